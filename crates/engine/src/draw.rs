//! Draw and accept: where a round's tokens come from and which guesses they confirm.
//!
//! A round's output is logits rows for the keyed sampler or, when every window of the round
//! draws greedily, the ids a runner took itself (`Runner::forward_greedy`) — the same tokens,
//! since `greedy_token` is what the sampler draws for such parameters — or, when every window
//! draws plain temperature samples, the tokens a runner decided from shortlists where the
//! logits are (`Runner::forward_picks`; the sampler's own comparison over the contenders).
//! Logits may live in the runner's own memory (`Runner::forward_logits`): [`accept`] reads only
//! what it needs, and the engine applies the verdicts after the runner is free again.

use crate::engine::Plan;
use crate::logprobs::{token_logprob, TokenLogprob};
use crate::sampler::{NoiseKey, Pick, Sampler, SamplingParams};
use crate::sequence::Seq;
use crate::Runner;
use tf_core::TokenId;
use tf_models::Row;

/// A round's output: `vocab` floats per row with logits, one greedy id per such row, or one
/// pick per such row.
#[derive(Clone, Copy)]
pub(crate) enum Drawn<'a> {
    Logits(&'a [f32], usize),
    Greedy(&'a [TokenId]),
    Picks(&'a [Pick]),
}

/// What a round asks the runner for (see [`RoundOut::forward`]).
pub(crate) enum Ask {
    Logits,
    /// Every draw of the round is greedy.
    Greedy,
    /// Every draw is a plain temperature sample, with these keys for the rows with logits.
    Picks(Vec<NoiseKey>),
}

impl Ask {
    /// What a round asks the runner for: ids only when every window draws greedily, picks when
    /// every window draws plain temperature samples (each row with logits keyed by its sequence's
    /// seed and the position it draws), else logits.
    pub(crate) fn for_round(running: &[Seq], plans: &[Plan], rows: &[Row]) -> Ask {
        let windows = || plans.iter().filter(|p| p.window);
        let params = |p: &Plan| &running[p.seq].req.params;
        // Log-probabilities are read from the logits rows (of windows and of prompts); a
        // grammar masks them.
        let wants = |p: &Plan| {
            let s = &running[p.seq];
            s.req.logprobs.is_some() || s.req.prompt_logprobs || (p.window && s.guide.is_some())
        };
        if plans.iter().any(wants) {
            return Ask::Logits;
        }
        if windows().all(|p| params(p).draws_greedy()) {
            return Ask::Greedy;
        }
        if !windows().all(|p| params(p).draws_plain()) {
            return Ask::Logits;
        }
        let owners = windows().flat_map(|p| std::iter::repeat_n(p, p.rows()));
        let keys = rows
            .iter()
            .filter(|r| r.logits)
            .zip(owners)
            .map(|(r, p)| NoiseKey {
                seed: running[p.seq].seed,
                position: r.pos as u64 + 1,
                temperature: params(p).temperature,
            })
            .collect();
        Ask::Picks(keys)
    }
}

impl Drawn<'_> {
    /// The token of output row `r` at absolute `position` (the sampler's arguments; a greedy id
    /// needs none of them).
    pub(crate) fn token(
        self,
        sampler: &mut Sampler,
        r: usize,
        params: &SamplingParams,
        seed: u64,
        position: u64,
        history: &[TokenId],
    ) -> TokenId {
        match self {
            Drawn::Logits(l, vocab) => sampler.sample(
                &l[r * vocab..(r + 1) * vocab],
                params,
                seed,
                position,
                history,
            ),
            Drawn::Greedy(ids) => ids[r],
            Drawn::Picks(picks) => match &picks[r] {
                Pick::Token(key, t) => {
                    // The key the runner drew with must be this draw's: anything else is a bug
                    // that would change a reply.
                    assert!(
                        key.seed == seed
                            && key.position == position
                            && key.temperature == params.temperature,
                        "pick drawn with {key:?}, wanted seed {seed} position {position}"
                    );
                    *t
                }
                Pick::Logits(l) => sampler.sample(l, params, seed, position, history),
            },
        }
    }
}

impl<'a> Drawn<'a> {
    /// Output row `r`'s logits, where the round brought them back.
    pub(crate) fn row(self, r: usize) -> Option<&'a [f32]> {
        match self {
            Drawn::Logits(l, vocab) => Some(&l[r * vocab..(r + 1) * vocab]),
            Drawn::Picks(picks) => match &picks[r] {
                Pick::Logits(l) => Some(l),
                Pick::Token(..) => None,
            },
            Drawn::Greedy(_) => None,
        }
    }
}

/// The buffers a caller keeps across rounds for [`forward`](RoundOut::forward).
#[derive(Default)]
pub(crate) struct RoundOut {
    pub logits: Vec<f32>,
    pub ids: Vec<TokenId>,
    pub picks: Vec<Pick>,
}

impl RoundOut {
    /// Runs `rows`: greedy ids through `forward_greedy`, picks through `forward_picks` where the
    /// runner has that path, else logits wherever the runner keeps them.
    pub(crate) fn forward<'a>(
        &'a mut self,
        runner: &'a mut dyn Runner,
        rows: &[Row],
        ask: &Ask,
    ) -> Result<Drawn<'a>, crate::EngineError> {
        match ask {
            Ask::Greedy => {
                runner.forward_greedy(rows, &mut self.logits, &mut self.ids)?;
                return Ok(Drawn::Greedy(&self.ids));
            }
            Ask::Picks(keys) => {
                if runner.forward_picks(rows, keys, &mut self.picks)? {
                    return Ok(Drawn::Picks(&self.picks));
                }
            }
            Ask::Logits => {}
        }
        let vocab = runner.vocab();
        let logits = runner.forward_logits(rows, &mut self.logits)?;
        Ok(Drawn::Logits(logits, vocab))
    }
}

/// What one window's rows decided.
pub(crate) struct Verdict {
    /// The target's tokens: the confirmed guesses and the first token after them.
    pub emitted: Vec<TokenId>,
    /// Guesses confirmed (of the main chain, or of the extra branch `via_branch`).
    pub accepted: usize,
    pub via_branch: Option<usize>,
    /// Each emitted token's log-probability, where the request asked for them.
    pub logprobs: Vec<TokenLogprob>,
}

/// Draws window `p`'s tokens from its rows (output rows `at..`) and accepts the guesses they
/// confirm: the main chain, else the first extra branch that starts with the target's own first
/// token; stops at the first guess the target does not draw.
///
/// A sequence with a grammar draws each row among the tokens the grammar allows after the
/// tokens drawn before it, and its guide takes every emitted token (`constraint.rs`).
pub(crate) fn accept(drawn: Drawn, sampler: &mut Sampler, s: &Seq, p: &Plan, at: usize) -> Verdict {
    let len = s.tokens.len();
    let k = p.drafts.len();
    let mut history = s.generated().to_vec();
    let mut draw = |r: usize, position: u64, history: &[TokenId]| {
        let (params, seed) = (&s.req.params, s.seed);
        let t = match &s.guide {
            None => drawn.token(sampler, r, params, seed, position, history),
            Some(g) => {
                let row = drawn
                    .row(r)
                    .expect("a round with a grammar brings logits back");
                g.masked(row, |row| {
                    sampler.sample(row, params, seed, position, history)
                })
            }
        };
        if let Some(g) = &s.guide {
            g.advance(t);
        }
        t
    };
    let first = draw(at, len as u64, &history);
    // Output row r drew token t: its log-probability, where the request asks.
    let logprob = |r: usize, t: TokenId| {
        s.req.logprobs.map(|top| {
            let row = drawn
                .row(r)
                .expect("a round with log-probabilities brings logits back");
            token_logprob(row, t, top)
        })
    };
    let mut follow: Option<(&[TokenId], usize, Option<usize>)> = None;
    if k > 0 && p.drafts[0] == first {
        follow = Some((&p.drafts, 1, None));
    } else {
        let mut offset = 1 + k;
        for (b, branch) in p.branches.iter().enumerate() {
            if branch[0] == first {
                follow = Some((branch, offset, Some(b)));
                break;
            }
            offset += branch.len();
        }
    }
    let mut v = Verdict {
        emitted: vec![first],
        accepted: 0,
        via_branch: None,
        logprobs: logprob(at, first).into_iter().collect(),
    };
    if let Some((branch, offset, b)) = follow {
        v.via_branch = b;
        v.accepted = 1;
        history.push(first);
        loop {
            let r = at + offset + v.accepted - 1;
            let t = draw(r, (len + v.accepted) as u64, &history);
            v.emitted.push(t);
            v.logprobs.extend(logprob(r, t));
            if v.accepted < branch.len() && branch[v.accepted] == t {
                v.accepted += 1;
                history.push(t);
            } else {
                break;
            }
        }
    }
    v
}
