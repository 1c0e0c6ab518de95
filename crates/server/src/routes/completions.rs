//! `POST /v1/completions`: a raw prompt (text or token ids), no chat template.

use std::convert::Infallible;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{json, Value};
use tf_core::TokenId;

use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::fields::Fields;
use crate::generate::{Finish, GenRequest, Generation, Outcome, Step};
use crate::params;
use crate::routes::common::{self, data, done_marker, SYSTEM_FINGERPRINT};
use crate::state::{Backend, SharedState};

/// The prompt as token ids: a string (special tokens parsed, BOS added where the model wants
/// one), a list of ids, or a one-element list of either.
/// Whether `text`'s bytes alone prove it cannot fit the context.
fn too_long(backend: &Backend, text: &str) -> bool {
    backend
        .tokenizer
        .min_tokens(text.len())
        .is_some_and(|n| n >= backend.context)
}

fn prompt_ids(backend: &Backend, value: Option<&Value>) -> ApiResult<Vec<TokenId>> {
    let bad = || {
        ApiError::invalid(
            "prompt",
            "'prompt' must be a string, a list of token ids, or a one-element list of either",
        )
    };
    let ids_of = |items: &[Value]| -> ApiResult<Vec<TokenId>> {
        items
            .iter()
            .map(|v| {
                let id = v.as_u64().ok_or_else(bad)?;
                if id as usize >= backend.tokenizer.vocab_size() {
                    return Err(ApiError::invalid(
                        "prompt",
                        format!(
                            "token id {id} is outside the vocabulary (size {})",
                            backend.tokenizer.vocab_size()
                        ),
                    ));
                }
                Ok(id as TokenId)
            })
            .collect()
    };
    let ids = match value {
        None => return Err(ApiError::invalid("prompt", "'prompt' is required")),
        Some(Value::String(s)) if too_long(backend, s) => {
            return Err(ApiError::context_exceeded(
                format!(
                    "prompt is too long: at least {} tokens > {} maximum ({} bytes, refused \
                     before tokenizing)",
                    backend.tokenizer.min_tokens(s.len()).unwrap_or(0),
                    backend.context,
                    s.len()
                ),
                "prompt",
            ))
        }
        Some(Value::String(s)) => backend
            .tokenizer
            .encode_chat(s)
            .map_err(|e| ApiError::bad_request(format!("cannot tokenize the prompt: {e}")))?,
        Some(Value::Array(items)) => match items.as_slice() {
            [Value::String(_)] => return prompt_ids(backend, items.first()),
            [Value::Array(inner)] => ids_of(inner)?,
            [_, _, ..] if items.iter().all(|v| !v.is_number()) => {
                return Err(ApiError::invalid(
                    "prompt",
                    "only one prompt per request is supported",
                ))
            }
            _ => ids_of(items)?,
        },
        Some(_) => return Err(bad()),
    };
    if ids.is_empty() {
        return Err(ApiError::invalid("prompt", "the prompt is empty"));
    }
    Ok(ids)
}

pub async fn handle(State(state): State<SharedState>, JsonBody(body): JsonBody) -> Response {
    match run(state, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn run(state: SharedState, body: Value) -> ApiResult<Response> {
    let f = Fields::new(&body)?;
    state.check_model(f.str("model")?)?;
    if f.bool("echo")? == Some(true) {
        return Err(ApiError::invalid(
            "echo",
            "'echo' is not supported (only false)",
        ));
    }
    if f.uint("best_of", 1)?.is_some_and(|b| b > 1) {
        return Err(ApiError::invalid("best_of", "'best_of' must be 1"));
    }
    let mut gen = params::read(&f, &state.config.defaults, &["max_tokens"], "stop")?;
    gen.logprobs = params::completion_logprobs(&f)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = match f.object("stream_options")? {
        Some(o) => o.bool("include_usage")?.unwrap_or(false),
        None => false,
    };
    let backend = state.backend()?;
    let prompt = {
        let (backend, value) = (backend.clone(), f.get("prompt").cloned());
        crate::blocking::run(move || prompt_ids(&backend, value.as_ref())).await?
    };
    let max_tokens = params::reply_length(
        "prompt",
        prompt.len(),
        gen.max_tokens.as_ref(),
        backend.context,
        state.config.max_tokens,
        params::Wording::OpenAi,
    )?;
    let request = GenRequest {
        prompt,
        params: gen.params,
        max_tokens,
        stop: gen.stop,
        ignore_eos: gen.ignore_eos,
        draft: gen.draft,
        logprobs: gen.logprobs,
    };
    let logprobs = gen.logprobs.is_some();
    let generation = Generation::start(state.clone(), backend.clone(), request).await?;
    let head = Head {
        id: common::new_id("cmpl-"),
        created: common::now_secs(),
        model: state.config.model_id.clone(),
        backend: logprobs.then_some(backend),
    };
    if stream {
        return Ok(Sse::new(events(generation, head, include_usage))
            .keep_alive(KeepAlive::default())
            .into_response());
    }
    let (text, outcome) = generation.collect().await;
    if let Finish::Error(message) = &outcome.finish {
        return Err(ApiError::internal(message.clone()));
    }
    let mut body = head.chunk(&text, Some(common::finish_reason(&outcome.finish, false)));
    if let Some(b) = &head.backend {
        body["choices"][0]["logprobs"] = common::completion_logprobs(b, &outcome.logprobs, 0).0;
    }
    body["usage"] = common::usage_json(&outcome, 0);
    body["tensorfold"] = common::receipt_json(&outcome);
    Ok(Json(body).into_response())
}

struct Head {
    id: String,
    created: u64,
    model: String,
    /// Where the request asked for log-probabilities: the tokenizer's model.
    backend: Option<std::sync::Arc<crate::state::Backend>>,
}

impl Head {
    fn chunk(&self, text: &str, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": finish}],
        })
    }

    fn end(&self, outcome: &Outcome, include_usage: bool) -> Vec<Event> {
        if let Finish::Error(message) = &outcome.finish {
            return vec![
                data(&ApiError::internal(message.clone()).body()),
                done_marker(),
            ];
        }
        let mut last = self.chunk("", Some(common::finish_reason(&outcome.finish, false)));
        last["tensorfold"] = common::receipt_json(outcome);
        let mut out = vec![data(&last)];
        if include_usage {
            let mut usage = self.chunk("", None);
            usage["choices"] = json!([]);
            usage["usage"] = common::usage_json(outcome, 0);
            out.push(data(&usage));
        }
        out.push(done_marker());
        out
    }
}

/// Where a stream stands: the reply's tokens whose log-probabilities were sent, and the text
/// offset after them.
#[derive(Default)]
struct Sent {
    tokens: usize,
    offset: usize,
}

fn events(
    generation: Generation,
    head: Head,
    include_usage: bool,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    stream::unfold(
        Some((generation, head, Sent::default())),
        move |st| async move {
            let (mut generation, head, mut sent) = st?;
            match generation.next().await? {
                Step::Text(t) => {
                    let mut chunk = head.chunk(&t, None);
                    if let Some(b) = &head.backend {
                        let lps = generation.take_logprobs();
                        let (v, at) = common::completion_logprobs(b, &lps, sent.offset);
                        chunk["choices"][0]["logprobs"] = v;
                        sent = Sent {
                            tokens: sent.tokens + lps.len(),
                            offset: at,
                        };
                    }
                    Some((vec![data(&chunk)], Some((generation, head, sent))))
                }
                Step::Done(outcome) => {
                    let mut events = head.end(&outcome, include_usage);
                    let rest = outcome.logprobs.get(sent.tokens..).unwrap_or(&[]);
                    let failed = matches!(outcome.finish, Finish::Error(_));
                    if let (Some(b), false) = (&head.backend, rest.is_empty() || failed) {
                        // The last tokens' log-probabilities ride on an empty text chunk.
                        let mut chunk = head.chunk("", None);
                        chunk["choices"][0]["logprobs"] =
                            common::completion_logprobs(b, rest, sent.offset).0;
                        events.insert(0, data(&chunk));
                    }
                    Some((events, None))
                }
            }
        },
    )
    .flat_map(|events| stream::iter(events.into_iter().map(Ok)))
}
