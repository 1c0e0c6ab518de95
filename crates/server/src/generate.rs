//! One request's run on the engine, as the HTTP side sees it: token ids in, text pieces out
//! (stop strings removed), then an [`Outcome`] with the receipt.
//!
//! Dropping a [`Generation`] before its end cancels the request (the engine frees its blocks
//! within one step) and counts a client disconnection.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use tf_core::{SeqId, TokenId};
use tf_engine::{
    token_sha, EngineError, Event, EventStream, FinishReason, Receipt, Request, TokenLogprob,
};
use tf_text::StreamDecoder;

use crate::error::{ApiError, ApiResult};
use crate::output::stop::{StopMatcher, StopScan};
use crate::state::{Backend, SharedState, ToolFormat};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its turn.
    Stop,
    /// A stop string matched (it is not part of the text).
    StopString(String),
    Length,
    Error(String),
}

/// How a finished request went.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub finish: Finish,
    pub prompt_tokens: usize,
    pub cached_tokens: usize,
    /// Reply tokens up to the end of the reply (the end-of-turn token included, and, for a stop
    /// string, up to the token that completed it).
    pub tokens: Vec<TokenId>,
    /// One per token of `tokens` where the request asked for log-probabilities, else empty.
    pub logprobs: Vec<TokenLogprob>,
    /// One per prompt token after the first where the request asked for them, else empty.
    pub prompt_logprobs: Vec<TokenLogprob>,
    pub token_sha: String,
    pub receipt: Receipt,
    pub e2e_secs: f64,
}

pub enum Step {
    Text(String),
    Done(Box<Outcome>),
}

pub struct Generation {
    state: SharedState,
    backend: Arc<Backend>,
    id: SeqId,
    events: EventStream,
    prompt_tokens: usize,
    decoder: StreamDecoder,
    stop: StopMatcher,
    stop_hit: Option<String>,
    tokens: Vec<TokenId>,
    /// Log-probabilities the engine sent for tokens not yet taken in, then those of `tokens`
    /// (one each), and how many of those [`Generation::take_logprobs`] handed out.
    lp_queue: VecDeque<TokenLogprob>,
    logprobs: Vec<TokenLogprob>,
    prompt_logprobs: Vec<TokenLogprob>,
    lp_taken: usize,
    error: Option<String>,
    started: Instant,
    pending_done: Option<Box<Outcome>>,
    done: bool,
}

fn engine_error(e: EngineError) -> ApiError {
    match e {
        EngineError::ContextExceeded { .. } => {
            ApiError::context_exceeded(e.to_string(), "max_tokens")
        }
        EngineError::InvalidRequest(m) => ApiError::bad_request(m),
        EngineError::QueueFull { .. } => ApiError::unavailable(e.to_string()),
        EngineError::Stopped => ApiError::unavailable("the engine has stopped"),
        EngineError::Model(m) => ApiError::internal(m.to_string()),
        EngineError::Backend(m) => ApiError::internal(m),
    }
}

impl Generation {
    pub async fn start(
        state: SharedState,
        backend: Arc<Backend>,
        mut request: Request,
        stop: &[String],
    ) -> ApiResult<Generation> {
        let started = Instant::now();
        let prompt_tokens = request.prompt.len();
        let stop = StopMatcher::new(stop);
        request.stop_tokens = backend.tokenizer.eog_ids().to_vec();
        // Harmony replies keep their control tokens: the reply parser reads the channels.
        let decoder = StreamDecoder::new(backend.tool_format != ToolFormat::Harmony);
        let (id, events) = backend
            .engine
            .submit_async(request)
            .await
            .map_err(engine_error)?;
        Ok(Generation {
            state,
            backend,
            id,
            events,
            prompt_tokens,
            decoder,
            stop,
            stop_hit: None,
            tokens: Vec::new(),
            lp_queue: VecDeque::new(),
            logprobs: Vec::new(),
            prompt_logprobs: Vec::new(),
            lp_taken: 0,
            error: None,
            started,
            pending_done: None,
            done: false,
        })
    }

    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    /// The next piece of text (never empty), or the outcome; `None` after the outcome.
    pub async fn next(&mut self) -> Option<Step> {
        if let Some(done) = self.pending_done.take() {
            return Some(Step::Done(done));
        }
        if self.done {
            return None;
        }
        loop {
            let event = self.events.recv().await;
            match event {
                Some(Event::Tokens(ids)) => {
                    if let Some(text) = self.take_tokens(&ids) {
                        return Some(Step::Text(text));
                    }
                }
                Some(Event::Logprobs(lps)) => self.lp_queue.extend(lps),
                Some(Event::PromptLogprobs(lps)) => self.prompt_logprobs.extend(lps),
                Some(Event::Error(message)) => self.error = Some(message),
                Some(Event::Done(receipt)) => return Some(self.finish(receipt)),
                None => {
                    self.error = Some("the engine stopped".into());
                    let receipt = Receipt {
                        token_sha: String::new(),
                        prompt_tokens: self.prompt_tokens,
                        cached_tokens: 0,
                        completion_tokens: self.tokens.len(),
                        finish: FinishReason::Error,
                        min_rows: 0,
                        rounds: 0,
                        drafted: 0,
                        accepted: 0,
                        sources: Vec::new(),
                        by_position: Vec::new(),
                        prefill_secs: 0.0,
                        decode_secs: 0.0,
                        ttft_secs: 0.0,
                        seed: 0,
                    };
                    return Some(self.finish(receipt));
                }
            }
        }
    }

    /// The prompt tokens' log-probabilities (all of them once the reply's first text came).
    pub fn prompt_logprobs(&self) -> &[TokenLogprob] {
        &self.prompt_logprobs
    }

    /// The log-probabilities of the reply's tokens taken in since the last call (none unless
    /// the request asked for them).
    pub fn take_logprobs(&mut self) -> Vec<TokenLogprob> {
        let new = self.logprobs[self.lp_taken..].to_vec();
        self.lp_taken = self.logprobs.len();
        new
    }

    fn take_tokens(&mut self, ids: &[TokenId]) -> Option<String> {
        if self.stop_hit.is_some() {
            // Tokens past a stop string (the rest of a drafted window) are not part of the reply.
            return None;
        }
        let mut text = String::new();
        for &id in ids {
            self.tokens.push(id);
            self.logprobs.extend(self.lp_queue.pop_front());
            let piece = self.decoder.push(&self.backend.tokenizer, id);
            match self.stop.push(&piece) {
                StopScan::Emit(t) => text.push_str(&t),
                StopScan::Matched { emit, stop } => {
                    text.push_str(&emit);
                    self.stop_hit = Some(stop);
                    // The reply ends at this token: the engine drops the rest and its receipt
                    // covers exactly these tokens.
                    self.backend.engine.stop_at(self.id, self.tokens.len());
                    break;
                }
            }
        }
        (!text.is_empty()).then_some(text)
    }

    fn finish(&mut self, receipt: Receipt) -> Step {
        self.done = true;
        let mut tail = String::new();
        if self.stop_hit.is_none() {
            let rest = self.decoder.finish();
            match self.stop.push(&rest) {
                StopScan::Emit(t) => {
                    tail.push_str(&t);
                    tail.push_str(&self.stop.flush());
                }
                StopScan::Matched { emit, stop } => {
                    tail.push_str(&emit);
                    self.stop_hit = Some(stop);
                }
            }
        }
        let finish = if let Some(stop) = self.stop_hit.clone() {
            Finish::StopString(stop)
        } else if let Some(message) = self.error.clone() {
            Finish::Error(message)
        } else {
            match receipt.finish {
                FinishReason::Stop => Finish::Stop,
                FinishReason::Length => Finish::Length,
                FinishReason::Cancelled => Finish::Error("the request was cancelled".into()),
                FinishReason::Error => Finish::Error("the engine failed".into()),
            }
        };
        let e2e_secs = self.started.elapsed().as_secs_f64();
        let metrics = &self.state.metrics;
        match finish {
            Finish::Error(_) => {
                metrics.failed();
                metrics.account(&receipt, self.tokens.len());
            }
            _ => metrics.finished(&receipt, self.tokens.len(), e2e_secs),
        }
        // The engine's receipt covers the reply (a stop string's cut included, `stop_at`);
        // where it could not (the engine ended the request first, or stopped), the reply's own.
        let sha = match receipt.completion_tokens == self.tokens.len() {
            true if !receipt.token_sha.is_empty() => receipt.token_sha.clone(),
            _ => token_sha(&self.tokens),
        };
        log_line(
            self.id,
            &finish,
            &receipt,
            &sha,
            self.tokens.len(),
            e2e_secs,
        );
        let outcome = Box::new(Outcome {
            finish,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: receipt.cached_tokens,
            token_sha: sha,
            tokens: std::mem::take(&mut self.tokens),
            logprobs: self.logprobs.clone(),
            prompt_logprobs: std::mem::take(&mut self.prompt_logprobs),
            receipt,
            e2e_secs,
        });
        if tail.is_empty() {
            Step::Done(outcome)
        } else {
            self.pending_done = Some(outcome);
            Step::Text(tail)
        }
    }
}

/// One line per finished request on stderr: what it cost and what the caches saved.
fn log_line(id: SeqId, finish: &Finish, r: &Receipt, sha: &str, completion: usize, e2e_secs: f64) {
    let finish = match finish {
        Finish::Stop => "stop".to_string(),
        Finish::StopString(_) => "stop-string".to_string(),
        Finish::Length => "length".to_string(),
        Finish::Error(m) => format!("error ({m})"),
    };
    let tps = if r.decode_secs > 0.0 && completion > 1 {
        (completion - 1) as f64 / r.decode_secs
    } else {
        0.0
    };
    eprintln!(
        "{}request {id}: {finish}, prompt {} (cached {}), reply {completion} tokens, ttft {:.3}s, \
         {tps:.1} tok/s, drafted {} accepted {}, {:.3}s total, token_sha {sha}",
        crate::routes::dashboard::clear_prefix(),
        r.prompt_tokens,
        r.cached_tokens,
        r.ttft_secs,
        r.drafted,
        r.accepted,
        e2e_secs
    );
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.done {
            self.backend.engine.cancel(self.id);
            self.state.metrics.disconnected();
            eprintln!(
                "{}request {}: client went away after {} tokens; cancelled",
                crate::routes::dashboard::clear_prefix(),
                self.id,
                self.tokens.len()
            );
        }
    }
}
