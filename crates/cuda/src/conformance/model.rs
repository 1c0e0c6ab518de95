//! The model checks (`tensorfold gpu-check --model FILE`): the whole model on the GPU against the
//! CPU backend, and the engine's exactness promises on the GPU.
//!
//! * logits: one prefill call with every row's logits, then decode rows, GPU vs CPU bit for bit;
//!   the GPU's prefill in uneven chunks equals its one-call prefill bit for bit;
//! * engine on the GPU (copies, plus the draft model when given), by `token_sha`: drafted ==
//!   serial (greedy and sampled), 8 concurrent == solo, resumed from the prefix cache == fresh,
//!   prefill chunks of 16 rows == chunks of 256, and GPU replies == CPU replies.

use std::collections::HashMap;
use std::sync::Arc;

use super::tally::Tally;
use crate::{CudaError, CudaRunner, Gpu, Result};
use tf_core::{BlockId, TokenId};
use tf_engine::cost::CostModel;
use tf_engine::proposer::DraftModel;
use tf_engine::{
    greedy_token, Engine, EngineConfig, Event, ModelRunner, NoiseKey, Pick, Receipt, Request,
    Runner, Sampler, SamplingParams,
};
use tf_kernels::ThreadPool;
use tf_models::{Model, Row};
use tokio::sync::mpsc::unbounded_channel;

use tf_core::SplitMix64;

const KV_POSITIONS: usize = 8 * 1024;
const CONTEXT: usize = 1024;

fn ids(seed: u64, n: usize, vocab: usize) -> Vec<TokenId> {
    let mut rng = SplitMix64::new(seed);
    // A motif every 16 tokens, so that context copies find matches.
    let motif: Vec<TokenId> = (0..8)
        .map(|_| (rng.next_u64() % vocab as u64) as TokenId)
        .collect();
    (0..n)
        .map(|i| {
            if i % 16 < 8 {
                motif[i % 8]
            } else {
                (rng.next_u64() % vocab as u64) as TokenId
            }
        })
        .collect()
}

fn bits_equal(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn rows<'a>(
    ids: &[TokenId],
    from: usize,
    to: usize,
    table: &'a [BlockId],
    all: bool,
) -> Vec<Row<'a>> {
    (from..to)
        .map(|p| Row {
            token: ids[p],
            pos: p,
            seq: 0,
            keep: true,
            table,
            logits: all || p + 1 == to,
            tree: None,
        })
        .collect()
}

/// GPU logits against the CPU's, and chunked GPU prefill against one call.
fn logits_checks(gpu: &Arc<Gpu>, model: &Arc<Model>, pool: &Arc<ThreadPool>) -> Result<Vec<Tally>> {
    let vocab = model.config.vocab;
    let n = 96;
    let prompt = ids(11, n + 16, vocab);
    let table: Vec<BlockId> = (0..(n + 32).div_ceil(16) as BlockId).collect();
    // Both sides store keys and values in the format the GPU program was compiled for.
    let kv = gpu.kv;
    let mut cpu = ModelRunner::with_format(model.clone(), pool.clone(), KV_POSITIONS, CONTEXT, kv);
    let mut dev = CudaRunner::new(gpu.clone(), model.clone(), KV_POSITIONS, CONTEXT, 256, kv)?;

    let mut prefill = Tally::new("prefill logits GPU == CPU (rows)");
    let want = cpu.forward(&rows(&prompt, 0, n, &table, true))?;
    let got = dev.forward(&rows(&prompt, 0, n, &table, true))?;
    let mut worst = 0f32;
    for r in 0..n {
        let (a, b) = (
            &want[r * vocab..(r + 1) * vocab],
            &got[r * vocab..(r + 1) * vocab],
        );
        worst = worst.max(max_diff(a, b));
        prefill.check(bits_equal(a, b), || {
            format!("row {r}: max |diff| {}", max_diff(a, b))
        });
    }
    if prefill.pass < prefill.total {
        prefill.note = format!("{}; worst max |diff| {worst}", prefill.note);
    }

    let mut decode = Tally::new("decode logits GPU == CPU (steps)");
    for p in n..n + 16 {
        let a = cpu.forward(&rows(&prompt, p, p + 1, &table, true))?;
        let b = dev.forward(&rows(&prompt, p, p + 1, &table, true))?;
        decode.check(bits_equal(&a, &b), || {
            format!("position {p}: max |diff| {}", max_diff(&a, &b))
        });
    }

    // The same prompt in uneven chunks on other blocks of the GPU cache.
    let mut chunks = Tally::new("GPU prefill in chunks == one call");
    let off = table.len() as BlockId;
    let table2: Vec<BlockId> = table.iter().map(|b| b + off).collect();
    let mut last = Vec::new();
    let mut at = 0;
    for len in [1, 15, 33, 7, 40] {
        let end = (at + len).min(n);
        last = dev.forward(&rows(&prompt, at, end, &table2, false))?;
        at = end;
    }
    let one = &got[(n - 1) * vocab..n * vocab];
    chunks.check(bits_equal(&last, one), || {
        format!("max |diff| {}", max_diff(&last, one))
    });
    // Row invariance: a batch of three sequences' rows, each equal to the row alone.
    let mut batch = Tally::new("GPU rows alone == in a batch of 3 sequences");
    let t3: Vec<BlockId> = table.iter().map(|b| b + 2 * off).collect();
    let mut mixed = rows(&prompt, n - 1, n, &table, true);
    mixed.extend(rows(&prompt, n - 1, n, &table2, true));
    mixed.extend(rows(&prompt, 0, 9, &t3, true));
    let out = dev.forward(&mixed)?;
    batch.check(bits_equal(&out[..vocab], one), || {
        "first sequence's row differs".into()
    });
    batch.check(bits_equal(&out[vocab..2 * vocab], one), || {
        "second sequence's row differs".into()
    });
    let alone = dev.forward(&rows(&prompt, 0, 9, &t3, true))?;
    batch.check(bits_equal(&out[2 * vocab..], &alone), || {
        "third sequence's rows differ".into()
    });
    // Greedy ids taken on the device: a prefill of every row (calls of 64 logit rows), each id
    // the greedy token of the CPU's logits, and the mixed rows (a replayed graph), each the
    // greedy token of the logits the same call returned.
    let mut greedy = Tally::new("GPU greedy ids == greedy token of the logits (rows)");
    let (mut scratch, mut a, mut b) = (Vec::new(), Vec::new(), Vec::new());
    let t4: Vec<BlockId> = table.iter().map(|b| b + 3 * off).collect();
    dev.forward_greedy(&rows(&prompt, 0, n, &t4, true), &mut scratch, &mut a)?;
    dev.forward_greedy(&mixed, &mut scratch, &mut b)?;
    let want_ids: Vec<TokenId> = want
        .chunks_exact(vocab)
        .chain(out.chunks_exact(vocab))
        .map(greedy_token)
        .collect();
    a.extend(b);
    greedy.check(a.len() == want_ids.len(), || {
        format!("{} ids for {} rows", a.len(), want_ids.len())
    });
    for (r, (g, w)) in a.iter().zip(&want_ids).enumerate() {
        greedy.check(g == w, || format!("row {r}: GPU {g}, logits {w}"));
    }
    // Logits left in the download buffer (`forward_logits`, sampled rounds): the mixed rows,
    // all wanted and every third one (the buffer compacted), against the copied logits.
    let mut view = Tally::new("GPU logits in the download buffer == copied logits (rows)");
    let mut sparse = mixed.clone();
    for (i, r) in sparse.iter_mut().enumerate() {
        r.logits = i % 3 == 1;
    }
    for (call, pick) in [(&mixed, 1), (&sparse, 3)] {
        let got = dev.forward_logits(call, &mut scratch)?.to_vec();
        let want: Vec<f32> = out
            .chunks_exact(vocab)
            .enumerate()
            .filter(|(i, _)| pick == 1 || i % 3 == 1)
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
        view.check(got.len() == want.len(), || {
            format!("{} floats for {}", got.len(), want.len())
        });
        for (r, (a, b)) in got.chunks(vocab).zip(want.chunks(vocab)).enumerate() {
            view.check(bits_equal(a, b), || format!("row {r} of every {pick}"));
        }
    }
    let plain = plain_checks(&mut dev, &prompt, &t4, &mixed, &want, &out, vocab)?;
    Ok(vec![prefill, decode, chunks, batch, greedy, view, plain])
}

/// Plain temperature draws decided from device shortlists (`forward_picks`) against the
/// sampler's draws from the same logits: every prompt row (calls of 64 logit rows) and the
/// mixed rows (a replayed graph), at temperatures 0.05 to 2 with their own seeds.
fn plain_checks(
    dev: &mut CudaRunner,
    prompt: &[TokenId],
    t4: &[BlockId],
    mixed: &[Row],
    want: &[f32],
    out: &[f32],
    vocab: usize,
) -> Result<Tally> {
    let mut tally = Tally::new("GPU plain draws == the sampler's draws (rows)");
    let mut sampler = Sampler::new();
    let n = want.len() / vocab;
    let key = |i: usize, position: usize| NoiseKey {
        seed: 1000 + 7 * i as u64,
        position: position as u64 + 1,
        temperature: [0.05, 0.7, 1.0, 2.0][i % 4],
    };
    let prefill = rows(prompt, 0, n, t4, true);
    let mut fallbacks = 0;
    for (call, logits) in [(&prefill[..], want), (mixed, out)] {
        let keys: Vec<NoiseKey> = call
            .iter()
            .enumerate()
            .map(|(i, r)| key(i, r.pos))
            .collect();
        let mut picks = Vec::new();
        if !dev.forward_picks(call, &keys, &mut picks)? {
            tally.check(false, || "forward_picks is off".into());
            break;
        }
        tally.check(picks.len() == keys.len(), || {
            format!("{} picks for {} rows", picks.len(), keys.len())
        });
        for (i, (pick, k)) in picks.iter().zip(&keys).enumerate() {
            let row = &logits[i * vocab..(i + 1) * vocab];
            let params = SamplingParams {
                temperature: k.temperature,
                ..SamplingParams::default()
            };
            let w = sampler.sample(row, &params, k.seed, k.position, &[]);
            match pick {
                Pick::Token(got_key, t) => tally.check(got_key == k && *t == w, || {
                    format!("row {i} at T {}: GPU {t}, sampler {w}", k.temperature)
                }),
                Pick::Logits(l) => {
                    fallbacks += 1;
                    tally.check(bits_equal(l, row), || format!("row {i}: fallback logits"))
                }
            }
        }
    }
    tally.note = format!("{fallbacks} rows fell back to their logits");
    Ok(tally)
}

/// Which runner an engine of the check uses.
#[derive(Clone, Copy, PartialEq)]
enum On {
    Cpu,
    Gpu,
}

struct Setup<'a> {
    gpu: &'a Arc<Gpu>,
    model: &'a Arc<Model>,
    draft: Option<&'a Arc<Model>>,
    pool: &'a Arc<ThreadPool>,
}

impl Setup<'_> {
    fn runner(&self, model: &Arc<Model>, on: On, positions: usize) -> Result<Box<dyn Runner>> {
        Ok(match on {
            On::Cpu => Box::new(ModelRunner::with_format(
                model.clone(),
                self.pool.clone(),
                positions,
                CONTEXT,
                self.gpu.kv,
            )),
            On::Gpu => Box::new(CudaRunner::new(
                self.gpu.clone(),
                model.clone(),
                positions,
                CONTEXT,
                256,
                self.gpu.kv,
            )?),
        })
    }

    fn engine(&self, on: On, config: EngineConfig) -> Result<Engine> {
        let runner = self.runner(self.model, on, KV_POSITIONS)?;
        let blocks = runner.kv_blocks();
        let drafts = config.drafts;
        let mut e = Engine::new(runner, config, CostModel::flat());
        if let (Some(d), true) = (self.draft, drafts) {
            let r = self.runner(d, on, blocks * tf_kernels::kv::BLOCK_SIZE)?;
            e.add_draft_model(Box::new(DraftModel::with_runner(r)));
        }
        Ok(e)
    }
}

/// Runs `reqs` together (all submitted before the first step) to completion.
fn run_all(e: &mut Engine, reqs: &[Request]) -> Result<Vec<Receipt>> {
    let mut rx = Vec::new();
    for r in reqs {
        let (tx, r_rx) = unbounded_channel();
        e.submit(r.clone(), tx)?;
        rx.push(r_rx);
    }
    let mut done: HashMap<usize, Receipt> = HashMap::new();
    let mut steps = 0;
    while done.len() < reqs.len() {
        e.step()?;
        steps += 1;
        for (i, r) in rx.iter_mut().enumerate() {
            while let Ok(ev) = r.try_recv() {
                match ev {
                    Event::Done(receipt) => {
                        done.insert(i, receipt);
                    }
                    Event::Logprobs(_) | Event::PromptLogprobs(_) => {}
                    Event::Error(err) => {
                        return Err(CudaError::Check(format!("engine error: {err}")))
                    }
                    Event::Tokens(_) => {}
                }
            }
        }
        if steps > 100_000 {
            return Err(CudaError::Check("engine made no progress".into()));
        }
    }
    Ok((0..reqs.len()).map(|i| done.remove(&i).unwrap()).collect())
}

/// Request `seed` of a kind: 0 greedy, 1 sampled with top-k and top-p, 2 sampled at plain
/// temperature (on the GPU, drawn from device shortlists).
fn request(seed: u64, kind: u64, vocab: usize, prompt_len: usize, max: usize) -> Request {
    let mut r = Request::new(ids(seed, prompt_len, vocab), max);
    r.ignore_eos = true;
    r.params = match kind {
        0 => SamplingParams::greedy(),
        1 => SamplingParams {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            seed: Some(seed * 31 + 7),
            ..SamplingParams::greedy()
        },
        _ => SamplingParams {
            temperature: 1.0,
            seed: Some(seed * 31 + 7),
            ..SamplingParams::default()
        },
    };
    r
}

fn engine_checks(s: &Setup) -> Result<Vec<Tally>> {
    let vocab = s.model.config.vocab;
    let reqs: Vec<Request> = (0..8u64)
        .map(|i| {
            request(
                100 + i,
                [0, 1, 0, 2][i as usize % 4],
                vocab,
                40 + 23 * i as usize,
                48,
            )
        })
        .collect();
    let serial_cfg = EngineConfig {
        drafts: false,
        ..EngineConfig::default()
    };
    let mut serial = Vec::new();
    for r in &reqs {
        let mut e = s.engine(On::Gpu, serial_cfg.clone())?;
        serial.push(run_all(&mut e, std::slice::from_ref(r))?.remove(0));
    }

    let mut drafted = Tally::new("GPU drafted == serial (min_rows >= 2)");
    let draft_cfg = EngineConfig {
        min_drafts: 3,
        ..EngineConfig::default()
    };
    for (r, want) in reqs.iter().zip(&serial) {
        let mut e = s.engine(On::Gpu, draft_cfg.clone())?;
        let got = run_all(&mut e, std::slice::from_ref(r))?.remove(0);
        drafted.check(got.token_sha == want.token_sha && got.min_rows >= 2, || {
            format!(
                "{} vs {} (min_rows {})",
                got.token_sha, want.token_sha, got.min_rows
            )
        });
    }

    let mut concurrent = Tally::new("GPU 8 concurrent == solo");
    let mut e = s.engine(On::Gpu, draft_cfg.clone())?;
    for (got, want) in run_all(&mut e, &reqs)?.iter().zip(&serial) {
        concurrent.check(got.token_sha == want.token_sha, || {
            format!("{} vs {}", got.token_sha, want.token_sha)
        });
    }

    // Resumed: a follow-up whose prompt extends an earlier request's prompt takes the cached
    // blocks; it must equal the same follow-up on a fresh engine.
    let mut resumed = Tally::new("GPU resumed from prefix cache == fresh");
    let mut e = s.engine(On::Gpu, draft_cfg.clone())?;
    for (i, r) in reqs.iter().take(4).enumerate() {
        run_all(&mut e, std::slice::from_ref(r))?;
        let mut follow = r.clone();
        follow.prompt.extend(ids(900 + i as u64, 20, vocab));
        let warm = run_all(&mut e, std::slice::from_ref(&follow))?.remove(0);
        let mut fresh_e = s.engine(On::Gpu, draft_cfg.clone())?;
        let fresh = run_all(&mut fresh_e, std::slice::from_ref(&follow))?.remove(0);
        resumed.check(
            warm.token_sha == fresh.token_sha && warm.cached_tokens > 0,
            || {
                format!(
                    "{} vs {} ({} cached)",
                    warm.token_sha, fresh.token_sha, warm.cached_tokens
                )
            },
        );
    }

    let mut chunked = Tally::new("GPU prefill chunks of 16 == of 256");
    let mut e = s.engine(
        On::Gpu,
        EngineConfig {
            max_step_rows: 16,
            ..serial_cfg.clone()
        },
    )?;
    for (got, want) in run_all(&mut e, &reqs)?.iter().zip(&serial) {
        chunked.check(got.token_sha == want.token_sha, || {
            format!("{} vs {}", got.token_sha, want.token_sha)
        });
    }

    let mut cpu = Tally::new("GPU replies == CPU replies");
    for (r, want) in reqs.iter().zip(&serial).take(4) {
        let mut e = s.engine(On::Cpu, serial_cfg.clone())?;
        let got = run_all(&mut e, std::slice::from_ref(r))?.remove(0);
        cpu.check(got.token_sha == want.token_sha, || {
            format!("CPU {} vs GPU {}", got.token_sha, want.token_sha)
        });
    }
    Ok(vec![drafted, concurrent, resumed, chunked, cpu])
}

/// Every check on `model` (and `draft`, a model of the same vocabulary), after a line naming
/// the model: the logits checks, then the engine's.
pub fn checks(
    gpu: &Arc<Gpu>,
    model_path: &std::path::Path,
    draft_path: Option<&std::path::Path>,
) -> Result<Vec<Tally>> {
    let model = Arc::new(Model::load(model_path)?);
    let draft = draft_path.map(Model::load).transpose()?.map(Arc::new);
    let pool = Arc::new(ThreadPool::with_available_parallelism());
    println!(
        "\nmodel: {} ({} layers, d_model {}), KV {} on both sides",
        model_path.display(),
        model.config.n_layers,
        model.config.d_model,
        gpu.kv.name()
    );
    let mut tallies = logits_checks(gpu, &model, &pool)?;
    let setup = Setup {
        gpu,
        model: &model,
        draft: draft.as_ref(),
        pool: &pool,
    };
    tallies.extend(engine_checks(&setup)?);
    Ok(tallies)
}
