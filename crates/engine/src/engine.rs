//! The engine: one step is schedule → forward → draw → accept → commit → emit, over windows of
//! every running sequence at once (continuous batching: sequences join and leave between steps,
//! long prompts are prefilled in chunks while others keep decoding).

use crate::blocks::{chain_hashes, BlockHash, BlockPool};
use crate::cost::{CostModel, MAX_DRAFT, PROBE_EVERY, PROBE_SHARE};

/// Acceptance a draft model's guesses are assumed to have before any is observed: a draft
/// model of the target's family agrees with it far more often than a copy of the context
/// (Qwen2.5-Coder-0.5B against the 1.5B: 0.84-0.93 of first guesses on the bench's cells), and
/// starting from the copies' prior it would seldom be tried at all.
const DRAFT_MODEL_PRIOR: f64 = 0.7;

/// Acceptance assumed for copies before any is observed, by the length of the matched context
/// ([`COPY_SOURCES`] order): a continuation after a long match (an edit's unchanged lines)
/// is far more often right than one after a token or two, and a copy that is never tried
/// because a draft model looks better can never show it.
const COPY_PRIORS: [f64; 6] = [0.3, 0.4, 0.5, 0.6, 0.75, 0.85];
use crate::draw::{Ask, RoundOut};
use crate::error::EngineError;
use crate::proposer::SourceId;
use crate::proposer::{copy_source, Copies, Proposer, COPY_SOURCES};
use crate::request::{Event, FinishReason, Request};
use crate::runner::{Row, Runner};
use crate::sampler::Sampler;
use crate::sequence::Seq;
use crate::spill::SpillStore;
use std::collections::VecDeque;
use std::time::Instant;
use tf_core::{SeqId, TokenId};
use tf_kernels::attention::KeyRemap;
use tf_kernels::kv::BLOCK_SIZE;
use tf_models::TreeRow;
use tokio::sync::mpsc::UnboundedSender;

mod cache;
mod calibrate;
mod commit;
mod room;
mod times;

use room::GROW_AHEAD;

/// Nodes per extra tree branch.
const TREE_BRANCH_LEN: usize = 2;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Rows per step at most; prefill chunks share it with decode windows.
    pub max_step_rows: usize,
    /// Sequences decoding at once at most (the rest wait).
    pub max_running: usize,
    /// Requests allowed to wait for room; a submission beyond is refused with
    /// [`EngineError::QueueFull`].
    pub max_waiting: usize,
    /// `false` = `--no-drafts`: every request is served serially.
    pub drafts: bool,
    /// Guess at least this many tokens per round when drafting (0 = as the cost model decides).
    /// Tests use it to exercise multi-row windows on every round.
    pub min_drafts: usize,
    /// Extra copy branches verified beside the main guess chain (tree drafts), at most.
    pub tree_branches: usize,
    /// Add the extra branches whenever there are some, whatever the cost model says (tests).
    pub force_trees: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_step_rows: 256,
            max_running: 64,
            max_waiting: usize::MAX,
            drafts: true,
            min_drafts: 0,
            tree_branches: 2,
            force_trees: false,
        }
    }
}

/// A source of guesses for one window.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Source {
    /// Context copies, tracked by the name of their match length.
    Copies(SourceId),
    /// Index into `Engine::models`.
    Model(usize),
    /// Forced filler guesses (the last token repeated) when nothing else has one.
    Filler,
    /// The tokens a request's grammar forces next.
    Grammar,
}

pub(crate) struct Plan {
    pub(crate) seq: usize,
    /// Positions whose rows carry committed tokens without logits (prefill), or with logits on
    /// the last one when `window` is set and the sequence is not decoding yet.
    catch_up: std::ops::Range<usize>,
    pub(crate) window: bool,
    pub(crate) drafts: Vec<TokenId>,
    source: Option<Source>,
    /// Tree drafts: other branches (distinct first tokens) and the KV slots of their nodes.
    pub(crate) branches: Vec<Vec<TokenId>>,
    branch_slots: Vec<Vec<usize>>,
}

impl Plan {
    /// Output rows of the window: its first row, the guesses, the tree nodes.
    pub(crate) fn rows(&self) -> usize {
        1 + self.drafts.len() + self.branches.iter().map(Vec::len).sum::<usize>()
    }

    /// The catch-up positions whose rows give a prompt token's log-probability (the next
    /// position holds a prompt token), where the request asks for them; their rows come first.
    pub(crate) fn prompt_rows(&self, s: &Seq) -> std::ops::Range<usize> {
        match s.req.prompt_logprobs {
            true => {
                let start = self.catch_up.start.max(s.prompt_logprobs_sent);
                start..self.catch_up.end.min(s.prompt_len() - 1).max(start)
            }
            false => 0..0,
        }
    }
}

pub struct Engine {
    runner: Box<dyn Runner>,
    copies: Copies,
    models: Vec<Box<dyn Proposer>>,
    pub cost: CostModel,
    blocks: BlockPool,
    running: Vec<Seq>,
    waiting: VecDeque<Seq>,
    next_id: SeqId,
    pub config: EngineConfig,
    round: usize,
    /// Tokens run through the model since the start: prompt rows (prefill and catch-up), and
    /// reply tokens sent.
    prefilled: u64,
    generated: u64,
    /// Sequences admitted (the next one's `Seq::admitted`), and sent back to wait for room.
    admissions: u64,
    preemptions: u64,
    /// Every layer's window when all of them slide (`Runner::window`), and the blocks freed
    /// behind it since the start.
    window: Option<usize>,
    window_frees: u64,
    /// Where the wall time goes (`TENSORFOLD_ENGINE_TIMES=1`).
    times: times::Times,
    sampler: Sampler,
    /// Prefix cache salt: the runner's model and kernel identity.
    salt: BlockHash,
    /// The prefix cache's disk tier, if any.
    spill: Option<SpillStore>,
    /// The last forward's logits or greedy ids, kept so that each round reuses the buffers.
    out: RoundOut,
    /// A proposer reads the target's hidden states (the runner keeps them), and the last
    /// round's row count.
    feed_hidden: bool,
    round_rows: usize,
}

impl Engine {
    pub fn new(runner: Box<dyn Runner>, config: EngineConfig, mut cost: CostModel) -> Engine {
        for (name, p) in COPY_SOURCES.iter().zip(COPY_PRIORS) {
            cost.set_prior(*name, p);
        }
        let blocks = BlockPool::new(runner.kv_blocks());
        let salt = runner.cache_salt();
        let window = runner.window();
        Engine {
            runner,
            copies: Copies::default(),
            models: Vec::new(),
            cost,
            blocks,
            running: Vec::new(),
            waiting: VecDeque::new(),
            next_id: 1,
            config,
            round: 0,
            prefilled: 0,
            generated: 0,
            admissions: 0,
            preemptions: 0,
            window,
            window_frees: 0,
            times: times::Times::from_env(),
            sampler: Sampler::new(),
            salt,
            spill: None,
            out: RoundOut::default(),
            feed_hidden: false,
            round_rows: 0,
        }
    }

    /// Spreads the sampler's passes over the whole vocabulary over `pool`'s threads (the same
    /// tokens; the pool is idle while a round's tokens are drawn).
    pub fn sample_on(&mut self, pool: std::sync::Arc<tf_kernels::ThreadPool>) {
        self.sampler = Sampler::with_pool(pool);
    }

    /// Adds a proposer that runs a model (a draft model).
    pub fn add_draft_model(&mut self, p: Box<dyn Proposer>) {
        self.cost.set_prior(p.id(), DRAFT_MODEL_PRIOR);
        if p.takes_hidden() && self.runner.keep_hidden(true) {
            self.feed_hidden = true;
        }
        self.models.push(p);
    }

    pub fn vocab(&self) -> usize {
        self.runner.vocab()
    }

    pub fn context_len(&self) -> usize {
        self.runner.context_len()
    }

    pub fn free_blocks(&self) -> usize {
        self.blocks.free_count()
    }

    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Checks and queues a request; its events go to `events`.
    pub fn submit(
        &mut self,
        req: Request,
        events: UnboundedSender<Event>,
    ) -> Result<SeqId, EngineError> {
        let vocab = self.runner.vocab();
        if req.prompt.is_empty() {
            return Err(EngineError::InvalidRequest("the prompt is empty".into()));
        }
        if let Some(bad) = req.prompt.iter().find(|t| **t as usize >= vocab) {
            return Err(EngineError::InvalidRequest(format!(
                "token id {bad} is outside the vocabulary (size {vocab})"
            )));
        }
        if req.max_tokens == 0 {
            return Err(EngineError::InvalidRequest(
                "max_tokens must be at least 1".into(),
            ));
        }
        req.params
            .validate()
            .map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
        let context = self.runner.context_len();
        if req.prompt.len() + req.max_tokens > context {
            return Err(EngineError::ContextExceeded {
                prompt: req.prompt.len(),
                max_tokens: req.max_tokens,
                context,
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        let seq = Seq::new(id, req, events);
        if self.blocks_held_at_most(&seq) > self.blocks.total() {
            return Err(EngineError::InvalidRequest(
                "the request needs more KV cache than the engine has".into(),
            ));
        }
        // Admit at once what fits, so that the queue holds only requests that really wait.
        self.admit();
        if self.waiting.len() >= self.config.max_waiting {
            return Err(EngineError::QueueFull {
                waiting: self.waiting.len(),
            });
        }
        self.waiting.push_back(seq);
        self.admit();
        Ok(id)
    }

    /// Ends request `id`'s reply after its first `keep` tokens (the client's stop string ended
    /// there): the tokens past them are dropped, and the receipt covers exactly the reply.
    pub fn stop_at(&mut self, id: SeqId, keep: usize) {
        for s in self.running.iter_mut().chain(self.waiting.iter_mut()) {
            if s.id == id && s.finished.is_none() {
                let end = s.prompt_len() + keep;
                if s.tokens.len() > end {
                    s.tokens.truncate(end);
                    s.kv_len = s.kv_len.min(end);
                }
                s.finished = Some(FinishReason::Stop);
            }
        }
    }

    pub fn cancel(&mut self, id: SeqId) {
        for s in self.running.iter_mut().chain(self.waiting.iter_mut()) {
            if s.id == id && s.finished.is_none() {
                s.finished = Some(FinishReason::Cancelled);
            }
        }
    }

    fn admit(&mut self) {
        while self.running.len() < self.config.max_running {
            let Some(mut s) = self.waiting.pop_front() else {
                break;
            };
            if s.finished.is_some() || s.events.is_closed() {
                let _ = s.events.send(Event::Done(s.receipt()));
                continue;
            }
            // Reuse the longest cached prefix, leaving at least the last prompt token to run
            // (its logits draw the first reply token).
            // Reuse the longest cached prefix of the committed tokens (a preempted sequence's
            // reply too). A request for the prompt's log-probabilities computes every prompt row.
            let reusable = match s.req.prompt_logprobs && s.first_token.is_none() {
                true => 0,
                false => (s.tokens.len() - 1) / BLOCK_SIZE,
            };
            let hashes = chain_hashes(&self.salt, &[], &s.tokens, reusable);
            let mut cached = self.blocks.lookup(&hashes);
            // A recurrent model resumes only where it kept its state.
            let resumable = (0..=cached.len())
                .rev()
                .find(|&n| n == 0 || self.runner.resumable(cached[n - 1]))
                .unwrap_or(0);
            let cut = resumable < cached.len();
            for mut b in cached.drain(resumable..).rev().collect::<Vec<_>>() {
                self.blocks.release_one(&mut b);
            }
            let in_ram = cached.len();
            // The disk tier may continue the chain where RAM stops.
            let mut on_disk = self.spill.as_ref().filter(|_| !cut).map_or(0, |st| {
                hashes[in_ram..]
                    .iter()
                    .take_while(|h| st.contains(h))
                    .count()
            });
            // Room for the prompt and a stretch of the reply; the table grows with the reply
            // (`grow_running`), so a large `max_tokens` does not take the pool up front.
            // (Past the cached prefix in either tier, whose blocks are loaded now; a disk part
            // that does not fit the whole pool is prefilled instead.)
            s.table = cached;
            let grown = loop {
                s.kv_len = (in_ram + on_disk) * BLOCK_SIZE;
                let slots =
                    (s.slots_needed(self.config.max_step_rows) + GROW_AHEAD).min(s.max_slots());
                s.kv_len = 0;
                let ok = self.blocks.grow(&mut s.table, slots);
                // Waiting helps while others run; alone, the disk part can never fit.
                if ok || on_disk == 0 || !self.running.is_empty() {
                    break ok;
                }
                on_disk = 0;
            };
            if !grown {
                self.blocks.release(&mut s.table);
            }
            // Blocks evicted to make room keep their keys and values until a forward or a load
            // writes them: save them first.
            self.spill_evicted();
            if !grown {
                self.waiting.push_front(s);
                break;
            }
            let range = in_ram..in_ram + on_disk;
            let mut hit = in_ram + self.load_spilled(&s.table[range.clone()], &hashes[range]);
            while hit > in_ram && !self.runner.resumable(s.table[hit - 1]) {
                // Loaded without a state: prefilled again (the same bits) from the last kept one.
                hit -= 1;
            }
            s.hashes = hashes[..hit].to_vec();
            s.kv_len = hit * BLOCK_SIZE;
            if s.first_token.is_none() {
                s.cached_tokens = s.kv_len;
            }
            self.admissions += 1;
            s.admitted = self.admissions;
            if hit > 0 {
                self.blocks.stats.hits += 1;
                self.blocks.stats.hit_tokens += s.kv_len as u64;
            }
            self.running.push(s);
        }
    }

    /// One step. Returns false when there was nothing to do.
    pub fn step(&mut self) -> Result<bool, EngineError> {
        for s in &mut self.running {
            if s.events.is_closed() && s.finished.is_none() {
                s.finished = Some(FinishReason::Cancelled);
            }
        }
        self.reap();
        self.admit();
        self.grow_running();
        if self.running.is_empty() {
            return Ok(false);
        }
        self.round += 1;
        self.times.step();
        debug_assert!(!self.blocks.has_evicted(), "evicted blocks not spilled");
        let t_schedule = self.times.start();
        let plans = self.schedule();
        self.times.add(times::Part::Schedule, t_schedule, None);
        let rows = build_rows(&self.running, &plans);
        let total_rows = rows.len();
        self.round_rows = total_rows;
        self.prefilled += plans.iter().map(|p| p.catch_up.len() as u64).sum::<u64>();
        let t = Instant::now();
        let t_forward = self.times.start();
        let ask = Ask::for_round(&self.running, &plans, &rows);
        let mut out = std::mem::take(&mut self.out);
        // The verdicts are drawn while the logits may still be the runner's; it is free again
        // when they are applied.
        let result = out.forward(self.runner.as_mut(), &rows, &ask).map(|drawn| {
            let secs = t.elapsed().as_secs_f64();
            (
                secs,
                Self::accept_all(&mut self.sampler, &self.running, &plans, drawn),
            )
        });
        self.out = out;
        drop(rows);
        let (secs, (verdicts, prompt_logprobs)) = match result {
            Ok(r) => r,
            Err(e) => {
                for p in &plans {
                    let s = &mut self.running[p.seq];
                    let _ = s.events.send(Event::Error(e.to_string()));
                    s.finished = Some(FinishReason::Error);
                }
                self.reap();
                return Err(e);
            }
        };
        self.times.add(times::Part::Forward, t_forward, None);
        self.cost.observe_forward(total_rows, secs);
        let t_commit = self.times.start();
        for (p, lps) in plans.iter().zip(prompt_logprobs) {
            if lps.is_empty() {
                continue;
            }
            let end = p.prompt_rows(&self.running[p.seq]).end;
            let s = &mut self.running[p.seq];
            s.prompt_logprobs_sent = end;
            if s.events.send(Event::PromptLogprobs(lps)).is_err() {
                s.finished = Some(FinishReason::Cancelled);
            }
        }
        self.commit(&plans, verdicts);
        self.index_blocks();
        self.free_outside_windows();
        self.reap();
        self.catch_up_models();
        self.times.add(times::Part::Commit, t_commit, None);
        Ok(true)
    }

    /// Decide every sequence's rows for this step.
    fn schedule(&mut self) -> Vec<Plan> {
        let mut plans = Vec::new();
        let mut rows = 0;
        for (i, s) in self.running.iter().enumerate() {
            if s.decoding() {
                plans.push(Plan {
                    seq: i,
                    catch_up: 0..0,
                    window: true,
                    drafts: Vec::new(),
                    source: None,
                    branches: Vec::new(),
                    branch_slots: Vec::new(),
                });
                rows += 1;
            }
        }
        let mut budget = self.config.max_step_rows.saturating_sub(rows);
        for (i, s) in self.running.iter().enumerate() {
            if s.decoding() || budget == 0 {
                continue;
            }
            let remaining = s.tokens.len() - s.kv_len;
            let n = remaining.min(budget);
            plans.push(Plan {
                seq: i,
                catch_up: s.kv_len..s.kv_len + n,
                window: n == remaining,
                drafts: Vec::new(),
                source: None,
                branches: Vec::new(),
                branch_slots: Vec::new(),
            });
            budget -= n;
            rows += n;
        }
        if self.config.drafts {
            for plan in plans.iter_mut() {
                let s = &self.running[plan.seq];
                if !s.decoding() || !s.req.draft {
                    continue;
                }
                // Guesses past max_tokens can never be committed; only forced drafting (which
                // exists to exercise multi-row windows on every round) verifies them anyway.
                let room = (s.req.max_tokens - s.generated().len())
                    .saturating_sub(1)
                    .max(self.config.min_drafts)
                    .min(MAX_DRAFT);
                if room == 0 {
                    continue;
                }
                let (source, mut drafts) = self.choose_drafts(plan.seq, rows - 1, room);
                // Guesses a grammar forbids are never drawn: they are cut, not verified.
                let guide = self.running[plan.seq].guide.as_ref();
                if let Some(g) = guide {
                    drafts.truncate(g.valid_prefix(&drafts));
                }
                rows += drafts.len();
                let found = match source {
                    Some(Source::Copies(_)) => Some(None),
                    Some(Source::Model(mi)) => Some(Some(self.models[mi].branches()))
                        .filter(|b| b.as_ref().is_some_and(|b| !b.is_empty())),
                    _ => None,
                };
                if let (Some(found), None) = (found, guide) {
                    let fit = (rows, room);
                    let (branches, slots) = self.choose_branches(plan.seq, &drafts, fit, found);
                    rows += branches.iter().map(Vec::len).sum::<usize>();
                    plan.branches = branches;
                    plan.branch_slots = slots;
                }
                plan.drafts = drafts;
                plan.source = source;
            }
        }
        plans
    }

    /// The guesses for one decoding sequence, sized by the cost model.
    fn choose_drafts(
        &mut self,
        seq: usize,
        other_rows: usize,
        room: usize,
    ) -> (Option<Source>, Vec<TokenId>) {
        let s = &self.running[seq];
        // Where the grammar leaves one way on (a schema's next key, its punctuation), those
        // tokens are the best guess there is; they cost nothing to propose.
        if let Some(g) = &s.guide {
            let mut forced = g.forced();
            if !forced.is_empty() {
                forced.truncate(room);
                return (Some(Source::Grammar), forced);
            }
        }
        let view = s.view();
        let (mut copy, match_len) = self.copies.lookup_with_len(view.tokens, room);
        let copy_name = copy_source(match_len);
        let id = Some(s.id);
        let k_copy = self
            .cost
            .best_window(copy_name, id, copy.len(), other_rows, 0.0);
        let rate = |cost: &CostModel, name: SourceId, k: usize, per: f64, extra: f64| {
            cost.expected_tokens(name, id, k)
                / (cost.forward_secs(other_rows + 1 + k) + per * k as f64 + extra)
        };
        let mut best: (Option<Source>, usize, f64) =
            (None, 0, rate(&self.cost, copy_name, 0, 0.0, 0.0));
        if k_copy > 0 {
            best = (
                Some(Source::Copies(copy_name)),
                k_copy,
                rate(&self.cost, copy_name, k_copy, 0.0, 0.0),
            );
        }
        let mut useful_models = Vec::new();
        for (mi, m) in self.models.iter().enumerate() {
            if !s.model_on(mi) {
                continue;
            }
            let per = self.cost.propose_secs(m.id());
            // A draft model that could not pay even with every guess right is not run at all:
            // each use also costs it a catch-up over the tokens committed since its last use.
            if !self.cost.can_ever_pay(other_rows, per) {
                continue;
            }
            useful_models.push(mi);
            let k = self.cost.best_window(m.id(), id, room, other_rows, per);
            let catch_up = self.cost.catch_up_secs(m.id(), m.behind(&view));
            let r = rate(&self.cost, m.id(), k, per, catch_up);
            if k > 0 && r > best.2 {
                best = (Some(Source::Model(mi)), k, r);
            }
        }
        let (mut source, mut k) = (best.0, best.1);
        // Probe a silent proposer now and then, so that it can earn its way back. A draft model
        // is probed also when copies took the round: short matches that cost nothing to guess
        // pay whenever a two-row forward costs about one row, and would otherwise keep a model
        // that looked dear once (an unlucky measurement) from ever being measured again.
        let probe_round = self.round % PROBE_EVERY == (s.id as usize) % PROBE_EVERY;
        if probe_round && !matches!(source, Some(Source::Model(_))) {
            // Copies and draft models take turns, so neither keeps the other from being seen.
            let model_turn = (self.round / PROBE_EVERY) % 2 == 1 || copy.is_empty();
            let usable = (0..self.models.len()).any(|mi| s.model_on(mi));
            if model_turn && usable {
                // Every model takes its turn, also one that looked too dear to pay: its cost
                // is measured again, in case the last measurement was unlucky.
                let mut pool = useful_models.clone();
                if (self.round / PROBE_EVERY / 2) % 4 == 3 || pool.is_empty() {
                    pool = (0..self.models.len())
                        .filter(|&mi| s.model_on(mi))
                        .collect();
                }
                let pick = pool[self.round / PROBE_EVERY / 2 % pool.len()];
                // Not in place of copies when the model would first catch up over more than a
                // step's worth of tokens (copies committed them meanwhile, as in an edit): while
                // copies land the model is not missed, and a round without them probes it,
                // catch-up and all.
                let m = &self.models[pick];
                let catch_up = self.cost.catch_up_whole_secs(m.id(), m.behind(&view));
                let dear = catch_up > self.cost.forward_secs(1);
                // Nor ever when the catch-up alone would cost more than the rounds between
                // probes can absorb.
                let affordable =
                    catch_up <= PROBE_SHARE * PROBE_EVERY as f64 * self.cost.forward_secs(1);
                if affordable && (source.is_none() || !dear) {
                    (source, k) = (Some(Source::Model(pick)), 1);
                }
            } else if source.is_none() && !copy.is_empty() {
                (source, k) = (Some(Source::Copies(copy_name)), 1);
            }
        }
        let forced = self.config.min_drafts.min(room);
        if k < forced {
            if copy.len() >= forced {
                (source, k) = (Some(Source::Copies(copy_name)), forced);
            } else if !self.models.is_empty() && s.model_on(0) {
                (source, k) = (Some(Source::Model(0)), forced);
            } else {
                (source, k) = (Some(Source::Filler), forced);
            }
        }
        let drafts = match source {
            None => Vec::new(),
            Some(Source::Copies(_)) => {
                copy.truncate(k);
                copy
            }
            Some(Source::Grammar) => unreachable!("grammar guesses return early"),
            Some(Source::Filler) => {
                vec![*s.tokens.last().expect("decoding sequences have tokens"); k]
            }
            Some(Source::Model(mi)) => {
                let t = Instant::now();
                let t_propose = self.times.start();
                let d = self.models[mi].propose(&view, k);
                self.times
                    .add(times::Part::Propose, t_propose, Some(times::Part::Schedule));
                let m = &self.models[mi];
                let secs = match m.last_guess_secs() {
                    Some(per) => per * d.len() as f64,
                    None => t.elapsed().as_secs_f64(),
                };
                self.cost.observe_propose(m.id(), d.len(), secs);
                if let Some((rows, secs)) = m.last_catch_up() {
                    self.cost.observe_catch_up(m.id(), rows, secs);
                }
                d
            }
        };
        (source, drafts)
    }

    /// Tree drafts: other continuations the context offers (distinct first tokens), verified in
    /// the same forward. Each branch node gets its own KV slot after the main chain's; it reads
    /// its ancestors through a remap, so it computes exactly what the serial row would.
    /// A draft model's own alternatives (an MTP head's runner-up first tokens) are placed the
    /// same way, in `found`.
    fn choose_branches(
        &self,
        seq: usize,
        chain: &[TokenId],
        (rows, room): (usize, usize),
        found: Option<Vec<Vec<TokenId>>>,
    ) -> (Vec<Vec<TokenId>>, Vec<Vec<usize>>) {
        if self.config.tree_branches == 0 || chain.is_empty() {
            return (Vec::new(), Vec::new());
        }
        let s = &self.running[seq];
        let len = s.tokens.len();
        let per_branch = chain.len().min(TREE_BRANCH_LEN);
        let found = found.unwrap_or_else(|| {
            let max = self.config.tree_branches + 1;
            self.copies.branches(&s.tokens, per_branch, max).0
        });
        let found = found.into_iter().map(|mut b| {
            b.truncate(per_branch);
            b
        });
        let mut branches = Vec::new();
        let mut slots = Vec::new();
        let mut next_slot = len + chain.len();
        let mut nodes = chain.len();
        for b in found.filter(|b| !b.is_empty() && b[0] != chain[0]) {
            if branches.len() == self.config.tree_branches || nodes + b.len() > room {
                break;
            }
            // Only when the extra rows are (nearly) free, unless forced.
            let extra = b.len();
            let cost_now = self
                .cost
                .forward_secs(rows + branches.iter().map(Vec::len).sum::<usize>());
            if !self.config.force_trees
                && self
                    .cost
                    .forward_secs(rows + branches.iter().map(Vec::len).sum::<usize>() + extra)
                    > cost_now * 1.03
            {
                break;
            }
            slots.push((next_slot..next_slot + extra).collect());
            next_slot += extra;
            nodes += extra;
            branches.push(b);
        }
        (branches, slots)
    }

    fn source_id(&self, source: Source) -> SourceId {
        match source {
            Source::Copies(id) => id,
            Source::Filler => SourceId::Filler,
            Source::Grammar => SourceId::Grammar,
            Source::Model(i) => self.models[i].id(),
        }
    }
}

/// The rows of a step, in plan order: catch-up rows, then each window's pending row and guesses.
fn build_rows<'a>(running: &'a [Seq], plans: &'a [Plan]) -> Vec<Row<'a>> {
    {
        let mut rows = Vec::new();
        for p in plans {
            let s = &running[p.seq];
            let last = s.tokens.len() - 1;
            let prompt_rows = p.prompt_rows(s);
            for pos in p.catch_up.clone() {
                rows.push(Row {
                    token: s.tokens[pos],
                    pos,
                    seq: s.id,
                    keep: true,
                    table: &s.table,
                    logits: p.window && pos == last || prompt_rows.contains(&pos),
                    tree: None,
                });
            }
            if p.window && s.decoding() {
                rows.push(Row {
                    token: s.tokens[last],
                    pos: last,
                    seq: s.id,
                    keep: true,
                    table: &s.table,
                    logits: true,
                    tree: None,
                });
                for (j, d) in p.drafts.iter().enumerate() {
                    rows.push(Row {
                        token: *d,
                        pos: last + 1 + j,
                        seq: s.id,
                        keep: false,
                        table: &s.table,
                        logits: true,
                        tree: None,
                    });
                }
                for (branch, slots) in p.branches.iter().zip(&p.branch_slots) {
                    for (j, d) in branch.iter().enumerate() {
                        rows.push(Row {
                            token: *d,
                            pos: last + 1 + j,
                            seq: s.id,
                            keep: false,
                            table: &s.table,
                            logits: true,
                            tree: Some(TreeRow {
                                slot: slots[j],
                                remap: KeyRemap {
                                    base: last + 1,
                                    slots: &slots[..=j],
                                },
                            }),
                        });
                    }
                }
            }
        }
        rows
    }
}

impl Engine {
    /// Finishes and frees every sequence that is done.
    fn reap(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].finished.is_some() {
                let mut s = self.running.swap_remove(i);
                self.times.report();
                let _ = s.events.send(Event::Done(s.receipt()));
                self.blocks.release(&mut s.table);
                self.runner.release(s.id);
                self.spill_evicted();
                for m in &mut self.models {
                    m.release(s.id);
                }
                self.cost.forget(s.id);
            } else {
                i += 1;
            }
        }
        self.waiting.retain(|s| {
            if s.finished.is_some() || s.events.is_closed() {
                let _ = s.events.send(Event::Done(s.receipt()));
                false
            } else {
                true
            }
        });
    }
}
