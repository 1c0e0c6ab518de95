//! Qwen3: no biases, RMSNorm on each q and k head before RoPE; Neox rotary pairs.
use crate::Family;

pub static FAMILY: Family = Family {
    name: "qwen3",
    gguf_arch: "qwen3",
    hf_names: &["Qwen3ForCausalLM", "qwen3"],
    qk_norm: true,
    ..Family::LLAMA_LIKE
};
