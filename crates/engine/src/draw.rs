//! Where a round's tokens come from: logits rows for the keyed sampler, or, when every window of
//! the round draws greedily, the ids a runner took itself (`Runner::forward_greedy`) — the same
//! tokens, since `greedy_token` is what the sampler draws for such parameters.

use crate::sampler::{Sampler, SamplingParams};
use crate::Runner;
use tf_core::TokenId;
use tf_models::Row;

/// A round's output: `vocab` floats per row with logits, or one greedy id per such row.
#[derive(Clone, Copy)]
pub(crate) enum Drawn<'a> {
    Logits(&'a [f32], usize),
    Greedy(&'a [TokenId]),
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
        }
    }
}

/// The buffers a caller keeps across rounds for [`forward`].
#[derive(Default)]
pub(crate) struct RoundOut {
    pub logits: Vec<f32>,
    pub ids: Vec<TokenId>,
    pub greedy: bool,
}

impl RoundOut {
    /// Runs `rows`, through `forward_greedy` when `greedy` (every draw of the round is greedy).
    pub(crate) fn forward(
        &mut self,
        runner: &mut dyn Runner,
        rows: &[Row],
        greedy: bool,
    ) -> Result<(), crate::EngineError> {
        self.greedy = greedy;
        if greedy {
            runner.forward_greedy(rows, &mut self.logits, &mut self.ids)
        } else {
            runner.forward_into(rows, &mut self.logits)
        }
    }

    /// What the last [`forward`](Self::forward) returned.
    pub(crate) fn drawn(&self, vocab: usize) -> Drawn<'_> {
        if self.greedy {
            Drawn::Greedy(&self.ids)
        } else {
            Drawn::Logits(&self.logits, vocab)
        }
    }
}
