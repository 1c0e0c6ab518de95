//! KV blocks reserved as a reply grows: a large `max_tokens` takes blocks only as the reply
//! needs them (a cached prefix survives it), and where the pool runs out the sequence admitted
//! last waits again and resumes to the very reply it would have given alone.

mod common;

use common::*;
use tf_engine::Event;
use tokio::sync::mpsc::unbounded_channel;

#[test]
fn a_large_max_tokens_does_not_evict_a_cached_prefix() {
    let pair = pairs(CENTRED).swap_remove(0);
    // 40 blocks: the cached prefix's 12 and 28 free, fewer than the 32 that a prompt of 40 and
    // a max_tokens of 460 would take up front.
    let mut b = bench(&pair.target, None, 2, drafting(2), 40 * 16);
    let mut a = request(1, false, 200, 8);
    a.ignore_eos = true;
    let first = run_all(&mut b, vec![(0, a.clone())]).remove(0);
    assert_eq!(first.receipt.cached_tokens, 0);

    // The long request runs a few steps, then its client goes away.
    let mut long = request(2, true, 40, 460);
    long.ignore_eos = true;
    let (tx, mut rx) = unbounded_channel();
    let id = b.engine.submit(long, tx).unwrap();
    let mut tokens = 0;
    for _ in 0..6 {
        b.engine.step().unwrap();
    }
    b.engine.cancel(id);
    while !b.engine.is_idle() {
        b.engine.step().unwrap();
    }
    while let Ok(ev) = rx.try_recv() {
        if let Event::Tokens(t) = ev {
            tokens += t.len();
        }
    }
    assert!(tokens > 0, "the long request ran");

    let again = run_all(&mut b, vec![(0, a.clone())]).remove(0);
    assert_same(&again, &first, "the prefix's owner again");
    assert_eq!(
        again.receipt.cached_tokens, 192,
        "its 12 cached blocks survived"
    );
}

#[test]
fn preempted_sequences_resume_to_their_solo_replies() {
    let pair = pairs(CENTRED).swap_remove(3);
    let reqs: Vec<_> = (0..5u64)
        .map(|i| {
            let mut r = request(30 + i, i % 2 == 1, 50 + 7 * i as usize, 180);
            r.ignore_eos = true;
            r
        })
        .collect();
    let solos: Vec<Run> = reqs
        .iter()
        .map(|r| solo(&pair.target, Some(&pair.draft), drafting(2), r))
        .collect();
    // 32 blocks: every sequence needs up to 16, so they cannot all grow at once.
    let mut b = bench(&pair.target, Some(&pair.draft), 2, drafting(2), 32 * 16);
    let runs = run_all(&mut b, reqs.iter().map(|r| (0, r.clone())).collect());
    assert!(b.engine.preemptions() > 0, "the pool never ran out");
    for (i, (got, want)) in runs.iter().zip(&solos).enumerate() {
        assert_same(got, want, &format!("request {i}"));
        assert_eq!(got.tokens.len(), 180);
    }
}
