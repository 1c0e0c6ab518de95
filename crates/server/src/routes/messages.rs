//! Anthropic Messages: `POST /v1/messages` (JSON or SSE with named events) and
//! `POST /v1/messages/count_tokens`, with Anthropic's error envelope.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::error::{AnthropicError, ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::fields::Fields;
use crate::generate::{Finish, Generation, Outcome};
use crate::output::{Delta, ReplyParser};
use crate::params::{self, GenFields};
use crate::prompt::{self, ChatPrompt, Conversation, ToolChoice};
use crate::reply::{Driver, Idle, ReplyFormat};
use crate::routes::chat;
use crate::routes::common;
use crate::state::SharedState;

struct MessagesRequest {
    chat: ChatPrompt,
    gen: GenFields,
    stream: bool,
}

fn text_blocks(v: Option<&Value>, param: &str) -> ApiResult<String> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for (i, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => text.push_str(t),
                    _ => {
                        return Err(ApiError::invalid(
                            &format!("{param}[{i}]"),
                            "only text blocks are supported here",
                        ))
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(ApiError::invalid(
            param,
            format!("'{param}' must be a string or a list of text blocks"),
        )),
    }
}

fn user_turn(conv: &mut Conversation, content: &Value, at: &str) -> ApiResult<()> {
    let Value::Array(blocks) = content else {
        conv.user(text_blocks(Some(content), at)?);
        return Ok(());
    };
    let mut text = String::new();
    for (j, b) in blocks.iter().enumerate() {
        let p = format!("{at}[{j}]");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_result") => {
                let id = b
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let out = text_blocks(b.get("content"), &format!("{p}.content"))?;
                conv.tool_result(id, None, out);
            }
            other => {
                return Err(ApiError::invalid(
                    &format!("{p}.type"),
                    format!(
                        "content blocks of type '{}' are not supported",
                        other.unwrap_or("?")
                    ),
                ))
            }
        }
    }
    if !text.is_empty() {
        conv.user(text);
    }
    Ok(())
}

fn assistant_turn(conv: &mut Conversation, content: &Value, at: &str) -> ApiResult<()> {
    let Value::Array(blocks) = content else {
        conv.assistant(Some(text_blocks(Some(content), at)?), None, Vec::new());
        return Ok(());
    };
    let (mut text, mut reasoning, mut calls) = (None::<String>, None::<String>, Vec::new());
    for (j, b) in blocks.iter().enumerate() {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => text
                .get_or_insert_with(String::new)
                .push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("thinking") => {
                reasoning = b
                    .get("thinking")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            }
            Some("tool_use") => calls.push((
                b.get("id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                b.get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                b.get("input").cloned().unwrap_or(json!({})),
            )),
            other => {
                return Err(ApiError::invalid(
                    &format!("{at}[{j}].type"),
                    format!(
                        "content blocks of type '{}' are not supported",
                        other.unwrap_or("?")
                    ),
                ))
            }
        }
    }
    if text.is_none() && calls.is_empty() {
        text = Some(String::new());
    }
    conv.assistant(text, reasoning, calls);
    Ok(())
}

/// System text, with the line Claude Code opens its system prompt with left out
/// (`x-anthropic-billing-header: cc_version=...; cc_entrypoint=...;`, a block of its own or a
/// first line): it changes every session and means nothing to the model, and in the prompt it
/// would end the cached prefix there. Dropped the same way for every request, so resumed
/// conversations still equal fresh ones.
fn system_text(v: Option<&Value>, param: &str) -> ApiResult<String> {
    const HEADER: &str = "x-anthropic-billing-header:";
    let billing = |t: &str| t.trim_start().starts_with(HEADER);
    let v = match v {
        Some(Value::Array(blocks)) => {
            let kept: Vec<Value> = blocks
                .iter()
                .filter(|b| !b.get("text").and_then(Value::as_str).is_some_and(billing))
                .cloned()
                .collect();
            Some(Value::Array(kept))
        }
        other => other.cloned(),
    };
    let text = text_blocks(v.as_ref(), param)?;
    if !text.contains(HEADER) {
        return Ok(text);
    }
    Ok(text.split_inclusive('\n').filter(|l| !billing(l)).collect())
}

fn parse(state: &SharedState, body: &Value, need_max_tokens: bool) -> ApiResult<MessagesRequest> {
    let f = Fields::new(body)?;
    state.check_model(f.str("model")?)?;
    let mut conv = Conversation::default();
    if f.has("system") {
        conv.system(system_text(f.get("system"), "system")?);
    }
    let list = f
        .array("messages")?
        .ok_or_else(|| ApiError::invalid("messages", "'messages' is required"))?;
    // System turns before the first assistant turn join the system prompt: Claude Code sends
    // its environment (thousands of tokens, the same every session) as a system turn after the
    // task, where the task's text would end every new session's cached prefix. The same rule
    // for every request, so resumed conversations still equal fresh ones.
    fn role(m: &Value) -> Option<&str> {
        m.get("role").and_then(Value::as_str)
    }
    let first_reply = list
        .iter()
        .position(|m| role(m) == Some("assistant"))
        .unwrap_or(list.len());
    for (i, m) in list.iter().enumerate().take(first_reply) {
        if role(m) == Some("system") {
            let at = format!("messages[{i}].content");
            let content = m.get("content").unwrap_or(&Value::Null);
            conv.system(system_text(Some(content), &at)?);
        }
    }
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}].content");
        let content = m.get("content").unwrap_or(&Value::Null);
        match m.get("role").and_then(Value::as_str) {
            Some("user") => user_turn(&mut conv, content, &at)?,
            Some("assistant") => assistant_turn(&mut conv, content, &at)?,
            Some("system") if i < first_reply => {}
            // Later system turns stay where they are.
            Some("system") => conv.system(system_text(Some(content), &at)?),
            other => {
                return Err(ApiError::invalid(
                    &format!("messages[{i}].role"),
                    format!(
                        "Unexpected role {}. Allowed input message roles are \"user\", \
                         \"assistant\" and \"system\".",
                        other.map_or("(none)".to_string(), |r| format!("{r:?}"))
                    ),
                ))
            }
        }
    }
    let mut tools = Vec::new();
    for (i, t) in f.array("tools")?.into_iter().flatten().enumerate() {
        let name = t.get("name").and_then(Value::as_str).ok_or_else(|| {
            ApiError::invalid(&format!("tools[{i}].name"), "each tool needs a 'name'")
        })?;
        tools.push(prompt::tool_json(
            name,
            t.get("description"),
            t.get("input_schema"),
            &format!("tools[{i}].input_schema"),
        )?);
    }
    let tool_choice = match f.object("tool_choice")? {
        None => None,
        Some(tc) => Some(match tc.str("type")? {
            Some("auto") => ToolChoice::Auto,
            Some("any") => ToolChoice::Required,
            Some("none") => ToolChoice::None,
            Some("tool") => ToolChoice::Named(
                tc.str("name")?
                    .ok_or_else(|| ApiError::invalid("tool_choice.name", "missing tool name"))?
                    .to_string(),
            ),
            _ => {
                return Err(ApiError::invalid(
                    "tool_choice.type",
                    "'tool_choice.type' must be auto, any, tool or none",
                ))
            }
        }),
    };
    let mut kwargs = Map::new();
    if let Some(thinking) = f.object("thinking")? {
        let on = thinking.str("type")? == Some("enabled");
        kwargs.insert("enable_thinking".into(), json!(on));
        // Templates that take an effort (gpt-oss) get the budget's: `reasoning_effort`.
        let budget = thinking.uint("budget_tokens", 0)?;
        kwargs.insert("reasoning_effort".into(), json!(effort_of(on, budget)));
    }
    if need_max_tokens && !f.has("max_tokens") {
        return Err(ApiError::invalid("max_tokens", "'max_tokens' is required"));
    }
    let mut gen = params::read(
        &f,
        &state.config.defaults,
        &["max_tokens"],
        "stop_sequences",
    )?;
    gen.structure = crate::structured::anthropic(&f)?;
    let parallel_tool_calls = match f.object("tool_choice")? {
        Some(tc) => !tc.bool("disable_parallel_tool_use")?.unwrap_or(false),
        None => true,
    };
    Ok(MessagesRequest {
        chat: ChatPrompt {
            messages: conv.finish(),
            tools,
            tool_choice,
            parallel_tool_calls,
            kwargs,
        },
        gen,
        stream: f.bool("stream")?.unwrap_or(false),
    })
}

pub async fn count_tokens(
    State(state): State<SharedState>,
    body: Result<JsonBody, ApiError>,
) -> Result<Json<Value>, AnthropicError> {
    let JsonBody(body) = body?;
    let req = parse(&state, &body, false)?;
    let backend = state.backend()?;
    let chat = req.chat;
    let rendered = crate::blocking::run(move || prompt::render(&backend, &chat)).await?;
    Ok(Json(json!({"input_tokens": rendered.tokens.len()})))
}

pub async fn create(
    State(state): State<SharedState>,
    body: Result<JsonBody, ApiError>,
) -> Result<Response, AnthropicError> {
    let JsonBody(body) = body?;
    let req = parse(&state, &body, true)?;
    let backend = state.backend()?;
    let (generation, rendered) = chat::start(
        &state,
        &backend,
        &req.chat,
        &req.gen,
        "messages",
        params::Wording::Anthropic,
    )
    .await?;
    let format = MessagesFormat {
        prompt_tokens: generation.prompt_tokens(),
        parser: rendered.parser(common::new_id("toolu_")),
        id: common::new_id("msg_"),
        model: state.config.model_id.clone(),
        blocks: Vec::new(),
        open: None,
        result: None,
    };
    let driver = Driver::new(generation, format);
    if req.stream {
        return Ok(driver.named_sse(Idle::Ping));
    }
    Ok(Json(driver.body().await?).into_response())
}

/// Anthropic's usage: `input_tokens` are the prompt tokens not read from the cache (the
/// cached ones are `cache_read_input_tokens`; together they are the whole prompt).
/// The reasoning effort an Anthropic thinking budget asks for: off or under 4096 tokens low,
/// under 16384 medium, more high (enabled without a budget: medium, the templates' default).
fn effort_of(enabled: bool, budget: Option<u64>) -> &'static str {
    match (enabled, budget) {
        (false, _) => "low",
        (true, None) => "medium",
        (true, Some(n)) if n < 4096 => "low",
        (true, Some(n)) if n < 16384 => "medium",
        _ => "high",
    }
}

fn usage_json(o: &Outcome) -> Value {
    json!({"input_tokens": o.prompt_tokens - o.cached_tokens.min(o.prompt_tokens),
        "output_tokens": o.tokens.len(),
        "cache_read_input_tokens": o.cached_tokens,
        "cache_creation_input_tokens": 0})
}

#[derive(Clone, Copy, PartialEq)]
enum OpenBlock {
    Text,
    Thinking,
}

/// The Messages API's reply: content blocks (text, thinking, tool use) as they open and close.
struct MessagesFormat {
    prompt_tokens: usize,
    parser: ReplyParser,
    id: String,
    model: String,
    /// The finished content blocks.
    blocks: Vec<Value>,
    open: Option<(OpenBlock, String)>,
    /// The finished message (the JSON reply), or the error the request failed with.
    result: Option<Result<Value, String>>,
}

impl MessagesFormat {
    fn close(&mut self, out: &mut Vec<Value>) {
        if let Some((kind, text)) = self.open.take() {
            let index = self.blocks.len();
            out.push(json!({"type": "content_block_stop", "index": index}));
            self.blocks.push(match kind {
                OpenBlock::Text => json!({"type": "text", "text": text}),
                OpenBlock::Thinking => {
                    json!({"type": "thinking", "thinking": text, "signature": ""})
                }
            });
        }
    }

    fn push(&mut self, delta: Delta, out: &mut Vec<Value>) {
        let (kind, text) = match delta {
            Delta::Content(t) => (OpenBlock::Text, t),
            Delta::Reasoning(t) => (OpenBlock::Thinking, t),
            Delta::ToolCall(call) => {
                self.close(out);
                let index = self.blocks.len();
                let input: Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
                out.push(json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}));
                out.push(json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": call.arguments}}));
                out.push(json!({"type": "content_block_stop", "index": index}));
                self.blocks.push(
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}),
                );
                return;
            }
        };
        if self.open.as_ref().map(|o| o.0) != Some(kind) {
            self.close(out);
            let index = self.blocks.len();
            let block = match kind {
                OpenBlock::Text => json!({"type": "text", "text": ""}),
                OpenBlock::Thinking => json!({"type": "thinking", "thinking": ""}),
            };
            out.push(
                json!({"type": "content_block_start", "index": index, "content_block": block}),
            );
            self.open = Some((kind, String::new()));
        }
        let index = self.blocks.len();
        if let Some((_, acc)) = &mut self.open {
            acc.push_str(&text);
        }
        let delta = match kind {
            OpenBlock::Text => json!({"type": "text_delta", "text": text}),
            OpenBlock::Thinking => json!({"type": "thinking_delta", "thinking": text}),
        };
        out.push(json!({"type": "content_block_delta", "index": index, "delta": delta}));
    }

    fn message(&self, stop: Option<(&str, Option<&str>)>, outcome: Option<&Outcome>) -> Value {
        let usage = match outcome {
            Some(o) => usage_json(o),
            // Before the engine has admitted the request, nothing is known to be cached.
            None => json!({"input_tokens": self.prompt_tokens, "output_tokens": 0,
                "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}),
        };
        let mut m = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": if stop.is_some() { json!(self.blocks) } else { json!([]) },
            "stop_reason": stop.map(|s| s.0),
            "stop_sequence": stop.and_then(|s| s.1),
            "usage": usage,
        });
        if let Some(o) = outcome {
            m["tensorfold"] = common::receipt_json(o);
        }
        m
    }
}

impl ReplyFormat for MessagesFormat {
    fn start(&mut self) -> Vec<Value> {
        let start = json!({"type": "message_start", "message": self.message(None, None)});
        vec![start, json!({"type": "ping"})]
    }

    fn text(&mut self, text: String, _: &mut Generation) -> Vec<Value> {
        let mut out = Vec::new();
        for d in self.parser.push(&text) {
            self.push(d, &mut out);
        }
        out
    }

    fn end(&mut self, outcome: Outcome) -> Vec<Value> {
        let mut out = Vec::new();
        for d in self.parser.finish() {
            self.push(d, &mut out);
        }
        self.close(&mut out);
        let tool_use = self.blocks.iter().any(|b| b["type"] == "tool_use");
        let stop = match &outcome.finish {
            Finish::Error(message) => {
                out.push(ApiError::internal(message.clone()).anthropic_body());
                self.result = Some(Err(message.clone()));
                return out;
            }
            Finish::Length => ("max_tokens", None),
            Finish::StopString(s) => ("stop_sequence", Some(s.as_str())),
            Finish::Stop if tool_use => ("tool_use", None),
            Finish::Stop => ("end_turn", None),
        };
        // The receipt rides on the last delta, as on the other APIs' last chunk.
        out.push(json!({"type": "message_delta",
            "delta": {"stop_reason": stop.0, "stop_sequence": stop.1},
            "usage": usage_json(&outcome),
            "tensorfold": common::receipt_json(&outcome)}));
        out.push(json!({"type": "message_stop"}));
        self.result = Some(Ok(self.message(Some(stop), Some(&outcome))));
        out
    }

    fn body(&mut self) -> ApiResult<Value> {
        crate::reply::ended(self.result.take())
    }
}

#[cfg(test)]
mod tests {
    use super::effort_of;

    #[test]
    fn thinking_budgets_map_to_efforts() {
        assert_eq!(effort_of(false, Some(50_000)), "low");
        assert_eq!(effort_of(true, None), "medium");
        assert_eq!(effort_of(true, Some(1024)), "low");
        assert_eq!(effort_of(true, Some(4096)), "medium");
        assert_eq!(effort_of(true, Some(16_383)), "medium");
        assert_eq!(effort_of(true, Some(16_384)), "high");
    }
}
