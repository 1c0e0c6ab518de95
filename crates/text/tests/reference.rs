//! The three test models' real vocabularies against independent references:
//! - llama.cpp's recorded runs (`shared/reference/*.json`): prompt text → prompt ids exactly,
//!   chat template + messages → prompt text exactly, completion ids → completion text;
//! - Python `tokenizers` over tricky texts (fixtures/gguf_encode.json);
//! - decode(encode(text)) == text and streaming == whole decode.

mod common;

use std::time::Instant;

use serde_json::Value;
use tf_text::{ChatTemplate, StreamDecoder, Tokenizer};

/// Reference file → test model.
fn model_for_reference(file_name: &str) -> &'static str {
    match file_name {
        "llama.cpp-greedy-qwen2.5-coder-1.5b-q4_k_m.json" => common::QWEN_1_5B,
        "llama.cpp-greedy-qwen2.5-coder-0.5b.json" => common::QWEN_0_5B,
        "llama.cpp-greedy-smollm2-135m-q4_1.json" => common::SMOLLM2,
        other => panic!("reference file {other} has no test model mapping in tests/reference.rs"),
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn stream_decode(tok: &Tokenizer, ids: &[u32], skip_special: bool) -> String {
    let mut stream = StreamDecoder::new(skip_special);
    let mut text = String::new();
    for &id in ids {
        text.push_str(&stream.push(tok, id));
    }
    text.push_str(&stream.finish());
    text
}

#[test]
fn llama_cpp_reference_prompts_and_completions() {
    let dir = common::reference_dir();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reference dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no reference JSON in {}", dir.display());

    let mut checked = 0;
    let mut failures = Vec::new();
    for path in &files {
        let file_name = path.file_name().unwrap().to_str().unwrap();
        let tok = common::model_tokenizer(model_for_reference(file_name));
        let template = ChatTemplate::new(
            tok.chat_template()
                .expect("test models ship a chat template"),
            tok.bos_token_text(),
            tok.eos_token_text(),
        )
        .unwrap();
        let reference = common::read_json(path);
        for case in reference["cases"].as_array().unwrap() {
            let label = format!("{file_name} / {}", case["name"].as_str().unwrap());
            let prompt_text = case["prompt_text"].as_str().unwrap();
            let got = tok.encode(prompt_text, true).unwrap();
            if got != ids(&case["prompt_ids"]) {
                failures.push(format!(
                    "{label}: prompt ids differ\n  want {:?}\n  got  {got:?}",
                    ids(&case["prompt_ids"])
                ));
            }
            if let Some(messages) = case["messages"].as_array() {
                let rendered = template
                    .render(messages, None, true, &serde_json::Map::new())
                    .unwrap();
                if rendered != prompt_text {
                    failures.push(format!(
                        "{label}: template renders {rendered:?}, want {prompt_text:?}"
                    ));
                }
            }
            // llama-server stops at an end-of-generation token without emitting its text.
            let mut completion = ids(&case["completion_ids"]);
            let want = case["completion_text"].as_str().unwrap();
            let skipped = tok.decode(&completion, true);
            if skipped != want {
                failures.push(format!("{label}: decoded {skipped:?}, want {want:?}"));
            }
            if completion.last().is_some_and(|&id| tok.is_eog(id)) {
                completion.pop();
            }
            let decoded = tok.decode(&completion, false);
            if decoded != want {
                failures.push(format!("{label}: decoded {decoded:?}, want {want:?}"));
            }
            if stream_decode(&tok, &completion, false) != decoded {
                failures.push(format!("{label}: streaming differs from decode"));
            }
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= files.len(), "every file has cases");
}

#[test]
fn tricky_texts_match_python_tokenizers() {
    let fixture = common::read_json(&common::fixtures_dir().join("gguf_encode.json"));
    let mut failures = Vec::new();
    for (name, cases) in fixture.as_object().unwrap() {
        let tok = common::model_tokenizer(common::model_file(name));
        for case in cases.as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let got = tok.encode(text, true).unwrap();
            if got != ids(&case["ids"]) {
                failures.push(format!(
                    "{name}: {text:?}\n  want {:?}\n  got  {got:?}",
                    ids(&case["ids"])
                ));
            }
            let round_trip = tok.decode(&got, false);
            if round_trip != text {
                failures.push(format!("{name}: {text:?} decodes back as {round_trip:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn qwen_special_tokens_and_end_of_generation() {
    let tok = common::model_tokenizer(common::QWEN_0_5B);
    assert_eq!(tok.vocab_size(), 151_936);
    let im_start = tok.token_to_id("<|im_start|>").unwrap();
    let im_end = tok.token_to_id("<|im_end|>").unwrap();
    let endoftext = tok.token_to_id("<|endoftext|>").unwrap();
    let tool_call = tok.token_to_id("<tool_call>").unwrap();
    assert_eq!((im_start, im_end, endoftext), (151_644, 151_645, 151_643));
    assert_eq!(tok.eos_id(), Some(im_end));
    assert_eq!(tok.bos_id(), Some(endoftext));
    assert!(!tok.add_bos());
    assert_eq!(tok.eog_ids(), [endoftext, im_end]);
    assert!(tok.is_eog(im_end) && !tok.is_eog(im_start));
    assert!(tok.is_special(im_start) && tok.is_control(im_start));
    assert!(tok.is_special(tool_call) && !tok.is_control(tool_call));
    assert_eq!(tok.eos_token_text(), Some("<|im_end|>"));

    // Control tokens are parsed only on request; user-defined ones always.
    let text = "<|im_start|>x<tool_call>";
    assert_eq!(tok.encode(text, true).unwrap()[0], im_start);
    let plain = tok.encode(text, false).unwrap();
    assert!(!plain.contains(&im_start));
    assert_eq!(*plain.last().unwrap(), tool_call);
    assert_eq!(tok.decode(&plain, false), text);

    // skip_special drops control tokens only; token_bytes gives special tokens' text.
    let ids = [
        im_start,
        tok.encode("hi", false).unwrap()[0],
        tool_call,
        im_end,
    ];
    assert_eq!(tok.decode(&ids, true), "hi<tool_call>");
    assert_eq!(
        tok.decode(&ids, false),
        "<|im_start|>hi<tool_call><|im_end|>"
    );
    assert_eq!(tok.token_bytes(im_end), b"<|im_end|>");
    assert_eq!(tok.token_bytes(tok.token_to_id("Ġ").unwrap()), b" ");
    assert!(tok.token_bytes(151_700).is_empty(), "unused [PAD] token");
    assert_eq!(tok.id_to_token(im_end), Some("<|im_end|>"));
}

#[test]
fn smollm2_special_tokens() {
    let tok = common::model_tokenizer(common::SMOLLM2);
    assert_eq!(tok.vocab_size(), 49_152);
    assert_eq!(tok.eos_id(), Some(2));
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eog_ids(), [0, 2], "<|endoftext|> and <|im_end|>");
    assert_eq!(tok.bos_token_text(), Some("<|im_start|>"));
}

/// A long code-and-prose prompt (about 4,000 tokens) encodes, round-trips, and (printed, not
/// asserted: tests do not time) takes a few milliseconds.
#[test]
fn long_prompt_round_trips() {
    let tok = common::model_tokenizer(common::QWEN_1_5B);
    let mut text = String::new();
    let mut i = 0;
    while text.len() < 16_000 {
        text.push_str(&format!(
            "<|im_start|>user\nStep {i}: compute fib({i}) — «{}» 数字{i}\n```rust\nfn f{i}(x: u64) -> u64 {{ x * {i} + 7 }}\n```\n<|im_end|>\n",
            "é".repeat(i % 5)
        ));
        i += 1;
    }
    let start = Instant::now();
    let ids = tok.encode(&text, true).unwrap();
    let first = start.elapsed();
    let start = Instant::now();
    let again = tok.encode(&text, true).unwrap();
    let second = start.elapsed();
    eprintln!(
        "encode of {} bytes -> {} tokens: {first:?} (first), {second:?} (warm cache)",
        text.len(),
        ids.len()
    );
    assert_eq!(ids, again);
    assert!(ids.len() > 3_000, "{} tokens", ids.len());
    assert_eq!(tok.decode(&ids, false), text);
    assert_eq!(stream_decode(&tok, &ids, false), text);
}
