//! Replies under a grammar (`Request::grammar`): every token is one the grammar allows after
//! the tokens before it, a drafted reply equals its serial twin, concurrent requests equal their
//! solo runs, guesses the grammar forbids are cut before they are verified, and a grammar that
//! fails ends its reply with an error. The tokens a grammar forces are guessed (source
//! `grammar`). The grammar here is a small automaton written for the
//! test; `tf-grammar` (llguidance) supplies real ones through the same trait.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use tf_core::TokenId;
use tf_engine::{Constraint, ConstraintSource, Event, FinishReason, Grammar};
use tokio::sync::mpsc::unbounded_channel;

/// Even ids for the first 8 tokens, then odd ids; the stop tokens from the 10th token on, and
/// only them from the 16th. Fails (an error instead of a mask) at token `fail_at`.
#[derive(Clone)]
struct Parity {
    taken: usize,
    fail_at: usize,
    bits: Vec<u32>,
    /// Tokens the engine asked about in `valid_prefix` that were not allowed (shared).
    cut: Arc<AtomicUsize>,
}

impl Parity {
    fn allows(taken: usize, t: TokenId) -> bool {
        let stop = STOP.contains(&t);
        if taken >= 16 {
            return stop;
        }
        if stop {
            return taken >= 10;
        }
        (t as usize % 2 == 1) == (taken >= 8)
    }
}

impl Constraint for Parity {
    fn allowed(&mut self) -> Result<&[u32], String> {
        if self.taken == self.fail_at {
            return Err(format!("failed at token {}", self.taken));
        }
        self.bits = vec![0; VOCAB.div_ceil(32)];
        for t in 0..VOCAB as TokenId {
            if Parity::allows(self.taken, t) {
                self.bits[t as usize / 32] |= 1 << (t % 32);
            }
        }
        Ok(&self.bits)
    }

    fn advance(&mut self, token: TokenId) -> Result<(), String> {
        if !Parity::allows(self.taken, token) {
            return Err(format!("token {token} is not allowed at {}", self.taken));
        }
        self.taken += 1;
        Ok(())
    }

    fn valid_prefix(&mut self, tokens: &[TokenId]) -> usize {
        let n = (tokens.iter().enumerate())
            .take_while(|&(i, &t)| Parity::allows(self.taken + i, t))
            .count();
        if n < tokens.len() {
            self.cut.fetch_add(1, Ordering::Relaxed);
        }
        n
    }

    /// "Forces" two even tokens over the first six (guesses the target often turns down).
    fn forced(&mut self) -> Vec<TokenId> {
        match self.taken {
            0..6 => vec![8, 10],
            _ => Vec::new(),
        }
    }
}

impl ConstraintSource for Parity {
    fn start(&self) -> Box<dyn Constraint> {
        Box::new(self.clone())
    }
}

fn parity(fail_at: usize) -> (Grammar, Arc<AtomicUsize>) {
    let cut = Arc::new(AtomicUsize::new(0));
    let p = Parity {
        taken: 0,
        fail_at,
        bits: Vec::new(),
        cut: cut.clone(),
    };
    (Grammar(Arc::new(p)), cut)
}

fn constrained(seed: u64, sampled: bool) -> tf_engine::Request {
    let mut req = request(seed, sampled, 19 + 11 * seed as usize, 24);
    req.grammar = Some(parity(usize::MAX).0);
    req
}

fn assert_follows(run: &Run, what: &str) {
    for (i, &t) in run.tokens.iter().enumerate() {
        assert!(
            Parity::allows(i, t),
            "{what}: token {i} ({t}) breaks the grammar"
        );
    }
    assert!(
        run.tokens.len() <= 17,
        "{what}: the grammar ends by 17 tokens"
    );
}

#[test]
fn constrained_replies_follow_the_grammar_and_drafted_equals_serial() {
    let pair = pairs(CENTRED).swap_remove(0);
    let reqs: Vec<_> = [(1, false), (2, true), (3, true)]
        .iter()
        .map(|&(seed, sampled)| constrained(seed, sampled))
        .collect();
    let serials: Vec<Run> = reqs.iter().map(|r| serial(&pair.target, r)).collect();
    for (i, want) in serials.iter().enumerate() {
        assert_follows(want, &format!("serial {i}"));
        assert_eq!(want.receipt.finish, FinishReason::Stop, "serial {i}");
        // The same request without the grammar draws something else.
        let mut free = reqs[i].clone();
        free.grammar = None;
        assert_ne!(
            serial(&pair.target, &free).tokens,
            want.tokens,
            "request {i}"
        );
    }
    for (i, (req, want)) in reqs.iter().zip(&serials).enumerate() {
        for (what, config, draft) in [
            ("draft model", drafting(3), Some(&pair.draft)),
            ("forced filler", drafting(2), None),
        ] {
            let (grammar, cut) = parity(usize::MAX);
            let mut req = req.clone();
            req.grammar = Some(grammar);
            let got = solo(&pair.target, draft, config, &req);
            let what = format!("request {i}, {what}");
            assert_same(&got, want, &what);
            assert!(got.receipt.drafted > 0, "{what}: no guess was verified");
            assert!(
                source(&got.receipt, "grammar").0 > 0,
                "{what}: no grammar guess"
            );
            assert!(cut.load(Ordering::Relaxed) > 0, "{what}: no guess was cut");
        }
    }
    // All three at once, beside a request without a grammar.
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
    }
    assert!(runs[3]
        .tokens
        .iter()
        .enumerate()
        .any(|(i, &t)| !Parity::allows(i, t)));
}

#[test]
fn a_failing_grammar_ends_its_reply_with_an_error() {
    let pair = pairs(CENTRED).swap_remove(0);
    let mut req = request(4, true, 30, 24);
    req.grammar = Some(parity(5).0);
    let mut b = bench(
        &pair.target,
        Some(&pair.draft),
        2,
        drafting(2),
        KV_POSITIONS,
    );
    let (tx, mut rx) = unbounded_channel();
    b.engine.submit(req, tx).unwrap();
    let (mut tokens, mut error, mut receipt) = (Vec::new(), None, None);
    for _ in 0..200 {
        b.engine.step().unwrap();
        while let Ok(ev) = rx.try_recv() {
            match ev {
                Event::Tokens(t) => tokens.extend(t),
                Event::Error(e) => error = Some(e),
                Event::Done(r) => receipt = Some(r),
                _ => {}
            }
        }
        if receipt.is_some() {
            break;
        }
    }
    let receipt = receipt.expect("the request finished");
    assert_eq!(receipt.finish, FinishReason::Error);
    let error = error.expect("an error event");
    assert!(error.contains("failed at token 5"), "{error}");
    // Five tokens under the grammar, then the stop token drawn while it failed.
    assert_eq!(tokens.len(), 6, "{tokens:?}");
    assert!(STOP.contains(&tokens[5]));
    assert!(b.engine.is_idle());
    assert_eq!(b.engine.free_blocks(), b.blocks);
}
