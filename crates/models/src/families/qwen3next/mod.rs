//! Qwen3-Next: Qwen3.5's layer mix (Gated DeltaNet layers, every `full_attention_interval`-th
//! layer gated full attention) with a mixture of experts in every layer plus a shared expert
//! whose output is gated by `sigmoid(x · gate)`. Its Hugging Face checkpoints fuse the linear
//! attention's projections per key head (`in_proj_qkvz`, `in_proj_ba`); they are split at load.
use crate::Family;

pub static FAMILY: Family = Family {
    name: "qwen3next",
    gguf_arch: "qwen3next",
    hf_names: &["Qwen3NextForCausalLM", "qwen3_next"],
    qk_norm: true,
    hf_norm_offset: true,
    delta_net: true,
    gated_attention: true,
    gguf_ffn_norm: "post_attention_norm.weight",
    hf_tensors: &[(
        "post_attention_norm.weight",
        "post_attention_layernorm.weight",
    )],
    ..Family::LLAMA_LIKE
};
