//! Model hyper-parameters, read from GGUF metadata or a Hugging Face `config.json`.

use crate::error::{ModelError, Result};
use crate::hybrid_config::{hf_blocks, hf_delta, hf_mamba};
pub use crate::hybrid_config::{Block, DeltaConfig, MambaConfig};
use crate::registry::{self, Family};
use serde_json::Value;
use tf_kernels::ops::RopeStyle;
use tf_weights::{GgufFile, MetaValue};

/// How a model stretches its rotary frequencies beyond its training context.
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Every frequency divided by `factor` (positions compressed).
    Linear {
        factor: f64,
    },
    /// Llama 3.x: low frequencies divided by `factor`, high ones kept, a smooth ramp between.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_context: f64,
    },
    /// YaRN: each pair's frequency blended between interpolated (divided by `factor`) and
    /// original by a linear ramp over the pairs whose wavelength falls between `beta_fast` and
    /// `beta_slow` rotations in `original_context` positions; cos and sin times `mscale`.
    Yarn {
        factor: f64,
        original_context: f64,
        beta_fast: f64,
        beta_slow: f64,
        /// The ramp's ends rounded outward to whole dimensions.
        truncate: bool,
        mscale: f64,
    },
}

impl RopeScaling {
    /// What YaRN multiplies cos and sin by (1 for the other kinds).
    pub fn mscale(&self) -> f64 {
        match *self {
            RopeScaling::Yarn { mscale, .. } => mscale,
            _ => 1.0,
        }
    }

    /// YaRN's default `mscale`: `0.1 ln(factor) + 1` (1 for factors up to 1).
    pub fn yarn_mscale(factor: f64) -> f64 {
        if factor <= 1.0 {
            1.0
        } else {
            0.1 * factor.ln() + 1.0
        }
    }

    /// The divisor of each rotary pair's frequency (`rot_dim / 2` of them; empty = all 1).
    pub fn factors(&self, rot_dim: usize, base: f32) -> Vec<f64> {
        let half = rot_dim / 2;
        match *self {
            RopeScaling::None => Vec::new(),
            RopeScaling::Linear { factor } => vec![factor; half],
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            } => (0..half)
                .map(|i| {
                    let freq = (base as f64).powf(-2.0 * i as f64 / rot_dim as f64);
                    let wavelen = 2.0 * std::f64::consts::PI / freq;
                    if wavelen < original_context / high_freq_factor {
                        1.0
                    } else if wavelen > original_context / low_freq_factor {
                        factor
                    } else {
                        let smooth = (original_context / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        // freq / divisor = (1 - smooth) * freq / factor + smooth * freq
                        1.0 / ((1.0 - smooth) / factor + smooth)
                    }
                })
                .collect(),
            RopeScaling::Yarn {
                factor,
                original_context,
                beta_fast,
                beta_slow,
                truncate,
                ..
            } => {
                let dim = rot_dim as f64;
                let base = base as f64;
                // The dimension whose pair turns `rotations` times in the original context.
                let at = |rotations: f64| {
                    dim * (original_context / (rotations * 2.0 * std::f64::consts::PI)).ln()
                        / (2.0 * base.ln())
                };
                let (mut low, mut high) = (at(beta_fast), at(beta_slow));
                if truncate {
                    (low, high) = (low.floor(), high.ceil());
                }
                let (low, mut high) = (low.max(0.0), high.min(dim - 1.0));
                if low == high {
                    high += 0.001;
                }
                (0..half)
                    .map(|i| {
                        let ramp = ((i as f64 - low) / (high - low)).clamp(0.0, 1.0);
                        // Weight of the original frequency: 1 for fast pairs, 0 for slow ones.
                        let keep = 1.0 - ramp;
                        1.0 / ((1.0 - keep) / factor + keep)
                    })
                    .collect()
            }
        }
    }
}

/// A mixture-of-experts feed-forward: a router picks `used` of `experts` SwiGLU experts per
/// token and sums their outputs, weighted.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeConfig {
    pub experts: usize,
    pub used: usize,
    /// Width of each expert's hidden layer.
    pub expert_ffn: usize,
    /// The chosen experts' softmax weights are divided by their sum (Mixtral, Qwen3-MoE).
    pub norm_topk: bool,
    pub gating: registry::Gating,
    /// A bias on the router's scores and on each expert's gate, up and down outputs (gpt-oss).
    pub biases: bool,
    /// Width of a shared expert that every token runs beside its routed ones, its output times
    /// `sigmoid(x · gate)` (Qwen3-Next); `None`: no shared expert.
    pub shared_ffn: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct ModelConfig {
    pub family: &'static Family,
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn_dim: usize,
    pub vocab: usize,
    pub rope_base: f32,
    pub rope_dim: usize,
    pub rope_style: RopeStyle,
    /// Scaling of the global layers' rotary frequencies (sliding layers are never scaled).
    pub rope_scaling: RopeScaling,
    /// RoPE base of the sliding-window layers, where it differs from `rope_base`.
    pub rope_local_base: Option<f32>,
    pub norm_eps: f32,
    /// The context length the model was trained for.
    pub context_len: usize,
    /// Keys a sliding-window layer sees (its own position included).
    pub sliding_window: Option<usize>,
    /// Which layers slide, when the checkpoint lists them (`layer_types`); otherwise the
    /// family's pattern decides.
    pub sliding_layers: Option<Vec<bool>>,
    /// Attention scores are multiplied by this (default `head_dim^-1/2`).
    pub attn_scale: f32,
    /// `cap * tanh(x / cap)` on attention scores / on the output logits (Gemma 2).
    pub attn_softcap: Option<f32>,
    pub final_softcap: Option<f32>,
    /// Every layer's feed-forward is a mixture of experts (`ffn_dim` then is unused).
    pub moe: Option<MoeConfig>,
    /// Gated DeltaNet layers among the attention layers.
    pub delta: Option<DeltaConfig>,
    /// Mamba-2, attention and MLP blocks (Nemotron-H).
    pub mamba: Option<MambaConfig>,
    /// Multi-token-prediction layers after the decoder (GGUF `nextn_predict_layers`); the first
    /// one is loaded as a drafter.
    pub mtp_layers: usize,
}

impl ModelConfig {
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }
    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Reads the family and its hyper-parameters; touches no tensor data.
    pub fn from_gguf(g: &GgufFile) -> Result<ModelConfig> {
        let src = g.path().display().to_string();
        let arch = g.get_str("general.architecture")?;
        let family =
            registry::by_gguf_arch(arch).ok_or_else(|| ModelError::UnsupportedArchitecture {
                source_path: src.clone(),
                arch: arch.to_string(),
                supported: registry::supported_list(),
            })?;
        let key = |k: &str| format!("{arch}.{k}");
        let u = |k: &str| -> Result<usize> { Ok(g.get_u64(&key(k))? as usize) };
        let u_or = |k: &str, d: usize| -> Result<usize> {
            match g.get(&key(k)) {
                None => Ok(d),
                Some(_) => u(k),
            }
        };
        let f_opt = |k: &str| -> Result<Option<f32>> {
            match g.get(&key(k)) {
                None => Ok(None),
                Some(_) => Ok(Some(g.get_f32(&key(k))?)),
            }
        };
        let f_or = |k: &str, d: f32| -> Result<f32> { Ok(f_opt(k)?.unwrap_or(d)) };
        // Nemotron-H lists per layer the KV heads (attention blocks) and the feed-forward width
        // (MLP blocks); a layer with neither is a Mamba-2 block.
        let per_layer = |k: &str| -> Option<Vec<usize>> {
            match g.get(&key(k)) {
                Some(MetaValue::Array(a)) => {
                    a.iter().map(|v| v.as_u64().map(|x| x as usize)).collect()
                }
                _ => None,
            }
        };
        let (kv_list, ff_list) = match family.mamba_blocks {
            true => (
                per_layer("attention.head_count_kv"),
                per_layer("feed_forward_length"),
            ),
            false => (None, None),
        };
        let d_model = u("embedding_length")?;
        let n_heads = u("attention.head_count")?;
        let head_dim = u_or("attention.key_length", d_model / n_heads.max(1))?;
        let vocab = match g.get(&key("vocab_size")) {
            Some(MetaValue::U32(v)) => *v as usize,
            Some(v) if v.as_u64().is_some() => v.as_u64().unwrap_or(0) as usize,
            _ => g
                .tensor_info("token_embd.weight")
                .and_then(|t| t.dims.get(1).copied())
                .ok_or_else(|| ModelError::MissingTensor {
                    source_path: src.clone(),
                    name: "token_embd.weight".into(),
                })?,
        };
        // Converters count a multi-token-prediction layer in `block_count` and name how many
        // in `nextn_predict_layers`; the decoder is the layers before them.
        let mtp_layers = u_or("nextn_predict_layers", 0)?;
        let n_layers = u("block_count")?.saturating_sub(mtp_layers);
        let rope_scaling = match g.get(&key("rope.scaling.type")) {
            None => RopeScaling::None,
            Some(_) => match g.get_str(&key("rope.scaling.type"))? {
                "none" => RopeScaling::None,
                "linear" => RopeScaling::Linear {
                    factor: f_or("rope.scaling.factor", 1.0)? as f64,
                },
                "yarn" => {
                    let factor = f_or("rope.scaling.factor", 1.0)? as f64;
                    RopeScaling::Yarn {
                        factor,
                        original_context: u("rope.scaling.original_context_length")? as f64,
                        beta_fast: f_or("rope.scaling.yarn_beta_fast", 32.0)? as f64,
                        beta_slow: f_or("rope.scaling.yarn_beta_slow", 1.0)? as f64,
                        truncate: family.yarn_truncate_default,
                        mscale: f_or("rope.scaling.attn_factor", 1.0)? as f64
                            * RopeScaling::yarn_mscale(factor),
                    }
                }
                other => {
                    return Err(ModelError::Config {
                        source_path: src,
                        what: format!("{arch}.rope.scaling.type '{other}' is not supported"),
                    })
                }
            },
        };
        // Gemma 3 27B scales attention by d_model / heads, every other size by the head size
        // (as llama.cpp and gemma_pytorch do; the GGUF carries no key for it).
        let scale_dim = if family.name == "gemma3" && n_layers == 62 {
            d_model / n_heads.max(1)
        } else {
            head_dim
        };
        let cfg = ModelConfig {
            family,
            n_layers,
            d_model,
            n_heads,
            n_kv_heads: match &kv_list {
                Some(l) => l.iter().copied().max().unwrap_or(0).max(1),
                None => u_or("attention.head_count_kv", n_heads)?,
            },
            head_dim,
            ffn_dim: match &ff_list {
                Some(l) => l.iter().copied().max().unwrap_or(0),
                None => u_or("feed_forward_length", 0)?,
            },
            vocab,
            rope_base: f_or("rope.freq_base", 10000.0)?,
            rope_dim: match family.rope {
                true => u_or("rope.dimension_count", head_dim)?,
                false => 0,
            },
            rope_style: family.gguf_rope,
            rope_scaling,
            // Gemma 3 converters write the sliding layers' base; older files leave the family's.
            rope_local_base: match family.local_rope_base {
                Some(d) => Some(f_or("rope.freq_base_swa", d)?),
                None => None,
            },
            norm_eps: match (
                family.mamba_blocks,
                f_opt("attention.layer_norm_rms_epsilon")?,
            ) {
                (_, Some(e)) => e,
                // Nemotron-H's converter writes its RMSNorm epsilon under this key.
                (true, None) => f_or("attention.layer_norm_epsilon", 1e-6)?,
                (false, None) => 1e-6,
            },
            context_len: u_or("context_length", 4096)?,
            sliding_window: match u_or("attention.sliding_window", 0)? {
                0 => None,
                w => Some(w),
            },
            sliding_layers: None,
            attn_scale: 1.0 / (scale_dim as f32).sqrt(),
            attn_softcap: f_opt("attn_logit_softcapping")?,
            final_softcap: f_opt("final_logit_softcapping")?,
            moe: match u_or("expert_count", 0)? {
                0 => None,
                experts => Some(MoeConfig {
                    experts,
                    used: u("expert_used_count")?,
                    expert_ffn: match u_or("expert_feed_forward_length", 0)? {
                        0 => u("feed_forward_length")?,
                        w => w,
                    },
                    norm_topk: match g.get(&key("expert_weights_norm")) {
                        Some(MetaValue::Bool(b)) => *b,
                        _ => family.norm_topk_gguf,
                    },
                    gating: family.gating,
                    biases: family.gpt_oss_biases,
                    shared_ffn: match u_or("expert_shared_feed_forward_length", 0)? {
                        0 => None,
                        w => Some(w),
                    },
                }),
            },
            delta: match family.delta_net {
                false => None,
                true => Some(DeltaConfig {
                    k_heads: u("ssm.group_count")?,
                    v_heads: u("ssm.time_step_rank")?,
                    dk: u("ssm.state_size")?,
                    dv: u("ssm.inner_size")? / u("ssm.time_step_rank")?.max(1),
                    conv_kernel: u("ssm.conv_kernel")?,
                    // qwen35 converters reorder value heads into tiled order; qwen3next's
                    // keep transformers' grouped one.
                    tiled: family.name == "qwen35",
                    attention: match g.get(&key("attention.recurrent_layers")) {
                        Some(MetaValue::Array(a)) => (a.iter().take(n_layers))
                            .map(|v| !matches!(v, MetaValue::Bool(true)))
                            .collect(),
                        _ => DeltaConfig::every(u("full_attention_interval")?, n_layers),
                    },
                }),
            },
            mtp_layers,
            mamba: match (&kv_list, &ff_list) {
                (Some(kv), Some(ff)) if kv.len() >= n_layers && ff.len() >= n_layers => {
                    let heads = u("ssm.time_step_rank")?;
                    Some(MambaConfig {
                        heads,
                        head_dim: u("ssm.inner_size")? / heads.max(1),
                        state: u("ssm.state_size")?,
                        groups: u("ssm.group_count")?,
                        conv_kernel: u("ssm.conv_kernel")?,
                        blocks: (0..n_layers)
                            .map(|l| match (kv[l], ff[l]) {
                                (_, 1..) => Block::Mlp,
                                (1.., 0) => Block::Attention,
                                (0, 0) => Block::Mamba,
                            })
                            .collect(),
                    })
                }
                (Some(_), _) | (_, Some(_)) => {
                    return Err(ModelError::Config {
                        source_path: src,
                        what: format!(
                            "{arch}: per-layer head_count_kv and feed_forward_length must list \
                             every layer"
                        ),
                    })
                }
                _ => None,
            },
        };
        cfg.validate(&src)?;
        Ok(cfg)
    }

    /// From a Hugging Face `config.json` value.
    pub fn from_hf(config: &Value, src: &str) -> Result<ModelConfig> {
        let err = |what: String| ModelError::Config {
            source_path: src.to_string(),
            what,
        };
        let arch = config
            .get("architectures")
            .and_then(|a| a.get(0))
            .and_then(Value::as_str)
            .or_else(|| config.get("model_type").and_then(Value::as_str))
            .ok_or_else(|| err("neither 'architectures' nor 'model_type' is set".into()))?;
        let family =
            registry::by_hf_name(arch).ok_or_else(|| ModelError::UnsupportedArchitecture {
                source_path: src.to_string(),
                arch: arch.to_string(),
                supported: registry::FAMILIES
                    .iter()
                    .map(|f| f.hf_names[0])
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let quant = config
            .get("quantization_config")
            .and_then(|q| q.get("quant_method"))
            .and_then(Value::as_str);
        // gpt-oss's own MXFP4 experts are read as they are; other quantized layouts are not.
        let own_mxfp4 = quant == Some("mxfp4") && family.hf_fused_experts;
        if quant.is_some_and(|m| m != "none") && !own_mxfp4 {
            return Err(err(
                "quantized safetensors checkpoints (quantization_config) are not read, but for \
                 gpt-oss's MXFP4 experts: use a float checkpoint or a GGUF conversion"
                    .into(),
            ));
        }
        if let Some(limit) = config.get("swiglu_limit").and_then(Value::as_f64) {
            if family.mlp == registry::Mlp::SwiGluOai && limit as f32 != registry::OAI_LIMIT {
                return Err(err(format!(
                    "swiglu_limit {limit} is not supported (gpt-oss's {} is)",
                    registry::OAI_LIMIT
                )));
            }
        }
        let u = |k: &str| -> Result<usize> {
            config
                .get(k)
                .and_then(Value::as_u64)
                .map(|v| v as usize)
                .ok_or_else(|| err(format!("missing or non-integer '{k}'")))
        };
        let f_opt = |k: &str| config.get(k).and_then(Value::as_f64).map(|v| v as f32);
        let f_or = |k: &str, d: f64| config.get(k).and_then(Value::as_f64).unwrap_or(d) as f32;
        let d_model = u("hidden_size")?;
        let n_heads = u("num_attention_heads")?;
        let head_dim = u("head_dim").unwrap_or(d_model / n_heads.max(1));
        let n_layers = match family.mamba_blocks {
            true => hf_blocks(config, src)?.len(),
            false => u("num_hidden_layers")?,
        };
        let (rope_base, rope_scaling) = hf_rope(config, "full_attention", src)?;
        let rope_local_base = match family.local_rope_base {
            None => None,
            Some(d) => {
                let (base, _) = hf_rope(config, "sliding_attention", src)?;
                // Older configs name the local base apart; newer ones nest it by layer type.
                let nested = config
                    .get("rope_parameters")
                    .is_some_and(|p| p.get("sliding_attention").is_some());
                Some(if nested {
                    base
                } else {
                    f_or("rope_local_base_freq", d as f64)
                })
            }
        };
        // transformers 5 moves it into `rope_parameters`.
        let partial = config
            .get("rope_parameters")
            .and_then(|p| p.get("partial_rotary_factor"))
            .and_then(Value::as_f64)
            .map_or_else(|| f_or("partial_rotary_factor", 1.0), |v| v as f32);
        let rope_dim = match family.rope {
            true => ((head_dim as f32 * partial) as usize) & !1,
            false => 0,
        };
        let sliding_layers = config
            .get("layer_types")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|t| t.as_str() == Some("sliding_attention"))
                    .collect::<Vec<_>>()
            });
        let sliding_window = match config.get("sliding_window") {
            Some(Value::Number(n)) => n.as_u64().map(|w| w as usize).filter(|&w| w > 0),
            _ => None,
        };
        // Mistral-style configs carry `use_sliding_window: false` to switch it off (Qwen2).
        let sliding_window = sliding_window
            .filter(|_| config.get("use_sliding_window").and_then(Value::as_bool) != Some(false));
        let attn_scale = match f_opt("query_pre_attn_scalar") {
            Some(s) => 1.0 / s.sqrt(),
            None => 1.0 / (head_dim as f32).sqrt(),
        };
        let cfg = ModelConfig {
            family,
            n_layers,
            d_model,
            n_heads,
            n_kv_heads: u("num_key_value_heads").unwrap_or(n_heads),
            head_dim,
            ffn_dim: u("intermediate_size").unwrap_or(0),
            vocab: u("vocab_size")?,
            rope_base,
            rope_dim,
            rope_style: RopeStyle::Neox,
            rope_scaling,
            rope_local_base,
            norm_eps: match family.mamba_blocks {
                // Nemotron-H's norms read `layer_norm_epsilon` (its `rms_norm_eps` is unused).
                true => f_or("layer_norm_epsilon", 1e-5),
                false => f_or("rms_norm_eps", 1e-6),
            },
            context_len: u("max_position_embeddings").unwrap_or(4096),
            sliding_window,
            sliding_layers,
            attn_scale,
            attn_softcap: f_opt("attn_logit_softcapping"),
            final_softcap: f_opt("final_logit_softcapping"),
            moe: hf_moe(config, family, src)?,
            delta: hf_delta(config, family, n_layers, src)?,
            // Hugging Face checkpoints' MTP tensors are not read (GGUF conversions carry them).
            mtp_layers: 0,
            mamba: hf_mamba(config, family, src)?,
        };
        cfg.validate(src)?;
        Ok(cfg)
    }

    fn validate(&self, src: &str) -> Result<()> {
        let bad = |what: &str| {
            Err(ModelError::Config {
                source_path: src.to_string(),
                what: what.to_string(),
            })
        };
        if self.n_layers == 0 || self.d_model == 0 || self.n_heads == 0 || self.vocab == 0 {
            return bad("zero layers, width, heads or vocabulary");
        }
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad("head_count is not a multiple of head_count_kv");
        }
        if self.head_dim == 0 || self.head_dim > 256 || !self.head_dim.is_multiple_of(2) {
            return bad("head dimension must be even and at most 256");
        }
        if self.rope_dim > self.head_dim || !self.rope_dim.is_multiple_of(2) {
            return bad("rope dimension must be even and at most the head dimension");
        }
        let positive = |x: f32| x.is_finite() && x > 0.0;
        if !positive(self.rope_base) || !self.rope_local_base.is_none_or(positive) {
            return bad("the RoPE base must be a positive finite number");
        }
        if !positive(self.norm_eps) {
            return bad("the RMSNorm epsilon must be a positive finite number");
        }
        if self.context_len == 0 {
            return bad("the context length is 0");
        }
        if ![self.attn_softcap, self.final_softcap]
            .iter()
            .all(|c| c.is_none_or(positive))
        {
            return bad("a soft-capping value must be a positive finite number");
        }
        match &self.moe {
            None if self.ffn_dim == 0 => return bad("the feed-forward width is 0"),
            Some(m) if m.experts == 0 || m.experts > MAX_EXPERTS => {
                return bad(&format!("expert count must be 1..={MAX_EXPERTS}"))
            }
            Some(m) if m.used == 0 || m.used > m.experts => {
                return bad("experts used per token must be 1..=expert count")
            }
            Some(m) if m.expert_ffn == 0 => return bad("the experts' feed-forward width is 0"),
            _ => {}
        }
        if let Some(mc) = &self.mamba {
            if mc.blocks.len() != self.n_layers {
                return bad("the block list does not have one block per layer");
            }
            if mc.heads == 0 || mc.groups == 0 || !mc.heads.is_multiple_of(mc.groups) {
                return bad("Mamba-2 heads must be a positive multiple of the groups");
            }
            if !(1..=1024).contains(&mc.head_dim) || !(1..=1024).contains(&mc.state) {
                return bad("Mamba-2 head and state widths must be 1..=1024");
            }
            if !(2..=16).contains(&mc.conv_kernel) {
                return bad("the Mamba-2 convolution kernel must be 2..=16");
            }
        }
        if let Some(dn) = &self.delta {
            if dn.attention.len() != self.n_layers {
                return bad("layer_types does not list one type per layer");
            }
            if dn.k_heads == 0 || dn.v_heads == 0 || !dn.v_heads.is_multiple_of(dn.k_heads) {
                return bad("linear-attention heads: value heads must be a multiple of key heads");
            }
            if !(1..=512).contains(&dn.dk) || !(1..=512).contains(&dn.dv) {
                return bad("linear-attention head widths must be 1..=512");
            }
            if !(2..=16).contains(&dn.conv_kernel) {
                return bad("the linear attention's convolution kernel must be 2..=16");
            }
        }
        if let Some(layers) = &self.sliding_layers {
            if layers.len() != self.n_layers {
                return bad("layer_types does not list one type per layer");
            }
        }
        match &self.rope_scaling {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } if factor.is_finite() && *factor > 0.0 => {}
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_context,
            } if [factor, low_freq_factor, high_freq_factor, original_context]
                .iter()
                .all(|v| v.is_finite() && **v > 0.0)
                && high_freq_factor > low_freq_factor => {}
            RopeScaling::Yarn {
                factor,
                original_context,
                beta_fast,
                beta_slow,
                mscale,
                ..
            } if [factor, original_context, beta_fast, beta_slow, mscale]
                .iter()
                .all(|v| v.is_finite() && **v > 0.0) => {}
            _ => return bad("RoPE scaling parameters must be positive and finite"),
        }
        Ok(())
    }

    /// Whether layer `layer` attends through the sliding window.
    pub fn layer_slides(&self, layer: usize) -> bool {
        if self.sliding_window.is_none() {
            return false;
        }
        if let Some(layers) = &self.sliding_layers {
            return layers.get(layer).copied().unwrap_or(false);
        }
        match self.family.windows {
            registry::Windows::All => true,
            registry::Windows::AllButEvery(n) => !(layer + 1).is_multiple_of(n),
        }
    }
}

/// Most experts a model may have (the largest public MoE models have 512).
const MAX_EXPERTS: usize = 1024;

/// The mixture of experts of a Hugging Face config, if it has one: `num_experts` (Qwen) or
/// `num_local_experts` (Mixtral), `num_experts_per_tok`, the experts' width
/// (`moe_intermediate_size`, else `intermediate_size`) and `norm_topk_prob` (the family's
/// default when absent). A model that mixes dense and expert layers is refused by name.
fn hf_moe(config: &Value, family: &Family, src: &str) -> Result<Option<MoeConfig>> {
    let num = |k: &str| config.get(k).and_then(Value::as_u64).map(|v| v as usize);
    let Some(experts) = num("num_experts").or_else(|| num("num_local_experts")) else {
        return Ok(None);
    };
    if experts == 0 {
        return Ok(None);
    }
    let err = |what: String| ModelError::Config {
        source_path: src.to_string(),
        what,
    };
    let dense_layers = config
        .get("mlp_only_layers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if dense_layers || num("decoder_sparse_step").is_some_and(|s| s > 1) {
        return Err(err(
            "dense feed-forward layers among the expert layers (mlp_only_layers, \
             decoder_sparse_step) are not supported"
                .into(),
        ));
    }
    Ok(Some(MoeConfig {
        experts,
        used: num("num_experts_per_tok")
            .ok_or_else(|| err("missing or non-integer 'num_experts_per_tok'".into()))?,
        expert_ffn: num("moe_intermediate_size")
            .or_else(|| num("intermediate_size"))
            .ok_or_else(|| err("missing the experts' width ('moe_intermediate_size')".into()))?,
        norm_topk: config
            .get("norm_topk_prob")
            .and_then(Value::as_bool)
            .unwrap_or(family.norm_topk_default),
        gating: family.gating,
        biases: family.gpt_oss_biases,
        shared_ffn: num("shared_expert_intermediate_size").filter(|&w| w > 0),
    }))
}

/// The RoPE base and scaling of a layer kind (`full_attention` or `sliding_attention`) in a
/// Hugging Face config: `rope_parameters` (transformers 5: one dict, or one per layer kind), else
/// the older top-level `rope_theta` and `rope_scaling`.
fn hf_rope(config: &Value, kind: &str, src: &str) -> Result<(f32, RopeScaling)> {
    let params = config.get("rope_parameters").filter(|p| p.is_object());
    let params = params.map(|p| p.get(kind).unwrap_or(p));
    let base = params
        .and_then(|p| p.get("rope_theta"))
        .or_else(|| config.get("rope_theta"))
        .and_then(Value::as_f64)
        .unwrap_or(10000.0) as f32;
    let scaling = params.or_else(|| config.get("rope_scaling").filter(|s| s.is_object()));
    let Some(s) = scaling else {
        return Ok((base, RopeScaling::None));
    };
    let kind_of = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let num = |k: &str| -> Result<f64> {
        s.get(k)
            .and_then(Value::as_f64)
            .ok_or_else(|| ModelError::Config {
                source_path: src.to_string(),
                what: format!("rope scaling '{kind_of}' needs a number '{k}'"),
            })
    };
    let scaling = match kind_of {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear {
            factor: num("factor")?,
        },
        "llama3" => RopeScaling::Llama3 {
            factor: num("factor")?,
            low_freq_factor: num("low_freq_factor")?,
            high_freq_factor: num("high_freq_factor")?,
            original_context: num("original_max_position_embeddings")?,
        },
        "yarn" => {
            let factor = num("factor")?;
            let opt = |k: &str| s.get(k).and_then(Value::as_f64);
            if opt("mscale").is_some() || opt("mscale_all_dim").is_some() {
                return Err(ModelError::Config {
                    source_path: src.to_string(),
                    what: "YaRN with 'mscale' / 'mscale_all_dim' (DeepSeek's form) is not \
                           supported"
                        .into(),
                });
            }
            RopeScaling::Yarn {
                factor,
                original_context: num("original_max_position_embeddings")?,
                beta_fast: opt("beta_fast").unwrap_or(32.0),
                beta_slow: opt("beta_slow").unwrap_or(1.0),
                truncate: s.get("truncate").and_then(Value::as_bool).unwrap_or(true),
                mscale: opt("attention_factor").unwrap_or(RopeScaling::yarn_mscale(factor)),
            }
        }
        other => {
            return Err(ModelError::Config {
                source_path: src.to_string(),
                what: format!(
                    "rope scaling type '{other}' is not supported (default, linear, llama3, yarn \
                     are)"
                ),
            })
        }
    };
    Ok((base, scaling))
}
