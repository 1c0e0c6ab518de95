//! What the engine measures before serving: the target's forward cost by row count, and each
//! draft model's cost of a guess and of a catch-up row, so that the first request already
//! sizes its windows and weighs a draft model's prefill against its reply.

use super::Engine;
use crate::error::EngineError;
use crate::proposer::SeqView;
use crate::runner::Row;
use crate::sampler::SamplingParams;
use std::time::Instant;

/// Rows of the draft models' measured catch-up (a throwaway prompt).
const DRAFT_ROWS: usize = 32;
/// Guesses of the draft models' measured proposal.
const DRAFT_GUESSES: usize = 4;

impl Engine {
    /// Measures the forward cost of 1..=32 rows and the draft models' costs (a throwaway
    /// sequence, its blocks returned).
    pub fn calibrate(&mut self) -> Result<Vec<(usize, f64)>, EngineError> {
        let mut table = Vec::new();
        let grown = self.blocks.grow(&mut table, DRAFT_ROWS + DRAFT_GUESSES + 1);
        self.spill_evicted();
        if !grown {
            self.blocks.release(&mut table);
            return Err(EngineError::InvalidRequest(
                "no KV room to calibrate".into(),
            ));
        }
        // Five passes over the row counts, each count's best kept. The passes interleave the
        // counts, so that a slow minute on a shared machine (another tenant, clocks) slows
        // every count alike instead of one: what drafting is worth is the ratio of the costs.
        const COUNTS: [usize; 6] = [1, 2, 4, 8, 16, 32];
        let mut best = [f64::MAX; COUNTS.len()];
        // Distinct tokens, spread over the vocabulary: a mixture of experts routes them to as
        // many experts as a real verify round's rows touch (one token repeated would reach
        // few, and a round would look cheaper than it is).
        let vocab = self.runner.vocab().max(1) as u64;
        let token = |p: usize| ((p as u64 * 2_654_435_761 + 12_345) % vocab) as u32;
        for _ in 0..5 {
            for (i, &rows) in COUNTS.iter().enumerate() {
                let rs: Vec<Row> = (0..rows)
                    .map(|p| Row {
                        token: token(p),
                        pos: p,
                        seq: 0,
                        // A verify round: the committed token, then guesses.
                        keep: p == 0,
                        table: &table,
                        logits: true,
                        tree: None,
                    })
                    .collect();
                let t = Instant::now();
                self.runner.forward(&rs)?;
                best[i] = best[i].min(t.elapsed().as_secs_f64());
            }
        }
        let mut points: Vec<(usize, f64)> = Vec::new();
        for (&rows, &secs) in COUNTS.iter().zip(&best) {
            // Costs never fall with more rows: a noisy small measurement must not make a wider
            // window look cheaper than a narrower one.
            let floor = points.last().map_or(0.0, |p| p.1);
            points.push((rows, secs.max(floor)));
        }
        self.cost = self.cost.recalibrated(&points);
        self.calibrate_drafts(&table);
        self.runner.release(0);
        self.blocks.release(&mut table);
        self.spill_evicted();
        Ok(points)
    }

    /// Each draft model's catch-up row and guess, best of two runs of a throwaway sequence
    /// (id 0, never a request's) in `table`, observed relative to the target's row.
    fn calibrate_drafts(&mut self, table: &[tf_core::BlockId]) {
        let tokens = vec![0; DRAFT_ROWS + 1];
        let params = SamplingParams::greedy();
        let view = SeqView {
            id: 0,
            tokens: &tokens,
            prompt_len: tokens.len(),
            params: &params,
            seed: 0,
            table,
            hashes: &[],
        };
        for m in &mut self.models {
            let (mut row, mut guess) = (f64::MAX, f64::MAX);
            for _ in 0..2 {
                let t = Instant::now();
                m.prefill(&view, usize::MAX);
                row = row.min(t.elapsed().as_secs_f64() / DRAFT_ROWS as f64);
                let t = Instant::now();
                let n = m.propose(&view, DRAFT_GUESSES).len();
                let per = m
                    .last_guess_secs()
                    .unwrap_or_else(|| t.elapsed().as_secs_f64() / n.max(1) as f64);
                if n > 0 {
                    guess = guess.min(per);
                }
                m.release(0);
            }
            if guess < f64::MAX {
                self.cost.observe_propose(m.id(), 1, guess);
                self.cost.observe_catch_up(m.id(), 1, row);
            }
        }
    }
}
