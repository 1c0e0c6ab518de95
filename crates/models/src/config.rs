//! Model hyper-parameters, read from GGUF metadata or a Hugging Face `config.json`.

use crate::error::{ModelError, Result};
use crate::registry::{self, Family};
use serde_json::Value;
use tf_kernels::ops::RopeStyle;
use tf_weights::{GgufFile, MetaValue};

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
    pub norm_eps: f32,
    /// The context length the model was trained for.
    pub context_len: usize,
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
        let f_or = |k: &str, d: f32| -> Result<f32> {
            match g.get(&key(k)) {
                None => Ok(d),
                Some(_) => Ok(g.get_f32(&key(k))?),
            }
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
        let cfg = ModelConfig {
            family,
            n_layers: u("block_count")?,
            d_model,
            n_heads,
            n_kv_heads: u_or("attention.head_count_kv", n_heads)?,
            head_dim,
            ffn_dim: u("feed_forward_length")?,
            vocab,
            rope_base: f_or("rope.freq_base", 10000.0)?,
            rope_dim: u_or("rope.dimension_count", head_dim)?,
            rope_style: family.gguf_rope,
            norm_eps: f_or("attention.layer_norm_rms_epsilon", 1e-6)?,
            context_len: u_or("context_length", 4096)?,
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
        let u = |k: &str| -> Result<usize> {
            config
                .get(k)
                .and_then(Value::as_u64)
                .map(|v| v as usize)
                .ok_or_else(|| err(format!("missing or non-integer '{k}'")))
        };
        let f_or = |k: &str, d: f64| config.get(k).and_then(Value::as_f64).unwrap_or(d) as f32;
        let d_model = u("hidden_size")?;
        let n_heads = u("num_attention_heads")?;
        let head_dim = u("head_dim").unwrap_or(d_model / n_heads.max(1));
        let cfg = ModelConfig {
            family,
            n_layers: u("num_hidden_layers")?,
            d_model,
            n_heads,
            n_kv_heads: u("num_key_value_heads").unwrap_or(n_heads),
            head_dim,
            ffn_dim: u("intermediate_size")?,
            vocab: u("vocab_size")?,
            rope_base: f_or("rope_theta", 10000.0),
            rope_dim: head_dim,
            rope_style: RopeStyle::Neox,
            norm_eps: f_or("rms_norm_eps", 1e-6),
            context_len: u("max_position_embeddings").unwrap_or(4096),
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
        Ok(())
    }
}
