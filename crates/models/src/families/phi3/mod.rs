//! Phi-3: the Llama layout with q, k and v in one tensor and gate and up in one; a sliding
//! window on every layer where the config sets one.
use crate::Family;

pub static FAMILY: Family = Family {
    name: "phi3",
    gguf_arch: "phi3",
    hf_names: &["Phi3ForCausalLM", "phi3"],
    fused: true,
    hf_tensors: &[
        ("attn_qkv.weight", "self_attn.qkv_proj.weight"),
        ("ffn_up.weight", "mlp.gate_up_proj.weight"),
    ],
    ..Family::LLAMA_LIKE
};
