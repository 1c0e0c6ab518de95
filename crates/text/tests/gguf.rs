//! Tokenizers built from small in-memory GGUF files: a SentencePiece vocabulary end to end, a
//! byte-level BPE one, and every kind of bad metadata giving its own error naming the file.

mod common;

use common::{gguf_with, str_value, strings, tiny_spm, tiny_spm_meta};
use tf_text::{TextError, TokenKind, Tokenizer};
use tf_weights::MetaValue;

fn names(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&id| tok.id_to_token(id).unwrap().to_string())
        .collect()
}

#[test]
fn sentencepiece_encode_decode() {
    let tok = tiny_spm();
    assert_eq!(tok.vocab_size(), 5 + 256 + 12);
    assert!(tok.add_bos(), "llama vocabularies add BOS by default");
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eog_ids(), [2, 3], "</s> and <|im_end|>");
    assert_eq!(tok.token_kind(5), Some(TokenKind::Byte));

    // Space prefix at the start, merges by score, byte fallback for unknown characters.
    let ids = tok.encode("hello hello!", false).unwrap();
    assert_eq!(names(&tok, &ids), ["▁hello", "▁hello", "<0x21>"]);
    assert_eq!(tok.decode(&ids, false), " hello hello!");

    // A space prefix again after a special token; é falls back to its two bytes.
    let ids = tok.encode("日<|im_end|>hé", true).unwrap();
    assert_eq!(
        names(&tok, &ids),
        ["▁日", "<|im_end|>", "▁", "h", "<0xC3>", "<0xA9>"]
    );
    assert_eq!(tok.decode(&ids, false), " 日<|im_end|> hé");
    assert_eq!(tok.decode(&ids, true), " 日 hé");

    // User-defined tokens are parsed even without parse_special; control ones are not.
    let ids = tok.encode("<think><|im_end|>", false).unwrap();
    assert_eq!(ids[0], 4);
    assert!(!ids.contains(&3));
}

#[test]
fn sentencepiece_without_space_prefix() {
    let mut meta = tiny_spm_meta();
    meta.push(("tokenizer.ggml.add_space_prefix", MetaValue::Bool(false)));
    meta.push(("tokenizer.ggml.add_bos_token", MetaValue::Bool(false)));
    let tok = Tokenizer::from_gguf(&gguf_with("t.gguf", meta)).unwrap();
    assert!(!tok.add_bos());
    let ids = tok.encode("hello", false).unwrap();
    assert_eq!(names(&tok, &ids), ["hello"]);
}

/// Byte-level BPE vocabulary: the 256 alphabet characters, merges "h e", "l l", "he ll",
/// "hell o", "Ġ w", and two special tokens.
fn tiny_bpe_meta(pre: Option<&str>) -> Vec<(&'static str, MetaValue)> {
    let mut tokens: Vec<String> = (0..=255u8)
        .map(|b| {
            // GPT-2 alphabet, as in pretok.rs.
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            let shifted = (0..b)
                .filter(|x| !matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF))
                .count() as u32;
            let c = if printable {
                u32::from(b)
            } else {
                256 + shifted
            };
            char::from_u32(c).unwrap().to_string()
        })
        .collect();
    for t in [
        "he",
        "ll",
        "hell",
        "hello",
        "Ġw",
        "<|eot|>",
        "<|end_of_text|>",
    ] {
        tokens.push(t.to_string());
    }
    let mut types = vec![1i32; 256 + 5];
    types.extend([3, 3]);
    let mut meta = vec![
        ("tokenizer.ggml.model", str_value("gpt2")),
        (
            "tokenizer.ggml.tokens",
            MetaValue::Array(tokens.into_iter().map(MetaValue::String).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            MetaValue::Array(types.into_iter().map(MetaValue::I32).collect()),
        ),
        (
            "tokenizer.ggml.merges",
            strings(&["h e", "l l", "he ll", "hell o", "Ġ w"]),
        ),
        ("tokenizer.ggml.eos_token_id", MetaValue::U32(261)),
        ("tokenizer.chat_template", str_value("{{ messages }}")),
    ];
    if let Some(pre) = pre {
        meta.push(("tokenizer.ggml.pre", str_value(pre)));
    }
    meta
}

#[test]
fn byte_level_bpe_encode_decode() {
    for pre in [
        None,
        Some("gpt2"),
        Some("qwen2"),
        Some("llama-bpe"),
        Some("smollm"),
    ] {
        let tok = Tokenizer::from_gguf(&gguf_with("bpe.gguf", tiny_bpe_meta(pre))).unwrap();
        let ids = tok.encode("hello world<|eot|>", true).unwrap();
        let n = names(&tok, &ids);
        assert_eq!(n[0], "hello", "{pre:?}");
        assert_eq!(n[1], "Ġw", "{pre:?}");
        assert_eq!(n.last().unwrap(), "<|eot|>");
        assert_eq!(tok.decode(&ids, false), "hello world<|eot|>");
        assert_eq!(tok.decode(&ids, true), "hello world");
        assert_eq!(tok.eog_ids(), [261, 262], "eos plus <|end_of_text|>");
        assert_eq!(tok.chat_template(), Some("{{ messages }}"));
        assert!(!tok.add_bos(), "no BOS id");
    }
}

fn error_of(meta: Vec<(&str, MetaValue)>) -> TextError {
    Tokenizer::from_gguf(&gguf_with("bad.gguf", meta)).unwrap_err()
}

fn without(mut meta: Vec<(&'static str, MetaValue)>, key: &str) -> Vec<(&'static str, MetaValue)> {
    meta.retain(|(k, _)| *k != key);
    meta
}

fn with(
    mut meta: Vec<(&'static str, MetaValue)>,
    key: &'static str,
    value: MetaValue,
) -> Vec<(&'static str, MetaValue)> {
    meta.retain(|(k, _)| *k != key);
    meta.push((key, value));
    meta
}

#[test]
fn missing_keys_are_named() {
    for key in [
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",
    ] {
        let err = error_of(without(tiny_bpe_meta(Some("gpt2")), key));
        match &err {
            TextError::MissingKey { path, key: k } => {
                assert_eq!(k, key);
                assert_eq!(path.to_str(), Some("bad.gguf"));
            }
            other => panic!("{key}: {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("bad.gguf") && msg.contains(key), "{msg}");
    }
    let err = error_of(without(tiny_spm_meta(), "tokenizer.ggml.scores"));
    assert!(
        matches!(&err, TextError::MissingKey { key, .. } if key == "tokenizer.ggml.scores"),
        "{err:?}"
    );
}

#[test]
fn unknown_pre_tokenizer_is_named() {
    let err = error_of(tiny_bpe_meta(Some("klingon")));
    assert!(
        matches!(&err, TextError::UnsupportedPreTokenizer { pre, .. } if pre == "klingon"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("bad.gguf") && msg.contains("'klingon'") && msg.contains("qwen2"),
        "{msg}"
    );
}

#[test]
fn unknown_model_is_named() {
    let err = error_of(with(
        tiny_bpe_meta(None),
        "tokenizer.ggml.model",
        str_value("bert"),
    ));
    assert!(
        matches!(&err, TextError::UnsupportedModel { model, .. } if model == "bert"),
        "{err:?}"
    );
    assert!(err.to_string().contains("bad.gguf") && err.to_string().contains("'bert'"));
}

#[test]
fn inconsistent_metadata_is_invalid() {
    let err = error_of(with(
        tiny_bpe_meta(None),
        "tokenizer.ggml.token_type",
        MetaValue::Array(vec![MetaValue::I32(1); 3]),
    ));
    assert!(matches!(err, TextError::InvalidVocab { .. }), "{err:?}");

    let err = error_of(with(
        tiny_bpe_meta(None),
        "tokenizer.ggml.merges",
        strings(&["nospace"]),
    ));
    assert!(
        matches!(&err, TextError::InvalidVocab { what, .. } if what.contains("nospace")),
        "{err:?}"
    );

    let err = error_of(with(
        tiny_bpe_meta(None),
        "tokenizer.ggml.merges",
        strings(&["x y"]),
    ));
    assert!(
        matches!(err, TextError::InvalidVocab { .. }),
        "merge of unknown tokens: {err:?}"
    );

    let err = error_of(with(
        tiny_bpe_meta(None),
        "tokenizer.ggml.tokens",
        MetaValue::U32(7),
    ));
    assert!(matches!(err, TextError::Weights(_)), "wrong type: {err:?}");
    assert!(err.to_string().contains("tokenizer.ggml.tokens"), "{err}");

    let err = error_of(with(
        tiny_bpe_meta(None),
        "tokenizer.ggml.tokens",
        MetaValue::Array(vec![]),
    ));
    assert!(
        matches!(err, TextError::InvalidVocab { .. }),
        "empty: {err:?}"
    );
}

/// A byte-level BPE vocabulary with these control tokens appended (ids 263 on).
fn with_controls(extra: &[&str]) -> Tokenizer {
    let mut meta = tiny_bpe_meta(None);
    for (key, value) in meta.iter_mut() {
        match (*key, value) {
            ("tokenizer.ggml.tokens", MetaValue::Array(v)) => {
                v.extend(extra.iter().map(|t| MetaValue::String(t.to_string())))
            }
            ("tokenizer.ggml.token_type", MetaValue::Array(v)) => {
                v.extend(extra.iter().map(|_| MetaValue::I32(3)))
            }
            _ => {}
        }
    }
    Tokenizer::from_gguf(&gguf_with("controls.gguf", meta)).unwrap()
}

/// The harmony format (gpt-oss) ends a reply at `<|return|>` or `<|call|>`; its `<|end|>` closes
/// one message (the analysis) and must not end the reply, while Phi-3's `<|end|>` does.
#[test]
fn harmony_vocabularies_end_at_return_and_call_not_end() {
    let tok = with_controls(&[
        "<|start|>",
        "<|end|>",
        "<|message|>",
        "<|channel|>",
        "<|return|>",
        "<|call|>",
    ]);
    assert_eq!(tok.eog_ids(), [261, 262, 267, 268]);
    assert!(!tok.is_eog(264), "<|end|>");
    let phi = with_controls(&["<|end|>", "<|user|>"]);
    assert_eq!(phi.eog_ids(), [261, 262, 263]);
}
