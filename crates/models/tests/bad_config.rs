//! Model files whose metadata can only produce garbage are refused at load with a message that
//! names the key, never an abort or a huge allocation (a 2^31-layer `block_count`, a zero
//! context, non-finite or non-positive RoPE bases and epsilons, a zero window).

use tf_core::DType;
use tf_models::synth::{synth_gguf, SynthSpec};
use tf_models::Model;
use tf_weights::{GgufFile, MetaValue};

fn load_with(arch: &'static str, key: &str, value: MetaValue) -> String {
    let mut w = synth_gguf(&SynthSpec::tiny(arch, DType::Q8_0));
    w.meta(&format!("{arch}.{key}"), value);
    let g = GgufFile::from_bytes(w.to_bytes(), "bad.gguf").unwrap();
    match Model::from_gguf(g) {
        Ok(_) => panic!("{arch}.{key}: loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn garbage_metadata_is_refused_by_name() {
    let huge = load_with("qwen2", "block_count", MetaValue::U32(0x7FFF_FFFF));
    assert!(huge.contains("missing tensor 'blk.2."), "{huge}");
    for (key, value, says) in [
        ("context_length", MetaValue::U32(0), "context length"),
        ("rope.freq_base", MetaValue::F32(f32::NAN), "RoPE base"),
        ("rope.freq_base", MetaValue::F32(-1.0), "RoPE base"),
        ("rope.freq_base", MetaValue::F32(f32::INFINITY), "RoPE base"),
        (
            "attention.layer_norm_rms_epsilon",
            MetaValue::F32(0.0),
            "epsilon",
        ),
        (
            "attention.layer_norm_rms_epsilon",
            MetaValue::F32(f32::NAN),
            "epsilon",
        ),
        (
            "final_logit_softcapping",
            MetaValue::F32(-3.0),
            "soft-capping",
        ),
    ] {
        let msg = load_with("gemma3", key, value);
        assert!(
            msg.contains("bad.gguf") && msg.contains(says),
            "{key}: {msg}"
        );
    }
    let zero = load_with("gemma3", "rope.freq_base_swa", MetaValue::F32(0.0));
    assert!(zero.contains("RoPE base"), "{zero}");
    let scaling = load_with(
        "llama",
        "rope.scaling.type",
        MetaValue::String("longrope".into()),
    );
    assert!(
        scaling.contains("rope.scaling.type 'longrope'"),
        "{scaling}"
    );
    // YaRN needs the context it was trained at.
    let yarn = load_with(
        "llama",
        "rope.scaling.type",
        MetaValue::String("yarn".into()),
    );
    assert!(
        yarn.contains("rope.scaling.original_context_length"),
        "{yarn}"
    );
}

/// A window of 0 keys means none (as llama.cpp reads it), not a model that sees nothing.
#[test]
fn a_zero_window_means_full_attention() {
    let mut w = synth_gguf(&SynthSpec::tiny("gemma3", DType::Q8_0));
    w.meta("gemma3.attention.sliding_window", MetaValue::U32(0));
    let m = Model::from_gguf(GgufFile::from_bytes(w.to_bytes(), "w0.gguf").unwrap()).unwrap();
    assert!(m.plan.layers.iter().all(|l| l.window.is_none()));
}

/// A quantized safetensors checkpoint other than gpt-oss's MXFP4 is refused with the way that
/// works, and gpt-oss's activation limit is checked.
#[test]
fn quantized_checkpoints_and_other_limits_are_refused_by_name() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/families/gpt-oss/hf/config.json");
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir).unwrap()).unwrap();
    assert!(tf_models::ModelConfig::from_hf(&base, "hf").is_ok());
    let mut q = base.clone();
    q["quantization_config"] = serde_json::json!({"quant_method": "mxfp4"});
    assert!(
        tf_models::ModelConfig::from_hf(&q, "hf").is_ok(),
        "gpt-oss's own MXFP4"
    );
    q["quantization_config"] = serde_json::json!({"quant_method": "gptq"});
    let err = tf_models::ModelConfig::from_hf(&q, "hf")
        .unwrap_err()
        .to_string();
    assert!(err.contains("quantized") && err.contains("GGUF"), "{err}");
    let mut l = base;
    l["swiglu_limit"] = serde_json::json!(9.0);
    let err = tf_models::ModelConfig::from_hf(&l, "hf")
        .unwrap_err()
        .to_string();
    assert!(err.contains("swiglu_limit 9"), "{err}");
}
