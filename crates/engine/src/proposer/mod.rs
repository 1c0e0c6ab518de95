//! Proposers guess the next tokens of a sequence; the target verifies them (ARCHITECTURE.md, exactness rule 5).
//! Whatever a proposer guesses, the committed tokens are the target's own draws, so a proposer can
//! only change speed, never a token.

mod align;
mod copies;
mod draft_model;
mod mtp;

pub use copies::{copy_source, Copies, COPY_SOURCES};
pub use draft_model::{DraftModel, DEFAULT_WINDOW};
pub use mtp::Mtp;

use crate::blocks::BlockHash;
use crate::sampler::SamplingParams;
use tf_core::{BlockId, SeqId, TokenId};

/// What a proposer may look at: committed tokens and the sampling setup (for coupled drafting).
pub struct SeqView<'a> {
    pub id: SeqId,
    pub tokens: &'a [TokenId],
    /// Where the reply starts in `tokens` (penalties read the reply only).
    pub prompt_len: usize,
    pub params: &'a SamplingParams,
    pub seed: u64,
    /// The sequence's KV block table (a draft model keeps its own cache under the same ids).
    pub table: &'a [BlockId],
    /// Prefix-cache chain hashes of the table's leading full blocks of committed tokens (as far
    /// as they are indexed): a block's hash names the whole token prefix up to its end.
    pub hashes: &'a [BlockHash],
}

/// Where a round's guesses came from: the key of the cost model's acceptance curves and costs,
/// and of a receipt's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceId {
    /// Context copies, by the length of the match ([`copy_source`]).
    Copies(CopyLen),
    /// The extra branches of a tree round (copies that start differently).
    CopiesTree,
    /// A draft model.
    DraftModel,
    /// The target's own multi-token-prediction head.
    Mtp,
    /// Forced guesses (the last token repeated; tests' `min_drafts`).
    Filler,
    /// The tokens a request's grammar forces next (structured output).
    Grammar,
    /// A proposer of another kind, by name (tests' scripted ones).
    Other(&'static str),
}

/// Match lengths copies are tracked by: a 1-token match predicts far worse than a 4-token one,
/// and a match of a whole line or more better still.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CopyLen {
    One,
    Two,
    Three,
    FourToSeven,
    EightToFifteen,
    SixteenUp,
}

impl SourceId {
    /// The name receipts, benchmarks and logs show.
    pub fn name(self) -> &'static str {
        match self {
            SourceId::Copies(CopyLen::One) => "copies-1",
            SourceId::Copies(CopyLen::Two) => "copies-2",
            SourceId::Copies(CopyLen::Three) => "copies-3",
            SourceId::Copies(CopyLen::FourToSeven) => "copies-4-7",
            SourceId::Copies(CopyLen::EightToFifteen) => "copies-8-15",
            SourceId::Copies(CopyLen::SixteenUp) => "copies-16+",
            SourceId::CopiesTree => "copies-tree",
            SourceId::DraftModel => "draft-model",
            SourceId::Mtp => "mtp",
            SourceId::Filler => "filler",
            SourceId::Grammar => "grammar",
            SourceId::Other(name) => name,
        }
    }
}

impl std::fmt::Display for SourceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

pub trait Proposer: Send {
    fn id(&self) -> SourceId;
    /// Up to `max` guessed tokens following `seq.tokens` (fewer, or none, when it has no idea).
    fn propose(&mut self, seq: &SeqView, max: usize) -> Vec<TokenId>;
    /// The sequence now has `committed` tokens; anything computed past them is void.
    fn commit(&mut self, _id: SeqId, _committed: usize) {}
    /// The sequence is gone.
    fn release(&mut self, _id: SeqId) {}
    /// Whether proposing costs model time (the window sizing weighs it against its gain).
    fn costs_forward(&self) -> bool {
        false
    }
    /// Whether the proposer reads the target's final hidden states of committed rows (a
    /// multi-token-prediction head): the engine then hands them over after every step.
    fn takes_hidden(&self) -> bool {
        false
    }
    /// The target's final hidden states of sequence `id`'s committed positions `first..`,
    /// `d_model` values each.
    fn hidden(&mut self, _id: SeqId, _first: usize, _rows: &[f32]) {}
    /// Other continuations the last [`propose`](Proposer::propose) found, each starting at its
    /// first guess's position with another token (verified as tree branches beside the chain);
    /// taken, so a second call returns none.
    fn branches(&mut self) -> Vec<Vec<TokenId>> {
        Vec::new()
    }
    /// Seconds the last [`propose`](Proposer::propose) spent per guess in steady state, where
    /// the proposer can tell (a draft model leaves out catching up with the tokens committed
    /// since its last call, which a sequence pays once per use, not per guess).
    fn last_guess_secs(&self) -> Option<f64> {
        None
    }
    /// Rows and seconds of the catch-up forward the last [`propose`](Proposer::propose) ran
    /// first, if it ran one.
    fn last_catch_up(&self) -> Option<(usize, f64)> {
        None
    }
    /// Rows a [`propose`](Proposer::propose) for `seq` would first run as a catch-up (the
    /// tokens committed since the proposer last saw the sequence, past a round's own rows).
    fn behind(&self, _seq: &SeqView) -> usize {
        0
    }
    /// The sequence's prompt is prefilled: a proposer that keeps state per sequence may catch
    /// up now rather than in its first round. It runs at most `max_rows` rows and returns the
    /// rows it ran and those still to run (the engine calls again between steps until none
    /// are; a proposer that gives up returns none left).
    fn prefill(&mut self, _seq: &SeqView, _max_rows: usize) -> (usize, usize) {
        (0, 0)
    }
}
