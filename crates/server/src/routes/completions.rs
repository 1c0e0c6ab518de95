//! `POST /v1/completions`: a raw prompt (text or token ids), no chat template.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tf_core::TokenId;

use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::fields::Fields;
use crate::generate::{Finish, Generation, Outcome};
use crate::params;
use crate::reply::{Driver, ReplyFormat};
use crate::routes::common::{self, SYSTEM_FINGERPRINT};
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
    if f.uint("best_of", 1)?.is_some_and(|b| b > 1) {
        return Err(ApiError::invalid("best_of", "'best_of' must be 1"));
    }
    let echo = f.bool("echo")?.unwrap_or(false);
    // `echo` with `max_tokens: 0` scores the prompt alone (lm-evaluation-harness): one token is
    // drawn and left out of the reply.
    let prompt_only = echo && f.get("max_tokens").is_some_and(|v| v == &json!(0));
    let max_keys: &[&str] = if prompt_only { &[] } else { &["max_tokens"] };
    let mut gen = params::read(&f, &state.config.defaults, max_keys, "stop")?;
    gen.request.logprobs = params::completion_logprobs(&f)?;
    gen.structure = crate::structured::openai(&f)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = match f.object("stream_options")? {
        Some(o) => o.bool("include_usage")?.unwrap_or(false),
        None => false,
    };
    let backend = state.backend()?;
    let (prompt, grammar) = {
        let (backend, value) = (backend.clone(), f.get("prompt").cloned());
        let structure = gen.structure.clone();
        crate::blocking::run(move || {
            let prompt = prompt_ids(&backend, value.as_ref())?;
            let grammar = structure
                .map(|s| crate::structured::compile(&backend, &s))
                .transpose()?;
            Ok((prompt, grammar))
        })
        .await?
    };
    let max_tokens = match prompt_only {
        true => 1,
        false => params::reply_length(
            "prompt",
            prompt.len(),
            gen.max_tokens.as_ref(),
            backend.context,
            state.config.max_tokens,
            params::Wording::OpenAi,
        )?,
    };
    if prompt.len() + max_tokens > backend.context {
        return Err(ApiError::context_exceeded(
            format!(
                "This model's maximum context length is {} tokens, and the prompt has {} tokens.",
                backend.context,
                prompt.len()
            ),
            "prompt",
        ));
    }
    // The echoed text: the prompt string as sent, or its ids decoded.
    let echoed = echo.then(|| match f.get("prompt") {
        Some(Value::String(t)) => t.clone(),
        _ => backend.tokenizer.decode(&prompt, false),
    });
    let logprobs = gen.request.logprobs.is_some();
    let mut request = gen.request(prompt.clone(), max_tokens, grammar);
    request.prompt_logprobs = echo && logprobs;
    let generation = Generation::start(state.clone(), backend.clone(), request, &gen.stop).await?;
    let head = Head {
        id: common::new_id("cmpl-"),
        created: common::now_secs(),
        model: state.config.model_id.clone(),
        backend: logprobs.then_some(backend),
        echo: echoed.map(|text| (text, prompt)),
        prompt_only,
    };
    let format = CompletionFormat {
        head,
        include_usage,
        sent: Sent::default(),
        text: String::new(),
        result: None,
    };
    let driver = Driver::new(generation, format);
    if stream {
        return Ok(driver.data_sse());
    }
    Ok(Json(driver.body().await?).into_response())
}

struct Head {
    id: String,
    created: u64,
    model: String,
    /// Where the request asked for log-probabilities: the tokenizer's model.
    backend: Option<std::sync::Arc<crate::state::Backend>>,
    /// `echo`: the prompt's text and ids, sent before the reply.
    echo: Option<(String, Vec<TokenId>)>,
    /// `echo` with `max_tokens: 0`: the reply is left out.
    prompt_only: bool,
}

/// One token for `common::completion_logprobs`.
type Item<'a> = (TokenId, Option<&'a tf_engine::TokenLogprob>);

impl Head {
    /// The echoed prompt: its text, and its tokens with their log-probabilities (the first
    /// has none).
    fn echo_part<'a>(
        &'a self,
        prompt_lps: &'a [tf_engine::TokenLogprob],
    ) -> (&'a str, Vec<Item<'a>>) {
        let Some((text, ids)) = &self.echo else {
            return ("", Vec::new());
        };
        let lps = std::iter::once(None).chain(prompt_lps.iter().map(Some));
        (text, ids.iter().copied().zip(lps).collect())
    }

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

    fn end(&self, outcome: &Outcome, include_usage: bool) -> Vec<Value> {
        let mut last = self.chunk("", Some(common::finish_reason(&outcome.finish, false)));
        last["tensorfold"] = common::receipt_json(outcome);
        let mut out = vec![last];
        if include_usage {
            let mut usage = self.chunk("", None);
            usage["choices"] = json!([]);
            usage["usage"] = common::usage_json(outcome, 0);
            out.push(usage);
        }
        out
    }

    /// The non-streamed reply: the echo and the whole text, with their log-probabilities.
    fn completion(&self, text: &str, outcome: &Outcome) -> Value {
        let (echo_text, echo_lp) = self.echo_part(&outcome.prompt_logprobs);
        let finish = common::finish_reason(&outcome.finish, false);
        let mut body = self.chunk(&format!("{echo_text}{text}"), Some(finish));
        if let Some(b) = &self.backend {
            let items = echo_lp
                .into_iter()
                .chain(common::reply_items(b, &outcome.logprobs));
            body["choices"][0]["logprobs"] = common::completion_logprobs(b, items, 0).0;
        }
        body["usage"] = common::usage_json(outcome, 0);
        body["tensorfold"] = common::receipt_json(outcome);
        body
    }
}

/// Where a stream stands: whether the echo went out, the reply's tokens whose
/// log-probabilities were sent, and the text offset after them.
#[derive(Default)]
struct Sent {
    echoed: bool,
    tokens: usize,
    offset: usize,
}

impl Head {
    /// The echo chunk (the prompt, with its log-probabilities where asked): sent once, before
    /// the reply's first text, when the prompt's log-probabilities have all come.
    fn echo_chunk(&self, prompt_lps: &[tf_engine::TokenLogprob], sent: &mut Sent) -> Option<Value> {
        if sent.echoed || self.echo.is_none() {
            return None;
        }
        sent.echoed = true;
        let (text, items) = self.echo_part(prompt_lps);
        let mut chunk = self.chunk(text, None);
        if let Some(b) = &self.backend {
            let (v, end) = common::completion_logprobs(b, items.into_iter(), 0);
            chunk["choices"][0]["logprobs"] = v;
            sent.offset = end;
        }
        Some(chunk)
    }
}

/// The completions API's reply: the echo, then text chunks (with the legacy log-probability
/// object where asked), then the finish; the whole `text_completion` at the end.
struct CompletionFormat {
    head: Head,
    include_usage: bool,
    sent: Sent,
    /// The reply's text so far (for the non-streamed reply).
    text: String,
    /// The finished `text_completion`, or the error the request failed with.
    result: Option<Result<Value, String>>,
}

impl ReplyFormat for CompletionFormat {
    fn text(&mut self, text: String, generation: &mut Generation) -> Vec<Value> {
        let head = &self.head;
        let mut events: Vec<Value> = head
            .echo_chunk(generation.prompt_logprobs(), &mut self.sent)
            .into_iter()
            .collect();
        if head.prompt_only {
            generation.take_logprobs();
            return events;
        }
        let mut chunk = head.chunk(&text, None);
        if let Some(b) = &head.backend {
            let lps = generation.take_logprobs();
            let items = common::reply_items(b, &lps);
            let (v, at) = common::completion_logprobs(b, items, self.sent.offset);
            chunk["choices"][0]["logprobs"] = v;
            self.sent.tokens += lps.len();
            self.sent.offset = at;
        }
        self.text.push_str(&text);
        events.push(chunk);
        events
    }

    fn end(&mut self, mut outcome: Outcome) -> Vec<Value> {
        let head = &self.head;
        let mut events: Vec<Value> = head
            .echo_chunk(&outcome.prompt_logprobs, &mut self.sent)
            .into_iter()
            .collect();
        if let Finish::Error(message) = &outcome.finish {
            events.push(ApiError::internal(message.clone()).body());
            self.result = Some(Err(message.clone()));
            return events;
        }
        // `echo` with `max_tokens: 0`: the one token drawn is not part of the reply.
        if head.prompt_only {
            outcome.receipt.completion_tokens = 0;
            outcome.tokens.clear();
            outcome.logprobs.clear();
            outcome.finish = Finish::Length;
        }
        let rest = outcome.logprobs.get(self.sent.tokens..).unwrap_or(&[]);
        if let (Some(b), false) = (&head.backend, rest.is_empty()) {
            // The last tokens' log-probabilities ride on an empty text chunk.
            let mut chunk = head.chunk("", None);
            let items = common::reply_items(b, rest);
            chunk["choices"][0]["logprobs"] =
                common::completion_logprobs(b, items, self.sent.offset).0;
            events.push(chunk);
        }
        events.extend(head.end(&outcome, self.include_usage));
        self.result = Some(Ok(head.completion(&self.text, &outcome)));
        events
    }

    fn body(&mut self) -> ApiResult<Value> {
        crate::reply::ended(self.result.take())
    }
}
