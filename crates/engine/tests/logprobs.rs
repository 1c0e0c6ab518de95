//! Log-probabilities of a reply (`Request::logprobs`): drafted replies carry the serial reply's
//! log-probabilities bit for bit, concurrent requests their solo ones, and each equals the
//! log-softmax of the logits a plain forward over the whole sequence gives.

mod common;

use std::sync::Arc;

use common::*;
use tf_core::{BlockId, TokenId};
use tf_engine::runner::Row;
use tf_engine::{ModelRunner, Runner, TokenLogprob};
use tf_kernels::kv::{KvFormat, BLOCK_SIZE};
use tf_kernels::ThreadPool;
use tf_models::Model;

fn with_logprobs(seed: u64, sampled: bool, top: usize) -> tf_engine::Request {
    let mut req = request(seed, sampled, 21 + 13 * seed as usize, 24);
    req.logprobs = Some(top);
    req
}

/// A log-probability entry as bits: token, logprob, alternatives.
type Bits = (TokenId, u32, Vec<(TokenId, u32)>);

/// Bitwise equality of two replies' log-probabilities.
fn assert_same_logprobs(got: &[TokenLogprob], want: &[TokenLogprob], what: &str) {
    let bits = |l: &[TokenLogprob]| -> Vec<Bits> {
        l.iter()
            .map(|e| {
                let top = e.top.iter().map(|&(t, v)| (t, v.to_bits())).collect();
                (e.token, e.logprob.to_bits(), top)
            })
            .collect()
    };
    assert_eq!(bits(got), bits(want), "{what}: log-probabilities differ");
}

/// Every position's logits from one forward over `tokens` on a fresh cache.
fn direct_logits(model: &Arc<Model>, tokens: &[TokenId]) -> Vec<f32> {
    let pool = Arc::new(ThreadPool::new(1));
    let mut runner =
        ModelRunner::with_format(model.clone(), pool, 512, CONTEXT, KvFormat::default());
    let table: Vec<BlockId> = (0..tokens.len().div_ceil(BLOCK_SIZE) as BlockId).collect();
    let rows: Vec<Row> = (tokens.iter().enumerate())
        .map(|(pos, &token)| Row {
            token,
            pos,
            seq: 0,
            keep: true,
            table: &table,
            logits: true,
            tree: None,
        })
        .collect();
    let mut buf = Vec::new();
    runner.forward_logits(&rows, &mut buf).unwrap().to_vec()
}

#[test]
fn drafted_and_concurrent_replies_carry_the_serial_log_probabilities() {
    let pair = pairs(CENTRED).swap_remove(0);
    let reqs: Vec<_> = [(1, false, 3), (2, true, 5), (3, true, 0)]
        .iter()
        .map(|&(seed, sampled, top)| with_logprobs(seed, sampled, top))
        .collect();
    let serials: Vec<Run> = reqs.iter().map(|r| serial(&pair.target, r)).collect();
    for (i, (req, want)) in reqs.iter().zip(&serials).enumerate() {
        assert_eq!(want.logprobs.len(), want.tokens.len(), "request {i}");
        let top = req.logprobs.unwrap();
        assert!(want.logprobs.iter().all(|e| e.top.len() == top));
        for (what, config, draft) in [
            ("draft model", drafting(3), Some(&pair.draft)),
            ("copies", drafting(2), None),
        ] {
            let got = solo(&pair.target, draft, config, req);
            let what = format!("request {i}, {what}");
            assert_same(&got, want, &what);
            assert_forced(&got, 2, &what);
            assert_same_logprobs(&got.logprobs, &want.logprobs, &what);
        }
    }
    // All three at once, beside a request without log-probabilities.
    let mut b = bench(
        &pair.target,
        Some(&pair.draft),
        2,
        drafting(2),
        KV_POSITIONS,
    );
    let mut all: Vec<(usize, tf_engine::Request)> = reqs.iter().map(|r| (0, r.clone())).collect();
    all.push((1, request(9, true, 40, 24)));
    let runs = run_all(&mut b, all);
    for (i, want) in serials.iter().enumerate() {
        assert_same(&runs[i], want, &format!("concurrent {i}"));
        assert_same_logprobs(
            &runs[i].logprobs,
            &want.logprobs,
            &format!("concurrent {i}"),
        );
    }
    assert!(runs[3].logprobs.is_empty());
}

#[test]
fn log_probabilities_are_the_log_softmax_of_the_rows_logits() {
    let pair = pairs(CENTRED).swap_remove(1);
    let vocab = VOCAB;
    for (seed, sampled) in [(4, false), (5, true)] {
        let req = with_logprobs(seed, sampled, 4);
        let run = serial(&pair.target, &req);
        let mut seq = req.prompt.clone();
        seq.extend(&run.tokens[..run.tokens.len() - 1]);
        let logits = direct_logits(&pair.target, &seq);
        for (j, e) in run.logprobs.iter().enumerate() {
            let row = &logits[(req.prompt.len() - 1 + j) * vocab..][..vocab];
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
            let z: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
            let lp = |t: TokenId| (row[t as usize] as f64 - max) - z.ln();
            assert_eq!(e.token, run.tokens[j]);
            assert!(
                (e.logprob as f64 - lp(e.token)).abs() < 1e-5,
                "seed {seed} token {j}"
            );
            // The top entries: the largest logits, highest first, ties to the lower id.
            let mut order: Vec<TokenId> = (0..vocab as TokenId).collect();
            order.sort_by(|&a, &b| row[b as usize].total_cmp(&row[a as usize]).then(a.cmp(&b)));
            let ids: Vec<TokenId> = e.top.iter().map(|t| t.0).collect();
            assert_eq!(ids, order[..4], "seed {seed} token {j}");
            for &(t, v) in &e.top {
                assert!((v as f64 - lp(t)).abs() < 1e-5);
            }
            if !sampled {
                // A greedy reply draws the most likely token.
                assert_eq!(e.token, order[0]);
            }
        }
    }
}

#[test]
fn prompt_log_probabilities_cover_every_prompt_token_in_chunked_prefill() {
    let pair = pairs(CENTRED).swap_remove(2);
    let vocab = VOCAB;
    let mut req = with_logprobs(6, true, 2);
    req.prompt = prompt(6, 100);
    req.prompt_logprobs = true;
    let logits = direct_logits(&pair.target, &req.prompt);
    // Prefill in chunks of 24 rows, beside another request; then again with the prompt's
    // blocks in the prefix cache (they must not be reused).
    let config = tf_engine::EngineConfig {
        max_step_rows: 24,
        ..drafting(2)
    };
    let mut b = bench(&pair.target, Some(&pair.draft), 2, config, KV_POSITIONS);
    let first = run_all(
        &mut b,
        vec![(0, req.clone()), (0, request(8, false, 60, 16))],
    );
    let again = run_all(&mut b, vec![(0, req.clone())]);
    let serial = serial(&pair.target, &req);
    for run in [&first[0], &again[0], &serial] {
        assert_eq!(run.prompt_logprobs.len(), req.prompt.len() - 1);
        assert_same_logprobs(&run.prompt_logprobs, &serial.prompt_logprobs, "prompt");
        assert_same(run, &serial, "reply");
        assert_same_logprobs(&run.logprobs, &serial.logprobs, "reply");
    }
    assert_eq!(
        again[0].receipt.cached_tokens, 0,
        "the prompt is computed whole"
    );
    assert!(first[1].prompt_logprobs.is_empty());
    for (i, e) in serial.prompt_logprobs.iter().enumerate() {
        let row = &logits[i * vocab..][..vocab];
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let z: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
        let want = (row[e.token as usize] as f64 - max) - z.ln();
        assert_eq!(e.token, req.prompt[i + 1]);
        assert!(
            (e.logprob as f64 - want).abs() < 1e-5,
            "prompt token {}",
            i + 1
        );
        assert_eq!(e.top.len(), 2);
    }
}
