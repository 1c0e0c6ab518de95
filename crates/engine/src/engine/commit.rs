//! The second half of an engine step: draw and accept every window from the round's output
//! (`draw.rs`), then commit and emit the verdicts — tokens appended, stops checked, the KV length
//! moved, proposers and the cost model told, the tokens sent — and, after the step, the next part
//! of a draft model's catch-up with a long prompt.

use super::{Engine, Plan};
use crate::cost::MAX_DRAFT;
use crate::draw::{accept, Drawn, Verdict};
use crate::logprobs::{token_logprob, TokenLogprob};
use crate::proposer::SourceId;
use crate::request::{Event, FinishReason};
use crate::sampler::Sampler;
use crate::sequence::Seq;
use std::time::Instant;

impl Engine {
    /// Draw and accept every planned window (verdicts in plan order, `None` for plans without
    /// a window), and read the log-probabilities of the prompt tokens whose rows the plans
    /// computed for that (in plan order; empty where none).
    pub(super) fn accept_all(
        sampler: &mut Sampler,
        running: &[Seq],
        plans: &[Plan],
        drawn: Drawn,
    ) -> (Vec<Option<Verdict>>, Vec<Vec<TokenLogprob>>) {
        let mut at = 0;
        let mut prompt = Vec::with_capacity(plans.len());
        let verdicts = plans
            .iter()
            .map(|p| {
                let s = &running[p.seq];
                // A plan's prompt rows come before its window's.
                let rows = p.prompt_rows(s);
                let top = s.req.logprobs.unwrap_or(0);
                let lps: Vec<TokenLogprob> = (rows.clone().enumerate())
                    .map(|(i, pos)| {
                        let row = drawn.row(at + i).expect("prompt rows bring logits back");
                        token_logprob(row, s.tokens[pos + 1], top)
                    })
                    .collect();
                at += lps.len();
                prompt.push(lps);
                if !p.window {
                    return None;
                }
                let v = accept(drawn, sampler, s, p, at);
                at += p.rows();
                Some(v)
            })
            .collect();
        (verdicts, prompt)
    }

    /// Commit and emit every planned window's verdict.
    pub(super) fn commit(&mut self, plans: &[Plan], verdicts: Vec<Option<Verdict>>) {
        let now = Instant::now();
        // Each plan's first row in the round (catch-up rows, then the window's).
        let mut at = 0;
        for (p, verdict) in plans.iter().zip(verdicts) {
            let decoding = self.running[p.seq].decoding();
            let base = at;
            at += p.catch_up.len() + if p.window && decoding { p.rows() } else { 0 };
            if self.feed_hidden && !p.catch_up.is_empty() {
                let (id, rows) = (self.running[p.seq].id, base..base + p.catch_up.len());
                self.hand_hidden(id, p.catch_up.start, rows);
            }
            let s = &mut self.running[p.seq];
            if !p.catch_up.is_empty() {
                s.kv_len = p.catch_up.end;
            }
            let Some(Verdict {
                emitted,
                accepted,
                via_branch,
                logprobs,
            }) = verdict
            else {
                continue;
            };
            let len = s.tokens.len();
            let k = p.drafts.len();
            let tree_nodes: usize = p.branches.iter().map(Vec::len).sum();
            // Accepted rows of an extra branch move from their slots to their positions.
            if let Some(b) = via_branch {
                let moves: Vec<(usize, usize)> = (0..accepted)
                    .map(|i| (p.branch_slots[b][i], len + i))
                    .collect();
                self.runner.copy_slots(s.id, &s.table, &moves);
            }
            // The window's rows hold committed tokens up to the last accepted guess.
            s.kv_len = len + accepted;
            if self.feed_hidden && decoding {
                // The window's first row, then its accepted guesses (of the chain or a branch).
                let (id, first) = (s.id, base + p.catch_up.len());
                let guesses = match via_branch {
                    None => first + 1,
                    Some(b) => {
                        let before: usize = p.branches[..b].iter().map(Vec::len).sum();
                        first + 1 + p.drafts.len() + before
                    }
                };
                self.hand_hidden(id, len - 1, first..first + 1);
                self.hand_hidden(id, len, guesses..guesses + accepted);
            }
            let s = &mut self.running[p.seq];
            let mut kept = Vec::with_capacity(emitted.len());
            for t in emitted {
                s.tokens.push(t);
                kept.push(t);
                if !s.req.ignore_eos && s.req.stop_tokens.contains(&t) {
                    s.finished = Some(FinishReason::Stop);
                    break;
                }
                if s.generated().len() >= s.req.max_tokens {
                    s.finished = Some(FinishReason::Length);
                    break;
                }
            }
            // A prompt just prefilled: draft models that may be used catch up now, inside the
            // prompt's time, instead of in the reply's first round. The first token leaves
            // after that, so the receipt's time to first token is the client's. A catch-up
            // dearer than a step's forward runs in parts after the first token instead
            // (`catch_up_models`). A model whose prefill could not pay within the reply is not
            // run for it at all.
            let mut sent_at = now;
            if !decoding && s.finished.is_none() && s.req.draft && self.config.drafts {
                let view = s.view();
                let left = s
                    .req
                    .max_tokens
                    .saturating_sub(view.tokens.len() - view.prompt_len);
                let (mut off, mut behind) = (Vec::new(), Vec::new());
                for (mi, m) in self.models.iter_mut().enumerate() {
                    if !self.cost.can_ever_pay(0, self.cost.propose_secs(m.id())) {
                        continue;
                    }
                    let rows = m.behind(&view);
                    let step = self
                        .cost
                        .catch_up_rows_like(m.id(), self.config.max_step_rows);
                    if !self.cost.prefill_can_pay(m.id(), rows, left) {
                        off.push(mi);
                    } else if rows > step {
                        behind.push(mi);
                    } else {
                        let t = self.times.start();
                        m.prefill(&view, usize::MAX);
                        self.times.add(
                            super::times::Part::DraftPrefill,
                            t,
                            Some(super::times::Part::Commit),
                        );
                        sent_at = Instant::now();
                    }
                }
                s.models_off = off;
                s.models_behind = behind;
            }
            let chain_accepted = if via_branch.is_none() { accepted } else { 0 };
            if decoding {
                s.rounds += 1;
                s.min_rows = s.min_rows.min(k + tree_nodes + 1);
                s.drafted += k + tree_nodes;
                s.accepted += accepted;
                for i in 0..k.min(MAX_DRAFT) {
                    s.at_drafted[i] += 1;
                    s.at_accepted[i] += usize::from(i < chain_accepted);
                }
            }
            if s.first_token.is_none() {
                s.first_token = Some(sent_at);
            }
            s.last_token = Some(sent_at);
            if !logprobs.is_empty() {
                // One per kept token (the emitted ones past a stop are dropped with it).
                let lp = logprobs.into_iter().take(kept.len()).collect();
                if s.events.send(Event::Logprobs(lp)).is_err() {
                    s.finished = Some(FinishReason::Cancelled);
                }
            }
            self.generated += kept.len() as u64;
            if s.events.send(Event::Tokens(kept)).is_err() {
                s.finished = Some(FinishReason::Cancelled);
            }
            // A grammar that failed (its limits, or no token allowed) ends the reply with its
            // reason.
            if let Some(why) = s.guide.as_ref().and_then(|g| g.failure()) {
                if s.finished != Some(FinishReason::Cancelled) {
                    let _ = s
                        .events
                        .send(Event::Error(format!("the grammar failed: {why}")));
                    s.finished = Some(FinishReason::Error);
                }
            }
            let committed = s.tokens.len();
            let id = s.id;
            if let Some(src) = p.source {
                let name = self.source_id(src);
                self.running[p.seq].count_source(name, k, chain_accepted);
                self.cost.observe_accept(name, Some(id), k, chain_accepted);
            }
            if tree_nodes > 0 {
                let tree_accepted = if via_branch.is_some() { accepted } else { 0 };
                // A draft model's own branches count as its guesses; copies' as the tree's.
                let tree = match p.source {
                    Some(super::Source::Model(mi)) => self.models[mi].id(),
                    _ => SourceId::CopiesTree,
                };
                self.running[p.seq].count_source(tree, tree_nodes, tree_accepted);
            }
            for m in &mut self.models {
                m.commit(id, committed);
            }
        }
    }

    /// Hands the round's final hidden states of `rows` (sequence `id`'s committed positions
    /// from `first`) to the proposers that read them.
    fn hand_hidden(&mut self, id: tf_core::SeqId, first: usize, rows: std::ops::Range<usize>) {
        let hidden = self.runner.hidden();
        let d = hidden.len() / self.round_rows.max(1);
        if rows.is_empty() || d == 0 || rows.end * d > hidden.len() {
            return;
        }
        for m in self.models.iter_mut().filter(|m| m.takes_hidden()) {
            m.hidden(id, first, &hidden[rows.start * d..rows.end * d]);
        }
    }

    /// Draft models still behind a long prompt run their next part of it: for one sequence a
    /// step, as many rows as cost about a step's target forward, so that other sequences'
    /// tokens wait about one step more, not the whole catch-up at once.
    pub(super) fn catch_up_models(&mut self) {
        let Some(s) = self
            .running
            .iter_mut()
            .find(|s| !s.models_behind.is_empty())
        else {
            return;
        };
        let view = s.view();
        let mut done = Vec::new();
        for &mi in &s.models_behind {
            let m = &mut self.models[mi];
            let rows = self
                .cost
                .catch_up_rows_like(m.id(), self.config.max_step_rows);
            let t = self.times.start();
            let left = m.prefill(&view, rows).1;
            self.times.add(
                super::times::Part::DraftPrefill,
                t,
                Some(super::times::Part::Commit),
            );
            if left == 0 {
                done.push(mi);
            }
        }
        s.models_behind.retain(|mi| !done.contains(mi));
    }
}
