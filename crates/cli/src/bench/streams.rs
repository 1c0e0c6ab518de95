//! `tensorfold bench --streams 1,4,16,64`: aggregate decode speed of many concurrent streams, in
//! the manner of llama.cpp's `llama-batched-bench` (`-npp P -ntg T -npl 1,4,16,64`).
//!
//! Per stream count N: N requests of `--stream-prompt` pseudo-random prompt ids and
//! `--stream-tokens` reply tokens (ignore_eos, greedy), all submitted before the engine's first
//! step, run to completion. Decode tok/s is the aggregate over the decode window: from the moment
//! the last stream received its first token (every prompt is in) to the last token, counting
//! the tokens that arrived inside it. Total tok/s is (prompt + reply tokens of all streams) over
//! the whole run, like batched-bench's `S`.
//!
//! Exactness: every concurrent reply is compared by `token_sha` with the same request run alone.
//! Stream i's prompt and seed are the same at every N, so the solo runs are made once, for the
//! largest N. The prompt cache is off (budget 0), so every run prefills its prompt fresh.

use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use tf_core::TokenId;
use tf_engine::{Engine, EngineConfig, Event, Receipt, Request};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use super::args::BenchArgs;
use crate::lanes;
use crate::GlobalArgs;
use tf_core::SplitMix64;

/// Seed of stream prompts (stream i draws from `STREAM_SEED + i`).
const STREAM_SEED: u64 = 0x5EED_0057;

/// One stream's reply: its receipt and when its tokens arrived.
struct Arrivals {
    receipt: Receipt,
    /// (arrival, tokens in that event).
    events: Vec<(Instant, usize)>,
}

/// Stream `i`'s request: `prompt` ids drawn from the vocabulary (avoiding id 0 and the top
/// ids, which may be special tokens), `tokens` reply tokens.
fn stream_request(i: usize, prompt: usize, tokens: usize, vocab: usize, draft: bool) -> Request {
    let mut rng = SplitMix64::new(STREAM_SEED + i as u64);
    let span = (vocab.saturating_sub(1024)).max(2) as u64;
    let ids: Vec<TokenId> = (0..prompt)
        .map(|_| (1 + rng.next_u64() % (span - 1)) as TokenId)
        .collect();
    let mut r = Request::new(ids, tokens);
    r.ignore_eos = true;
    r.draft = draft;
    r
}

/// Runs `reqs` together: all submitted, then the engine stepped until every one finished.
fn run_together(engine: &mut Engine, reqs: &[Request]) -> Result<Vec<Arrivals>> {
    let mut streams: Vec<UnboundedReceiver<Event>> = Vec::new();
    for r in reqs {
        let (tx, rx) = unbounded_channel();
        engine
            .submit(r.clone(), tx)
            .map_err(|e| anyhow!("submitting stream {}: {e}", streams.len()))?;
        streams.push(rx);
    }
    let mut events: Vec<Vec<(Instant, usize)>> = vec![Vec::new(); reqs.len()];
    let mut done: Vec<Option<Receipt>> = vec![None; reqs.len()];
    let mut left = reqs.len();
    while left > 0 {
        if !engine.step()? && engine.is_idle() {
            bail!("the engine went idle with {left} streams unfinished");
        }
        let now = Instant::now();
        for (i, rx) in streams.iter_mut().enumerate() {
            while let Ok(ev) = rx.try_recv() {
                match ev {
                    Event::Tokens(t) if !t.is_empty() => events[i].push((now, t.len())),
                    Event::Tokens(_) | Event::Logprobs(_) | Event::PromptLogprobs(_) => {}
                    Event::Error(e) => bail!("stream {i}: engine error: {e}"),
                    Event::Done(r) => {
                        done[i] = Some(r);
                        left -= 1;
                    }
                }
            }
        }
    }
    Ok(done
        .into_iter()
        .zip(events)
        .map(|(r, events)| Arrivals {
            receipt: r.expect("every stream finished"),
            events,
        })
        .collect())
}

/// (aggregate decode tok/s, tokens in the decode window, window seconds).
fn decode_rate(runs: &[Arrivals]) -> (f64, usize, f64) {
    let Some(from) = runs
        .iter()
        .filter_map(|a| a.events.first())
        .map(|e| e.0)
        .max()
    else {
        return (0.0, 0, 0.0);
    };
    let to = runs
        .iter()
        .filter_map(|a| a.events.last())
        .map(|e| e.0)
        .max()
        .unwrap_or(from);
    let tokens: usize = runs
        .iter()
        .flat_map(|a| &a.events)
        .filter(|e| e.0 > from)
        .map(|e| e.1)
        .sum();
    let secs = (to - from).as_secs_f64();
    (tokens as f64 / secs.max(1e-9), tokens, secs)
}

fn parse_counts(args: &BenchArgs) -> Result<Vec<usize>> {
    let mut counts = args.streams.clone();
    if counts.contains(&0) {
        bail!("--streams: every count must be at least 1");
    }
    counts.sort_unstable();
    counts.dedup();
    Ok(counts)
}

pub fn run(args: &BenchArgs, global: &GlobalArgs) -> Result<()> {
    let counts = parse_counts(args)?;
    let max_n = *counts.last().ok_or_else(|| anyhow!("--streams is empty"))?;
    let (prompt, tokens) = (args.stream_prompt, args.stream_tokens);
    if prompt == 0 || tokens == 0 {
        bail!("--stream-prompt and --stream-tokens must be at least 1");
    }
    let spec = crate::load::spec_or_default(args.model.as_deref());
    let config = EngineConfig {
        drafts: !args.no_drafts,
        max_running: max_n.max(EngineConfig::default().max_running),
        ..EngineConfig::default()
    };
    // Room for every stream's prompt, reply and a verify window, with a block of slack each.
    let per_stream = prompt + tokens + 64 + tf_kernels::kv::BLOCK_SIZE;
    let lanes = lanes::build(
        spec,
        args.draft.as_deref(),
        |_, _| {
            Ok(lanes::KvPlan {
                kv_positions: max_n * per_stream,
                context: per_stream,
                max_running: None,
            })
        },
        config,
        global,
    )?;
    let mut engine = lanes.engine;
    engine.set_cache_budget(0);
    let vocab = engine.vocab();
    let draft = !args.no_drafts;
    let reqs: Vec<Request> = (0..max_n)
        .map(|i| stream_request(i, prompt, tokens, vocab, draft))
        .collect();
    eprintln!(
        "bench: {spec}, {} streams of {prompt} prompt + {tokens} reply tokens, {}",
        counts
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join("/"),
        if draft {
            "drafted"
        } else {
            "serial (draft: false)"
        }
    );
    // Warm-up: one small concurrent run (first-use costs: kernels, page faults, buffers).
    run_together(&mut engine, &reqs[..max_n.min(4)])?;

    let mut solo = Vec::new();
    for r in &reqs {
        solo.push(run_together(&mut engine, std::slice::from_ref(r))?.remove(0));
    }
    let mut differ = 0;
    println!(
        "| streams | decode tok/s (aggregate) | per stream | total tok/s | decode window | exact |"
    );
    println!("|---|---|---|---|---|---|");
    for &n in &counts {
        let start = Instant::now();
        let runs = run_together(&mut engine, &reqs[..n])?;
        let total_secs = start.elapsed().as_secs_f64();
        let (rate, win_tokens, win_secs) = decode_rate(&runs);
        let exact = runs
            .iter()
            .zip(&solo)
            .filter(|(a, s)| a.receipt.token_sha == s.receipt.token_sha)
            .count();
        let all_tokens: usize = runs.iter().map(|a| a.receipt.completion_tokens).sum();
        println!(
            "| {n} | {rate:.1} | {:.1} | {:.1} | {win_tokens} tokens in {:.3} s | {exact} of {n} |",
            rate / n as f64,
            (n * prompt + all_tokens) as f64 / total_secs,
            win_secs,
        );
        for (i, (a, s)) in runs.iter().zip(&solo).enumerate() {
            if a.receipt.token_sha != s.receipt.token_sha {
                differ += 1;
                eprintln!(
                    "  stream {i} of {n}: concurrent {} != solo {}",
                    a.receipt.token_sha, s.receipt.token_sha
                );
            }
        }
    }
    if differ > 0 {
        bail!("{differ} concurrent replies differ from their solo runs");
    }
    Ok(())
}
