//! Qwen3.5 (dense text models): Gated DeltaNet layers (linear attention with a recurrent state,
//! a short convolution and a gated output norm) with every `full_attention_interval`-th layer
//! full attention, gated (each head's query comes with a gate) with per-head q/k norms and RoPE
//! on the first quarter of each head; zero-centred RMSNorm weights (`1 + w`) in Hugging Face
//! checkpoints, stored as `1 + w` by GGUF converters.
use crate::Family;

pub static FAMILY: Family = Family {
    name: "qwen35",
    gguf_arch: "qwen35",
    hf_names: &["Qwen3_5ForCausalLM", "qwen3_5_text", "qwen3_5"],
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
