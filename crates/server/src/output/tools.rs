//! Tool calls written by the model, parsed into OpenAI `tool_calls`.

use serde_json::Value;

/// A parsed call: the function name and its arguments as a JSON text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Parses one call body, `{"name": .., "arguments": {..}}` (Qwen/Hermes) or
/// `{"name": .., "parameters": {..}}` (Llama 3). `None` when it is not a well-formed call.
pub fn parse_call(body: &str, id: String) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let obj = value.as_object()?;
    let name = obj.get("name")?.as_str()?.to_string();
    if name.is_empty() {
        return None;
    }
    let args = obj.get("arguments").or_else(|| obj.get("parameters"));
    let arguments = match args {
        None | Some(Value::Null) => "{}".to_string(),
        // Some models write the arguments as a JSON string already.
        Some(Value::String(s)) => {
            serde_json::from_str::<Value>(s).ok()?;
            s.clone()
        }
        Some(v @ Value::Object(_)) => v.to_string(),
        Some(_) => return None,
    };
    Some(ToolCall {
        id,
        name,
        arguments,
    })
}

/// Calls written as bare JSON instead of tags: one call object, a list of them, or either
/// inside a fenced code block (```json ... ```). Empty when the text is anything else.
pub fn parse_json_calls(text: &str) -> Vec<(String, String)> {
    let mut t = text.trim();
    if let Some(rest) = t.strip_prefix("```") {
        let Some(body) = rest.strip_suffix("```") else {
            return Vec::new();
        };
        // Drop the info string (`json`) on the fence line.
        t = body.split_once('\n').map_or("", |(_, b)| b).trim();
    }
    // Qwen2.5's template shows the call format with doubled braces (`{{"name": ...}}`), and
    // models copy it.
    let parsed = serde_json::from_str::<Value>(t).or_else(|e| {
        match t.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            Some(inner) if inner.starts_with('{') && inner.ends_with('}') => {
                serde_json::from_str::<Value>(inner)
            }
            _ => Err(e),
        }
    });
    let values = match parsed {
        Ok(Value::Array(items)) => items,
        Ok(v @ Value::Object(_)) => vec![v],
        _ => return Vec::new(),
    };
    let mut calls = Vec::new();
    for v in values {
        match parse_call(&v.to_string(), String::new()) {
            Some(c) => calls.push((c.name, c.arguments)),
            None => return Vec::new(),
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_and_listed_calls_parse() {
        let fenced = "```json\n{\"name\": \"f\", \"arguments\": {\"c\": \"P\"}}\n```";
        assert_eq!(
            parse_json_calls(fenced),
            vec![("f".to_string(), "{\"c\":\"P\"}".to_string())]
        );
        let list = "[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\"}]";
        assert_eq!(parse_json_calls(list).len(), 2);
        let doubled = "{{\"name\": \"f\", \"arguments\": {\"c\": 1}}}";
        assert_eq!(parse_json_calls(doubled).len(), 1);
        assert!(parse_json_calls("```python\nprint(1)\n```").is_empty());
        assert!(parse_json_calls("{\"x\": 1}").is_empty());
        assert!(parse_json_calls("```json\n{\"name\": \"f\"").is_empty());
    }

    #[test]
    fn qwen_and_llama_bodies_parse() {
        let c = parse_call(
            "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n",
            "c1".into(),
        )
        .unwrap();
        assert_eq!(c.name, "get_weather");
        assert_eq!(c.arguments, "{\"city\":\"Paris\"}");
        let c = parse_call("{\"name\": \"f\", \"parameters\": {}}", "c2".into()).unwrap();
        assert_eq!(c.arguments, "{}");
        let c = parse_call(
            "{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}",
            "c3".into(),
        );
        assert_eq!(c.unwrap().arguments, "{\"a\": 1}");
    }

    #[test]
    fn malformed_bodies_are_not_calls() {
        for body in [
            "{\"name\": \"f\", \"arguments\": {",
            "[1, 2]",
            "{\"arguments\": {}}",
            "{\"name\": 3}",
            "{\"name\": \"f\", \"arguments\": 7}",
            "{\"name\": \"f\", \"arguments\": \"not json\"}",
            "",
        ] {
            assert_eq!(parse_call(body, "x".into()), None, "{body}");
        }
    }
}
