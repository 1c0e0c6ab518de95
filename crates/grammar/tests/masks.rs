//! Grammars over real vocabularies (the test models' tokenizers, fetched by
//! scripts/fetch-test-models): a valid document's tokens are each allowed in turn and the
//! grammar may end after them, invalid ones are not allowed, control tokens never appear inside
//! text, end-of-generation tokens end a finished document, and bad grammars are errors that say
//! why.

use std::path::PathBuf;

use serde_json::json;
use tf_core::TokenId;
use tf_grammar::{GrammarError, Spec, Vocabulary};
use tf_text::Tokenizer;
use tf_weights::GgufFile;

fn tokenizer(file: &str) -> Tokenizer {
    let dir = match std::env::var_os("TENSORFOLD_CACHE") {
        Some(c) => PathBuf::from(c).join("models"),
        None => {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/tensorfold/models")
        }
    };
    let path = dir.join(file);
    assert!(
        path.exists(),
        "test model {} is missing: run scripts/fetch-test-models",
        path.display()
    );
    Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap()
}

const QWEN: &str = "qwen2.5-coder-0.5b-instruct.gguf";
const SMOL: &str = "smollm2-135m-instruct-q4_1.gguf";

fn allows(mask: &[u32], t: TokenId) -> bool {
    mask.get(t as usize / 32)
        .is_some_and(|w| w >> (t % 32) & 1 == 1)
}

/// Walks `text`'s tokens through a fresh state of `spec`: the index of the first token not
/// allowed, or `None` when all are; and whether an end-of-generation token may follow.
fn walk(vocab: &Vocabulary, tok: &Tokenizer, spec: &Spec, text: &str) -> (Option<usize>, bool) {
    let grammar = vocab.compile(spec).unwrap();
    let mut state = grammar.0.start();
    let ids = tok.encode(text, false).unwrap();
    for (i, &t) in ids.iter().enumerate() {
        if !allows(state.allowed().unwrap(), t) {
            return (Some(i), false);
        }
        state.advance(t).unwrap();
    }
    let eog = tok.eog_ids().to_vec();
    let mask = state.allowed().unwrap();
    (None, eog.iter().all(|&e| allows(mask, e)))
}

fn person() -> Spec {
    Spec::JsonSchema {
        schema: json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "minimum": 0},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}}
            },
            "required": ["name", "age"],
            "additionalProperties": false
        }),
        strict: true,
    }
}

#[test]
fn a_schema_allows_its_documents_and_nothing_else() {
    for file in [QWEN, SMOL] {
        let tok = tokenizer(file);
        let vocab = Vocabulary::new(&tok).unwrap();
        let spec = person();
        for doc in [
            r#"{"name": "Ada", "age": 36}"#,
            r#"{"name":"Ada","age":36,"tags":["a","b"]}"#,
            "{\n  \"name\": \"Ada \\\"L\\\"\",\n  \"age\": 0\n}",
        ] {
            assert_eq!(
                walk(&vocab, &tok, &spec, doc),
                (None, true),
                "{file}: {doc}"
            );
        }
        // Unfinished: allowed so far, but it may not end here.
        assert_eq!(
            walk(&vocab, &tok, &spec, r#"{"name": "Ada""#),
            (None, false)
        );
        for bad in [
            r#"{"name": "Ada", "age": -3}"#,
            r#"{"name": "Ada", "age": 3, "x": 1}"#,
            r#"{"age": 3.5}"#,
            r#"{"name": "Ada", "age": 3, "tags": ["c"]}"#,
            r#"[1]"#,
        ] {
            let (stop, _) = walk(&vocab, &tok, &spec, bad);
            assert!(stop.is_some(), "{file}: {bad} was allowed");
        }
    }
}

#[test]
fn control_tokens_never_appear_inside_text_and_end_tokens_only_at_the_end() {
    let tok = tokenizer(QWEN);
    let vocab = Vocabulary::new(&tok).unwrap();
    let grammar = vocab.compile(&Spec::JsonObject).unwrap();
    let mut state = grammar.0.start();
    for &t in &tok.encode(r#"{"a": "x"#, false).unwrap() {
        state.advance(t).unwrap();
    }
    let mask = state.allowed().unwrap().to_vec();
    let im_start = tok.token_to_id("<|im_start|>").unwrap();
    assert!(tok.is_control(im_start));
    assert!(!allows(&mask, im_start), "a control token inside a string");
    for &e in tok.eog_ids() {
        assert!(!allows(&mask, e), "the reply may not end inside a string");
    }
    // Many ordinary tokens may continue a string.
    let n: u32 = mask.iter().map(|w| w.count_ones()).sum();
    assert!(n > 10_000, "{n} tokens allowed inside a string");
}

#[test]
fn regexes_and_lark_grammars_are_enforced() {
    let tok = tokenizer(QWEN);
    let vocab = Vocabulary::new(&tok).unwrap();
    let phone = Spec::Regex(r"\d{3}-\d{4}".into());
    assert_eq!(walk(&vocab, &tok, &phone, "555-1234"), (None, true));
    assert!(walk(&vocab, &tok, &phone, "5551234").0.is_some());
    assert!(walk(&vocab, &tok, &phone, "555-12345").0.is_some());
    let lark = Spec::Lark(
        "start: greeting \" \" NAME\ngreeting: \"hello\" | \"bye\"\nNAME: /[A-Z][a-z]+/\n".into(),
    );
    assert_eq!(walk(&vocab, &tok, &lark, "hello World"), (None, true));
    assert!(walk(&vocab, &tok, &lark, "hi World").0.is_some());
    // A Lark grammar may embed a schema.
    let call = Spec::Lark(
        "start: \"<tool_call>\\n\" %json {\"type\": \"object\", \"properties\": {\"n\": \
         {\"type\": \"integer\"}}, \"required\": [\"n\"]} \"\\n</tool_call>\"\n"
            .into(),
    );
    assert_eq!(
        walk(&vocab, &tok, &call, "<tool_call>\n{\"n\": 4}\n</tool_call>"),
        (None, true)
    );
    // Free thinking, then a document (the server's grammar for a reply that starts inside
    // `<think>`).
    let think = Spec::Lark(
        "start: thinking body\nthinking[suffix=\"</think>\"]: /(?s:.*)/\nbody: /[ \\n]*/ %json {\"type\": \"object\"}\n"
            .into(),
    );
    assert_eq!(
        walk(&vocab, &tok, &think, "Hmm, {x} </think>\n\n{\"a\": 1}"),
        (None, true)
    );
    assert_eq!(walk(&vocab, &tok, &think, "</think>{}"), (None, true));
    assert!(!walk(&vocab, &tok, &think, "no end {\"a\": 1}").1);
    // llama.cpp's GBNF, read into Lark.
    let gbnf = Spec::Gbnf(
        "root ::= answer (\", \" answer){0,2}\nanswer ::= \"yes\" | \"no\" | [0-9]+\n".into(),
    );
    assert_eq!(walk(&vocab, &tok, &gbnf, "yes, 42, no"), (None, true));
    assert!(walk(&vocab, &tok, &gbnf, "yes, 1, 2, 3").0.is_some());
    assert!(walk(&vocab, &tok, &gbnf, "maybe").0.is_some());
}

#[test]
fn guesses_are_cut_at_the_first_token_the_grammar_forbids() {
    let tok = tokenizer(QWEN);
    let vocab = Vocabulary::new(&tok).unwrap();
    let grammar = vocab.compile(&person()).unwrap();
    let mut state = grammar.0.start();
    let good = tok.encode(r#"{"name": "Bo", "age": 7}"#, false).unwrap();
    assert_eq!(state.valid_prefix(&good), good.len());
    // A key may follow (its quote is allowed), but no key starts with "z".
    let mut bad = tok.encode(r#"{"name": "Bo", ""#, false).unwrap();
    let ok = bad.len();
    bad.extend(tok.encode("zip\": 1}", false).unwrap());
    assert_eq!(state.valid_prefix(&bad), ok);
    // Asking moved nothing: the first token is still the only way to start.
    let open = tok.encode("{", false).unwrap()[0];
    assert!(allows(state.allowed().unwrap(), open));
}

#[test]
fn bad_grammars_are_errors_that_say_why() {
    let tok = tokenizer(SMOL);
    let vocab = Vocabulary::new(&tok).unwrap();
    let cases = [
        Spec::Regex("(unclosed".into()),
        Spec::Lark("start: missing_rule\n".into()),
        Spec::JsonSchema {
            schema: json!({"type": "no-such-type"}),
            strict: true,
        },
        Spec::JsonSchema {
            schema: json!({"$ref": "#/$defs/absent"}),
            strict: false,
        },
    ];
    for spec in cases {
        match vocab.compile(&spec) {
            Err(GrammarError::Invalid(msg)) => assert!(!msg.is_empty(), "{spec:?}"),
            Err(e) => panic!("{spec:?}: {e}"),
            Ok(_) => panic!("{spec:?} compiled"),
        }
    }
}
