//! A Hugging Face tokenizer directory (tokenizer.json + tokenizer_config.json) against the ids
//! Python `tokenizers` gives (fixtures/hf_tiny, from scripts/gen_text_fixtures.py).

mod common;

use tf_text::{ChatTemplate, TextError, Tokenizer};

#[test]
fn tiny_tokenizer_json_matches_python() {
    let dir = common::fixtures_dir().join("hf_tiny");
    let tok = Tokenizer::from_hf_dir(&dir).unwrap();
    let cases = common::read_json(&dir.join("cases.json"));
    for case in cases.as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(tok.encode(text, true).unwrap(), want, "{text:?}");
        assert_eq!(tok.decode(&want, false), text);
        assert_eq!(
            tok.decode(&want, true),
            case["decoded_skip_special"].as_str().unwrap(),
            "{text:?}"
        );
    }

    let im_start = tok.token_to_id("<|im_start|>").unwrap();
    let im_end = tok.token_to_id("<|im_end|>").unwrap();
    let tool_call = tok.token_to_id("<tool_call>").unwrap();
    assert!(tok.is_control(im_start));
    assert!(tok.is_special(tool_call) && !tok.is_control(tool_call));
    assert_eq!(tok.eos_id(), Some(im_end));
    assert_eq!(tok.bos_id(), None);
    assert!(!tok.add_bos());
    assert!(tok.eog_ids().contains(&im_end));

    // Without parse_special, control-token text is plain text; user-defined tokens still match.
    let plain = tok.encode("<|im_start|><tool_call>", false).unwrap();
    assert!(!plain.contains(&im_start));
    assert_eq!(*plain.last().unwrap(), tool_call);
    assert_eq!(tok.decode(&plain, false), "<|im_start|><tool_call>");

    let template =
        ChatTemplate::new(tok.chat_template().unwrap(), None, tok.eos_token_text()).unwrap();
    let messages = [serde_json::json!({"role": "user", "content": "hi"})];
    let prompt = template
        .render(&messages, None, true, &serde_json::Map::new())
        .unwrap();
    assert_eq!(
        prompt,
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn missing_tokenizer_json_names_the_file() {
    let err = Tokenizer::from_hf_dir(common::fixtures_dir().join("no-such-dir")).unwrap_err();
    assert!(matches!(err, TextError::HfFile { .. }), "{err:?}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}
