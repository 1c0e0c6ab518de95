//! Gemma 2: Gemma 3's layout without q/k norms, sliding-window and global layers alternating
//! (one RoPE base), attention-logit and final-logit soft-capping.
use crate::registry::{Mlp, Windows};
use crate::Family;

pub static FAMILY: Family = Family {
    name: "gemma2",
    gguf_arch: "gemma2",
    hf_names: &["Gemma2ForCausalLM", "gemma2"],
    mlp: Mlp::GeGlu,
    post_norms: true,
    hf_norm_offset: true,
    embed_scale: true,
    windows: Windows::AllButEvery(2),
    hf_tensors: super::gemma3::GEMMA_NORMS,
    ..Family::LLAMA_LIKE
};
