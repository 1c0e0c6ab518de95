//! Binding a family's tensors by name, with every shape checked before the first forward.

use crate::config::{ModelConfig, MoeConfig};
use crate::error::{ModelError, Result};
use crate::registry::Family;
use tf_core::DType;
use tf_kernels::matmul::{PackedMatrix, WeightMatrix};
use tf_weights::{TensorSource, TensorView};

/// Tensor naming of the two checkpoint formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    Gguf,
    Hf,
}

impl Naming {
    fn global(self, what: &str, family: &Family) -> &'static str {
        match (self, what) {
            (Naming::Gguf, "embed") => "token_embd.weight",
            (Naming::Gguf, "norm") => "output_norm.weight",
            (Naming::Gguf, "output") => "output.weight",
            (Naming::Hf, "embed") => family.hf_globals[0],
            (Naming::Hf, "norm") => family.hf_globals[1],
            (Naming::Hf, "output") => family.hf_globals[2],
            _ => unreachable!("unknown global tensor {what}"),
        }
    }

    /// The name of layer `i`'s tensor `what` (GGUF-style), with the family's own HF names.
    pub(crate) fn layer(self, i: usize, what: &str, family: &Family) -> String {
        match self {
            Naming::Gguf => format!("blk.{i}.{what}"),
            Naming::Hf => {
                let own = family.hf_tensors.iter().find(|(g, _)| *g == what);
                let hf = match what {
                    _ if own.is_some() => own.map_or("", |(_, h)| h),
                    "attn_norm.weight" => "input_layernorm.weight",
                    "attn_q.weight" => "self_attn.q_proj.weight",
                    "attn_k.weight" => "self_attn.k_proj.weight",
                    "attn_v.weight" => "self_attn.v_proj.weight",
                    "attn_output.weight" => "self_attn.o_proj.weight",
                    "attn_q.bias" => "self_attn.q_proj.bias",
                    "attn_k.bias" => "self_attn.k_proj.bias",
                    "attn_v.bias" => "self_attn.v_proj.bias",
                    "attn_q_norm.weight" => "self_attn.q_norm.weight",
                    "attn_k_norm.weight" => "self_attn.k_norm.weight",
                    "ffn_norm.weight" => "post_attention_layernorm.weight",
                    "ffn_gate.weight" => "mlp.gate_proj.weight",
                    "ffn_up.weight" => "mlp.up_proj.weight",
                    "ffn_down.weight" => "mlp.down_proj.weight",
                    // A tensor of another family's layout (asked for, unused, by optional
                    // tensors): its GGUF-style name, which no HF checkpoint has.
                    _ => what,
                };
                format!("{}.{i}.{hf}", family.hf_layers)
            }
        }
    }
}

pub struct LayerWeights<'a> {
    pub attn_norm: Vec<f32>,
    pub mixer: MixerWeights<'a>,
    pub ffn_norm: Vec<f32>,
    /// RMSNorm of the attention output and of the MLP output (Gemma's sandwich norms).
    pub post_attn_norm: Option<Vec<f32>>,
    pub post_ffn_norm: Option<Vec<f32>>,
    pub ffn: Ffn<'a>,
}

/// A layer's mixer: attention, a Gated DeltaNet or a Mamba-2 layer, or none (a feed-forward
/// block).
pub enum MixerWeights<'a> {
    Attention(Attention<'a>),
    DeltaNet(DeltaWeights<'a>),
    Mamba(MambaWeights<'a>),
    None,
}

pub struct Attention<'a> {
    pub wq: WeightMatrix<'a>,
    pub wk: WeightMatrix<'a>,
    pub wv: WeightMatrix<'a>,
    pub wo: WeightMatrix<'a>,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    /// Bias of the attention output projection (gpt-oss).
    pub bo: Option<Vec<f32>>,
    /// One attention-sink logit per query head (gpt-oss).
    pub sinks: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
}

/// A layer's feed-forward: one MLP, or a mixture of experts; one projection and `down`
/// (Nemotron-H's squared ReLU); or none (a mixer block).
pub enum Ffn<'a> {
    Dense(Mlp<'a>),
    Moe(Experts<'a>),
    Plain {
        up: WeightMatrix<'a>,
        down: WeightMatrix<'a>,
    },
    None,
}

/// `down(act(x · gate) * (x · up))`.
pub struct Mlp<'a> {
    pub gate: WeightMatrix<'a>,
    pub up: WeightMatrix<'a>,
    pub down: WeightMatrix<'a>,
}

pub struct Experts<'a> {
    /// `d_model` x `experts`: each expert's score for a row.
    pub router: WeightMatrix<'a>,
    /// Added to the router's scores (gpt-oss).
    pub router_bias: Option<Vec<f32>>,
    pub experts: Vec<Mlp<'a>>,
    pub biases: Option<ExpertBiases>,
    /// The shared expert and its gate (`d_model` weights), every row's (Qwen3-Next).
    pub shared: Option<(Mlp<'a>, Vec<f32>)>,
}

/// Each expert's biases, back to back (gpt-oss): gate and up `expert_ffn` each, down `d_model`.
pub struct ExpertBiases {
    pub gate: Vec<f32>,
    pub up: Vec<f32>,
    pub down: Vec<f32>,
}

pub use crate::hybrid_weights::{DeltaWeights, MambaWeights, MtpWeights};

pub struct Weights<'a> {
    pub embed: TensorView<'a>,
    pub norm: Vec<f32>,
    /// The output head (the embedding when tied).
    pub output: WeightMatrix<'a>,
    pub tied_output: bool,
    pub layers: Vec<LayerWeights<'a>>,
    /// Per-pair divisors of the rotary frequencies stored in the file (Llama 3.x GGUF
    /// `rope_freqs.weight`).
    pub rope_freqs: Option<Vec<f32>>,
    /// The multi-token-prediction head (its layer is the last of `layers`).
    pub mtp: Option<MtpWeights<'a>>,
}

pub(crate) struct Binder<'a> {
    pub(crate) src: &'a dyn TensorSource,
    pub(crate) arena: &'a Arena,
}

/// Weights relaid out at load (a checkpoint layout the kernels cannot read in place), kept
/// as long as the model.
#[derive(Default)]
pub struct Arena(std::sync::Mutex<Vec<Box<[u8]>>>);

impl Arena {
    pub(crate) fn keep(&self, bytes: Vec<u8>) -> &[u8] {
        let b = bytes.into_boxed_slice();
        let (ptr, len) = (b.as_ptr(), b.len());
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(b);
        // SAFETY: a boxed slice's heap block never moves when the box does, and the arena
        // only ever adds boxes, so the block lives as long as the arena.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

impl<'a> Binder<'a> {
    pub(crate) fn view(&self, name: &str, dims: &[usize]) -> Result<TensorView<'a>> {
        let t = self
            .src
            .tensor(name)
            .ok_or_else(|| ModelError::MissingTensor {
                source_path: self.src.describe(),
                name: name.to_string(),
            })?;
        if t.dims != dims {
            return Err(ModelError::BadShape {
                source_path: self.src.describe(),
                name: name.to_string(),
                expected: dims.to_vec(),
                found: t.dims.to_vec(),
            });
        }
        Ok(t)
    }

    pub(crate) fn matrix(&self, name: &str, k: usize, n: usize) -> Result<WeightMatrix<'a>> {
        let t = self.view(name, &[k, n])?;
        WeightMatrix::new(t.dtype, k, n, t.data).ok_or_else(|| ModelError::BadShape {
            source_path: self.src.describe(),
            name: name.to_string(),
            expected: vec![k, n],
            found: t.dims.to_vec(),
        })
    }

    /// A matrix of `parts` summed output widths, cut into one matrix per part (rows are
    /// contiguous, so each part is a view of the same bytes).
    pub(crate) fn split(
        &self,
        name: &str,
        k: usize,
        parts: &[usize],
    ) -> Result<Vec<WeightMatrix<'a>>> {
        let whole = self.matrix(name, k, parts.iter().sum())?;
        let row = whole.row_bytes();
        let mut at = 0;
        Ok(parts
            .iter()
            .map(|&n| {
                let data = &whole.data[at * row..(at + n) * row];
                at += n;
                WeightMatrix::new(whole.dtype, k, n, data).expect("a part of a checked matrix")
            })
            .collect())
    }

    /// A norm's weights, `1 + w` where the checkpoint stores `w` (Gemma in HF layout).
    pub(crate) fn norm(&self, name: &str, n: usize, offset: bool) -> Result<Vec<f32>> {
        let mut w = self.vector(name, n)?;
        if offset {
            w.iter_mut().for_each(|v| *v += 1.0);
        }
        Ok(w)
    }

    pub(crate) fn opt_norm(
        &self,
        name: &str,
        n: usize,
        wanted: bool,
        offset: bool,
    ) -> Result<Option<Vec<f32>>> {
        if !wanted {
            return Ok(None);
        }
        self.norm(name, n, offset).map(Some)
    }

    /// A mixture of experts: the router, and each expert's gate, up and down matrices. GGUF
    /// files hold each kind as one tensor of all experts (`ffn_gate_exps`, `experts` matrices
    /// back to back, so each expert is a view of its bytes); older GGUF files and HF
    /// checkpoints hold one tensor per expert.
    fn experts(
        &self,
        naming: Naming,
        layer: usize,
        fam: &Family,
        d: usize,
        moe: &MoeConfig,
    ) -> Result<Experts<'a>> {
        let (e, f) = (moe.experts, moe.expert_ffn);
        let router = match naming {
            Naming::Gguf => format!("blk.{layer}.ffn_gate_inp.weight"),
            Naming::Hf => format!("model.layers.{layer}.{}", fam.hf_experts[0]),
        };
        let router = self.matrix(&router, d, e)?;
        if naming == Naming::Hf && fam.hf_fused_experts {
            return self.fused_experts(layer, fam, d, moe, router);
        }
        let gguf = |what: &str| format!("blk.{layer}.{what}");
        let router_bias = self.opt_vector(&gguf("ffn_gate_inp.bias"), e, moe.biases)?;
        let biases = match moe.biases {
            false => None,
            true => Some(ExpertBiases {
                gate: self.view(&gguf("ffn_gate_exps.bias"), &[f, e])?.to_f32()?,
                up: self.view(&gguf("ffn_up_exps.bias"), &[f, e])?.to_f32()?,
                down: self.view(&gguf("ffn_down_exps.bias"), &[d, e])?.to_f32()?,
            }),
        };
        let stacked = format!("blk.{layer}.ffn_gate_exps.weight");
        if naming == Naming::Gguf && self.src.tensor(&stacked).is_some() {
            let kind = |what: &str, k: usize, n: usize| -> Result<Vec<WeightMatrix<'a>>> {
                let name = format!("blk.{layer}.ffn_{what}_exps.weight");
                let t = self.view(&name, &[k, n, e])?;
                let one = t.data.len() / e;
                (0..e)
                    .map(|x| {
                        WeightMatrix::new(t.dtype, k, n, &t.data[x * one..(x + 1) * one])
                            .ok_or_else(|| ModelError::BadShape {
                                source_path: self.src.describe(),
                                name: name.clone(),
                                expected: vec![k, n, e],
                                found: t.dims.to_vec(),
                            })
                    })
                    .collect()
            };
            let (gate, up, down) = (kind("gate", d, f)?, kind("up", d, f)?, kind("down", f, d)?);
            let experts = gate
                .into_iter()
                .zip(up)
                .zip(down)
                .map(|((gate, up), down)| Mlp { gate, up, down })
                .collect();
            return Ok(Experts {
                router,
                router_bias,
                experts,
                biases,
                shared: None,
            });
        }
        let name = |which: usize, x: usize| match naming {
            Naming::Gguf => format!(
                "blk.{layer}.ffn_{}.{x}.weight",
                ["gate", "up", "down"][which]
            ),
            Naming::Hf => format!(
                "model.layers.{layer}.{}",
                fam.hf_experts[which + 1].replace("{e}", &x.to_string())
            ),
        };
        let experts = (0..e)
            .map(|x| {
                Ok(Mlp {
                    gate: self.matrix(&name(0, x), d, f)?,
                    up: self.matrix(&name(1, x), d, f)?,
                    down: self.matrix(&name(2, x), f, d)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Experts {
            router,
            router_bias,
            experts,
            biases,
            shared: None,
        })
    }

    /// gpt-oss's float checkpoint: `gate_up_proj` `[experts, d, 2f]` (gate and up interleaved
    /// along the last axis) and `down_proj` `[experts, f, d]`, i.e. every matrix stored input
    /// by output, or the same in the hub's MXFP4 blocks; each expert's gate, up and down copied
    /// out as rows of inputs (the kernels' layout), and the interleaved biases split.
    fn fused_experts(
        &self,
        layer: usize,
        fam: &Family,
        d: usize,
        moe: &MoeConfig,
        router: WeightMatrix<'a>,
    ) -> Result<Experts<'a>> {
        let (e, f) = (moe.experts, moe.expert_ffn);
        let name = |what: &str| format!("model.layers.{layer}.{what}");
        let (gate_up, down) = (name(fam.hf_experts[1]), name(fam.hf_experts[3]));
        let experts = match self.hub_mxfp4(&gate_up, &down, d, moe)? {
            Some(experts) => experts,
            None => self.float_experts(&gate_up, &down, d, moe)?,
        };
        let bias = |what: &str, n: usize| -> Result<Vec<f32>> {
            Ok(self.view(&name(what), &[n, e])?.to_f32()?)
        };
        let gate_up_b = bias("mlp.experts.gate_up_proj_bias", 2 * f)?;
        let pick = |offset: usize| -> Vec<f32> {
            gate_up_b.iter().skip(offset).step_by(2).copied().collect()
        };
        let biases = match moe.biases {
            true => Some(ExpertBiases {
                gate: pick(0),
                up: pick(1),
                down: bias("mlp.experts.down_proj_bias", d)?,
            }),
            false => None,
        };
        Ok(Experts {
            router,
            router_bias: self.opt_vector(&name("mlp.router.bias"), e, moe.biases)?,
            experts,
            biases,
            shared: None,
        })
    }

    /// The hub's MXFP4 layout (`{gate_up,down}_proj_blocks` `[experts, out, in/32, 16]` and
    /// `_scales` `[experts, out, in/32]`, raw bytes; gate and up in alternate rows), repacked
    /// into GGUF's MXFP4 blocks (the scale byte, then element j in the low nibble of byte j
    /// and element j + 16 in its high one; the hub packs elements 2i and 2i + 1 in byte i):
    /// the same integers, so the file computes what its GGUF conversion does. `None` when the
    /// checkpoint is not in this layout.
    fn hub_mxfp4(
        &self,
        gate_up: &str,
        down: &str,
        d: usize,
        moe: &MoeConfig,
    ) -> Result<Option<Vec<Mlp<'a>>>> {
        let (e, f) = (moe.experts, moe.expert_ffn);
        let part = |base: &str, what: &str, dims: &[usize]| -> Result<Option<&'a [u8]>> {
            let name = format!("{base}_{what}");
            match self.src.raw_bytes(&name) {
                None => Ok(None),
                Some((found, data)) if found == dims => Ok(Some(data)),
                Some((found, _)) => Err(ModelError::BadShape {
                    source_path: self.src.describe(),
                    name,
                    expected: dims.to_vec(),
                    found: found.to_vec(),
                }),
            }
        };
        let (Some(gb), Some(gs), Some(db), Some(ds)) = (
            part(gate_up, "blocks", &[16, d / 32, 2 * f, e])?,
            part(gate_up, "scales", &[d / 32, 2 * f, e])?,
            part(down, "blocks", &[16, f / 32, d, e])?,
            part(down, "scales", &[f / 32, d, e])?,
        ) else {
            return Ok(None);
        };
        let arena: &'a Arena = self.arena;
        // Rows `rows` (output features, of `k / 32` blocks each) of expert x's tensor, repacked.
        let repack = |blocks: &[u8],
                      scales: &[u8],
                      n_rows: usize,
                      k: usize,
                      x: usize,
                      rows: &mut dyn Iterator<Item = usize>| {
            let kb = k / 32;
            let mut out = Vec::new();
            for r in rows {
                for b in 0..kb {
                    let at = (x * n_rows + r) * kb + b;
                    let hub = &blocks[16 * at..16 * at + 16];
                    let v = |i: usize| (hub[i / 2] >> (4 * (i % 2))) & 0xF;
                    out.push(scales[at]);
                    out.extend((0..16).map(|j| v(j) | (v(j + 16) << 4)));
                }
            }
            arena.keep(out)
        };
        let matrix = |data: &'a [u8], k: usize, n: usize| {
            WeightMatrix::new(DType::MXFP4, k, n, data).expect("whole MXFP4 blocks")
        };
        Ok(Some(
            (0..e)
                .map(|x| Mlp {
                    gate: matrix(
                        repack(gb, gs, 2 * f, d, x, &mut (0..f).map(|j| 2 * j)),
                        d,
                        f,
                    ),
                    up: matrix(
                        repack(gb, gs, 2 * f, d, x, &mut (0..f).map(|j| 2 * j + 1)),
                        d,
                        f,
                    ),
                    down: matrix(repack(db, ds, d, f, x, &mut (0..d)), f, d),
                })
                .collect(),
        ))
    }

    /// The float layout: `gate_up` `[experts, d, 2f]` and `down` `[experts, f, d]`.
    fn float_experts(
        &self,
        gate_up: &str,
        down: &str,
        d: usize,
        moe: &MoeConfig,
    ) -> Result<Vec<Mlp<'a>>> {
        let (e, f) = (moe.experts, moe.expert_ffn);
        let gate_up_name = gate_up;
        let gate_up = self.view(gate_up, &[2 * f, d, e])?;
        let down = self.view(down, &[d, f, e])?;
        if gate_up.dtype.block_elems() != 1 || down.dtype != gate_up.dtype {
            return Err(ModelError::BadShape {
                source_path: self.src.describe(),
                name: gate_up_name.to_string(),
                expected: vec![2 * f, d, e],
                found: gate_up.dims.to_vec(),
            });
        }
        let es = gate_up.dtype.block_bytes();
        let arena: &'a Arena = self.arena;
        // out[x][row][col] = src[x][col][row * stride + offset] for each expert x.
        let transpose = |src: &[u8], rows: usize, cols: usize, stride: usize, offset: usize| {
            let mut out = Vec::with_capacity(e * rows * cols * es);
            for x in 0..e {
                for r in 0..rows {
                    for c in 0..cols {
                        let at = ((x * cols + c) * stride + r * (stride / rows) + offset) * es;
                        out.extend_from_slice(&src[at..at + es]);
                    }
                }
            }
            arena.keep(out)
        };
        let gates = transpose(gate_up.data, f, d, 2 * f, 0);
        let ups = transpose(gate_up.data, f, d, 2 * f, 1);
        let downs = transpose(down.data, d, f, d, 0);
        let one = |all: &'a [u8], k: usize, n: usize, x: usize| {
            let len = k * n * es;
            WeightMatrix::new(gate_up.dtype, k, n, &all[x * len..(x + 1) * len])
                .expect("a whole expert's matrix")
        };
        Ok((0..e)
            .map(|x| Mlp {
                gate: one(gates, d, f, x),
                up: one(ups, d, f, x),
                down: one(downs, f, d, x),
            })
            .collect())
    }

    /// Layer `i`: its norms, its mixer (a Gated DeltaNet layer where `recurrent`, attention
    /// otherwise) and its feed-forward.
    fn layer(
        &self,
        naming: Naming,
        i: usize,
        cfg: &ModelConfig,
        recurrent: bool,
    ) -> Result<LayerWeights<'a>> {
        let fam = cfg.family;
        let (d, f) = (cfg.d_model, cfg.ffn_dim);
        let off = naming == Naming::Hf && fam.hf_norm_offset;
        let n = |w: &str| naming.layer(i, w, fam);
        let mixer = match &cfg.delta {
            Some(dn) if recurrent => MixerWeights::DeltaNet(self.delta(naming, i, cfg, dn)?),
            _ => MixerWeights::Attention(self.attention(naming, i, cfg)?),
        };
        let ffn = match &cfg.moe {
            Some(moe) => {
                let mut x = self.experts(naming, i, fam, d, moe)?;
                if let Some(w) = moe.shared_ffn {
                    x.shared = Some(self.shared_expert(naming, i, d, w)?);
                }
                Ffn::Moe(x)
            }
            None if fam.fused => {
                let gu = self.split(&n("ffn_up.weight"), d, &[f, f])?;
                Ffn::Dense(Mlp {
                    gate: gu[0],
                    up: gu[1],
                    down: self.matrix(&n("ffn_down.weight"), f, d)?,
                })
            }
            None => Ffn::Dense(Mlp {
                gate: self.matrix(&n("ffn_gate.weight"), d, f)?,
                up: self.matrix(&n("ffn_up.weight"), d, f)?,
                down: self.matrix(&n("ffn_down.weight"), f, d)?,
            }),
        };
        let post = fam.post_norms;
        Ok(LayerWeights {
            attn_norm: self.norm(&n("attn_norm.weight"), d, off)?,
            mixer,
            ffn_norm: self.norm(&n(fam.gguf_ffn_norm), d, off)?,
            post_attn_norm: self.opt_norm(&n("post_attention_norm.weight"), d, post, off)?,
            post_ffn_norm: self.opt_norm(&n("post_ffw_norm.weight"), d, post, off)?,
            ffn,
        })
    }

    /// Layer `i`'s attention: q (with each head's gate, for gated attention), k, v, o, and
    /// the family's biases, sinks and q/k norms.
    pub(crate) fn attention(
        &self,
        naming: Naming,
        i: usize,
        cfg: &ModelConfig,
    ) -> Result<Attention<'a>> {
        let fam = cfg.family;
        let n = |w: &str| naming.layer(i, w, fam);
        let (d, q, kv) = (cfg.d_model, cfg.q_dim(), cfg.kv_dim());
        let off = naming == Naming::Hf && fam.hf_norm_offset;
        let qw = if fam.gated_attention { 2 * q } else { q };
        // A q/k norm's width: one head, or the whole projection (OLMoE).
        let qk_width = |whole: usize| {
            if fam.qk_norm_full {
                whole
            } else {
                cfg.head_dim
            }
        };
        let [wq, wk, wv] = if fam.fused {
            let qkv = self.split(&n("attn_qkv.weight"), d, &[q, kv, kv])?;
            [qkv[0], qkv[1], qkv[2]]
        } else {
            [
                self.matrix(&n("attn_q.weight"), d, qw)?,
                self.matrix(&n("attn_k.weight"), d, kv)?,
                self.matrix(&n("attn_v.weight"), d, kv)?,
            ]
        };
        Ok(Attention {
            wq,
            wk,
            wv,
            wo: self.matrix(&n("attn_output.weight"), q, d)?,
            bq: self.opt_vector(&n("attn_q.bias"), q, fam.qkv_bias)?,
            bk: self.opt_vector(&n("attn_k.bias"), kv, fam.qkv_bias)?,
            bv: self.opt_vector(&n("attn_v.bias"), kv, fam.qkv_bias)?,
            bo: self.opt_vector(&n("attn_output.bias"), d, fam.gpt_oss_biases)?,
            sinks: self.opt_vector(&n("attn_sinks.weight"), cfg.n_heads, fam.sinks)?,
            q_norm: self.opt_norm(&n("attn_q_norm.weight"), qk_width(q), fam.qk_norm, off)?,
            k_norm: self.opt_norm(&n("attn_k_norm.weight"), qk_width(kv), fam.qk_norm, off)?,
        })
    }

    pub(crate) fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        Ok(self.view(name, &[n])?.to_f32()?)
    }

    pub(crate) fn opt_vector(
        &self,
        name: &str,
        n: usize,
        wanted: bool,
    ) -> Result<Option<Vec<f32>>> {
        if !wanted {
            return Ok(None);
        }
        self.vector(name, n).map(Some)
    }
}

pub fn bind<'a>(
    src: &'a dyn TensorSource,
    arena: &'a Arena,
    naming: Naming,
    cfg: &ModelConfig,
) -> Result<Weights<'a>> {
    let b = Binder { src, arena };
    let d = cfg.d_model;
    let embed = b.view(naming.global("embed", cfg.family), &[d, cfg.vocab])?;
    let (output, tied_output) = match src.tensor(naming.global("output", cfg.family)) {
        Some(_) => (
            b.matrix(naming.global("output", cfg.family), d, cfg.vocab)?,
            false,
        ),
        None => (
            b.matrix(naming.global("embed", cfg.family), d, cfg.vocab)?,
            true,
        ),
    };
    let fam = cfg.family;
    let off = naming == Naming::Hf && fam.hf_norm_offset;
    // Grown as layers bind (not reserved from `block_count`, which a corrupt file can make huge:
    // the first missing tensor ends the loop).
    let mut layers = Vec::new();
    for i in 0..cfg.n_layers {
        let recurrent = cfg.delta.as_ref().is_some_and(|dn| !dn.attention[i]);
        layers.push(match &cfg.mamba {
            Some(mc) => b.block(naming, i, cfg, mc)?,
            None => b.layer(naming, i, cfg, recurrent)?,
        });
    }
    // A block without a feed-forward ends with the next block's input norm (the walk skips
    // the feed-forward; the mixer's `h = ffn_norm(x)` is then the next block's input).
    if cfg.mamba.is_some() {
        for i in 0..layers.len() {
            if matches!(layers[i].ffn, Ffn::None) {
                layers[i].ffn_norm = match layers.get(i + 1) {
                    Some(next) => next.attn_norm.clone(),
                    None => vec![1.0; d],
                };
            }
        }
    }
    // The first multi-token-prediction layer: a full-attention layer after the decoder's, and
    // its input projection, norms and (optional) head.
    let mtp = match (naming, cfg.mtp_layers) {
        (Naming::Gguf, 1..) => {
            let i = cfg.n_layers;
            layers.push(b.layer(naming, i, cfg, false)?);
            let n = |w: &str| format!("blk.{i}.nextn.{w}");
            Some(MtpWeights {
                eh_proj: b.matrix(&n("eh_proj.weight"), 2 * d, d)?,
                enorm: b.vector(&n("enorm.weight"), d)?,
                hnorm: b.vector(&n("hnorm.weight"), d)?,
                head_norm: b.vector(&n("shared_head_norm.weight"), d)?,
                head: match src.tensor(&n("shared_head_head.weight")) {
                    Some(_) => Some(b.matrix(&n("shared_head_head.weight"), d, cfg.vocab)?),
                    None => None,
                },
            })
        }
        _ => None,
    };
    let rope_freqs = match (naming, src.tensor("rope_freqs.weight")) {
        (Naming::Gguf, Some(_)) => Some(b.vector("rope_freqs.weight", cfg.rope_dim / 2)?),
        _ => None,
    };
    Ok(Weights {
        embed,
        norm: b.norm(naming.global("norm", cfg.family), d, off)?,
        output,
        tied_output,
        layers,
        rope_freqs,
        mtp,
    })
}

impl<'a> LayerWeights<'a> {
    /// The layer's matrices in the order [`Panels`] keeps them: q, k, v, o, then the dense
    /// MLP's gate, up, down, or the router and each expert's gate, up, down.
    pub fn matrices(&self) -> Vec<&WeightMatrix<'a>> {
        let mut out = match &self.mixer {
            MixerWeights::Attention(a) => vec![&a.wq, &a.wk, &a.wv, &a.wo],
            MixerWeights::DeltaNet(d) => vec![&d.qkv, &d.z, &d.b, &d.a, &d.out],
            MixerWeights::Mamba(m) => vec![&m.z, &m.xbc, &m.dt, &m.out],
            MixerWeights::None => Vec::new(),
        };
        match &self.ffn {
            Ffn::Dense(m) => out.extend([&m.gate, &m.up, &m.down]),
            Ffn::Plain { up, down } => out.extend([up, down]),
            Ffn::None => {}
            Ffn::Moe(x) => {
                out.push(&x.router);
                for m in &x.experts {
                    out.extend([&m.gate, &m.up, &m.down]);
                }
                if let Some((m, _)) = &x.shared {
                    out.extend([&m.gate, &m.up, &m.down]);
                }
            }
        }
        out
    }

    /// Index in the layer's [`Panels`] entry of the first feed-forward matrix (the dense gate,
    /// or the router): after the mixer's (q, k, v, o; or a DeltaNet layer's five).
    pub fn ffn_panels(&self) -> usize {
        match &self.mixer {
            MixerWeights::Attention(_) | MixerWeights::Mamba(_) => 4,
            MixerWeights::DeltaNet(_) => 5,
            MixerWeights::None => 0,
        }
    }

    /// The attention weights (`None` for a recurrent layer).
    pub fn attention(&self) -> Option<&Attention<'a>> {
        match &self.mixer {
            MixerWeights::Attention(a) => Some(a),
            _ => None,
        }
    }

    /// The dense MLP (`None` for a mixture of experts).
    pub fn dense(&self) -> Option<&Mlp<'a>> {
        match &self.ffn {
            Ffn::Dense(m) => Some(m),
            _ => None,
        }
    }
}

/// The panel forms of a model's matrices (`None` where a type has none, or nothing was packed).
pub struct Panels {
    /// Per layer, in [`LayerWeights::matrices`] order.
    pub layers: Vec<Vec<Option<PackedMatrix>>>,
    pub output: Option<PackedMatrix>,
}

impl Panels {
    pub fn none(layers: usize) -> Panels {
        Panels {
            layers: (0..layers).map(|_| Vec::new()).collect(),
            output: None,
        }
    }

    /// Packs the matrices whose type `wanted` accepts, spread over the machine's cores.
    pub fn pack_where(w: &Weights, wanted: impl Fn(DType) -> bool + Sync) -> Panels {
        let mut jobs: Vec<&WeightMatrix> = w.layers.iter().flat_map(|l| l.matrices()).collect();
        jobs.push(&w.output);
        let wanted = &wanted;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done: Vec<std::sync::Mutex<Option<PackedMatrix>>> =
            jobs.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..threads.min(jobs.len()) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(m) = jobs.get(i) else { break };
                    if wanted(m.dtype) {
                        *done[i].lock().unwrap_or_else(|e| e.into_inner()) = PackedMatrix::pack(m);
                    }
                });
            }
        });
        let mut packed: Vec<Option<PackedMatrix>> = done
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let output = packed.pop().flatten();
        let mut it = packed.into_iter();
        let layers = w
            .layers
            .iter()
            .map(|l| it.by_ref().take(l.matrices().len()).collect())
            .collect();
        Panels { layers, output }
    }

    /// The source matrices that have a panel form and are read only through it (the output
    /// head when it is the embedding is still read for token rows).
    pub fn packed_sources<'w>(&self, w: &'w Weights<'w>) -> Vec<&'w WeightMatrix<'w>> {
        let mut out = Vec::new();
        for (l, p) in w.layers.iter().zip(&self.layers) {
            for (m, pm) in l.matrices().into_iter().zip(p) {
                if pm.is_some() {
                    out.push(m);
                }
            }
        }
        if self.output.is_some() && !w.tied_output {
            out.push(&w.output);
        }
        out
    }
}

/// `m` read through its panel form where it has one (`p`: the panel, if any was made).
pub fn with_panel<'a>(
    m: &WeightMatrix<'a>,
    p: Option<&'a Option<PackedMatrix>>,
) -> WeightMatrix<'a> {
    match p {
        Some(Some(p)) => m.with_packed(p),
        _ => *m,
    }
}
