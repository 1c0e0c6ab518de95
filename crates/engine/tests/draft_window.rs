//! A draft model's window (tiny synthetic GGUF models): a catch-up longer than the window runs
//! only the sequence's first block and its last tokens, which the draft sees as one shorter
//! sequence (its guesses are those of a fresh draft given just those tokens); the window's
//! blocks are never taken as another sequence's prefix; a catch-up run in parts leaves the draft
//! as one run whole does; and the replies equal their serial runs.

mod common;

use common::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tf_core::TokenId;
use tf_engine::blocks::BlockHash;
use tf_engine::cost::CostModel;
use tf_engine::proposer::Proposer;
use tf_engine::{EngineConfig, SamplingParams};
use tf_kernels::kv::BLOCK_SIZE;
use tf_kernels::ThreadPool;

const WINDOW: usize = 32;

/// A 121-token prompt with a 32-token window: the draft runs block 0 and positions 80..120,
/// guesses what a fresh draft guesses given only those tokens, and another sequence naming the
/// same blocks under their hashes takes block 0 alone (the window's blocks hold keys and values
/// at renumbered positions), then guesses the same.
#[test]
fn a_windowed_draft_sees_the_first_block_and_the_last_tokens() {
    let model = &pairs(CENTRED)[0].target;
    let pool = Arc::new(ThreadPool::new(2));
    let params = SamplingParams::greedy();
    let tokens = prompt(8300, 121);
    let n = tokens.len();
    let start = (n - 1 - WINDOW) / BLOCK_SIZE * BLOCK_SIZE;
    let table: Vec<u32> = (0..9).collect();
    let hashes: Vec<BlockHash> = (0..(n / BLOCK_SIZE) as u8).map(|i| [i + 1; 32]).collect();
    let rows = Arc::new(AtomicUsize::new(0));
    let mut d = counted_draft(model, pool.clone(), 32, &rows).with_window(WINDOW);
    let first = seq_view(1, &tokens, &table, &hashes, &params);
    assert_eq!(d.behind(&first), BLOCK_SIZE + (n - 1 - start));
    d.prefill(&first, usize::MAX);
    assert_eq!(rows.load(Ordering::Relaxed), BLOCK_SIZE + (n - 1 - start));
    let guesses = d.propose(&first, 4);
    assert_eq!(guesses.len(), 4);

    let want = fresh_guesses(model, pool, &tokens, start, &params);
    assert_eq!(
        guesses, want,
        "a windowed draft guessed otherwise than a fresh draft given the same tokens"
    );

    let again = seq_view(2, &tokens, &table, &hashes, &params);
    assert_eq!(
        d.behind(&again),
        n - 1 - start,
        "the window's blocks were taken as a prefix"
    );
    assert_eq!(d.propose(&again, 4), want);
}

/// Four guesses of a fresh draft (no window) given only the first block of `tokens` and its
/// tokens from `start` on.
fn fresh_guesses(
    model: &Arc<tf_models::Model>,
    pool: Arc<ThreadPool>,
    tokens: &[TokenId],
    start: usize,
    params: &SamplingParams,
) -> Vec<TokenId> {
    let short: Vec<TokenId> = tokens[..BLOCK_SIZE]
        .iter()
        .chain(&tokens[start..])
        .copied()
        .collect();
    let short_table: Vec<u32> = (20..26).collect();
    let mut fresh = counted_draft(model, pool, 32, &Arc::new(AtomicUsize::new(0))).with_window(0);
    fresh.propose(&seq_view(1, &short, &short_table, &[], params), 4)
}

/// A windowed prefill run in parts of any size (one row, parts ending inside the first block,
/// at its end, inside the window) runs the same rows as one whole prefill and leaves the draft
/// guessing the same. With a 70-token prompt the rows after the first block are within a window
/// of the first block's end: a part that stops there must still go on as a window.
#[test]
fn a_windowed_prefill_in_parts_equals_one_prefill() {
    let model = &pairs(CENTRED)[0].target;
    let pool = Arc::new(ThreadPool::new(2));
    let params = SamplingParams::greedy();
    for n in [70, 121] {
        let tokens = prompt(8400 + n as u64, n);
        let start = (n - 1 - WINDOW) / BLOCK_SIZE * BLOCK_SIZE;
        let whole = BLOCK_SIZE + (n - 1 - start);
        let table: Vec<u32> = (0..9).collect();
        let want = fresh_guesses(model, pool.clone(), &tokens, start, &params);
        for part in [1, 5, BLOCK_SIZE, BLOCK_SIZE + 4, 37, usize::MAX] {
            let rows = Arc::new(AtomicUsize::new(0));
            let mut d = counted_draft(model, pool.clone(), 32, &rows).with_window(WINDOW);
            let view = seq_view(1, &tokens, &table, &[], &params);
            let mut parts = 0;
            loop {
                let (ran, left) = d.prefill(&view, part);
                parts += 1;
                assert!(ran > 0 && ran <= part, "n {n} part {part}: ran {ran} rows");
                if left == 0 {
                    break;
                }
            }
            let what = format!("n {n}, parts of {part} rows");
            assert_eq!(parts, whole.div_ceil(part.min(whole)), "{what}");
            assert_eq!(rows.load(Ordering::Relaxed), whole, "{what}: rows run");
            assert_eq!(d.behind(&view), 0, "{what}");
            assert_eq!(d.propose(&view, 4), want, "{what}: guesses");
        }
    }
}

/// Through the engine, with steps of 16 rows: a catch-up dearer than a step's forward runs in
/// parts after the first token, none larger than the rows that cost about one step, and the
/// draft model still drafts; every reply equals its serial run.
#[test]
fn a_long_catch_up_runs_in_parts_between_steps() {
    let pair = &pairs(CENTRED)[1];
    let model = &pair.target;
    let config = EngineConfig {
        max_step_rows: 16,
        ..drafting(0)
    };
    for sampled in [false, true] {
        let (rows, largest) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut b = bench_with(model, 2, config.clone(), KV_POSITIONS, |pool, blocks| {
            let d = counted_draft_largest(model, pool, blocks, &rows, &largest).with_window(WINDOW);
            Some(Box::new(d) as Box<dyn Proposer>)
        });
        b.engine.cost = costs_that_pay();
        let step = b.engine.cost.catch_up_rows_like(SourceId::DraftModel, 16);
        largest.store(0, Ordering::Relaxed);
        let req = request(9400 + u64::from(sampled), sampled, 440, 48);
        let run = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
        let what = format!("sampled {sampled}");
        assert_same(&run, &serial(model, &req), &what);
        assert!(
            source(&run.receipt, "draft-model").0 > 0,
            "{what}: no drafts"
        );
        let largest = largest.load(Ordering::Relaxed);
        assert!(
            step < WINDOW + BLOCK_SIZE,
            "{what}: a part of {step} rows holds the whole catch-up"
        );
        assert!(
            largest <= step,
            "{what}: a draft forward of {largest} rows, more than a step's {step}"
        );
        assert_eq!(b.engine.free_blocks(), b.blocks);
    }
}

/// Costs under which the draft model pays for its prefill: the CPU's shape, a guess a quarter
/// of a step, a catch-up row 0.08 of one.
fn costs_that_pay() -> CostModel {
    let mut cost = CostModel::from_points(&[(1, 1.0), (4, 1.1), (8, 1.5), (16, 2.8)]);
    cost.observe_propose(SourceId::DraftModel, 4, 1.0);
    cost.observe_catch_up(SourceId::DraftModel, 32, 32.0 * 0.08);
    cost
}

/// Through the engine: prompts far longer than the window, greedy and sampled, with the target
/// itself as the draft model and costs set so that the draft pays for its prefill. The draft runs
/// about the window's rows for the prompt instead of the whole prompt, still drafts, and every
/// reply equals its serial run.
#[test]
fn a_long_prompt_runs_only_a_window_of_the_draft_model() {
    let pair = &pairs(CENTRED)[1];
    let model = &pair.target;
    for sampled in [false, true] {
        let rows = Arc::new(AtomicUsize::new(0));
        let mut b = bench_with(model, 2, drafting(0), KV_POSITIONS, |pool, blocks| {
            let d = counted_draft(model, pool, blocks, &rows).with_window(WINDOW);
            Some(Box::new(d) as Box<dyn Proposer>)
        });
        b.engine.cost = costs_that_pay();
        let req = request(9300 + u64::from(sampled), sampled, 440, 48);
        let before = rows.load(Ordering::Relaxed);
        let run = run_all(&mut b, vec![(0, req.clone())]).pop().unwrap();
        let ran = rows.load(Ordering::Relaxed) - before;
        let what = format!("sampled {sampled}");
        assert_same(&run, &serial(model, &req), &what);
        let r = &run.receipt;
        let (drafted, _) = source(r, "draft-model");
        assert!(drafted > 0, "{what}: the draft model drafted nothing");
        // The window and the first block (and a block of alignment), then per round the last
        // committed tokens and the guesses, and catch-ups over the tokens copies committed.
        let bound = WINDOW + 2 * BLOCK_SIZE + r.completion_tokens + r.drafted + 2 * r.rounds;
        assert!(
            bound < r.prompt_tokens,
            "{what}: the bound {bound} tells nothing"
        );
        assert!(
            ran <= bound,
            "{what}: the draft model ran {ran} rows for a {}-token prompt, more than {bound}",
            r.prompt_tokens
        );
    }
}
