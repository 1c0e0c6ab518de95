//! Llama (and SmolLM2): no biases, no q/k norms. GGUF converters permute q/k rows so that rotary
//! pairs are adjacent (interleaved); HF checkpoints keep the half-split (Neox) layout.
use crate::Family;
use tf_kernels::ops::RopeStyle;

pub static FAMILY: Family = Family {
    name: "llama",
    gguf_arch: "llama",
    hf_names: &["LlamaForCausalLM", "llama"],
    qkv_bias: false,
    qk_norm: false,
    gguf_rope: RopeStyle::Interleaved,
};
