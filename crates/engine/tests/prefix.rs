//! The prefix cache over real forward passes (tiny synthetic GGUF models): a conversation resumed
//! from cached blocks equals the same conversation served fresh, token for token, whatever
//! drafted the earlier turns; requests sharing a prefix share its blocks and still equal their
//! solo runs; a tiny cache budget evicts without changing a bit.

mod common;

use common::*;
use tf_core::TokenId;
use tf_engine::{EngineConfig, Request};

/// An agent-style conversation: each turn's prompt is the previous prompt, the previous reply,
/// and a new message (a tool output of 10–60 tokens).
fn conversation(b: &mut Bench, first: &Request, turns: usize, seed: u64) -> Vec<(Request, Run)> {
    let mut rng = SplitMix64::new(seed);
    let mut out = Vec::new();
    let mut req = first.clone();
    for turn in 0..turns {
        let run = run_all(b, vec![(0, req.clone())]).pop().unwrap();
        out.push((req.clone(), run.clone()));
        let mut next: Vec<TokenId> = req.prompt.clone();
        next.extend(&run.tokens);
        next.extend(prompt(seed * 1000 + turn as u64, 10 + rng.below(50)));
        let mut r = req.clone();
        r.prompt = next;
        req = r;
        if req.prompt.len() + req.max_tokens + 16 > 500 {
            break;
        }
    }
    out
}

#[test]
fn resumed_conversations_equal_fresh_ones() {
    for (p, pair) in pairs(REPETITIVE).iter().enumerate() {
        for (mode, draft, config) in [
            ("serial", false, serial_config()),
            ("copies forced", false, drafting(3)),
            ("draft model", true, drafting(0)),
        ] {
            for sampled in [false, true] {
                let first = request(900 + p as u64, sampled, 40, 20);
                let mut b = bench(
                    &pair.target,
                    draft.then_some(&pair.draft),
                    2,
                    config.clone(),
                    KV_POSITIONS,
                );
                let turns = conversation(&mut b, &first, 12, 77 + p as u64);
                assert!(turns.len() >= 6, "{}: too few turns", pair.name);
                for (t, (req, run)) in turns.iter().enumerate() {
                    let what = format!("{} {mode} sampled={sampled} turn {t}", pair.name);
                    let fresh = serial(&pair.target, req);
                    assert_same(run, &fresh, &what);
                    if t > 0 {
                        assert!(
                            run.receipt.cached_tokens >= 16,
                            "{what}: no cached prefix ({} tokens)",
                            run.receipt.cached_tokens
                        );
                    } else {
                        assert_eq!(run.receipt.cached_tokens, 0, "{what}");
                    }
                }
                assert!(b.engine.cache_stats().hits >= turns.len() as u64 - 1);
            }
        }
    }
}

#[test]
fn requests_sharing_a_prefix_share_blocks_and_equal_their_solo_runs() {
    let pair = &pairs(CENTRED)[1];
    let shared = prompt(4242, 96);
    let reqs: Vec<Request> = (0..6u64)
        .map(|i| {
            let mut r = request(4300 + i, i % 2 == 0, 0, 24);
            r.prompt = [shared.clone(), prompt(4400 + i, 5 + i as usize * 7)].concat();
            r
        })
        .collect();
    let want: Vec<Run> = reqs.iter().map(|r| serial(&pair.target, r)).collect();
    for config in [serial_config(), drafting(2)] {
        let mut b = bench(&pair.target, None, 2, config, KV_POSITIONS);
        // The first request computes the prefix; the rest arrive while it still runs.
        let arrivals: Vec<(usize, Request)> = reqs
            .iter()
            .enumerate()
            .map(|(i, r)| (if i == 0 { 0 } else { 3 }, r.clone()))
            .collect();
        let runs = run_all(&mut b, arrivals);
        for (i, (run, want)) in runs.iter().zip(&want).enumerate() {
            assert_same(run, want, &format!("request {i}"));
            if i > 0 {
                assert_eq!(
                    run.receipt.cached_tokens, 96,
                    "request {i} reused the prefix"
                );
            }
        }
    }
}

#[test]
fn a_tiny_cache_budget_evicts_and_stays_exact() {
    let pair = &pairs(REPETITIVE)[0];
    let first = request(5151, true, 50, 24);
    let config = EngineConfig {
        max_step_rows: 32,
        ..drafting(2)
    };
    let mut b = bench(&pair.target, None, 2, config, KV_POSITIONS);
    b.engine.set_cache_budget(3);
    let turns = conversation(&mut b, &first, 8, 99);
    for (t, (req, run)) in turns.iter().enumerate() {
        assert_same(run, &serial(&pair.target, req), &format!("turn {t}"));
        assert!(
            run.receipt.cached_tokens <= 3 * 16,
            "turn {t}: more than the budget was kept"
        );
        // The kept blocks are the prefix's first ones (released last-first, so the oldest
        // positions are the most recently used): every resumed turn starts from them.
        if t > 0 {
            assert_eq!(run.receipt.cached_tokens, 3 * 16, "turn {t}");
        }
    }
    assert!(b.engine.cache_stats().evictions > 0, "nothing was evicted");
    assert!(b.engine.cached_blocks() <= 3);
}
