//! Where test data lives: committed fixtures, the shared reference continuations, and the test
//! models (never committed; fetched by scripts/fetch-test-models).

#![allow(dead_code)]

use std::path::PathBuf;

use tf_text::Tokenizer;
use tf_weights::GgufFile;

pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `$TENSORFOLD_SHARED/reference`, else `shared/reference` next to the workspace.
pub fn reference_dir() -> PathBuf {
    match std::env::var_os("TENSORFOLD_SHARED") {
        Some(shared) => PathBuf::from(shared).join("reference"),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference"),
    }
}

/// `$TENSORFOLD_CACHE/models`, else `~/.cache/tensorfold/models`.
pub fn models_dir() -> PathBuf {
    match std::env::var_os("TENSORFOLD_CACHE") {
        Some(cache) => PathBuf::from(cache).join("models"),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            PathBuf::from(home).join(".cache/tensorfold/models")
        }
    }
}

/// Opens a test model; a missing file fails the test (it must not pass silently).
pub fn open_model(file: &str) -> GgufFile {
    let path = models_dir().join(file);
    assert!(
        path.exists(),
        "test model {} is missing: run scripts/fetch-test-models (or set TENSORFOLD_CACHE)",
        path.display()
    );
    GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"))
}

pub fn model_tokenizer(file: &str) -> Tokenizer {
    Tokenizer::from_gguf(&open_model(file)).unwrap_or_else(|e| panic!("{e}"))
}

/// Test model file of each name used by the fixtures.
pub const QWEN_1_5B: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
pub const QWEN_0_5B: &str = "qwen2.5-coder-0.5b-instruct.gguf";
pub const SMOLLM2: &str = "smollm2-135m-instruct-q4_1.gguf";

pub fn model_file(fixture_name: &str) -> &'static str {
    match fixture_name {
        "qwen2.5-coder-1.5b" => QWEN_1_5B,
        "qwen2.5-coder-0.5b" => QWEN_0_5B,
        "smollm2-135m" => SMOLLM2,
        other => panic!("no test model is known for fixture name {other:?}"),
    }
}

use tf_weights::{GgufWriter, MetaValue};

pub fn strings(items: &[&str]) -> MetaValue {
    MetaValue::Array(
        items
            .iter()
            .map(|s| MetaValue::String(s.to_string()))
            .collect(),
    )
}

pub fn str_value(s: &str) -> MetaValue {
    MetaValue::String(s.to_string())
}

/// A GGUF holding only the given metadata, parsed back (`name` stands for its path).
pub fn gguf_with(name: &str, meta: Vec<(&str, MetaValue)>) -> GgufFile {
    let mut w = GgufWriter::new();
    for (key, value) in meta {
        w.meta(key, value);
    }
    GgufFile::from_bytes(w.to_bytes(), name).unwrap()
}

/// A tiny SentencePiece (`llama`) vocabulary: specials, all 256 byte tokens, a few merges.
/// Returns the metadata; tokens are `<unk>`=0, `<s>`=1, `</s>`=2, `<|im_end|>`=3 (control),
/// `<think>`=4 (user-defined), `<0x00>`..`<0xFF>` = 5..=260, then the pieces below.
pub fn tiny_spm_meta() -> Vec<(&'static str, MetaValue)> {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>", "<|im_end|>", "<think>"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut types = vec![2, 3, 3, 3, 4];
    let mut scores = vec![0.0f32; 5];
    for b in 0..=255u32 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
        scores.push(0.0);
    }
    let pieces: [(&str, f32); 12] = [
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("ll", -3.0),
        ("he", -4.0),
        ("hell", -5.0),
        ("hello", -6.0),
        ("▁hello", -7.0),
        ("日", -2.0),
        ("▁日", -3.0),
    ];
    for (piece, score) in pieces {
        tokens.push(piece.to_string());
        types.push(1);
        scores.push(score);
    }
    vec![
        ("tokenizer.ggml.model", str_value("llama")),
        (
            "tokenizer.ggml.tokens",
            MetaValue::Array(tokens.into_iter().map(MetaValue::String).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            MetaValue::Array(types.into_iter().map(MetaValue::I32).collect()),
        ),
        (
            "tokenizer.ggml.scores",
            MetaValue::Array(scores.into_iter().map(MetaValue::F32).collect()),
        ),
        ("tokenizer.ggml.bos_token_id", MetaValue::U32(1)),
        ("tokenizer.ggml.eos_token_id", MetaValue::U32(2)),
        ("tokenizer.ggml.unknown_token_id", MetaValue::U32(0)),
    ]
}

pub fn tiny_spm() -> Tokenizer {
    Tokenizer::from_gguf(&gguf_with("tiny-spm.gguf", tiny_spm_meta())).unwrap()
}
