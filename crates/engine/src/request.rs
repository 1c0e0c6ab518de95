//! What a client submits and what it receives back.

use crate::proposer::SourceId;
use crate::sampler::SamplingParams;
use tf_core::TokenId;

#[derive(Clone, Debug)]
pub struct Request {
    pub prompt: Vec<TokenId>,
    pub params: SamplingParams,
    /// Generated tokens at most (the end-of-generation token included when it ends the reply).
    pub max_tokens: usize,
    /// Tokens that end the reply (the model's end-of-generation set).
    pub stop_tokens: Vec<TokenId>,
    /// Keep going past stop tokens (benchmarks).
    pub ignore_eos: bool,
    /// `false` = the serial reference: a window of one row every round.
    pub draft: bool,
    /// Each drawn token's log-probability and this many of its row's most likely tokens
    /// ([`Event::Logprobs`]); `None` = none (rounds may then skip the logits).
    pub logprobs: Option<usize>,
    /// Also the log-probability of every prompt token after the first, each under the rows
    /// before it ([`Event::PromptLogprobs`], with `logprobs` alternatives): the whole prompt
    /// is computed (no cached prefix is reused).
    pub prompt_logprobs: bool,
    /// A grammar the reply follows (structured output): each token is drawn among those it
    /// allows after the tokens before it ([`crate::constraint`]).
    pub grammar: Option<crate::constraint::Grammar>,
}

impl Request {
    pub fn new(prompt: Vec<TokenId>, max_tokens: usize) -> Request {
        Request {
            prompt,
            params: SamplingParams::greedy(),
            max_tokens,
            stop_tokens: Vec::new(),
            ignore_eos: false,
            draft: true,
            logprobs: None,
            prompt_logprobs: false,
            grammar: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token ended the reply.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The client went away or cancelled.
    Cancelled,
    /// The engine failed (the message went out as an `Event::Error`).
    Error,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Error => "error",
        }
    }
}

/// Per-proposer drafting counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceCounts {
    pub source: SourceId,
    pub drafted: usize,
    pub accepted: usize,
}

impl SourceCounts {
    pub fn name(&self) -> &'static str {
        self.source.name()
    }
}

/// What every finished request reports: enough to compare two runs of the same request.
#[derive(Clone, Debug)]
pub struct Receipt {
    /// First 12 hex digits of SHA-256 over the comma-joined reply token ids.
    pub token_sha: String,
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys and values came from the prefix cache.
    pub cached_tokens: usize,
    pub completion_tokens: usize,
    pub finish: FinishReason,
    /// The narrowest verify window (rows) of the request's decode rounds.
    pub min_rows: usize,
    /// Decode rounds (forward passes that produced tokens for this request).
    pub rounds: usize,
    pub drafted: usize,
    pub accepted: usize,
    pub sources: Vec<SourceCounts>,
    /// Per guess position i: (windows with a guess there, of which accepted).
    pub by_position: Vec<(usize, usize)>,
    pub prefill_secs: f64,
    /// From the first generated token to the last.
    pub decode_secs: f64,
    /// From submission to the first generated token.
    pub ttft_secs: f64,
    pub seed: u64,
}

/// Events of one request, in order: `Tokens` any number of times, then exactly one `Done` (or an
/// `Error` followed by `Done`).
#[derive(Clone, Debug)]
pub enum Event {
    /// The log-probabilities of the tokens of the next [`Event::Tokens`], one each, when the
    /// request asked for them.
    Logprobs(Vec<crate::logprobs::TokenLogprob>),
    /// The log-probabilities of the next prompt tokens (from the second on, in order, before
    /// any [`Event::Tokens`]), when the request asked for them.
    PromptLogprobs(Vec<crate::logprobs::TokenLogprob>),
    Tokens(Vec<TokenId>),
    Error(String),
    Done(Receipt),
}

/// First 12 hex digits of SHA-256 over the comma-joined token ids.
pub fn token_sha(tokens: &[TokenId]) -> String {
    use sha2::{Digest, Sha256};
    let joined = tokens
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let digest = Sha256::digest(joined.as_bytes());
    digest.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn token_sha_known_answer() {
        // Python: hashlib.sha256(b"1,2,3").hexdigest()[:12]
        assert_eq!(super::token_sha(&[1, 2, 3]), "8a6ae1512200");
        assert_eq!(super::token_sha(&[]), "e3b0c44298fc");
        assert_ne!(super::token_sha(&[1, 2, 3]), super::token_sha(&[1, 2, 4]));
    }
}
