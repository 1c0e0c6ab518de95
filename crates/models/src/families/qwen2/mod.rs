//! Qwen2 / Qwen2.5: biases on q, k and v; Neox rotary pairs.
use crate::Family;

pub static FAMILY: Family = Family {
    name: "qwen2",
    gguf_arch: "qwen2",
    hf_names: &["Qwen2ForCausalLM", "qwen2"],
    qkv_bias: true,
    ..Family::LLAMA_LIKE
};
