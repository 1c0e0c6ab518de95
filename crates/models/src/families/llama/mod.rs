//! Llama (Llama 2/3.x, SmolLM2, Mistral): no biases, no q/k norms. GGUF converters permute q/k
//! rows so that rotary pairs are adjacent (interleaved); HF checkpoints keep the half-split (Neox)
//! layout. Llama 3.x's frequency scaling comes from `rope_scaling` (HF) or the `rope_freqs`
//! tensor (GGUF); Mistral's sliding window from `sliding_window`, on every layer.
use crate::Family;
use tf_kernels::ops::RopeStyle;

pub static FAMILY: Family = Family {
    name: "llama",
    gguf_arch: "llama",
    hf_names: &["LlamaForCausalLM", "llama", "MistralForCausalLM", "mistral"],
    gguf_rope: RopeStyle::Interleaved,
    ..Family::LLAMA_LIKE
};
