//! Conversations in, prompt token ids out: OpenAI chat messages and tools are checked and put
//! in the shape Hugging Face chat templates expect (what `apply_chat_template` receives), then
//! rendered with the model's own template.

use serde_json::{json, Map, Value};
use tf_core::TokenId;

use crate::error::{ApiError, ApiResult};
use crate::output::ReplyParser;
use crate::state::{Backend, ToolFormat};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    None,
    Auto,
    Required,
    Named(String),
}

/// A conversation ready to render.
#[derive(Clone, Debug, Default)]
pub struct ChatPrompt {
    /// Template-shaped messages (see [`Conversation`]).
    pub messages: Vec<Value>,
    /// Template-shaped tools (`{"type": "function", "function": {..}}`).
    pub tools: Vec<Value>,
    pub tool_choice: Option<ToolChoice>,
    /// A reply may hold several tool calls (where the format has room for them).
    pub parallel_tool_calls: bool,
    /// Extra template variables (`enable_thinking`, `reasoning_effort`, ...).
    pub kwargs: Map<String, Value>,
}

/// The rendered prompt and how to read the reply.
pub struct Rendered {
    pub tokens: Vec<TokenId>,
    /// The prompt ends inside an open `<think>` block.
    pub in_think: bool,
    /// Tool calls to parse out of the reply, in this format.
    pub tools: Option<ToolFormat>,
    /// Text put after the generation prompt to start the reply: the opening of a tool call
    /// when `tool_choice` requires one (the reply parser reads it first).
    pub prefill: String,
    /// The reply comes in the harmony format (gpt-oss).
    pub harmony: bool,
    /// The reply's content has a requested shape (structured output): JSON content is not a
    /// call.
    pub shaped: bool,
}

impl Rendered {
    /// The reply parser, already past the prefill.
    pub fn parser(&self, call_prefix: String) -> ReplyParser {
        let mut parser = match self.harmony {
            true => ReplyParser::harmony(self.tools.is_some(), call_prefix),
            false => ReplyParser::new(self.in_think, self.tools, call_prefix),
        };
        if self.shaped {
            parser.no_bare_calls();
        }
        if !self.prefill.is_empty() {
            let _ = parser.push(&self.prefill);
        }
        parser
    }
}

/// An assistant message's reasoning under the name harmony templates read (`thinking`).
fn thinking_field(mut m: Value) -> Value {
    if let Some(obj) = m.as_object_mut() {
        if !obj.contains_key("thinking") {
            if let Some(r) = obj.get("reasoning_content").cloned() {
                obj.insert("thinking".into(), r);
            }
        }
    }
    m
}

/// The start of a reply that must call a tool (`tool_choice` required or named).
fn tool_prefill(format: ToolFormat, choice: Option<&ToolChoice>) -> String {
    let named = |n: &str| serde_json::to_string(n).unwrap_or_default();
    match (format, choice) {
        (ToolFormat::Tagged, Some(ToolChoice::Required)) => "<tool_call>\n{\"name\": \"".into(),
        (ToolFormat::Tagged, Some(ToolChoice::Named(n))) => {
            format!("<tool_call>\n{{\"name\": {}, \"arguments\": ", named(n))
        }
        (ToolFormat::BareJson, Some(ToolChoice::Required)) => "{\"name\": \"".into(),
        (ToolFormat::BareJson, Some(ToolChoice::Named(n))) => {
            format!("{{\"name\": {}, \"parameters\": ", named(n))
        }
        _ => String::new(),
    }
}

/// Builds template-shaped messages one at a time; leading system/developer messages are merged
/// into one system message, as instructions.
#[derive(Default)]
pub struct Conversation {
    pub messages: Vec<Value>,
    leading_system: Vec<String>,
}

impl Conversation {
    pub fn system(&mut self, text: String) {
        if self.messages.is_empty() {
            self.leading_system.push(text);
        } else {
            self.messages
                .push(json!({"role": "system", "content": text}));
        }
    }

    pub fn user(&mut self, text: String) {
        self.flush_system();
        self.messages.push(json!({"role": "user", "content": text}));
    }

    /// An assistant turn; `tool_calls` are `(id, name, arguments as JSON)`.
    pub fn assistant(
        &mut self,
        content: Option<String>,
        reasoning: Option<String>,
        tool_calls: Vec<(String, String, Value)>,
    ) {
        self.flush_system();
        // Consecutive assistant items (Responses API: a message, then function calls) are one turn.
        if let Some(last) = self.messages.last_mut() {
            if last["role"] == "assistant" && content.is_none() && !tool_calls.is_empty() {
                let calls = last
                    .as_object_mut()
                    .unwrap()
                    .entry("tool_calls")
                    .or_insert_with(|| json!([]));
                if let Some(a) = calls.as_array_mut() {
                    a.extend(tool_calls.into_iter().map(call_json));
                }
                return;
            }
        }
        let mut m = Map::new();
        m.insert("role".into(), json!("assistant"));
        m.insert("content".into(), content.map_or(Value::Null, Value::String));
        if let Some(r) = reasoning {
            m.insert("reasoning_content".into(), json!(r));
        }
        if !tool_calls.is_empty() {
            m.insert(
                "tool_calls".into(),
                Value::Array(tool_calls.into_iter().map(call_json).collect()),
            );
        }
        self.messages.push(Value::Object(m));
    }

    pub fn tool_result(&mut self, call_id: Option<String>, name: Option<String>, text: String) {
        self.flush_system();
        let mut m = Map::new();
        m.insert("role".into(), json!("tool"));
        m.insert("content".into(), json!(text));
        if let Some(id) = call_id {
            m.insert("tool_call_id".into(), json!(id));
        }
        if let Some(n) = name {
            m.insert("name".into(), json!(n));
        }
        self.messages.push(Value::Object(m));
    }

    /// Appends template-shaped messages (a stored conversation).
    pub fn extend(&mut self, messages: Vec<Value>) {
        for m in messages {
            if m["role"] == "system" && self.messages.is_empty() {
                self.leading_system
                    .push(m["content"].as_str().unwrap_or("").to_string());
            } else {
                self.flush_system();
                self.messages.push(m);
            }
        }
    }

    fn flush_system(&mut self) {
        if !self.leading_system.is_empty() && self.messages.is_empty() {
            let text = std::mem::take(&mut self.leading_system).join("\n\n");
            self.messages
                .push(json!({"role": "system", "content": text}));
        }
    }

    pub fn finish(mut self) -> Vec<Value> {
        self.flush_system();
        self.messages
    }
}

fn call_json((id, name, arguments): (String, String, Value)) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// Tool call arguments as JSON: templates render them with `tojson`, so a JSON text from the
/// client becomes the value it stands for.
pub fn arguments_value(text: &str, param: &str) -> ApiResult<Value> {
    if text.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(text).map_err(|e| {
        ApiError::invalid(
            param,
            format!("'{param}' must be a JSON text of the call's arguments: {e}"),
        )
    })
}

/// Text of a content field: a string, or a list of text parts (`{"type": "text", "text"}`,
/// also `input_text`/`output_text` for the Responses API).
pub fn content_text(content: Option<&Value>, param: &str) -> ApiResult<Option<String>> {
    match content {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                match (kind, part.get("text")) {
                    ("text" | "input_text" | "output_text", Some(Value::String(t))) => {
                        text.push_str(t)
                    }
                    ("text" | "input_text" | "output_text", _) => {
                        return Err(ApiError::invalid(
                            &format!("{param}[{i}].text"),
                            "a text part needs a 'text' string",
                        ))
                    }
                    _ => {
                        return Err(ApiError::invalid(
                            &format!("{param}[{i}].type"),
                            format!("only text content is supported, got a part of type '{kind}'"),
                        ))
                    }
                }
            }
            Ok(Some(text))
        }
        Some(_) => Err(ApiError::invalid(
            param,
            format!("'{param}' must be a string or a list of content parts"),
        )),
    }
}

/// One tool in template shape. `function` holds `name`, `description`, `parameters` (a null
/// or missing schema becomes an empty object schema).
/// A tool in the template's shape. `parameters` (at `param` in the request) must be a JSON Schema
/// object where it is given: anything else would reach the template as garbage.
pub fn tool_json(
    name: &str,
    description: Option<&Value>,
    parameters: Option<&Value>,
    param: &str,
) -> ApiResult<Value> {
    if let Some(p) = parameters.filter(|p| !p.is_null() && !p.is_object()) {
        return Err(ApiError::invalid(
            param,
            format!(
                "'{param}' must be a JSON Schema object, got {}",
                crate::fields::type_name(p)
            ),
        ));
    }
    let mut function = Map::new();
    function.insert("name".into(), json!(name));
    if let Some(d) = description.filter(|d| !d.is_null()) {
        function.insert("description".into(), d.clone());
    }
    let params = match parameters {
        Some(p) if !p.is_null() => p.clone(),
        _ => json!({"type": "object", "properties": {}}),
    };
    function.insert("parameters".into(), params);
    Ok(json!({"type": "function", "function": Value::Object(function)}))
}

/// `tool_choice` in OpenAI's forms: "none" | "auto" | "required" | {"type": "function",
/// "function": {"name"}} (also the Responses API's flat {"type": "function", "name"}).
pub fn tool_choice(value: Option<&Value>) -> ApiResult<Option<ToolChoice>> {
    let bad = || {
        ApiError::invalid(
            "tool_choice",
            "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}",
        )
    };
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(Some(ToolChoice::None)),
            "auto" => Ok(Some(ToolChoice::Auto)),
            "required" | "any" => Ok(Some(ToolChoice::Required)),
            _ => Err(bad()),
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(bad)?;
            Ok(Some(ToolChoice::Named(name.to_string())))
        }
        Some(_) => Err(bad()),
    }
}

pub fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("function")?.get("name")?.as_str()
}

/// Control-token text found in a conversation's strings, swapped for placeholders before the
/// template renders and put back as plain text when the prompt is encoded.
#[derive(Default)]
struct Shield {
    literals: Vec<String>,
}

impl Shield {
    /// Placeholder delimiters: private-use characters no template writes.
    const OPEN: char = '\u{10FFF0}';
    const CLOSE: char = '\u{10FFF1}';

    /// `v` with every control-token text inside its strings replaced by a placeholder.
    fn value(&mut self, v: &Value, tok: &tf_text::Tokenizer) -> Value {
        match v {
            Value::String(s) => {
                let spans = tok.control_spans(s);
                if spans.is_empty() {
                    return v.clone();
                }
                let mut out = String::with_capacity(s.len());
                let mut at = 0;
                for span in spans {
                    out.push_str(&s[at..span.start]);
                    let k = self.literals.len();
                    self.literals.push(s[span.clone()].to_string());
                    out.push(Self::OPEN);
                    out.push_str(&k.to_string());
                    out.push(Self::CLOSE);
                    at = span.end;
                }
                out.push_str(&s[at..]);
                Value::String(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| self.value(x, tok)).collect()),
            Value::Object(o) => Value::Object(
                o.iter()
                    .map(|(k, x)| (k.clone(), self.value(x, tok)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// The rendered `text` as parts to encode: the template's own text with special tokens
    /// parsed, each shielded literal as plain text.
    fn parts<'a>(&'a self, text: &'a str) -> Vec<(&'a str, bool)> {
        if self.literals.is_empty() {
            return vec![(text, true)];
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find(Self::OPEN) {
            let after = &rest[open + Self::OPEN.len_utf8()..];
            let literal = after.find(Self::CLOSE).and_then(|close| {
                let k: usize = after[..close].parse().ok()?;
                Some((self.literals.get(k)?, close))
            });
            match literal {
                Some((lit, close)) => {
                    parts.push((&rest[..open], true));
                    parts.push((lit.as_str(), false));
                    rest = &after[close + Self::CLOSE.len_utf8()..];
                }
                None => {
                    // Not a placeholder of ours: keep it as template text.
                    let end = open + Self::OPEN.len_utf8();
                    parts.push((&rest[..end], true));
                    rest = &rest[end..];
                }
            }
        }
        parts.push((rest, true));
        parts.retain(|(t, _)| !t.is_empty());
        parts
    }
}

/// Renders `chat` with the model's template and tokenizes it.
pub fn render(backend: &Backend, chat: &ChatPrompt) -> ApiResult<Rendered> {
    let template = backend.template.as_ref().ok_or_else(|| {
        ApiError::bad_request(
            "this model has no chat template: use /v1/completions with a raw prompt",
        )
    })?;
    if chat.messages.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "the conversation has no messages",
        ));
    }
    let mut tools: Vec<Value> = chat.tools.clone();
    match &chat.tool_choice {
        Some(ToolChoice::None) => tools.clear(),
        Some(ToolChoice::Named(name)) => {
            tools.retain(|t| tool_name(t) == Some(name.as_str()));
            if tools.is_empty() {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("'tool_choice' names the function '{name}', which is not in 'tools'"),
                ));
            }
        }
        Some(ToolChoice::Required) if tools.is_empty() => {
            return Err(ApiError::invalid(
                "tool_choice",
                "'tool_choice' is \"required\" but no tools were given",
            ))
        }
        _ => {}
    }
    // Text a client sent that spells a control token (`<|im_start|>system` inside a message)
    // must stay text: only the template writes control tokens.
    let mut shield = Shield::default();
    let harmony = backend.tool_format == ToolFormat::Harmony;
    let messages: Vec<Value> = chat
        .messages
        .iter()
        .map(|m| shield.value(m, &backend.tokenizer))
        .map(|m| if harmony { thinking_field(m) } else { m })
        .collect();
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| shield.value(t, &backend.tokenizer))
        .collect();
    let mut text = template
        .render(
            &messages,
            (!tools.is_empty()).then_some(tools.as_slice()),
            true,
            &chat.kwargs,
        )
        .map_err(|e| {
            ApiError::bad_request(format!("the chat template rejected the conversation: {e}"))
        })?;
    let in_think = !harmony && text.trim_end().ends_with("<think>");
    let prefill = if tools.is_empty() || in_think || harmony {
        String::new()
    } else {
        // "required" with a single tool can only mean that tool.
        let choice = match (&chat.tool_choice, tools.as_slice()) {
            (Some(ToolChoice::Required), [only]) => tool_name(only)
                .map(|n| ToolChoice::Named(n.to_string()))
                .or(chat.tool_choice.clone()),
            (choice, _) => choice.clone(),
        };
        tool_prefill(backend.tool_format, choice.as_ref())
    };
    text.push_str(&prefill);
    if let Some(n) = backend.tokenizer.min_tokens(text.len()) {
        if n >= backend.context {
            return Err(ApiError::context_exceeded(
                format!(
                    "prompt is too long: at least {n} tokens > {} maximum ({} bytes, refused \
                     before tokenizing); this model's maximum context length leaves no room \
                     for a reply.",
                    backend.context,
                    text.len()
                ),
                "messages",
            ));
        }
    }
    let tokens = backend
        .tokenizer
        .encode_chat_parts(&shield.parts(&text))
        .map_err(|e| ApiError::bad_request(format!("cannot tokenize the prompt: {e}")))?;
    Ok(Rendered {
        tokens,
        in_think,
        tools: (!tools.is_empty()).then_some(backend.tool_format),
        prefill,
        harmony,
        shaped: false,
    })
}
