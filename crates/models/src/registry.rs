//! The supported model families. Adding a family = one folder under `families/` and one line in
//! [`FAMILIES`].

use crate::families;
use tf_kernels::ops::RopeStyle;

/// What distinguishes one llama-like decoder family from another.
#[derive(Debug)]
pub struct Family {
    /// Our name for it.
    pub name: &'static str,
    /// `general.architecture` in GGUF files.
    pub gguf_arch: &'static str,
    /// `architectures[0]` (or `model_type`) in Hugging Face `config.json`.
    pub hf_names: &'static [&'static str],
    /// Biases on the q, k and v projections.
    pub qkv_bias: bool,
    /// RMSNorm over each head of q and k before RoPE.
    pub qk_norm: bool,
    /// How GGUF files of this family lay out rotary pairs (HF checkpoints are always Neox).
    pub gguf_rope: RopeStyle,
}

pub static FAMILIES: &[&Family] = &[
    &families::llama::FAMILY,
    &families::qwen2::FAMILY,
    &families::qwen3::FAMILY,
];

pub fn by_gguf_arch(arch: &str) -> Option<&'static Family> {
    FAMILIES.iter().copied().find(|f| f.gguf_arch == arch)
}

pub fn by_hf_name(name: &str) -> Option<&'static Family> {
    FAMILIES
        .iter()
        .copied()
        .find(|f| f.hf_names.iter().any(|n| n.eq_ignore_ascii_case(name)))
}

pub fn supported_list() -> String {
    FAMILIES
        .iter()
        .map(|f| f.gguf_arch)
        .collect::<Vec<_>>()
        .join(", ")
}
