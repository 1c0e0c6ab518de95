//! Pieces every generation endpoint's reply carries: ids, timestamps, usage, the `tensorfold`
//! receipt object, log-probabilities (SSE framing is the reply driver's: `reply.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::generate::{Finish, Outcome};
use crate::state::Backend;
use tf_engine::TokenLogprob;

/// A log-probability as the APIs write it (an impossible token's -inf as -9999).
fn logprob_json(v: f32) -> Value {
    if v.is_finite() {
        json!(v)
    } else {
        json!(-9999.0)
    }
}

/// The text and the bytes of a token.
fn token_text(backend: &Backend, id: tf_core::TokenId) -> (String, &[u8]) {
    let b = backend.tokenizer.token_bytes(id);
    (String::from_utf8_lossy(b).into_owned(), b)
}

/// The reply tokens that carry log-probabilities: all but an end-of-generation token.
fn shown<'a>(
    backend: &'a Backend,
    lps: &'a [TokenLogprob],
) -> impl Iterator<Item = &'a TokenLogprob> {
    lps.iter().filter(|lp| !backend.tokenizer.is_eog(lp.token))
}

/// Chat's `logprobs.content` entries for `lps`.
pub fn chat_logprobs(backend: &Backend, lps: &[TokenLogprob]) -> Vec<Value> {
    let entry = |id, v: f32| {
        let (t, b) = token_text(backend, id);
        json!({"token": t, "logprob": logprob_json(v), "bytes": b})
    };
    shown(backend, lps)
        .map(|lp| {
            let mut e = entry(lp.token, lp.logprob);
            let top: Vec<Value> = lp.top.iter().map(|&(id, v)| entry(id, v)).collect();
            e["top_logprobs"] = Value::Array(top);
            e
        })
        .collect()
}

/// The reply tokens of `lps` for [`completion_logprobs`] (an end-of-generation token left out).
pub fn reply_items<'a>(
    backend: &'a Backend,
    lps: &'a [TokenLogprob],
) -> impl Iterator<Item = (tf_core::TokenId, Option<&'a TokenLogprob>)> {
    shown(backend, lps).map(|lp| (lp.token, Some(lp)))
}

/// The completions API's `logprobs` object for `items` (each token and, but for an echoed
/// prompt's first token, its log-probability), text offsets counted in characters from
/// `offset`; returns it and the offset after the last token.
pub fn completion_logprobs<'a>(
    backend: &Backend,
    items: impl Iterator<Item = (tf_core::TokenId, Option<&'a TokenLogprob>)>,
    offset: usize,
) -> (Value, usize) {
    let (mut tokens, mut values, mut tops, mut offsets) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut at = offset;
    for (id, lp) in items {
        let (t, _) = token_text(backend, id);
        offsets.push(at);
        at += t.chars().count();
        tokens.push(t);
        let Some(lp) = lp else {
            values.push(Value::Null);
            tops.push(Value::Null);
            continue;
        };
        values.push(logprob_json(lp.logprob));
        let mut top = Map::new();
        for &(id, v) in &lp.top {
            top.insert(token_text(backend, id).0, logprob_json(v));
        }
        tops.push(Value::Object(top));
    }
    let body = json!({
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": offsets,
    });
    (body, at)
}

pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A fresh id, `{prefix}{24 hex digits}`: unique within the process and unlikely to repeat
/// across restarts (the start time is mixed in).
pub fn new_id(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static EPOCH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // SplitMix64 of (epoch, n): well spread, never equal for different n.
    let mut z = epoch.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    format!("{prefix}{z:016x}{:08x}", n as u32)
}

pub const SYSTEM_FINGERPRINT: &str = concat!("tensorfold-", env!("CARGO_PKG_VERSION"));

/// The `tensorfold` object: the receipt that lets two runs of a request be compared.
pub fn receipt_json(outcome: &Outcome) -> Value {
    let r = &outcome.receipt;
    let tokens = outcome.tokens.len();
    let tps = if r.decode_secs > 0.0 && tokens > 1 {
        (tokens - 1) as f64 / r.decode_secs
    } else {
        0.0
    };
    let mut sources = Map::new();
    for s in &r.sources {
        sources.insert(
            s.name().to_string(),
            json!({"drafted": s.drafted, "accepted": s.accepted}),
        );
    }
    json!({
        "token_sha": outcome.token_sha,
        "min_rows": r.min_rows,
        "rounds": r.rounds,
        "drafted": r.drafted,
        "accepted": r.accepted,
        "sources": sources,
        "tokens_per_second": round3(tps),
        "time_to_first_token": round3(r.ttft_secs),
        "prefill_seconds": round3(r.prefill_secs),
        "decode_seconds": round3(r.decode_secs),
        "seed": r.seed,
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// OpenAI chat/completions usage.
pub fn usage_json(outcome: &Outcome, reasoning_tokens: usize) -> Value {
    let completion = outcome.tokens.len();
    json!({
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": outcome.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": outcome.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    })
}

/// OpenAI's `finish_reason` (`tool_calls` when the reply ended in tool calls).
pub fn finish_reason(finish: &Finish, tool_calls: bool) -> &'static str {
    match finish {
        Finish::Length => "length",
        _ if tool_calls => "tool_calls",
        _ => "stop",
    }
}
