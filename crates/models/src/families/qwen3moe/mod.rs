//! Qwen3-MoE: Qwen3's attention (per-head q/k RMSNorm, no biases) with a mixture of experts in
//! every layer: a softmax router picks `expert_used_count` experts per token, their weights
//! renormalized where `norm_topk_prob` says (always in GGUF files, as llama.cpp does).
use crate::Family;

pub static FAMILY: Family = Family {
    name: "qwen3moe",
    gguf_arch: "qwen3moe",
    hf_names: &["Qwen3MoeForCausalLM", "qwen3_moe"],
    qk_norm: true,
    norm_topk_default: false,
    ..Family::LLAMA_LIKE
};
