//! Sampling and length fields shared by every generation endpoint, checked whether or not the
//! request samples (an out-of-range `top_p` is an error even at temperature 0).

use tf_engine::SamplingParams;

use crate::error::{ApiError, ApiResult};
use crate::fields::Fields;
use crate::state::SamplingDefaults;

/// The validated fields, before the prompt is known.
#[derive(Clone, Debug)]
pub struct GenFields {
    pub params: SamplingParams,
    /// An explicit length cap and the field it came from.
    pub max_tokens: Option<(usize, String)>,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    pub draft: bool,
    /// Log-probabilities of the reply's tokens with this many alternatives each (set by the
    /// APIs that have them: [`chat_logprobs`], [`completion_logprobs`]).
    pub logprobs: Option<usize>,
    /// The shape the reply must have (structured output), set by each API's parser.
    pub structure: Option<crate::structured::Structure>,
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
    params.temperature = f
        .f32_in("temperature", 0.0, 2.0)?
        .or(defaults.temperature)
        .unwrap_or(params.temperature);
    if let Some(p) = f.f32_in("top_p", 0.0, 1.0)? {
        if p <= 0.0 {
            return Err(ApiError::invalid(
                "top_p",
                "'top_p' must be greater than 0 and at most 1",
            ));
        }
        params.top_p = p;
    } else if let Some(p) = defaults.top_p {
        params.top_p = p;
    }
    params.top_k = f
        .uint("top_k", 0)?
        .map(|k| k.min(u32::MAX as u64) as usize)
        .or(defaults.top_k)
        .unwrap_or(0);
    params.min_p = f
        .f32_in("min_p", 0.0, 1.0)?
        .or(defaults.min_p)
        .unwrap_or(0.0);
    params.presence_penalty = f.f32_in("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0);
    params.frequency_penalty = f.f32_in("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0);
    if let Some(r) = f.f32_in("repetition_penalty", 0.0, 10.0)? {
        if r <= 0.0 {
            return Err(ApiError::invalid(
                "repetition_penalty",
                "'repetition_penalty' must be greater than 0",
            ));
        }
        params.repetition_penalty = r;
    }
    params.seed = seed(f)?;
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
    Ok(GenFields {
        params,
        max_tokens,
        stop,
        ignore_eos: f.bool("ignore_eos")?.unwrap_or(false),
        draft: f.bool("draft")?.unwrap_or(true),
        logprobs: None,
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
