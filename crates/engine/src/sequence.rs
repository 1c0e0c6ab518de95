//! Engine-side state of one request.

use crate::proposer::SourceId;
use crate::request::{Event, FinishReason, Receipt, Request, SourceCounts};
use std::time::Instant;
use tf_core::{BlockId, SeqId, TokenId};
use tokio::sync::mpsc::UnboundedSender;

pub(crate) struct Seq {
    pub id: SeqId,
    pub req: Request,
    pub seed: u64,
    /// Prompt then committed reply tokens.
    pub tokens: Vec<TokenId>,
    /// Positions whose keys and values in the target cache hold committed tokens.
    pub kv_len: usize,
    pub table: Vec<BlockId>,
    /// Chain hashes of the leading full blocks already indexed in the prefix cache.
    pub hashes: Vec<crate::blocks::BlockHash>,
    /// Prompt positions whose keys and values came from the prefix cache.
    pub cached_tokens: usize,
    pub events: UnboundedSender<Event>,
    pub submitted: Instant,
    pub first_token: Option<Instant>,
    pub last_token: Option<Instant>,
    pub rounds: usize,
    pub drafted: usize,
    pub accepted: usize,
    pub min_rows: usize,
    pub sources: Vec<SourceCounts>,
    /// Windows that had a guess at position i, and those whose guess i was accepted.
    pub at_drafted: [usize; crate::cost::MAX_DRAFT],
    pub at_accepted: [usize; crate::cost::MAX_DRAFT],
    pub finished: Option<FinishReason>,
    /// Draft models (indices into the engine's) not run for this sequence: their prefill of
    /// the prompt could not pay within the reply's `max_tokens`.
    pub models_off: Vec<usize>,
    /// Draft models still running this sequence's prompt, a part each step (a catch-up
    /// longer than a step's worth); they propose nothing for it until done.
    pub models_behind: Vec<usize>,
    /// Admission order (larger = admitted later; a preempted sequence gets a new one).
    pub admitted: u64,
    /// Prompt positions whose rows' log-probabilities went out (`Request::prompt_logprobs`):
    /// a sequence prefilled again after preemption does not send them twice.
    pub prompt_logprobs_sent: usize,
    /// Leading table entries already freed (behind every layer's window).
    pub freed_blocks: usize,
    /// The request's grammar state, where it has one.
    pub guide: Option<crate::constraint::Guide>,
}

impl Seq {
    pub fn new(id: SeqId, req: Request, events: UnboundedSender<Event>) -> Seq {
        let seed = req.params.seed_for(&req.prompt);
        Seq {
            id,
            seed,
            tokens: req.prompt.clone(),
            kv_len: 0,
            table: Vec::new(),
            hashes: Vec::new(),
            cached_tokens: 0,
            events,
            submitted: Instant::now(),
            first_token: None,
            last_token: None,
            rounds: 0,
            drafted: 0,
            accepted: 0,
            min_rows: usize::MAX,
            sources: Vec::new(),
            at_drafted: [0; crate::cost::MAX_DRAFT],
            at_accepted: [0; crate::cost::MAX_DRAFT],
            finished: None,
            models_off: Vec::new(),
            models_behind: Vec::new(),
            admitted: 0,
            prompt_logprobs_sent: 0,
            freed_blocks: 0,
            guide: req
                .grammar
                .as_ref()
                .map(|g| crate::constraint::Guide::new(g, &req.stop_tokens)),
            req,
        }
    }

    /// Whether draft model `mi` may propose for this sequence.
    pub fn model_on(&self, mi: usize) -> bool {
        !self.models_off.contains(&mi) && !self.models_behind.contains(&mi)
    }

    pub fn prompt_len(&self) -> usize {
        self.req.prompt.len()
    }

    pub fn generated(&self) -> &[TokenId] {
        &self.tokens[self.prompt_len()..]
    }

    /// What a proposer may look at of this sequence.
    pub fn view(&self) -> crate::proposer::SeqView<'_> {
        crate::proposer::SeqView {
            id: self.id,
            tokens: &self.tokens,
            prompt_len: self.prompt_len(),
            params: &self.req.params,
            seed: self.seed,
            table: &self.table,
            hashes: &self.hashes,
        }
    }

    /// Every prompt position is in the cache and the last committed token is pending.
    pub fn decoding(&self) -> bool {
        self.kv_len + 1 == self.tokens.len() && self.tokens.len() > self.prompt_len()
    }

    /// Slots the next step may touch: the committed tokens (a prefill at most `step_rows` of
    /// them further) and one window past them.
    pub fn slots_needed(&self, step_rows: usize) -> usize {
        let upto = self.tokens.len().min(self.kv_len + step_rows.max(1));
        (upto + crate::cost::MAX_DRAFT + 1).min(self.max_slots())
    }

    /// Slots a request can ever need: the prompt, the reply, and one window past it.
    pub fn max_slots(&self) -> usize {
        self.prompt_len() + self.req.max_tokens + crate::cost::MAX_DRAFT + 1
    }

    pub fn count_source(&mut self, source: SourceId, drafted: usize, accepted: usize) {
        match self.sources.iter_mut().find(|s| s.source == source) {
            Some(s) => {
                s.drafted += drafted;
                s.accepted += accepted;
            }
            None => self.sources.push(SourceCounts {
                source,
                drafted,
                accepted,
            }),
        }
    }

    pub fn receipt(&self) -> Receipt {
        let now = Instant::now();
        let first = self.first_token.unwrap_or(now);
        Receipt {
            token_sha: crate::request::token_sha(self.generated()),
            prompt_tokens: self.prompt_len(),
            cached_tokens: self.cached_tokens,
            completion_tokens: self.generated().len(),
            finish: self.finished.unwrap_or(FinishReason::Error),
            min_rows: if self.rounds == 0 { 0 } else { self.min_rows },
            rounds: self.rounds,
            drafted: self.drafted,
            accepted: self.accepted,
            sources: self.sources.clone(),
            by_position: self
                .at_drafted
                .iter()
                .zip(&self.at_accepted)
                .take_while(|(d, _)| **d > 0)
                .map(|(d, a)| (*d, *a))
                .collect(),
            prefill_secs: (first - self.submitted).as_secs_f64(),
            decode_secs: self.last_token.map_or(0.0, |l| (l - first).as_secs_f64()),
            ttft_secs: (first - self.submitted).as_secs_f64(),
            seed: self.seed,
        }
    }
}
