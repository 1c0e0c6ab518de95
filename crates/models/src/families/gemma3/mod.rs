//! Gemma 3 (text): GeGLU, q/k norms, sandwich norms, embeddings scaled by `sqrt(d_model)`, five
//! sliding-window layers (RoPE base 10,000) to one global layer (the model's base, with its
//! linear scaling), attention scaled by `query_pre_attn_scalar^-1/2`, tied output head.
use crate::registry::{Mlp, Windows};
use crate::Family;

/// HF names of Gemma's four per-layer norms (GGUF-style name first).
pub const GEMMA_NORMS: &[(&str, &str)] = &[
    (
        "post_attention_norm.weight",
        "post_attention_layernorm.weight",
    ),
    ("ffn_norm.weight", "pre_feedforward_layernorm.weight"),
    ("post_ffw_norm.weight", "post_feedforward_layernorm.weight"),
];

pub static FAMILY: Family = Family {
    name: "gemma3",
    gguf_arch: "gemma3",
    hf_names: &["Gemma3ForCausalLM", "gemma3_text"],
    qk_norm: true,
    mlp: Mlp::GeGlu,
    post_norms: true,
    hf_norm_offset: true,
    embed_scale: true,
    windows: Windows::AllButEvery(6),
    local_rope_base: Some(10000.0),
    hf_tensors: GEMMA_NORMS,
    ..Family::LLAMA_LIKE
};
