//! OLMoE (AI2): Llama attention with an RMSNorm over the whole q and k projections (before the
//! split into heads and RoPE, Neox pairs), and a mixture of experts in every layer whose chosen
//! weights are not renormalized (`norm_topk_prob: false`; llama.cpp's graph never does).
use crate::Family;

pub static FAMILY: Family = Family {
    name: "olmoe",
    gguf_arch: "olmoe",
    hf_names: &["OlmoeForCausalLM", "olmoe"],
    qk_norm: true,
    qk_norm_full: true,
    norm_topk_default: false,
    norm_topk_gguf: false,
    ..Family::LLAMA_LIKE
};
