//! The OpenAI Responses API: `POST /v1/responses` (JSON or SSE), `GET`/`DELETE
//! /v1/responses/{id}`, and `GET /v1/responses` upgraded to a WebSocket
//! ([`super::responses_ws`]). One [`ResponseRun`] drives a response for all three transports,
//! so their events are the same.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::fields::Fields;
use crate::generate::{Finish, Generation, Outcome};
use crate::output::ReplyParser;
use crate::params::{self, GenFields};
use crate::prompt::{self, ChatPrompt, Conversation};
use crate::reply::{Driver, Idle, ReplyFormat};
use crate::routes::chat::{self, count_tokens};
use crate::routes::common;
use crate::routes::responses_events::EventBuilder;
use crate::state::{Backend, SharedState};

/// A validated `response.create`.
pub struct ResponseRequest {
    chat: ChatPrompt,
    /// The conversation without instructions (what a later `previous_response_id` continues).
    history: Vec<Value>,
    gen: GenFields,
    stream: bool,
    store: bool,
    echo: Value,
    /// The functions of `namespace` tools, by the name the model sees.
    namespaces: Namespaces,
    generate: bool,
}

fn input_items(conv: &mut Conversation, input: &Value, namespaces: &Namespaces) -> ApiResult<()> {
    let items = match input {
        Value::String(s) => {
            conv.user(s.clone());
            return Ok(());
        }
        Value::Array(items) => items,
        _ => {
            return Err(ApiError::invalid(
                "input",
                "'input' must be a string or a list of items",
            ))
        }
    };
    let mut reasoning: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let at = |k: &str| format!("input[{i}].{k}");
        let obj = item.as_object().ok_or_else(|| {
            ApiError::invalid(&format!("input[{i}]"), "each item must be an object")
        })?;
        let kind = obj.get("type").and_then(Value::as_str).unwrap_or("message");
        let text_of = |k: &str| -> ApiResult<String> {
            match obj.get(k) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(v @ Value::Array(_)) => {
                    Ok(prompt::content_text(Some(v), &at(k))?.unwrap_or_default())
                }
                _ => Err(ApiError::invalid(&at(k), format!("'{k}' must be a string"))),
            }
        };
        match kind {
            "message" => {
                let role = obj.get("role").and_then(Value::as_str).unwrap_or("");
                let content =
                    prompt::content_text(obj.get("content"), &at("content"))?.unwrap_or_default();
                match role {
                    "user" => conv.user(content),
                    "system" | "developer" => conv.system(content),
                    "assistant" => conv.assistant(Some(content), reasoning.take(), Vec::new()),
                    _ => {
                        return Err(ApiError::invalid(
                            &at("role"),
                            "'role' must be user, assistant, system or developer",
                        ))
                    }
                }
            }
            "function_call" => {
                let mut name = text_of("name")?;
                // A namespace function's call goes back under the name the model was shown.
                if let Some(ns) = obj.get("namespace").and_then(Value::as_str) {
                    let shown = namespaces.iter().find(|(_, v)| v.0 == ns && v.1 == name);
                    if let Some((shown, _)) = shown {
                        name = shown.clone();
                    }
                }
                let args = prompt::arguments_value(&text_of("arguments")?, &at("arguments"))?;
                let call_id = text_of("call_id")?;
                conv.assistant(None, reasoning.take(), vec![(call_id, name, args)]);
            }
            "function_call_output" => {
                let call_id = text_of("call_id")?;
                conv.tool_result(Some(call_id), None, text_of("output")?);
            }
            "reasoning" => {
                let mut text = String::new();
                for part in obj
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(t) = part.get("text").and_then(Value::as_str) {
                        text.push_str(t);
                    }
                }
                reasoning = Some(text);
            }
            other => {
                return Err(ApiError::invalid(
                    &at("type"),
                    format!("input items of type '{other}' are not supported"),
                ))
            }
        }
    }
    Ok(())
}

/// Functions inside `namespace` tools, by the name the model sees: (namespace, function name).
pub type Namespaces = HashMap<String, (String, String)>;

/// The tools the model is shown: function tools, and the functions of `namespace` tools (each
/// under its own name, or `namespace.name` where two would share a name). Tools the server
/// cannot run (hosted ones: `web_search`, `file_search`, `image_generation`, ...) are left out
/// of the prompt rather than refused, as clients such as Codex send them by default.
fn tools(f: &Fields) -> ApiResult<(Vec<Value>, Namespaces)> {
    // (namespace, function, where it is in the request)
    let mut found: Vec<(Option<String>, &Value, String)> = Vec::new();
    let function =
        |t: &Value| t.get("type").and_then(Value::as_str).unwrap_or("function") == "function";
    for (i, t) in f.array("tools")?.into_iter().flatten().enumerate() {
        match t.get("type").and_then(Value::as_str).unwrap_or("") {
            "function" => found.push((None, t, format!("tools[{i}]"))),
            "namespace" => {
                let ns = t.get("name").and_then(Value::as_str).unwrap_or("");
                let members = t.get("tools").and_then(Value::as_array);
                for (j, member) in members.into_iter().flatten().enumerate() {
                    if function(member) {
                        let at = format!("tools[{i}].tools[{j}]");
                        found.push((Some(ns.to_string()), member, at));
                    }
                }
            }
            _ => {}
        }
    }
    let name_of = |t: &Value| {
        // The chat form ({"function": {...}}) as well as the flat Responses form.
        let func = t.get("function").unwrap_or(t);
        func.get("name").and_then(Value::as_str).map(str::to_string)
    };
    let mut count: HashMap<String, usize> = HashMap::new();
    for (_, t, _) in &found {
        if let Some(n) = name_of(t) {
            *count.entry(n).or_default() += 1;
        }
    }
    let mut out = Vec::new();
    let mut namespaces = Namespaces::new();
    for (ns, t, at) in found {
        let func = t.get("function").unwrap_or(t);
        let name = name_of(t).ok_or_else(|| {
            ApiError::invalid(&format!("{at}.name"), "each function needs a 'name'")
        })?;
        let shown = match &ns {
            Some(ns) if count[&name] > 1 => format!("{ns}.{name}"),
            _ => name.clone(),
        };
        if let Some(ns) = ns {
            namespaces.insert(shown.clone(), (ns, name));
        }
        out.push(prompt::tool_json(
            &shown,
            func.get("description"),
            func.get("parameters"),
            &format!("{at}.parameters"),
        )?);
    }
    Ok((out, namespaces))
}

pub fn parse(state: &SharedState, body: &Value) -> ApiResult<ResponseRequest> {
    parse_on(state, body, |_| None)
}

/// [`parse`], with `local` looking up a `previous_response_id` first (a WebSocket connection's
/// own earlier responses, kept whatever their `store` said), then the store.
pub fn parse_on(
    state: &SharedState,
    body: &Value,
    local: impl Fn(&str) -> Option<Vec<Value>>,
) -> ApiResult<ResponseRequest> {
    let f = Fields::new(body)?;
    state.check_model(f.str("model")?)?;
    if f.bool("background")? == Some(true) {
        return Err(ApiError::invalid(
            "background",
            "'background' is not supported",
        ));
    }
    let mut history = Conversation::default();
    if let Some(prev) = f.str("previous_response_id")? {
        let conversation = local(prev).or_else(|| state.store.get(prev).map(|(_, c)| c));
        let conversation = conversation.ok_or_else(|| ApiError {
            param: Some("previous_response_id".into()),
            ..ApiError::not_found(format!("Previous response with id '{prev}' not found."))
        })?;
        history.extend(conversation);
    }
    let input = f
        .get("input")
        .ok_or_else(|| ApiError::invalid("input", "'input' is required"))?;
    let (tools, namespaces) = tools(&f)?;
    input_items(&mut history, input, &namespaces)?;
    let history = history.finish();
    let instructions = f.str("instructions")?;
    let mut conv = Conversation::default();
    if let Some(text) = instructions {
        conv.system(text.to_string());
    }
    conv.extend(history.clone());
    let mut kwargs = chat::template_kwargs(&f)?;
    if let Some(reasoning) = f.object("reasoning")? {
        if let Some(effort) = reasoning.str("effort")? {
            kwargs
                .entry("reasoning_effort")
                .or_insert_with(|| json!(effort));
        }
    }
    let format = match f.object("text")? {
        Some(text) => match text.object("format")? {
            Some(format) => format.raw().clone(),
            None => Map::new(),
        },
        None => Map::new(),
    };
    let mut gen = params::read(&f, &state.config.defaults, &["max_output_tokens"], "stop")?;
    gen.structure = crate::structured::responses(&f)?;
    let parallel_tool_calls = f.bool("parallel_tool_calls")?.unwrap_or(true);
    let tool_choice = prompt::tool_choice(f.get("tool_choice"))?;
    let echo = json!({
        "instructions": instructions,
        "max_output_tokens": gen.max_tokens.as_ref().map(|m| m.0),
        "metadata": f.get("metadata").cloned().unwrap_or(json!({})),
        "parallel_tool_calls": parallel_tool_calls,
        "previous_response_id": f.str("previous_response_id")?,
        "reasoning": {"effort": kwargs.get("reasoning_effort"), "summary": null},
        "store": f.bool("store")?.unwrap_or(true),
        "temperature": gen.request.params.temperature,
        "text": {"format": if format.is_empty() { json!({"type": "text"}) } else { Value::Object(format) }},
        "tool_choice": f.get("tool_choice").cloned().unwrap_or(json!("auto")),
        "tools": f.get("tools").cloned().unwrap_or(json!([])),
        "top_p": gen.request.params.top_p,
        "truncation": "disabled",
    });
    Ok(ResponseRequest {
        chat: ChatPrompt {
            messages: conv.finish(),
            tools,
            tool_choice,
            parallel_tool_calls,
            kwargs,
        },
        history,
        gen,
        stream: f.bool("stream")?.unwrap_or(false),
        store: f.bool("store")?.unwrap_or(true),
        echo,
        namespaces,
        generate: f.bool("generate")?.unwrap_or(true),
    })
}

/// A response object: its identity, status and output, and the request's echoed settings.
fn response_object(
    id: &str,
    created: u64,
    model: &str,
    status: &str,
    output: Vec<Value>,
    req: &ResponseRequest,
) -> Value {
    let mut r = json!({
        "id": id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "model": model,
        "output": output,
        "usage": null,
    });
    for (k, v) in req.echo.as_object().into_iter().flatten() {
        r[k] = v.clone();
    }
    r
}

impl ResponseRequest {
    /// Whether the request asked for no generation (`"generate": false`: Codex's prewarm of a
    /// WebSocket connection).
    pub fn generates(&self) -> bool {
        self.generate
    }

    /// The answer to a request that generates nothing: `response.created` and
    /// `response.completed` with no output, and the response's id and conversation (its input),
    /// which a later request on the same connection may continue.
    pub fn without_generation(
        self,
        state: &SharedState,
        stream_id: Option<Value>,
    ) -> (Vec<Value>, String, Vec<Value>) {
        let id = common::new_id("resp_");
        let model = &state.config.model_id;
        let created = common::now_secs();
        let mut b = EventBuilder::new(false, stream_id, Namespaces::new());
        let mut done = response_object(&id, created, model, "completed", Vec::new(), &self);
        done["usage"] = json!({"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 0});
        let start = response_object(&id, created, model, "in_progress", Vec::new(), &self);
        let events = vec![
            b.event("response.created", json!({"response": start})),
            b.event("response.completed", json!({"response": done})),
        ];
        (events, id, self.history)
    }
}

/// One response in progress (HTTP JSON, SSE or a WebSocket): the reply driver over the
/// Responses format.
pub struct ResponseRun {
    driver: Driver<ResponsesFormat>,
}

/// The Responses API's reply: output items as they open and close, then the response object
/// (stored when asked).
struct ResponsesFormat {
    state: SharedState,
    backend: Arc<Backend>,
    parser: ReplyParser,
    builder: EventBuilder,
    id: String,
    created: u64,
    req: ResponseRequest,
    /// The finished response object.
    result: Option<Value>,
    /// The finished response's conversation (its input and output), stored or not.
    conversation: Option<Vec<Value>>,
}

impl ResponseRun {
    pub async fn start(
        state: &SharedState,
        req: ResponseRequest,
        stream_id: Option<Value>,
    ) -> ApiResult<ResponseRun> {
        let backend = state.backend()?;
        let (generation, rendered) = chat::start(
            state,
            &backend,
            &req.chat,
            &req.gen,
            "input",
            params::Wording::OpenAi,
        )
        .await?;
        let parallel = req.echo["parallel_tool_calls"].as_bool().unwrap_or(true);
        let format = ResponsesFormat {
            state: state.clone(),
            backend,
            parser: rendered.parser(common::new_id("call_")),
            builder: EventBuilder::new(parallel, stream_id, req.namespaces.clone()),
            id: common::new_id("resp_"),
            created: common::now_secs(),
            req,
            result: None,
            conversation: None,
        };
        Ok(ResponseRun {
            driver: Driver::new(generation, format),
        })
    }

    /// The response's id.
    pub fn id(&self) -> &str {
        &self.driver.format.id
    }

    /// The next events; `None` once the response is over.
    pub async fn next(&mut self) -> Option<Vec<Value>> {
        self.driver.next().await
    }

    /// The finished response's conversation (its input and output), once.
    pub fn take_conversation(&mut self) -> Option<Vec<Value>> {
        self.driver.format.conversation.take()
    }
}

impl ResponsesFormat {
    fn object(&self, status: &str, output: Vec<Value>) -> Value {
        let model = &self.state.config.model_id;
        response_object(&self.id, self.created, model, status, output, &self.req)
    }

    fn deltas(&mut self, deltas: Vec<crate::output::Delta>) -> Vec<Value> {
        deltas
            .into_iter()
            .flat_map(|d| self.builder.push(d))
            .collect()
    }
}

impl ReplyFormat for ResponsesFormat {
    fn start(&mut self) -> Vec<Value> {
        let r = self.object("in_progress", Vec::new());
        let created = self
            .builder
            .event("response.created", json!({"response": r}));
        let progress = self
            .builder
            .event("response.in_progress", json!({"response": r}));
        vec![created, progress]
    }

    fn text(&mut self, text: String, _: &mut Generation) -> Vec<Value> {
        let deltas = self.parser.push(&text);
        self.deltas(deltas)
    }

    fn end(&mut self, outcome: Outcome) -> Vec<Value> {
        let deltas = self.parser.finish();
        let mut events = self.deltas(deltas);
        self.builder.close(&mut events);
        let items: Vec<Value> = self.builder.items.clone();
        let (status, kind) = match &outcome.finish {
            Finish::Error(_) => ("failed", "response.failed"),
            Finish::Length => ("incomplete", "response.incomplete"),
            _ => ("completed", "response.completed"),
        };
        let mut r = self.object(status, items.clone());
        match &outcome.finish {
            Finish::Error(message) => {
                r["error"] = json!({"code": "server_error", "message": message});
            }
            Finish::Length => r["incomplete_details"] = json!({"reason": "max_output_tokens"}),
            _ => {}
        }
        let reasoning = (!self.builder.reasoning_text.is_empty())
            .then_some(self.builder.reasoning_text.as_str());
        let output_tokens = outcome.tokens.len();
        r["usage"] = json!({
            "input_tokens": outcome.prompt_tokens,
            "input_tokens_details": {"cached_tokens": outcome.cached_tokens},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": count_tokens(&self.backend, reasoning)},
            "total_tokens": outcome.prompt_tokens + output_tokens,
        });
        r["tensorfold"] = common::receipt_json(&outcome);
        if !matches!(outcome.finish, Finish::Error(_)) {
            let mut conv = Conversation::default();
            conv.extend(self.req.history.clone());
            append_output(&mut conv, &items);
            let conv = conv.finish();
            if self.req.store {
                self.state
                    .store
                    .insert(self.id.clone(), r.clone(), conv.clone());
            }
            self.conversation = Some(conv);
        }
        self.result = Some(r.clone());
        events.push(self.builder.event(kind, json!({"response": r})));
        events
    }

    fn body(&mut self) -> ApiResult<Value> {
        let result = self.result.take().unwrap_or(Value::Null);
        if result["status"] == "failed" {
            let message = result["error"]["message"].as_str().unwrap_or("failed");
            return Err(ApiError::internal(message.to_string()));
        }
        Ok(result)
    }
}

/// The response's output items as conversation turns.
fn append_output(conv: &mut Conversation, items: &[Value]) {
    let mut reasoning = None;
    let mut content = None;
    let mut calls = Vec::new();
    for item in items {
        match item["type"].as_str() {
            Some("reasoning") => {
                reasoning = item["content"][0]["text"].as_str().map(str::to_string)
            }
            Some("message") => content = item["content"][0]["text"].as_str().map(str::to_string),
            Some("function_call") => {
                let args = item["arguments"].as_str().unwrap_or("{}");
                calls.push((
                    item["call_id"].as_str().unwrap_or("").to_string(),
                    item["name"].as_str().unwrap_or("").to_string(),
                    serde_json::from_str(args).unwrap_or(json!({})),
                ));
            }
            _ => {}
        }
    }
    if content.is_none() && calls.is_empty() {
        content = Some(String::new());
    }
    conv.assistant(content, reasoning, calls);
}

pub async fn create(State(state): State<SharedState>, JsonBody(body): JsonBody) -> Response {
    match create_inner(state, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn create_inner(state: SharedState, body: Value) -> ApiResult<Response> {
    let req = parse(&state, &body)?;
    let stream = req.stream;
    let run = ResponseRun::start(&state, req, None).await?;
    if stream {
        return Ok(run.driver.named_sse(Idle::Comment));
    }
    Ok(Json(run.driver.body().await?).into_response())
}

pub async fn retrieve(State(state): State<SharedState>, Path(id): Path<String>) -> Response {
    match state.store.get(&id) {
        Some((response, _)) => Json(response).into_response(),
        None => ApiError::not_found(format!("No response found with id '{id}'.")).into_response(),
    }
}

pub async fn delete(State(state): State<SharedState>, Path(id): Path<String>) -> Response {
    if state.store.delete(&id) {
        Json(json!({"id": id, "object": "response.deleted", "deleted": true})).into_response()
    } else {
        ApiError::not_found(format!("No response found with id '{id}'.")).into_response()
    }
}

pub use super::responses_ws::websocket;
