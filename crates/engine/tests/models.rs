//! Engine exactness over real forward passes: tiny synthetic GGUF models (random weights, real
//! shapes and tensor types) behind `ModelRunner`, drafted by context copies and by draft models.
//! A drafted reply equals its serial reply, a concurrent request equals its solo run, whatever the
//! architecture (llama, qwen2, qwen3), the tensor type (Q4_K/Q6_K rows go through the multi-row
//! kernels whenever a step holds several rows; Q8_0, Q4_1), the window sizes, the thread count,
//! the arrival order and the prefill chunking. A draft model that is the target itself must have
//! every guess accepted, which checks that its cache is rolled back to the committed tokens.

mod common;

use common::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tf_core::{SeqId, TokenId};
use tf_engine::proposer::DraftModel;
use tf_engine::proposer::{Proposer, SeqView};
use tf_engine::SourceId;
use tf_engine::{EngineConfig, FinishReason, Request, SamplingParams};

#[test]
fn drafted_equals_serial_with_copies_only() {
    let mut copies = [(0usize, 0usize); 7];
    let mut stops = 0;
    for pair in pairs(REPETITIVE) {
        for sampled in [false, true] {
            for seed in 1..4u64 {
                let req = request(seed, sampled, 24 + 29 * seed as usize, 40);
                let want = serial(&pair.target, &req);
                stops += usize::from(want.receipt.finish == FinishReason::Stop);
                for (min_drafts, counts) in copies.iter_mut().enumerate() {
                    let what = format!(
                        "{} seed {seed} sampled {sampled} min_drafts {min_drafts}",
                        pair.name
                    );
                    let got = solo(&pair.target, None, drafting(min_drafts), &req);
                    assert_same(&got, &want, &what);
                    assert_forced(&got, min_drafts, &what);
                    let (d, a) = source(&got.receipt, "copies");
                    counts.0 += d;
                    counts.1 += a;
                }
            }
        }
    }
    eprintln!(
        "copies (drafted, accepted) by min_drafts: {copies:?}; {stops} serial replies stopped"
    );
    assert!(
        copies.iter().all(|&(d, a)| d > 0 && a > 0 && a < d),
        "copies must draft, hit and miss at every min_drafts: {copies:?}"
    );
}

#[test]
fn drafted_equals_serial_with_a_draft_model() {
    for pair in pairs(CENTRED) {
        let (mut drafted, mut accepted) = (0, 0);
        for sampled in [false, true] {
            for seed in 11..14u64 {
                let req = request(seed, sampled, 20 + 37 * (seed as usize - 10), 40);
                let want = serial(&pair.target, &req);
                for min_drafts in 0..=6 {
                    let what = format!(
                        "{} seed {seed} sampled {sampled} min_drafts {min_drafts}",
                        pair.name
                    );
                    let got = solo(&pair.target, Some(&pair.draft), drafting(min_drafts), &req);
                    assert_same(&got, &want, &what);
                    assert_forced(&got, min_drafts, &what);
                    let (d, a) = source(&got.receipt, "draft-model");
                    drafted += d;
                    accepted += a;
                }
            }
        }
        eprintln!("{}: draft model {accepted}/{drafted} accepted", pair.name);
        assert!(drafted > 0, "{}: the draft model never drafted", pair.name);
    }
}

/// With the target as its own draft model, every guess is the target's own draw (same kernels,
/// same keyed noise), greedy or sampled: a rejected guess means the draft model's cache was not
/// rolled back to the committed tokens, or a row is not row-exact.
#[test]
fn a_draft_model_equal_to_the_target_is_always_right() {
    for pair in pairs(CENTRED) {
        let model = &pair.target;
        let mut drafted = 0;
        for sampled in [false, true] {
            let reqs: Vec<Request> = (0..6u64)
                .map(|s| request(40 + s, sampled, 10 + 23 * s as usize, 48))
                .collect();
            let want: Vec<Run> = reqs.iter().map(|r| serial(model, r)).collect();
            for min_drafts in [0usize, 1, 2, 5, 9] {
                // One at a time, then all together (windows of other sequences in the same step,
                // prefill chunks beside them, blocks of finished sequences reused by later ones).
                let mut runs: Vec<Run> = reqs
                    .iter()
                    .map(|r| solo(model, Some(model), drafting(min_drafts), r))
                    .collect();
                let config = EngineConfig {
                    max_step_rows: 24,
                    ..drafting(min_drafts)
                };
                let mut b = bench(model, Some(model), 2, config, KV_POSITIONS);
                let arrivals = reqs.iter().enumerate().map(|(i, r)| (3 * i, r.clone()));
                runs.extend(run_all(&mut b, arrivals.collect()));
                for (i, run) in runs.iter().enumerate() {
                    let what = format!(
                        "{} request {} sampled {sampled} min_drafts {min_drafts}",
                        pair.name,
                        i % reqs.len()
                    );
                    assert_same(run, &want[i % reqs.len()], &what);
                    assert_forced(run, min_drafts, &what);
                    let (d, a) = source(&run.receipt, "draft-model");
                    assert_eq!(a, d, "{what}: a guess of the target itself was rejected");
                    drafted += d;
                }
            }
        }
        assert!(drafted > 0, "{}: the draft model never drafted", pair.name);
    }
}

/// The target as its own draft model, alternating per sequence between rounds where it guesses
/// with other sampling (temperature 1.5, another seed: guesses rejected after a few, its cache
/// left holding tokens that were never committed) and rounds where it guesses with the request's
/// own sampling. After a correct rollback, every guess of the latter is the target's own draw.
/// A faithful window: (sequence, its length, guesses, committed after verification).
type Window = (SeqId, usize, usize, usize);

struct Alternating {
    inner: DraftModel,
    rounds: HashMap<SeqId, usize>,
    /// The sequence's length and the number of guesses of its pending faithful window.
    pending: HashMap<SeqId, (usize, usize)>,
    log: Arc<Mutex<Vec<Window>>>,
}

impl Proposer for Alternating {
    fn id(&self) -> SourceId {
        SourceId::Other("alternating")
    }
    fn costs_forward(&self) -> bool {
        true
    }
    fn propose(&mut self, seq: &SeqView, max: usize) -> Vec<TokenId> {
        let round = self.rounds.entry(seq.id).or_default();
        *round += 1;
        match *round % 3 {
            1 => {
                let wild = SamplingParams {
                    temperature: 1.5,
                    ..SamplingParams::default()
                };
                let view = SeqView {
                    params: &wild,
                    seed: seq.seed ^ 0x5EED,
                    ..*seq
                };
                self.inner.propose(&view, max)
            }
            // Guesses from elsewhere (the draft model sees the tokens they commit only later).
            2 => vec![seq.tokens[seq.tokens.len() - 1]; max],
            _ => {
                let guesses = self.inner.propose(seq, max);
                self.pending
                    .insert(seq.id, (seq.tokens.len(), guesses.len()));
                guesses
            }
        }
    }
    fn commit(&mut self, id: SeqId, committed: usize) {
        self.inner.commit(id, committed);
        if let Some((len, k)) = self.pending.remove(&id) {
            self.log.lock().unwrap().push((id, len, k, committed));
        }
    }
    fn release(&mut self, id: SeqId) {
        self.inner.release(id);
        self.rounds.remove(&id);
        self.pending.remove(&id);
    }
}

#[test]
fn draft_model_cache_is_rolled_back_after_rejected_guesses() {
    for pair in pairs(CENTRED) {
        let model = &pair.target;
        let reqs: Vec<Request> = (0..8u64)
            .map(|s| request(60 + s, s % 2 == 1, 12 + 17 * s as usize, 48))
            .collect();
        let want: Vec<Run> = reqs.iter().map(|r| serial(model, r)).collect();
        for (min_drafts, together) in [(1, false), (3, false), (6, true), (0, true)] {
            let log = Arc::new(Mutex::new(Vec::new()));
            let config = EngineConfig {
                max_step_rows: 24,
                ..drafting(min_drafts)
            };
            let mut b = bench_with(model, 2, config, KV_POSITIONS, |pool, blocks| {
                Some(Box::new(Alternating {
                    inner: DraftModel::new(model.clone(), pool, blocks),
                    rounds: HashMap::new(),
                    pending: HashMap::new(),
                    log: log.clone(),
                }))
            });
            let runs: Vec<Run> = if together {
                run_all(&mut b, reqs.iter().map(|r| (0, r.clone())).collect())
            } else {
                reqs.iter()
                    .flat_map(|r| run_all(&mut b, vec![(0, r.clone())]))
                    .collect()
            };
            let mut ends = HashMap::new();
            for (i, (run, want)) in runs.iter().zip(&want).enumerate() {
                let what = format!("{} request {i} min_drafts {min_drafts}", pair.name);
                assert_same(run, want, &what);
                assert_forced(run, min_drafts, &what);
                ends.insert(
                    run.id,
                    run.receipt.prompt_tokens + run.receipt.completion_tokens,
                );
            }
            let (mut faithful, mut wild) = (0, 0);
            for &(id, len, k, committed) in log.lock().unwrap().iter() {
                // Every guess accepted (committed = len + k + 1), unless the reply ended there.
                assert!(
                    committed == len + k + 1 || committed == ends[&id],
                    "{} min_drafts {min_drafts}: sequence {id} at {len}: {} of {k} faithful \
                     guesses accepted: the draft model's cache was not rolled back",
                    pair.name,
                    committed - len - 1
                );
                faithful += k;
            }
            for run in &runs {
                let (d, a) = source(&run.receipt, "alternating");
                wild += d - a;
            }
            // With forced guesses every kind of round happens; left to the cost model, the
            // proposer may (rightly) be dropped once its wild rounds fail.
            if min_drafts > 0 {
                assert!(faithful > 0, "{}: no faithful guesses", pair.name);
                assert!(wild > 0, "{}: no guesses rejected", pair.name);
            }
        }
    }
}

/// 1, 4 and 16 sequences arriving at different steps, long prompts prefilled in chunks of at most
/// 24 rows while others decode; serial, copies and draft-model engines; some requests opt out of
/// drafting (`draft: false`). Each reply equals its solo serial run.
#[test]
fn concurrent_equals_solo() {
    let mut rng = SplitMix64::new(7);
    for pair in pairs(CENTRED) {
        for n in [1usize, 4, 16] {
            let reqs: Vec<Request> = (0..n)
                .map(|i| {
                    let seed = 200 + (n * 100 + i) as u64;
                    let mut r = request(seed, i % 2 == 1, 8 + rng.below(140), 16 + rng.below(32));
                    r.draft = n == 1 || i % 5 != 3;
                    r
                })
                .collect();
            let want: Vec<Run> = reqs.iter().map(|r| serial(&pair.target, r)).collect();
            for (mode, draft, min_drafts) in [
                ("serial", false, None),
                ("copies", false, Some(0)),
                ("copies forced", false, Some(1 + rng.below(6))),
                ("draft model", true, Some(0)),
                ("draft model forced", true, Some(1 + rng.below(6))),
            ] {
                let config = EngineConfig {
                    max_step_rows: 24,
                    ..min_drafts.map_or_else(serial_config, drafting)
                };
                let draft = draft.then_some(&pair.draft);
                let mut b = bench(&pair.target, draft, 2, config, KV_POSITIONS);
                let arrivals: Vec<(usize, Request)> =
                    reqs.iter().map(|r| (rng.below(40), r.clone())).collect();
                let runs = run_all(&mut b, arrivals);
                for (i, (run, want)) in runs.iter().zip(&want).enumerate() {
                    let what = format!("{} {mode} {min_drafts:?}: request {i} of {n}", pair.name);
                    assert_same(run, want, &what);
                    if reqs[i].draft {
                        assert_forced(run, min_drafts.unwrap_or(0), &what);
                    } else {
                        assert_eq!(run.receipt.drafted, 0, "{what}: drafted for draft: false");
                    }
                }
            }
        }
    }
}

/// More requests than KV room: later ones wait for the blocks of finished ones, which still hold
/// their keys and values (in the target's cache and in the draft model's).
#[test]
fn requests_waiting_for_kv_room_equal_their_solo_runs() {
    let pair = &pairs(CENTRED)[0];
    let reqs: Vec<Request> = (0..12u64)
        .map(|s| request(500 + s, s % 2 == 0, 30 + 11 * s as usize, 40))
        .collect();
    let want: Vec<Run> = reqs.iter().map(|r| serial(&pair.target, r)).collect();
    for (draft, min_drafts) in [(None, 3), (Some(&pair.draft), 2), (Some(&pair.target), 4)] {
        let config = EngineConfig {
            max_step_rows: 24,
            ..drafting(min_drafts)
        };
        // About three sequences' worth of blocks.
        let mut b = bench(&pair.target, draft, 2, config, 3 * 256);
        let runs = run_all(&mut b, reqs.iter().map(|r| (0, r.clone())).collect());
        for (i, (run, want)) in runs.iter().zip(&want).enumerate() {
            let what = format!("request {i}, min_drafts {min_drafts}");
            assert_same(run, want, &what);
            assert_forced(run, min_drafts, &what);
            if draft.is_some_and(|d| Arc::ptr_eq(d, &pair.target)) {
                let (d, a) = source(&run.receipt, "draft-model");
                assert_eq!(a, d, "{what}: a guess of the target itself was rejected");
            }
        }
    }
}
