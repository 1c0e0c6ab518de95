//! A draft model and the prefix cache (tiny synthetic GGUF models): a sequence that the target
//! resumes from cached blocks takes the draft model's keys and values of the same blocks instead
//! of running its whole prompt through the draft again, those keys and values are the ones a
//! fresh run computes (the target as its own draft is never wrong), and a block the draft has
//! written since is never taken.

mod common;

use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tf_core::TokenId;
use tf_engine::blocks::BlockHash;
use tf_engine::cost::CostModel;
use tf_engine::proposer::Proposer;
use tf_engine::SamplingParams;
use tf_kernels::kv::BLOCK_SIZE;
use tf_kernels::ThreadPool;

/// A turn-by-turn conversation on one engine whose draft model is the target itself: every turn
/// after the first reuses most of its prompt from the prefix cache, and the draft model runs
/// little more than the rows the target runs (the uncached prompt and the reply), far fewer
/// than the prompt; yet it never guesses wrong and every reply equals the fresh serial one.
#[test]
fn a_resumed_conversation_takes_the_draft_models_cached_blocks() {
    let pair = &pairs(CENTRED)[1];
    let model = &pair.target;
    let mut checked = 0;
    for sampled in [false, true] {
        let rows = Arc::new(AtomicUsize::new(0));
        let mut b = bench_with(model, 2, drafting(2), KV_POSITIONS, |pool, blocks| {
            Some(Box::new(counted_draft(model, pool, blocks, &rows)) as Box<dyn Proposer>)
        });
        let mut req = request(7100 + u64::from(sampled), sampled, 60, 24);
        let mut rng = SplitMix64::new(71);
        for turn in 0..12 {
            let before = rows.load(Ordering::Relaxed);
            let run = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
            let ran = rows.load(Ordering::Relaxed) - before;
            let what = format!("sampled {sampled} turn {turn}");
            assert_same(&run, &serial(model, &req), &what);
            let (d, a) = source(&run.receipt, "draft-model");
            assert_eq!(a, d, "{what}: a guess of the target itself was rejected");
            let r = &run.receipt;
            // The rows the target ran, plus the draft's own per round (the last committed
            // tokens and its guesses), plus the last blocks of the earlier turn that the draft
            // had not caught up with when it ended.
            let bound = (r.prompt_tokens - r.cached_tokens)
                + 2 * BLOCK_SIZE
                + r.completion_tokens
                + r.drafted
                + 2 * r.rounds;
            if turn == 0 {
                assert_eq!(r.cached_tokens, 0, "{what}");
            } else {
                assert!(r.cached_tokens >= 48, "{what}: {} cached", r.cached_tokens);
                assert!(
                    ran <= bound,
                    "{what}: the draft model ran {ran} rows for {} prompt tokens ({} cached), \
                     more than the {bound} past its cached blocks",
                    r.prompt_tokens,
                    r.cached_tokens
                );
                if r.prompt_tokens > bound {
                    checked += 1;
                }
            }
            let mut next: Vec<TokenId> = req.prompt.clone();
            next.extend(&run.tokens);
            next.extend(prompt(7200 + turn, 10 + rng.below(40)));
            if next.len() + req.max_tokens + 16 > 500 {
                break;
            }
            req.prompt = next;
        }
    }
    // Turns where running the whole prompt again would have broken the bound.
    assert!(
        checked >= 4,
        "only {checked} turns tell reuse from a full run"
    );
}

/// The draft model's record of its blocks, directly: a sequence naming held blocks under their
/// hashes starts past them and guesses what a fresh draft guesses; a block written since for
/// other tokens, or named under another hash, is run again.
#[test]
fn the_draft_model_takes_only_blocks_it_still_holds() {
    let model = &pairs(CENTRED)[0].target;
    let pool = Arc::new(ThreadPool::new(2));
    let blocks = 16;
    let params = SamplingParams::greedy();
    let a = prompt(8100, 41);
    let other = prompt(8200, 41);
    let hashes: Vec<BlockHash> = vec![[1; 32], [2; 32]];
    let n = a.len();
    let rows = Arc::new(AtomicUsize::new(0));
    let mut d = counted_draft(model, pool.clone(), blocks, &rows);
    d.prefill(&seq_view(1, &a, &[0, 1, 2], &hashes, &params), usize::MAX);
    // The same tokens in blocks 0 and 1, named by their hashes: two blocks taken.
    let resumed = seq_view(2, &a, &[0, 1, 3], &hashes, &params);
    assert_eq!(d.behind(&resumed), n - 1 - 2 * BLOCK_SIZE);
    let guesses = d.propose(&resumed, 4);
    let mut fresh = counted_draft(model, pool.clone(), blocks, &Arc::new(AtomicUsize::new(0)));
    let want = fresh.propose(&seq_view(1, &a, &[4, 5, 6], &hashes, &params), 4);
    assert_eq!(
        guesses, want,
        "guesses from the held blocks differ from a fresh run's"
    );
    // Block 1 named under another hash: the chain stops at block 0.
    let misnamed = [hashes[0], [9; 32]];
    assert_eq!(
        d.behind(&seq_view(3, &a, &[0, 1, 7], &misnamed, &params)),
        n - 1 - BLOCK_SIZE
    );
    // Another sequence writes block 0: nothing is taken any more.
    d.prefill(&seq_view(4, &other, &[0, 8, 9], &[], &params), usize::MAX);
    let again = seq_view(5, &a, &[0, 1, 10], &hashes, &params);
    assert_eq!(d.behind(&again), n - 1);
    let before = rows.load(Ordering::Relaxed);
    assert_eq!(d.propose(&again, 4), want);
    assert_eq!(rows.load(Ordering::Relaxed) - before, n - 1 + 4);
}

/// A draft model is prefilled with a prompt only where the reply could pay for it: a long
/// prompt with room for a long reply runs through it, the same prompt with a two-token reply
/// does not (and the draft model is not run for that request at all); both replies equal
/// their serial runs. The costs are set, not measured (a tiny model's timings are mostly
/// overhead): a guess a quarter of a one-row forward, a catch-up row 0.08 of one.
#[test]
fn a_long_prompt_with_a_short_reply_skips_the_draft_model() {
    let pair = &pairs(CENTRED)[1];
    let rows = Arc::new(AtomicUsize::new(0));
    let mut b = bench_with(
        &pair.target,
        2,
        drafting(0),
        KV_POSITIONS,
        |pool, blocks| {
            Some(Box::new(counted_draft(&pair.draft, pool, blocks, &rows)) as Box<dyn Proposer>)
        },
    );
    for (seed, prompt_len, max_tokens, prefilled) in [(9100, 200, 300, true), (9200, 400, 2, false)]
    {
        let mut cost = CostModel::from_points(&[(1, 1.0), (4, 1.1), (8, 1.5), (16, 2.8)]);
        cost.observe_propose(SourceId::DraftModel, 4, 1.0);
        cost.observe_catch_up(SourceId::DraftModel, 32, 32.0 * 0.08);
        b.engine.cost = cost;
        let req = request(seed, false, prompt_len, max_tokens);
        let before = rows.load(Ordering::Relaxed);
        let run = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
        let ran = rows.load(Ordering::Relaxed) - before;
        let what = format!("prompt {prompt_len}, max_tokens {max_tokens}");
        assert_same(&run, &serial(&pair.target, &req), &what);
        if prefilled {
            assert!(
                ran >= prompt_len - 1,
                "{what}: the draft model ran only {ran} rows"
            );
        } else {
            assert_eq!(ran, 0, "{what}: the draft model ran {ran} rows");
            assert_eq!(source(&run.receipt, "draft-model").0, 0, "{what}");
        }
    }
}

/// Calibration measures the draft model too (a guess and a catch-up row), so that the first
/// request already weighs the draft model's prefill, and gives back every block it used.
#[test]
fn calibration_measures_the_draft_model() {
    let pair = &pairs(CENTRED)[1];
    let rows = Arc::new(AtomicUsize::new(0));
    let b = bench_with(
        &pair.target,
        2,
        drafting(0),
        KV_POSITIONS,
        |pool, blocks| {
            Some(Box::new(counted_draft(&pair.draft, pool, blocks, &rows)) as Box<dyn Proposer>)
        },
    );
    assert!(b.engine.cost.propose_secs(SourceId::DraftModel) > 0.0);
    assert!(!b
        .engine
        .cost
        .prefill_can_pay(SourceId::DraftModel, 100_000, 1));
    // Two runs of a 32-row prefill and four guesses.
    assert_eq!(rows.load(Ordering::Relaxed), 2 * (32 + 4));
    assert_eq!(b.engine.free_blocks(), b.blocks);
}
