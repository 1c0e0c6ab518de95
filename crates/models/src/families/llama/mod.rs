//! Llama (Llama 2/3.x, SmolLM2, Mistral): no biases, no q/k norms. GGUF converters permute q/k
//! rows so that rotary pairs are adjacent (interleaved); HF checkpoints keep the half-split (Neox)
//! layout. Llama 3.x's frequency scaling comes from `rope_scaling` (HF) or the `rope_freqs`
//! tensor (GGUF); Mistral's sliding window from `sliding_window`, on every layer. Mixtral is a
//! Llama with a mixture of experts (`expert_count` in GGUF, `num_local_experts` in HF, whose
//! experts are `block_sparse_moe.experts.E.w1/w3/w2`: gate, up, down).
use crate::Family;
use tf_kernels::ops::RopeStyle;

pub static FAMILY: Family = Family {
    name: "llama",
    gguf_arch: "llama",
    hf_names: &[
        "LlamaForCausalLM",
        "llama",
        "MistralForCausalLM",
        "mistral",
        "MixtralForCausalLM",
        "mixtral",
    ],
    gguf_rope: RopeStyle::Interleaved,
    hf_experts: [
        "block_sparse_moe.gate.weight",
        "block_sparse_moe.experts.{e}.w1.weight",
        "block_sparse_moe.experts.{e}.w3.weight",
        "block_sparse_moe.experts.{e}.w2.weight",
    ],
    ..Family::LLAMA_LIKE
};
