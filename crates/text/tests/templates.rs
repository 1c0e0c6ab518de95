//! Chat templates render byte-identical to Python Jinja2 as Hugging Face transformers sets it up
//! (fixtures from scripts/gen_text_fixtures.py: the three test models' templates, a Qwen3 template
//! with `<think>`/`enable_thinking`, a Llama-3-style one with `tojson(indent=4)`,
//! `raise_exception` and `strftime_now`, and Gemma-, Phi-3- and Mistral-style ones: a system
//! message folded into the first user turn, role alternation enforced, list content).

mod common;

use std::collections::HashMap;

use serde_json::Value;
use tf_text::{ChatTemplate, TextError};

#[test]
fn every_fixture_case_renders_like_python_jinja2() {
    let fixture = common::read_json(&common::fixtures_dir().join("chat_templates.json"));
    let mut templates = HashMap::new();
    for (name, t) in fixture["templates"].as_object().unwrap() {
        let compiled = ChatTemplate::new(
            t["source"].as_str().unwrap(),
            t["bos_token"].as_str(),
            t["eos_token"].as_str(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        templates.insert(name.clone(), compiled);
    }

    let cases = fixture["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for case in cases {
        let label = format!(
            "{} / {} / tools={} / add_generation_prompt={} / kwargs={}",
            case["template"].as_str().unwrap(),
            case["conversation"].as_str().unwrap(),
            !case["tools"].is_null(),
            case["add_generation_prompt"],
            case["kwargs"]
        );
        let template = &templates[case["template"].as_str().unwrap()];
        let messages = case["messages"].as_array().unwrap();
        let tools = case["tools"].as_array().map(Vec::as_slice);
        let kwargs = case["kwargs"].as_object().unwrap();
        let agp = case["add_generation_prompt"].as_bool().unwrap();
        let got = template.render(messages, tools, agp, kwargs);
        match (&case["expected"], got) {
            (Value::String(want), Ok(got)) if *want == got => {}
            (Value::String(want), Ok(got)) => failures.push(format!(
                "{label}: output differs\n--- python\n{want}\n--- rust\n{got}\n---"
            )),
            (Value::String(_), Err(e)) => failures.push(format!("{label}: unexpected error {e}")),
            (_, Ok(got)) => failures.push(format!(
                "{label}: python raised {} but rust rendered {got:?}",
                case["error"]
            )),
            (_, Err(e)) => {
                assert!(matches!(e, TextError::Template(_)), "{label}: {e}");
                // Messages from raise_exception must reach the caller unchanged.
                let python = case["error"].as_str().unwrap();
                if let Some(msg) = python.strip_prefix("TemplateError: ") {
                    if !e.to_string().contains(msg) {
                        failures.push(format!("{label}: error {e} lacks {msg:?}"));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
