//! `POST /v1/chat/completions`, JSON and SSE.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::fields::Fields;
use crate::generate::{Finish, Generation, Outcome};
use crate::output::{Delta, ReplyParser, ToolCall};
use crate::params::{self, GenFields};
use crate::prompt::{self, ChatPrompt, Conversation, Rendered};
use crate::reply::{Driver, ReplyFormat};
use crate::routes::common::{self, SYSTEM_FINGERPRINT};
use crate::state::{Backend, SharedState};

/// A parsed chat request.
pub struct ChatRequest {
    pub chat: ChatPrompt,
    pub gen: GenFields,
    pub stream: bool,
    pub include_usage: bool,
    pub parallel_tool_calls: bool,
}

fn messages(list: &[Value]) -> ApiResult<Vec<Value>> {
    let mut conv = Conversation::default();
    for (i, m) in list.iter().enumerate() {
        let at = |k: &str| format!("messages[{i}].{k}");
        let obj = m.as_object().ok_or_else(|| {
            ApiError::invalid(&format!("messages[{i}]"), "each message must be an object")
        })?;
        let f = Fields::new(m)?;
        let role = f
            .str("role")
            .map_err(|_| ApiError::invalid(&at("role"), "'role' must be a string"))?
            .ok_or_else(|| ApiError::invalid(&at("role"), "every message needs a 'role'"))?;
        let content = prompt::content_text(obj.get("content"), &at("content"))?;
        match role {
            "system" | "developer" => conv.system(content.unwrap_or_default()),
            "user" => conv.user(content.ok_or_else(|| {
                ApiError::invalid(&at("content"), "a user message needs 'content'")
            })?),
            "assistant" => {
                let reasoning = match obj.get("reasoning_content").or(obj.get("reasoning")) {
                    Some(Value::String(s)) => Some(s.clone()),
                    None | Some(Value::Null) => None,
                    Some(_) => {
                        return Err(ApiError::invalid(
                            &at("reasoning_content"),
                            "'reasoning_content' must be a string",
                        ))
                    }
                };
                let mut calls = Vec::new();
                for (j, c) in f.array("tool_calls")?.into_iter().flatten().enumerate() {
                    let p = format!("messages[{i}].tool_calls[{j}]");
                    let func = c.get("function").ok_or_else(|| {
                        ApiError::invalid(&p, "a tool call needs a 'function' object")
                    })?;
                    let name = func.get("name").and_then(Value::as_str).ok_or_else(|| {
                        ApiError::invalid(&format!("{p}.function.name"), "missing function name")
                    })?;
                    let args = match func.get("arguments") {
                        Some(Value::String(s)) => {
                            prompt::arguments_value(s, &format!("{p}.function.arguments"))?
                        }
                        Some(v @ Value::Object(_)) => v.clone(),
                        _ => json!({}),
                    };
                    let id = c
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    calls.push((id, name.to_string(), args));
                }
                if content.is_none() && calls.is_empty() {
                    conv.assistant(Some(String::new()), reasoning, calls);
                } else {
                    conv.assistant(content, reasoning, calls);
                }
            }
            "tool" | "function" => conv.tool_result(
                f.str("tool_call_id")?.map(str::to_string),
                f.str("name")?.map(str::to_string),
                content.unwrap_or_default(),
            ),
            other => {
                return Err(ApiError::invalid(
                    &at("role"),
                    format!("unknown role '{other}' (system, developer, user, assistant, tool)"),
                ))
            }
        }
    }
    Ok(conv.finish())
}

/// `tools` in the chat form: `[{"type": "function", "function": {name, description, parameters}}]`.
pub fn chat_tools(f: &Fields) -> ApiResult<Vec<Value>> {
    let mut tools = Vec::new();
    for (i, t) in f.array("tools")?.into_iter().flatten().enumerate() {
        let func = t.get("function").filter(|v| v.is_object()).ok_or_else(|| {
            ApiError::invalid(
                &format!("tools[{i}].function"),
                "each tool needs a 'function' object",
            )
        })?;
        let name = func.get("name").and_then(Value::as_str).ok_or_else(|| {
            ApiError::invalid(
                &format!("tools[{i}].function.name"),
                "each function needs a 'name'",
            )
        })?;
        tools.push(prompt::tool_json(
            name,
            func.get("description"),
            func.get("parameters"),
            &format!("tools[{i}].function.parameters"),
        )?);
    }
    Ok(tools)
}

/// `chat_template_kwargs` and `reasoning_effort` as template variables.
pub fn template_kwargs(f: &Fields) -> ApiResult<Map<String, Value>> {
    let mut kwargs = f.map("chat_template_kwargs")?.cloned().unwrap_or_default();
    if let Some(effort) = f.str("reasoning_effort")? {
        if !["none", "minimal", "low", "medium", "high"].contains(&effort) {
            return Err(ApiError::invalid(
                "reasoning_effort",
                format!(
                    "'reasoning_effort' must be none, minimal, low, medium or high, got '{effort}'"
                ),
            ));
        }
        kwargs
            .entry("reasoning_effort")
            .or_insert_with(|| json!(effort));
        if effort == "none" {
            kwargs
                .entry("enable_thinking")
                .or_insert_with(|| json!(false));
        }
    }
    Ok(kwargs)
}

pub fn parse(state: &SharedState, body: &Value) -> ApiResult<ChatRequest> {
    let f = Fields::new(body)?;
    state.check_model(f.str("model")?)?;
    let list = f
        .array("messages")?
        .ok_or_else(|| ApiError::invalid("messages", "'messages' is required"))?;
    if list.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "'messages' must not be empty",
        ));
    }
    let parallel_tool_calls = f.bool("parallel_tool_calls")?.unwrap_or(true);
    let chat = ChatPrompt {
        messages: messages(list)?,
        tools: chat_tools(&f)?,
        tool_choice: prompt::tool_choice(f.get("tool_choice"))?,
        parallel_tool_calls,
        kwargs: template_kwargs(&f)?,
    };
    let mut gen = params::read(
        &f,
        &state.config.defaults,
        &["max_completion_tokens", "max_tokens"],
        "stop",
    )?;
    gen.request.logprobs = params::chat_logprobs(&f)?;
    gen.structure = crate::structured::openai(&f)?;
    let include_usage = match f.object("stream_options")? {
        Some(o) => o.bool("include_usage")?.unwrap_or(false),
        None => false,
    };
    Ok(ChatRequest {
        chat,
        gen,
        stream: f.bool("stream")?.unwrap_or(false),
        include_usage,
        parallel_tool_calls,
    })
}

/// Renders the prompt and starts the request on the engine.
pub async fn start(
    state: &SharedState,
    backend: &Arc<Backend>,
    chat: &ChatPrompt,
    gen: &GenFields,
    prompt_param: &str,
    wording: params::Wording,
) -> ApiResult<(Generation, Rendered)> {
    // The prompt, and the grammar its reply follows (a tool call's depends on the prompt).
    let (rendered, grammar) = {
        let (backend, chat, structure) = (backend.clone(), chat.clone(), gen.structure.clone());
        crate::blocking::run(move || {
            let mut rendered = prompt::render(&backend, &chat)?;
            let must_call = matches!(
                chat.tool_choice,
                Some(prompt::ToolChoice::Required | prompt::ToolChoice::Named(_))
            );
            rendered.shaped = structure.is_some() && !must_call;
            let spec =
                crate::structured::reply_spec(&backend, &chat, &rendered, structure.as_ref())?;
            let grammar = spec
                .map(|s| crate::structured::compile(&backend, &s))
                .transpose()?;
            Ok((rendered, grammar))
        })
        .await?
    };
    let max_tokens = params::reply_length(
        prompt_param,
        rendered.tokens.len(),
        gen.max_tokens.as_ref(),
        backend.context,
        state.config.max_tokens,
        wording,
    )?;
    let request = gen.request(rendered.tokens.clone(), max_tokens, grammar);
    let generation = Generation::start(state.clone(), backend.clone(), request, &gen.stop).await?;
    Ok((generation, rendered))
}

pub async fn handle(State(state): State<SharedState>, JsonBody(body): JsonBody) -> Response {
    match run(state, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(state: SharedState, body: Value) -> ApiResult<Response> {
    let req = parse(&state, &body)?;
    let backend = state.backend()?;
    let (generation, rendered) = start(
        &state,
        &backend,
        &req.chat,
        &req.gen,
        "messages",
        params::Wording::OpenAi,
    )
    .await?;
    let format = ChatFormat {
        parser: rendered.parser(common::new_id("call_")),
        backend,
        id: common::new_id("chatcmpl-"),
        created: common::now_secs(),
        model: state.config.model_id.clone(),
        include_usage: req.include_usage,
        parallel: req.parallel_tool_calls,
        reply: Reply::default(),
        logprobs: req.gen.request.logprobs.is_some(),
        lp_pending: Vec::new(),
        lp_sent: 0,
        result: None,
    };
    let driver = Driver::new(generation, format);
    if req.stream {
        return Ok(driver.data_sse());
    }
    Ok(Json(driver.body().await?).into_response())
}

/// A whole reply, split.
#[derive(Default)]
pub struct Reply {
    pub content: String,
    pub reasoning: Option<String>,
    pub tool_calls: Vec<ToolCall>,
}

pub fn count_tokens(backend: &Backend, text: Option<&str>) -> usize {
    text.map_or(0, |t| {
        backend
            .tokenizer
            .encode(t, false)
            .map_or(0, |ids| ids.len())
    })
}

fn call_json(c: &ToolCall) -> Value {
    json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}})
}

/// The chat API's reply: `chat.completion.chunk`s as it streams, the `chat.completion` at the
/// end.
struct ChatFormat {
    parser: ReplyParser,
    backend: Arc<Backend>,
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    parallel: bool,
    /// The reply so far (the tool calls kept: all, or the first without `parallel`).
    reply: Reply,
    /// The request asked for log-probabilities: entries not yet sent (they go with the next
    /// chunk), and how many of the reply's tokens have been taken in.
    logprobs: bool,
    lp_pending: Vec<Value>,
    lp_sent: usize,
    /// The finished `chat.completion`, or the error the request failed with.
    result: Option<Result<Value, String>>,
}

impl ChatFormat {
    fn chunk(&mut self, delta: Value, finish: Option<&str>) -> Value {
        let logprobs = match self.lp_pending.is_empty() {
            true => Value::Null,
            false => json!({"content": std::mem::take(&mut self.lp_pending), "refusal": null}),
        };
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
        })
    }

    /// Takes in the log-probabilities of `lps` (the reply's tokens from `lp_sent` on).
    fn take_logprobs(&mut self, lps: &[tf_engine::TokenLogprob]) {
        if self.logprobs {
            self.lp_sent += lps.len();
            let entries = common::chat_logprobs(&self.backend, lps);
            self.lp_pending.extend(entries);
        }
    }

    fn deltas(&mut self, deltas: Vec<Delta>) -> Vec<Value> {
        let mut out = Vec::new();
        for d in deltas {
            let delta = match d {
                Delta::Content(t) => {
                    self.reply.content.push_str(&t);
                    json!({"content": t})
                }
                Delta::Reasoning(t) => {
                    let r = self.reply.reasoning.get_or_insert_with(String::new);
                    r.push_str(&t);
                    json!({"reasoning_content": t})
                }
                Delta::ToolCall(c) => {
                    if !self.parallel && !self.reply.tool_calls.is_empty() {
                        continue;
                    }
                    let index = self.reply.tool_calls.len();
                    let delta = json!({"tool_calls": [{
                        "index": index,
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }]});
                    self.reply.tool_calls.push(c);
                    delta
                }
            };
            out.push(self.chunk(delta, None));
        }
        out
    }

    /// The non-streamed reply.
    fn completion(&self, outcome: &Outcome, reasoning_tokens: usize) -> Value {
        let reply = &self.reply;
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        let content = if reply.tool_calls.is_empty() || !reply.content.trim().is_empty() {
            json!(reply.content)
        } else {
            Value::Null
        };
        message.insert("content".into(), content);
        if let Some(r) = &reply.reasoning {
            message.insert("reasoning_content".into(), json!(r));
        }
        if !reply.tool_calls.is_empty() {
            let calls: Vec<Value> = reply.tool_calls.iter().map(call_json).collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let logprobs = match self.logprobs {
            true => json!({"content": common::chat_logprobs(&self.backend, &outcome.logprobs),
                "refusal": null}),
            false => Value::Null,
        };
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{
                "index": 0,
                "message": Value::Object(message),
                "logprobs": logprobs,
                "finish_reason": common::finish_reason(&outcome.finish, !reply.tool_calls.is_empty()),
            }],
            "usage": common::usage_json(outcome, reasoning_tokens),
            "tensorfold": common::receipt_json(outcome),
        })
    }
}

impl ReplyFormat for ChatFormat {
    fn start(&mut self) -> Vec<Value> {
        vec![self.chunk(json!({"role": "assistant", "content": ""}), None)]
    }

    fn text(&mut self, text: String, generation: &mut Generation) -> Vec<Value> {
        let lps = generation.take_logprobs();
        self.take_logprobs(&lps);
        let deltas = self.parser.push(&text);
        self.deltas(deltas)
    }

    fn end(&mut self, outcome: Outcome) -> Vec<Value> {
        let rest = outcome.logprobs.get(self.lp_sent..).unwrap_or(&[]).to_vec();
        self.take_logprobs(&rest);
        let deltas = self.parser.finish();
        let mut out = self.deltas(deltas);
        if let Finish::Error(message) = &outcome.finish {
            out.push(ApiError::internal(message.clone()).body());
            self.result = Some(Err(message.clone()));
            return out;
        }
        let calls = !self.reply.tool_calls.is_empty();
        let mut last = self.chunk(
            json!({}),
            Some(common::finish_reason(&outcome.finish, calls)),
        );
        last["tensorfold"] = common::receipt_json(&outcome);
        out.push(last);
        let reasoning_tokens = count_tokens(&self.backend, self.reply.reasoning.as_deref());
        if self.include_usage {
            let mut usage = self.chunk(json!({}), None);
            usage["choices"] = json!([]);
            usage["usage"] = common::usage_json(&outcome, reasoning_tokens);
            out.push(usage);
        }
        self.result = Some(Ok(self.completion(&outcome, reasoning_tokens)));
        out
    }

    fn body(&mut self) -> ApiResult<Value> {
        crate::reply::ended(self.result.take())
    }
}
