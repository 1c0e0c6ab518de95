//! gpt-oss (OpenAI, 2025): a mixture of experts in every layer (top k of the router's scores
//! plus a bias, softmax over those k; experts with biases and a clamped SwiGLU, stored as MXFP4),
//! attention with biases on q, k, v and the output and one sink logit per head, sliding-window
//! (128) and full layers alternating (the first slides), YaRN-scaled RoPE in Neox pairs.
use crate::registry::{Gating, Mlp, Windows};
use crate::Family;

pub static FAMILY: Family = Family {
    name: "gpt-oss",
    gguf_arch: "gpt-oss",
    hf_names: &["GptOssForCausalLM", "gpt_oss"],
    qkv_bias: true,
    mlp: Mlp::SwiGluOai,
    windows: Windows::AllButEvery(2),
    gating: Gating::TopKSoftmax,
    gpt_oss_biases: true,
    sinks: true,
    gguf_ffn_norm: "post_attention_norm.weight",
    hf_unsupported: Some(
        "gpt-oss safetensors checkpoints (fused, interleaved expert tensors) are not read yet: \
         use a GGUF conversion (llama.cpp's convert_hf_to_gguf.py writes its MXFP4 experts as they are)",
    ),
    yarn_truncate_default: false,
    ..Family::LLAMA_LIKE
};
