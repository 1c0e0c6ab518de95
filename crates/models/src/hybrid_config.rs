//! The configuration of hybrid recurrent models: Gated DeltaNet layers among attention layers
//! (Qwen3.5, Qwen3-Next) and Mamba-2, attention and MLP blocks (Nemotron-H), from GGUF keys
//! (read in `config.rs`) or a Hugging Face `config.json` (read here).

use crate::error::{ModelError, Result};
use crate::registry::Family;
use serde_json::Value;

/// What one block of a Nemotron-H-style model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    Mamba,
    Attention,
    Mlp,
}

/// Mamba-2 blocks among attention and MLP blocks (Nemotron-H).
#[derive(Clone, Debug, PartialEq)]
pub struct MambaConfig {
    pub heads: usize,
    pub head_dim: usize,
    /// State width per head.
    pub state: usize,
    /// Groups sharing B and C.
    pub groups: usize,
    pub conv_kernel: usize,
    /// Each layer's block.
    pub blocks: Vec<Block>,
}

impl MambaConfig {
    /// Blocks from a pattern of `M` (Mamba-2), `*` (attention) and `-` (MLP).
    pub fn pattern(p: &str) -> Option<Vec<Block>> {
        p.chars()
            .map(|c| match c {
                'M' => Some(Block::Mamba),
                '*' => Some(Block::Attention),
                '-' => Some(Block::Mlp),
                _ => None,
            })
            .collect()
    }
}

/// Gated DeltaNet layers (Qwen3-Next, Qwen3.5): linear attention with a recurrent state, mixed
/// with a few full-attention layers.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaConfig {
    pub k_heads: usize,
    pub v_heads: usize,
    /// Key (and query) head width.
    pub dk: usize,
    /// Value head width.
    pub dv: usize,
    /// Taps of the short causal convolution.
    pub conv_kernel: usize,
    /// Value head `h` reads key head `h % k_heads` (the order GGUF converters write) instead
    /// of `h / (v_heads / k_heads)` (transformers').
    pub tiled: bool,
    /// Which layers are full attention (the others are Gated DeltaNet).
    pub attention: Vec<bool>,
}

impl DeltaConfig {
    /// Channels of the convolution: q, k and v.
    pub fn channels(&self) -> usize {
        2 * self.k_heads * self.dk + self.v_heads * self.dv
    }

    /// Layer types from a full-attention interval: every `n`-th layer attends.
    pub fn every(n: usize, layers: usize) -> Vec<bool> {
        (0..layers)
            .map(|l| (l + 1).is_multiple_of(n.max(1)))
            .collect()
    }
}

/// A Nemotron-H config's blocks: `hybrid_override_pattern` (`M`, `*`, `-`), or
/// `layers_block_type` (`mamba`, `attention`, `mlp`).
pub(crate) fn hf_blocks(config: &Value, src: &str) -> Result<Vec<Block>> {
    let err = |what: String| ModelError::Config {
        source_path: src.to_string(),
        what,
    };
    if let Some(p) = config
        .get("hybrid_override_pattern")
        .and_then(Value::as_str)
    {
        return MambaConfig::pattern(p)
            .filter(|b| !b.is_empty())
            .ok_or_else(|| err(format!("hybrid_override_pattern {p:?}: M, * and - only")));
    }
    let list = config
        .get("layers_block_type")
        .and_then(Value::as_array)
        .ok_or_else(|| err("neither hybrid_override_pattern nor layers_block_type".into()))?;
    list.iter()
        .map(|t| match t.as_str() {
            Some("mamba") => Ok(Block::Mamba),
            Some("attention") | Some("full_attention") => Ok(Block::Attention),
            Some("mlp") => Ok(Block::Mlp),
            other => Err(err(format!("block type {other:?} is not supported"))),
        })
        .collect()
}

/// The Mamba-2 shape of a Hugging Face config of a family with Mamba-2 blocks.
pub(crate) fn hf_mamba(config: &Value, family: &Family, src: &str) -> Result<Option<MambaConfig>> {
    if !family.mamba_blocks {
        return Ok(None);
    }
    let num = |k: &str| integer(config, k, src);
    Ok(Some(MambaConfig {
        heads: num("mamba_num_heads")?,
        head_dim: num("mamba_head_dim")?,
        state: num("ssm_state_size")?,
        groups: num("n_groups")?,
        conv_kernel: num("conv_kernel")?,
        blocks: hf_blocks(config, src)?,
    }))
}

/// The Gated DeltaNet layers of a Hugging Face config (`linear_*` keys), for a family that has
/// them; the layer types from `layer_types` (`linear_attention` / `full_attention`), else from
/// `full_attention_interval`.
pub(crate) fn hf_delta(
    config: &Value,
    family: &Family,
    layers: usize,
    src: &str,
) -> Result<Option<DeltaConfig>> {
    if !family.delta_net {
        return Ok(None);
    }
    let num = |k: &str| integer(config, k, src);
    let attention = match config.get("layer_types").and_then(Value::as_array) {
        Some(types) => types
            .iter()
            .map(|t| t.as_str() == Some("full_attention"))
            .collect(),
        None => DeltaConfig::every(num("full_attention_interval")?, layers),
    };
    Ok(Some(DeltaConfig {
        k_heads: num("linear_num_key_heads")?,
        v_heads: num("linear_num_value_heads")?,
        dk: num("linear_key_head_dim")?,
        dv: num("linear_value_head_dim")?,
        conv_kernel: num("linear_conv_kernel_dim")?,
        tiled: false,
        attention,
    }))
}

/// A Hugging Face config's integer `k`.
fn integer(config: &Value, k: &str, src: &str) -> Result<usize> {
    config
        .get(k)
        .and_then(Value::as_u64)
        .map(|v| v as usize)
        .ok_or_else(|| ModelError::Config {
            source_path: src.to_string(),
            what: format!("missing or non-integer '{k}'"),
        })
}
