//! tf-engine: sequences, scheduling, paged KV bookkeeping, drafting with exact verification, and
//! the keyed sampler.
//!
//! One step of the [`Engine`] is schedule → forward → draw → accept → commit → emit over windows
//! of every running sequence. A drawn token is a pure function of (logits row, sampling params,
//! seed, absolute position, committed history) ([`sampler`]), and every kernel below is
//! row-exact, so a drafted reply is the serial reply, token for token (ARCHITECTURE.md, exactness rules 4 and 5).
//!
//! * [`runner`]: the seam to a model ([`Runner`], [`ModelRunner`]); [`fake`]: a test target.
//! * [`proposer`]: guessers (context copies, draft models).
//! * [`cost`]: window sizing from measured forward costs and acceptance rates.
//! * [`handle`]: the engine on its own thread, with per-request event streams.
//! * [`blocks`]: KV block ids and the prefix cache; [`spill`]: its disk tier.

pub mod blocks;
pub mod constraint;
pub mod cost;
mod draw;
mod engine;
pub mod error;
pub mod fake;
pub mod handle;
pub mod logprobs;
pub mod proposer;
pub mod request;
pub mod runner;
pub mod sampler;
mod sequence;
pub mod spill;

pub use constraint::{Constraint, ConstraintSource, Grammar};
pub use engine::{Engine, EngineConfig};
pub use error::EngineError;
pub use handle::{EngineHandle, EngineStats, EventStream};
pub use logprobs::{token_logprob, TokenLogprob, MAX_TOP_LOGPROBS};
pub use proposer::{CopyLen, SourceId};
pub use request::{token_sha, Event, FinishReason, Receipt, Request, SourceCounts};
pub use runner::{ModelRunner, Runner};
pub use sampler::{
    default_seed, greedy_token, gumbel, philox4x32_10, sample, NoiseKey, Pick, Sampler,
    SamplerError, SamplingParams, Shortlist,
};
pub use spill::{SpillStats, SpillStore};
