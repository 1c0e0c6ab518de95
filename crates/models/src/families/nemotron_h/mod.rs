//! NVIDIA Nemotron-H: blocks of one op each, Mamba-2 (the most), MLP and a few attention
//! blocks, each `x + op(norm(x))` with its own RMSNorm. The MLP is a squared ReLU of one
//! projection; attention has no position encoding. Hugging Face checkpoints name everything
//! under `backbone.` and each block's op `mixer`.
use crate::registry::Mlp;
use crate::Family;

pub static FAMILY: Family = Family {
    name: "nemotron_h",
    gguf_arch: "nemotron_h",
    hf_names: &["NemotronHForCausalLM", "nemotron_h"],
    mlp: Mlp::Relu2,
    mamba_blocks: true,
    rope: false,
    hf_layers: "backbone.layers",
    hf_globals: [
        "backbone.embeddings.weight",
        "backbone.norm_f.weight",
        "lm_head.weight",
    ],
    hf_tensors: &[
        ("attn_norm.weight", "norm.weight"),
        ("attn_q.weight", "mixer.q_proj.weight"),
        ("attn_k.weight", "mixer.k_proj.weight"),
        ("attn_v.weight", "mixer.v_proj.weight"),
        ("attn_output.weight", "mixer.o_proj.weight"),
        ("ffn_up.weight", "mixer.up_proj.weight"),
        ("ffn_down.weight", "mixer.down_proj.weight"),
    ],
    ..Family::LLAMA_LIKE
};
