//! Sampling and length fields shared by every generation endpoint, checked whether or not the
//! request samples (an out-of-range `top_p` is an error even at temperature 0).

use tf_engine::{Request, SamplerError, SamplingParams};

use crate::error::{ApiError, ApiResult};
use crate::fields::Fields;
use crate::state::SamplingDefaults;

/// The validated fields, before the prompt is known: the engine's [`Request`] but for what the
/// prompt decides ([`GenFields::request`] completes it), and what the server itself applies.
#[derive(Clone, Debug)]
pub struct GenFields {
    /// Sampling parameters (ranges checked by [`SamplingParams::validate`], the engine's own
    /// definition), `ignore_eos`, `draft`, and `logprobs` where the API has them
    /// ([`chat_logprobs`], [`completion_logprobs`]). Its prompt is empty.
    pub request: Request,
    /// An explicit length cap and the field it came from.
    pub max_tokens: Option<(usize, String)>,
    /// Stop strings (cut by the server: `output/stop.rs`).
    pub stop: Vec<String>,
    /// The shape the reply must have (structured output), set by each API's parser.
    pub structure: Option<crate::structured::Structure>,
}

impl GenFields {
    /// The engine request for `prompt`: its reply length and grammar decided.
    pub fn request(
        &self,
        prompt: Vec<tf_core::TokenId>,
        max_tokens: usize,
        grammar: Option<tf_engine::Grammar>,
    ) -> Request {
        Request {
            prompt,
            max_tokens,
            grammar,
            ..self.request.clone()
        }
    }
}

/// Chat's `logprobs` (bool) and `top_logprobs` (0..=20, only with `logprobs`).
pub fn chat_logprobs(f: &Fields) -> ApiResult<Option<usize>> {
    let on = f.bool("logprobs")?.unwrap_or(false);
    let top = top_count(f, "top_logprobs")?;
    match (on, top) {
        (false, Some(_)) => Err(ApiError::invalid(
            "top_logprobs",
            "'top_logprobs' needs 'logprobs': true",
        )),
        (on, top) => Ok(on.then(|| top.unwrap_or(0))),
    }
}

/// Completions' `logprobs`: the number of alternatives (0..=20), `null` or absent for none.
pub fn completion_logprobs(f: &Fields) -> ApiResult<Option<usize>> {
    top_count(f, "logprobs")
}

fn top_count(f: &Fields, key: &str) -> ApiResult<Option<usize>> {
    let max = tf_engine::MAX_TOP_LOGPROBS;
    match f.uint(key, 0)? {
        Some(n) if n as usize > max => Err(ApiError::invalid(
            key,
            format!("'{key}' must be at most {max}"),
        )),
        n => Ok(n.map(|n| n as usize)),
    }
}

/// Reads the fields; `max_keys` are the names the length cap may go by, in order of preference.
pub fn read(
    f: &Fields,
    defaults: &SamplingDefaults,
    max_keys: &[&str],
    stop_key: &str,
) -> ApiResult<GenFields> {
    // A bias would change the logits every draw reads; until it is part of them (the same in
    // drafted and serial rows), a request that sets one is refused rather than served without.
    if let Some(bias) = f.object("logit_bias")? {
        if !bias.raw().is_empty() {
            return Err(ApiError::invalid(
                "logit_bias",
                "'logit_bias' is not supported by this server",
            ));
        }
    }
    let mut params = SamplingParams::default();
    let number = |key: &str| f.f32_in(key, f64::MIN, f64::MAX);
    params.temperature = number("temperature")?
        .or(defaults.temperature)
        .unwrap_or(params.temperature);
    params.top_p = number("top_p")?.or(defaults.top_p).unwrap_or(params.top_p);
    params.top_k = f
        .uint("top_k", 0)?
        .map(|k| k.min(u32::MAX as u64) as usize)
        .or(defaults.top_k)
        .unwrap_or(0);
    params.min_p = number("min_p")?.or(defaults.min_p).unwrap_or(0.0);
    params.presence_penalty = number("presence_penalty")?.unwrap_or(0.0);
    params.frequency_penalty = number("frequency_penalty")?.unwrap_or(0.0);
    params.repetition_penalty = number("repetition_penalty")?.unwrap_or(1.0);
    params.seed = seed(f)?;
    // The ranges are the engine's (one definition, `SamplingParams::validate`).
    params.validate().map_err(|e| {
        let SamplerError::OutOfRange {
            name,
            expected,
            value,
        } = e;
        ApiError::invalid(
            &f.name(name),
            format!("'{}' must be {expected}, got {value}", f.name(name)),
        )
    })?;
    if let Some(n) = f.uint("n", 1)? {
        if n != 1 {
            return Err(ApiError::invalid(
                "n",
                format!("'n' must be 1 (this server returns one choice per request), got {n}"),
            ));
        }
    }
    let mut max_tokens = None;
    for key in max_keys {
        if let Some(m) = f.uint(key, 1)? {
            max_tokens = Some((m.min(usize::MAX as u64) as usize, f.name(key)));
            break;
        }
    }
    let stop = f.strings(stop_key)?;
    if stop.len() > 16 {
        return Err(ApiError::invalid(
            stop_key,
            format!("'{stop_key}' takes at most 16 strings"),
        ));
    }
    let mut request = Request::new(Vec::new(), 0);
    request.params = params;
    request.ignore_eos = f.bool("ignore_eos")?.unwrap_or(false);
    request.draft = f.bool("draft")?.unwrap_or(true);
    Ok(GenFields {
        request,
        max_tokens,
        stop,
        structure: None,
    })
}

/// `seed`: any integer (negative ones are taken as their two's-complement bits).
fn seed(f: &Fields) -> ApiResult<Option<u64>> {
    match f.get("seed") {
        None => Ok(None),
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|i| i as u64))
            .map(Some)
            .ok_or_else(|| {
                ApiError::invalid("seed", format!("'seed' must be an integer, got {n}"))
            }),
        Some(_) => Err(ApiError::invalid("seed", "'seed' must be an integer")),
    }
}

/// The reply length: an explicit cap must fit beside the prompt; an omitted one is the room
/// left (and at most the server's `--max-tokens`).
pub fn reply_length(
    prompt_param: &str,
    prompt_tokens: usize,
    explicit: Option<&(usize, String)>,
    context: usize,
    server_cap: Option<usize>,
    wording: Wording,
) -> ApiResult<usize> {
    let anthropic = wording == Wording::Anthropic;
    if prompt_tokens >= context {
        // Each API's own words: clients match on them to recover (Claude Code compacts on
        // Anthropic's).
        let message = if anthropic {
            format!("prompt is too long: {prompt_tokens} tokens > {context} maximum")
        } else {
            format!(
                "This model's maximum context length is {context} tokens, and the prompt has \
                 {prompt_tokens} tokens, which leaves no room for a reply."
            )
        };
        return Err(ApiError::context_exceeded(message, prompt_param));
    }
    let room = context - prompt_tokens;
    match explicit {
        Some((n, key)) if *n > room => Err(ApiError::context_exceeded(
            if anthropic {
                format!(
                    "input length and `{key}` exceed context limit: {prompt_tokens} + {n} > \
                     {context}, decrease input length or `{key}` and try again"
                )
            } else {
                format!(
                    "This model's maximum context length is {context} tokens. However, you \
                     requested {} tokens ({prompt_tokens} in the prompt, {n} for the reply). \
                     Please reduce the prompt or '{key}' (at most {room}).",
                    prompt_tokens + n
                )
            },
            key,
        )),
        Some((n, _)) => Ok(*n),
        None => Ok(server_cap.map_or(room, |cap| cap.min(room))),
    }
}

/// Whose error wording a refusal uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wording {
    OpenAi,
    Anthropic,
}
