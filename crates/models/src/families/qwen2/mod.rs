//! Qwen2 / Qwen2.5: biases on q, k and v; Neox rotary pairs.
use crate::Family;
use tf_kernels::ops::RopeStyle;

pub static FAMILY: Family = Family {
    name: "qwen2",
    gguf_arch: "qwen2",
    hf_names: &["Qwen2ForCausalLM", "qwen2"],
    qkv_bias: true,
    qk_norm: false,
    gguf_rope: RopeStyle::Neox,
};
