//! Chat templates: a template source and a conversation (messages and tools, as JSON), both
//! mutated, compiled and rendered. A broken template or conversation must give an error, never
//! a panic or a render that runs away (the renderer's fuel bounds it).

use serde_json::Value;
use tf_text::ChatTemplate;

use crate::mutate::{no_kwargs, pack, unpack, Mutator};
use crate::Target;

pub struct Template {
    /// (template source, conversation JSON) of the text crate's template fixtures.
    seeds: Vec<(String, Value)>,
}

impl Template {
    pub fn new() -> anyhow::Result<Self> {
        let path = crate::repo_dir().join("crates/text/tests/fixtures/chat_templates.json");
        let fixtures: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        let templates = fixtures["templates"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let mut seeds = Vec::new();
        for case in fixtures["cases"].as_array().into_iter().flatten() {
            let Some(t) = case["template"].as_str().and_then(|t| templates.get(t)) else {
                continue;
            };
            let source = t["source"].as_str().unwrap_or_default().to_string();
            let conversation = serde_json::json!({
                "messages": case["messages"],
                "tools": case["tools"],
                "kwargs": case["kwargs"],
            });
            seeds.push((source, conversation));
        }
        anyhow::ensure!(!seeds.is_empty(), "no template cases in {}", path.display());
        Ok(Template { seeds })
    }
}

impl Target for Template {
    fn name(&self) -> &'static str {
        "template"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        self.seeds
            .iter()
            .map(|(s, c)| pack(&[s.as_bytes(), &serde_json::to_vec(c).unwrap()]))
            .collect()
    }

    fn mutate(&self, m: &mut Mutator, input: &[u8], other: &[u8]) -> Vec<u8> {
        let parts = unpack(input, 2);
        if m.rng.chance(0.5) {
            if let Ok(v) = serde_json::from_slice::<Value>(parts[1]) {
                return pack(&[parts[0], &serde_json::to_vec(&m.json(&v)).unwrap()]);
            }
        }
        pack(&[&m.bytes(parts[0], unpack(other, 2)[0]), parts[1]])
    }

    fn run(&self, input: &[u8]) -> Result<(), String> {
        let parts = unpack(input, 2);
        let source = String::from_utf8_lossy(parts[0]);
        let Ok(t) = ChatTemplate::new(&source, Some("<s>"), Some("</s>")) else {
            return Ok(());
        };
        let conversation: Value = serde_json::from_slice(parts[1]).unwrap_or(Value::Null);
        let messages = conversation["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let tools = conversation["tools"].as_array().cloned();
        let kwargs = conversation["kwargs"]
            .as_object()
            .cloned()
            .unwrap_or_else(no_kwargs);
        let _ = t.render(&messages, tools.as_deref(), true, &kwargs);
        Ok(())
    }
}
