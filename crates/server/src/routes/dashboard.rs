//! `/stats` (the server's live state as JSON) and `/dashboard` (one self-contained page that
//! polls it): decode and prefill tok/s over the last minutes, requests running and queued, KV and
//! prompt-cache use, drafted and accepted guesses per source, the last requests' receipts.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::SharedState;

/// Samples kept: ten minutes at one a second.
const SAMPLES: usize = 600;
/// Rates in `/stats`'s `now` are taken over this many seconds.
const RATE_WINDOW: usize = 5;

/// One second's snapshot of the engine's counters.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// Seconds since the server started.
    t: f64,
    prefilled: u64,
    generated: u64,
    running: usize,
    waiting: usize,
}

/// The last [`SAMPLES`] snapshots, oldest first.
pub struct Series {
    started: Instant,
    samples: Mutex<VecDeque<Sample>>,
}

impl Default for Series {
    fn default() -> Self {
        Series {
            started: Instant::now(),
            samples: Mutex::new(VecDeque::with_capacity(SAMPLES)),
        }
    }
}

impl Series {
    /// Tokens per second between samples `a` and `b`: (decode, prefill).
    fn rates(a: &Sample, b: &Sample) -> (f64, f64) {
        let dt = (b.t - a.t).max(1e-9);
        (
            b.generated.saturating_sub(a.generated) as f64 / dt,
            b.prefilled.saturating_sub(a.prefilled) as f64 / dt,
        )
    }
}

/// Takes a sample of the engine every second, for as long as the server runs.
pub async fn sample(state: SharedState) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let Ok(backend) = state.backend() else {
            continue;
        };
        let Some(stats) = backend.engine.stats_async().await else {
            continue;
        };
        let s = Sample {
            t: state.series.started.elapsed().as_secs_f64(),
            prefilled: stats.prefilled_tokens,
            generated: stats.generated_tokens,
            running: stats.running,
            waiting: stats.waiting,
        };
        let mut samples = state.series.samples.lock().unwrap();
        if samples.len() == SAMPLES {
            samples.pop_front();
        }
        samples.push_back(s);
    }
}

/// Whether a live status line is on the terminal (`serve` without `--no-live`): lines logged to
/// stderr clear it first ([`clear_prefix`]).
pub static LIVE_LINE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// What a line logged to stderr starts with: a carriage return and an erase of the live status
/// line, when there is one.
pub fn clear_prefix() -> &'static str {
    match LIVE_LINE.load(std::sync::atomic::Ordering::Relaxed) {
        true => "\r\x1b[2K",
        false => "",
    }
}

/// The live status line: requests, the last seconds' tok/s, KV use.
pub async fn status_line(state: &SharedState) -> Option<String> {
    let backend = state.backend().ok()?;
    let engine = backend.engine.stats_async().await?;
    let (decode, prefill) = {
        let samples = state.series.samples.lock().unwrap();
        match samples.len() {
            0 | 1 => (0.0, 0.0),
            n => Series::rates(&samples[n.saturating_sub(RATE_WINDOW + 1)], &samples[n - 1]),
        }
    };
    let total = backend.total_blocks.max(1);
    let used = total.saturating_sub(engine.free_blocks);
    Some(format!(
        "running {} · queued {} · decode {decode:.1} tok/s · prefill {prefill:.1} tok/s · KV {:.0}% · \
         cache hits {} · served {}",
        engine.running,
        engine.waiting,
        100.0 * used as f64 / total as f64,
        engine.cache.hits,
        state.metrics.totals()[5],
    ))
}

/// `GET /stats`.
pub async fn stats(State(state): State<SharedState>) -> Response {
    let backend = match state.backend() {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let Some(engine) = backend.engine.stats_async().await else {
        return ApiError::unavailable("the engine has stopped").into_response();
    };
    let samples: Vec<Sample> = state
        .series
        .samples
        .lock()
        .unwrap()
        .iter()
        .copied()
        .collect();
    let series: Vec<Value> = samples
        .windows(2)
        .map(|w| {
            let (decode, prefill) = Series::rates(&w[0], &w[1]);
            json!({"t": w[1].t, "decode_tps": decode, "prefill_tps": prefill,
                   "running": w[1].running, "waiting": w[1].waiting})
        })
        .collect();
    let now = match samples.len() {
        0 | 1 => (0.0, 0.0),
        n => Series::rates(&samples[n.saturating_sub(RATE_WINDOW + 1)], &samples[n - 1]),
    };
    let m = &state.metrics;
    let [prompt, cached, generated, drafted, accepted, ok, failed] = m.totals();
    let sources: Vec<Value> = (m.sources().into_iter())
        .map(|(name, d, a)| json!({"name": name, "drafted": d, "accepted": a}))
        .collect();
    let recent: Vec<Value> = (m.recent().into_iter().rev())
        .map(|r| {
            let rc = &r.receipt;
            let tps = match r.completion_tokens > 1 && rc.decode_secs > 0.0 {
                true => (r.completion_tokens - 1) as f64 / rc.decode_secs,
                false => 0.0,
            };
            json!({
                "ended": r.ended,
                "token_sha": rc.token_sha,
                "finish": rc.finish.as_str(),
                "prompt_tokens": rc.prompt_tokens,
                "cached_tokens": rc.cached_tokens,
                "completion_tokens": r.completion_tokens,
                "min_rows": rc.min_rows,
                "drafted": rc.drafted,
                "accepted": rc.accepted,
                "ttft_secs": rc.ttft_secs,
                "decode_tps": tps,
            })
        })
        .collect();
    let total = backend.total_blocks;
    Json(json!({
        "model": state.config.model_id,
        "uptime_secs": state.series.started.elapsed().as_secs_f64(),
        "now": {"decode_tps": now.0, "prefill_tps": now.1,
                "running": engine.running, "waiting": engine.waiting},
        "kv": {
            "total_blocks": total,
            "used_blocks": total.saturating_sub(engine.free_blocks),
            "cached_blocks": engine.cached_blocks,
        },
        "prompt_cache": {"hits": engine.cache.hits, "hit_tokens": engine.cache.hit_tokens,
                         "evictions": engine.cache.evictions},
        "totals": {
            "requests_ok": ok,
            "requests_failed": failed,
            "prompt_tokens": prompt,
            "cached_prompt_tokens": cached,
            "generation_tokens": generated,
            "drafted": drafted,
            "accepted": accepted,
            "engine_prefilled_tokens": engine.prefilled_tokens,
            "engine_generated_tokens": engine.generated_tokens,
        },
        "sources": sources,
        "recent": recent,
        "series": series,
    }))
    .into_response()
}

/// `GET /dashboard`: the page (no build step, no external assets).
pub async fn page(State(state): State<SharedState>) -> Response {
    if !state.config.dashboard {
        return ApiError::not_found("the dashboard is off (serve without --no-dashboard)")
            .with_code("unknown_url")
            .into_response();
    }
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        include_str!("dashboard.html"),
    )
        .into_response()
}
