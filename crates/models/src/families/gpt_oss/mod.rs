//! gpt-oss (OpenAI, 2025): a mixture of experts in every layer (top k of the router's scores
//! plus a bias, softmax over those k; experts with biases and a clamped SwiGLU, stored as MXFP4),
//! attention with biases on q, k, v and the output and one sink logit per head, sliding-window
//! (128) and full layers alternating (the first slides), YaRN-scaled RoPE in Neox pairs. Float
//! safetensors checkpoints hold the experts fused and interleaved; they are relaid out at load.
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
    hf_fused_experts: true,
    hf_experts: [
        "mlp.router.weight",
        "mlp.experts.gate_up_proj",
        "mlp.experts.gate_up_proj",
        "mlp.experts.down_proj",
    ],
    hf_tensors: &[
        (
            "post_attention_norm.weight",
            "post_attention_layernorm.weight",
        ),
        ("attn_output.bias", "self_attn.o_proj.bias"),
        ("attn_sinks.weight", "self_attn.sinks"),
    ],
    yarn_truncate_default: false,
    ..Family::LLAMA_LIKE
};
