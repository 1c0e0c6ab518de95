//! `tensorfold bench`: prefill and decode speed in the manner of llama-bench.
//!
//! Prefill (`ppN`): N deterministic pseudo-random token ids through the model in chunks of
//! [`PP_CHUNK_ROWS`] rows, logits of the last row only. Decode (`tgN`): after a short prompt, N
//! tokens one row per forward, each the greedy token of the previous row (taken where the logits
//! are, as for a greedy request). Every test runs once to warm up (page faults of the mmapped
//! weights, worker wake-up), then `--reps` times; the table shows the median.
//!
//! The default mode measures the engine cells in-process (`cells.rs`); `--url` measures the same
//! cells on an OpenAI-compatible server over HTTP (`bench/url.rs`).

pub mod args;
mod sse;
mod streams;
mod url;

use args::fmt_runs;
pub use args::BenchArgs;

use std::time::Instant;

use anyhow::{bail, Result};
use tf_core::{BlockId, TokenId};
use tf_engine::{greedy_token, NoiseKey, Pick, Runner, Sampler, SamplingParams};
use tf_kernels::kv::BLOCK_SIZE;
use tf_models::Row;

use crate::load::{self, gib};
use crate::GlobalArgs;
use tf_core::SplitMix64;

/// Rows per prefill forward in the benchmark.
pub const PP_CHUNK_ROWS: usize = 512;
/// Prompt length before the decode test.
const TG_PROMPT_TOKENS: usize = 8;
/// Seed of the benchmark's token ids (any fixed value: the ids only need to be reproducible).
const BENCH_SEED: u64 = 0x7E45_0F01D;

/// One benchmark's measurements, in tokens per second.
struct Measured {
    test: String,
    runs: Vec<f64>,
}

impl Measured {
    fn median(&self) -> f64 {
        crate::cells::median(&mut self.runs.clone())
    }
}

struct Bench {
    runner: Box<dyn Runner>,
    table: Vec<BlockId>,
    ids: Vec<TokenId>,
    /// Decode draws plain samples at this temperature with this sampler (else greedy tokens).
    temperature: Option<f32>,
    sampler: Sampler,
    /// A recurrent model's next forward after a one-row round (no guesses to replay).
    replay_base: f64,
}

impl Bench {
    /// Prefill of all ids from position 0; returns tokens per second.
    fn prefill(&mut self, n: usize) -> Result<f64> {
        let start = Instant::now();
        self.forward_range(0, n)?;
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }

    /// Positions `from..to` of `ids` in chunks; returns the last row's logits.
    fn forward_range(&mut self, from: usize, to: usize) -> Result<Vec<f32>> {
        let mut logits = Vec::new();
        let mut pos = from;
        while pos < to {
            let end = (pos + PP_CHUNK_ROWS).min(to);
            let rows: Vec<Row> = (pos..end)
                .map(|p| Row {
                    token: self.ids[p],
                    pos: p,
                    seq: 0,
                    keep: true,
                    table: &self.table,
                    logits: p + 1 == to,
                    tree: None,
                })
                .collect();
            logits = self.runner.forward(&rows)?;
            pos = end;
        }
        Ok(logits)
    }

    /// `tg` greedy decode steps after a short prompt, each taking the greedy token as a greedy
    /// request in the engine does (`Runner::forward_greedy`: on a GPU only the id comes back);
    /// returns tokens per second.
    fn decode(&mut self, tg: usize) -> Result<f64> {
        let mut logits = self.forward_range(0, TG_PROMPT_TOKENS)?;
        let mut ids = vec![greedy_token(&logits)];
        let mut picks = Vec::new();
        let start = Instant::now();
        for i in 0..tg {
            let pos = TG_PROMPT_TOKENS + i;
            let row = Row {
                token: ids[0],
                pos,
                seq: 0,
                keep: true,
                table: &self.table,
                logits: true,
                tree: None,
            };
            let rows = std::slice::from_ref(&row);
            let Some(temperature) = self.temperature else {
                self.runner.forward_greedy(rows, &mut logits, &mut ids)?;
                continue;
            };
            // A plain draw as the engine takes it: picks where the runner has them.
            let key = NoiseKey {
                seed: BENCH_SEED,
                position: pos as u64 + 1,
                temperature,
            };
            let params = SamplingParams {
                temperature,
                ..SamplingParams::default()
            };
            let draw = |sampler: &mut Sampler, l: &[f32]| {
                sampler.sample(l, &params, key.seed, key.position, &[])
            };
            ids[0] = if self.runner.forward_picks(rows, &[key], &mut picks)? {
                match &picks[0] {
                    Pick::Token(_, t) => *t,
                    Pick::Logits(l) => draw(&mut self.sampler, l),
                }
            } else {
                let l = self.runner.forward_logits(rows, &mut logits)?;
                draw(&mut self.sampler, l)
            };
        }
        Ok(tg as f64 / start.elapsed().as_secs_f64())
    }

    /// Seconds of one forward of `k` rows, all with logits, at positions `ctx..ctx + k`, taken
    /// as `take` says, the best of `reps` (the context is prefilled once by the caller); `None`
    /// if the runner has no picks path.
    ///
    /// A recurrent model's round is its committed row and k - 1 guesses, run by a sequence that
    /// resumes at `ctx` from the context's state snapshot; the time also counts what accepting
    /// every guess costs the next round: its first forward replays them (timed, less the same
    /// forward after a one-row round, `replay_base`).
    fn verify(&mut self, ctx: usize, k: usize, reps: u32, take: Take) -> Result<Option<f64>> {
        let recurrent = self.runner.recurrent();
        let rows: Vec<Row> = (ctx..ctx + k)
            .map(|p| Row {
                token: self.ids[p % self.ids.len()],
                pos: p,
                seq: 0,
                // Guesses after the committed context, repeatable (a recurrent model runs them
                // from a copy of its state); a recurrent round's first row is committed.
                keep: recurrent && p == ctx,
                table: &self.table,
                logits: true,
                tree: None,
            })
            .collect();
        let keys: Vec<NoiseKey> = rows
            .iter()
            .map(|r| NoiseKey {
                seed: BENCH_SEED,
                position: r.pos as u64 + 1,
                temperature: 1.0,
            })
            .collect();
        let mut best = f64::MAX;
        let (mut logits, mut ids, mut picks) = (Vec::new(), Vec::new(), Vec::new());
        let mut rows = rows;
        let mut next_best = f64::MAX;
        for rep in 0..=reps {
            // A fresh sequence each time (recurrent: resumed from the context's snapshot).
            let seq = 1 + rep as u64;
            rows.iter_mut().for_each(|r| r.seq = seq);
            let start = Instant::now();
            match take {
                Take::Ids => self.runner.forward_greedy(&rows, &mut logits, &mut ids)?,
                // Where the engine's sampled rounds read them (on a GPU, the download buffer).
                Take::Logits => {
                    self.runner.forward_logits(&rows, &mut logits)?;
                }
                Take::Picks => {
                    if !self.runner.forward_picks(&rows, &keys, &mut picks)? {
                        return Ok(None);
                    }
                }
            }
            let secs = start.elapsed().as_secs_f64();
            if recurrent {
                let next = Row {
                    token: self.ids[(ctx + k) % self.ids.len()],
                    pos: ctx + k,
                    keep: true,
                    ..rows[0]
                };
                let start = Instant::now();
                self.runner.forward_logits(&[next], &mut logits)?;
                let replay = start.elapsed().as_secs_f64();
                next_best = next_best.min(replay);
                let base = if k == 1 { replay } else { self.replay_base };
                best = best.min(secs + (replay - base).max(0.0));
                self.runner.release(seq);
            } else {
                best = best.min(secs);
            }
        }
        if recurrent && k == 1 {
            self.replay_base = next_best;
        }
        Ok(Some(best))
    }
}

/// How a verify round's rows come back: every row's logits (sampled requests), each row's
/// greedy id (greedy requests), or each row's plain temperature draw decided from a device
/// shortlist (requests with only a temperature; GPU runners).
#[derive(Clone, Copy)]
enum Take {
    Logits,
    Ids,
    Picks,
}

fn measure(reps: u32, mut f: impl FnMut() -> Result<f64>) -> Result<Vec<f64>> {
    f()?; // warm-up
    (0..reps).map(|_| f()).collect()
}

pub fn run(args: &BenchArgs, global: &GlobalArgs) -> Result<()> {
    if let Some(url) = &args.url {
        return url::run(args, url);
    }
    if !args.streams.is_empty() {
        return streams::run(args, global);
    }
    if !args.raw {
        return crate::cells::run(args, global);
    }
    raw(args, global)
}

/// `bench --raw`: llama-bench's prefill and decode tests, and verify rounds of k rows.
fn raw(args: &BenchArgs, global: &GlobalArgs) -> Result<()> {
    if args.pp == 0 && args.tg == 0 && args.verify.is_empty() {
        bail!("nothing to measure: --pp and --tg are both 0 and no --verify");
    }
    let spec = load::spec_or_default(args.model.as_deref());
    let path = load::resolve(spec, global)?;
    let loaded = load::load(&path)?;
    let backend = crate::device::Backend::open(global)?;
    let mut model = loaded.model;
    if args.as_draft {
        model = backend.draft_weights(model, global)?;
    }
    let cfg = &model.config;
    let pool = std::sync::Arc::new(load::thread_pool(global));

    let max_verify = args.verify.iter().copied().max().unwrap_or(0);
    let positions = args
        .pp
        .max(TG_PROMPT_TOKENS + args.tg)
        .max(args.verify_context + max_verify);
    let blocks = positions.div_ceil(BLOCK_SIZE);
    let mut rng = SplitMix64::new(BENCH_SEED);
    let ids = (0..positions.max(TG_PROMPT_TOKENS))
        .map(|_| (rng.next_u64() % cfg.vocab as u64) as TokenId)
        .collect();
    let sizes = (blocks * BLOCK_SIZE, positions, PP_CHUNK_ROWS);
    let keep = global.draft_keep();
    let (runner, bytes_per_token) = if args.as_draft {
        // A GPU reads the whole head anyway (`Backend::draft_runner`).
        let head = model.pruned_head(if backend.is_gpu() { usize::MAX } else { keep });
        let bytes = model.bytes_per_token_with_head(&head);
        (backend.draft_runner(&model, &pool, sizes, keep)?, bytes)
    } else {
        let (kv, ctx, rows) = sizes;
        (
            backend.runner(&model, &pool, kv, ctx, rows)?,
            model.bytes_per_token(),
        )
    };
    if let Some(t) = args.temperature {
        if !(t > 0.0 && t <= 2.0) {
            bail!("--temperature must be in (0, 2], got {t}");
        }
    }
    let mut bench = Bench {
        runner,
        table: (0..blocks as BlockId).collect(),
        ids,
        temperature: args.temperature,
        sampler: Sampler::with_pool(pool.clone()),
        replay_base: 0.0,
    };
    let threads = if backend.is_gpu() {
        backend.name()
    } else {
        pool.threads().to_string()
    };

    eprintln!(
        "bench: {} ({}, {} layers), {}, {}, KV {}; {} warm-up + {} measured runs per test",
        path.display(),
        cfg.family.name,
        cfg.n_layers,
        if backend.is_gpu() {
            backend.name()
        } else {
            format!("{} threads", pool.threads())
        },
        model.level.name(),
        backend.kv_format().name(),
        1,
        args.reps
    );
    if args.as_draft {
        eprintln!(
            "bench: as a draft model: {}, {:.3} GB read per token",
            model
                .tensor_types()
                .iter()
                .map(|(d, n)| format!("{n} {d:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            bytes_per_token as f64 / 1e9
        );
    }
    let mut results = Vec::new();
    if args.pp > 0 {
        let runs = measure(args.reps, || bench.prefill(args.pp))?;
        eprintln!("pp{}: {}", args.pp, fmt_runs(&runs));
        results.push(Measured {
            test: format!("pp{}", args.pp),
            runs,
        });
    }
    let bytes_per_token = bytes_per_token as f64;
    if args.tg > 0 {
        let runs = measure(args.reps, || bench.decode(args.tg))?;
        eprintln!("tg{}: {}", args.tg, fmt_runs(&runs));
        results.push(Measured {
            test: match args.temperature {
                Some(t) => format!("tg{} T={t}", args.tg),
                None => format!("tg{}", args.tg),
            },
            runs,
        });
    }

    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let weights = format!("{:.2} GiB", gib(model.weight_bytes() as u64));
    let header = [
        "model", "weights", "threads", "test", "tok/s", "runs", "GB/token", "GB/s",
    ];
    let mut rows = Vec::new();
    for m in &results {
        let median = m.median();
        let is_decode = m.test.starts_with("tg");
        rows.push([
            name.clone(),
            weights.clone(),
            threads.clone(),
            m.test.clone(),
            format!("{median:.2}"),
            fmt_runs(&m.runs),
            if is_decode {
                format!("{:.3}", bytes_per_token / 1e9)
            } else {
                "-".into()
            },
            if is_decode {
                format!("{:.2}", bytes_per_token * median / 1e9)
            } else {
                "-".into()
            },
        ]);
    }
    print_table(&header, &rows);
    if !args.verify.is_empty() {
        let rounds = print_verify(&mut bench, args)?;
        if model.weights().mtp.is_some() && !backend.is_gpu() {
            let head = model.pruned_head(global.draft_keep());
            print_mtp(&model, &pool, args.reps, &rounds, &head)?;
        }
    }
    Ok(())
}

/// The cost of a forward of k rows against one row, after a context of `--verify-context`.
/// Returns each row count's time with every row's logits.
fn print_verify(bench: &mut Bench, args: &BenchArgs) -> Result<Vec<(usize, f64)>> {
    let ctx = args.verify_context;
    let start = Instant::now();
    bench.forward_range(0, ctx)?;
    if ctx > 0 {
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "context: {ctx} tokens prefilled in {secs:.2} s ({:.2} tok/s, one run, no warm-up)",
            ctx as f64 / secs
        );
    }
    let takes = [Take::Logits, Take::Ids, Take::Picks];
    let mut one = [None; 3];
    for (o, take) in one.iter_mut().zip(takes) {
        *o = bench.verify(ctx, 1, args.reps, take)?;
    }
    println!();
    let mut rows = Vec::new();
    let mut rounds = Vec::new();
    for &k in &args.verify {
        let mut cells = vec![k.to_string()];
        for (i, take) in takes.into_iter().enumerate() {
            let t = if k == 1 {
                one[i]
            } else {
                bench.verify(ctx, k, args.reps, take)?
            };
            match (t, one[i]) {
                (Some(t), Some(o)) => {
                    cells.push(format!("{:.3}", t * 1e3));
                    cells.push(format!("{:.2}", t / o));
                    if i == 0 {
                        cells.push(format!("{:.1}", k as f64 / t));
                        rounds.push((k, t));
                    }
                }
                _ => cells.extend(vec!["-".to_string(); if i == 0 { 3 } else { 2 }]),
            }
        }
        rows.push(<[String; 8]>::try_from(cells).expect("eight cells a row"));
    }
    // Logits: every row's vocabulary of floats comes back (sampled requests); greedy ids: only
    // each row's greedy token (greedy requests, `Runner::forward_greedy`); picks: each row's
    // temperature-1 draw, decided on the host from a shortlist found where the logits are
    // (`Runner::forward_picks`; "-" where the runner has none).
    print_table(
        &[
            "rows",
            "ms/forward",
            "x 1 row",
            "rows/s",
            "ms, greedy ids",
            "x 1 row, ids",
            "ms, picks",
            "x 1 row, picks",
        ],
        &rows,
    );
    Ok(rounds)
}

/// A Markdown table, columns padded to their widest cell.
fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    line(header.to_vec());
    println!(
        "|{}|",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// The model's multi-token-prediction head as a drafter, by parts: one chained guess (a row of
/// the head), and what a round of k rows (the committed token and k - 1 guesses) yields when
/// the head is always right (k tokens) or always wrong (one), against serial decoding (one
/// token a one-row forward). Random weights make its real acceptance unmeasurable; these bound
/// it.
fn print_mtp(
    model: &tf_models::Model,
    pool: &tf_kernels::ThreadPool,
    reps: u32,
    rounds: &[(usize, f64)],
    head: &[std::ops::Range<usize>],
) -> Result<()> {
    let c = &model.config;
    let mut kv = tf_kernels::kv::KvCache::new(1, c.n_kv_heads, c.head_dim, 1, Default::default());
    let table = [0 as BlockId];
    let hidden = vec![0.5f32; c.d_model];
    let row = Row {
        token: 1,
        pos: 3,
        seq: 0,
        keep: false,
        table: &table,
        logits: true,
        tree: None,
    };
    let mut best = f64::MAX;
    for _ in 0..=reps {
        let start = Instant::now();
        model.forward_mtp(pool, &[row], &hidden, &mut kv, Some(head))?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    let kept: usize = head.iter().map(|r| r.len()).sum();
    let Some(&(_, one)) = rounds.iter().find(|r| r.0 == 1) else {
        bail!("--verify must include 1 to compare the MTP head with one row");
    };
    println!(
        "\nMTP head: one guess {:.3} ms ({:.2} x a one-row forward), drawn from {kept} of {} \
         head columns (--draft-vocab)",
        best * 1e3,
        best / one,
        c.vocab
    );
    let serial = 1.0 / one;
    let table: Vec<[String; 6]> = (rounds.iter())
        .filter(|r| r.0 > 1)
        .map(|&(k, verify)| {
            let round = (k - 1) as f64 * best + verify;
            [
                k.to_string(),
                format!("{:.3}", round * 1e3),
                format!("{:.1}", k as f64 / round),
                format!("{:.2}", k as f64 / round / serial),
                format!("{:.1}", 1.0 / round),
                format!("{:.2}", 1.0 / round / serial),
            ]
        })
        .collect();
    print_table(
        &[
            "rows",
            "ms/round",
            "tok/s, all right",
            "x serial",
            "tok/s, all wrong",
            "x serial, wrong",
        ],
        &table,
    );
    Ok(())
}
