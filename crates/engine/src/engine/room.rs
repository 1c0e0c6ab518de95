//! KV room: each running sequence's block table grows with its reply (admission reserves a
//! prefill chunk, not prompt + `max_tokens`); where the pool runs out the sequence admitted last
//! waits again (preemption) and resumes to the same reply; a model whose every layer slides
//! gives back the blocks behind its window.

use super::Engine;
use crate::cost::MAX_DRAFT;
use crate::sequence::Seq;
use tf_kernels::kv::BLOCK_SIZE;

/// Slots a sequence's table gets beyond what its next step needs, so that it grows every few
/// blocks, not every step.
pub(super) const GROW_AHEAD: usize = 4 * BLOCK_SIZE;

impl Engine {
    /// Gives every running sequence's table the slots its next step may touch. Where the pool
    /// runs out, the sequence admitted last gives its blocks back and waits to be admitted
    /// again (preemption): its keys and values are then recomputed from its committed tokens,
    /// the same bits, so its reply does not change.
    pub(super) fn grow_running(&mut self) {
        let mut i = 0;
        while i < self.running.len() {
            let s = &mut self.running[i];
            let need = s.slots_needed(self.config.max_step_rows);
            if need.div_ceil(BLOCK_SIZE) <= s.table.len() {
                i += 1;
                continue;
            }
            let ahead = (need + GROW_AHEAD).min(s.max_slots());
            let grown =
                self.blocks.grow(&mut s.table, ahead) || self.blocks.grow(&mut s.table, need);
            self.spill_evicted();
            if grown {
                i += 1;
                continue;
            }
            let victim = (0..self.running.len())
                .max_by_key(|&j| self.running[j].admitted)
                .expect("a running sequence");
            self.preempt(victim);
            if victim < i {
                i -= 1;
            }
        }
    }

    /// Sends running sequence `i` back to wait, its blocks released.
    fn preempt(&mut self, i: usize) {
        let mut s = self.running.remove(i);
        self.blocks.release(&mut s.table);
        self.runner.release(s.id);
        self.spill_evicted();
        s.hashes.clear();
        s.kv_len = 0;
        s.freed_blocks = 0;
        for m in &mut self.models {
            m.release(s.id);
        }
        s.models_behind.clear();
        self.preemptions += 1;
        self.waiting.push_front(s);
    }

    /// For a model whose every layer slides: each running sequence's blocks that no row can read
    /// again go back to the pool (the next rows start at `kv_len`; a row's window is read from
    /// the start of the key chunk holding its first key). Their indexed ones stay in the prefix
    /// cache until evicted. Not with draft models, whose caches use the same block ids.
    pub(super) fn free_outside_windows(&mut self) {
        let Some(w) = self.window else { return };
        if !self.models.is_empty() {
            return;
        }
        let chunk = tf_kernels::attention::KEY_CHUNK;
        for s in &mut self.running {
            let first = (s.kv_len + 1).saturating_sub(w) / chunk * chunk;
            let upto = (first / BLOCK_SIZE).min(s.table.len());
            while s.freed_blocks < upto {
                self.blocks.release_one(&mut s.table[s.freed_blocks]);
                s.freed_blocks += 1;
                self.window_frees += 1;
            }
        }
        self.spill_evicted();
    }

    /// The most blocks `s` can hold at once: all of its slots, or, where every layer slides
    /// and blocks behind the window are freed, a window, its chunk, one step and the growth.
    pub(super) fn blocks_held_at_most(&self, s: &Seq) -> usize {
        let all = s.max_slots().div_ceil(BLOCK_SIZE);
        match (self.window, self.models.is_empty()) {
            (Some(w), true) => {
                let step = self.config.max_step_rows.max(MAX_DRAFT + 1);
                let live = w + tf_kernels::attention::KEY_CHUNK + step + GROW_AHEAD;
                all.min(live.div_ceil(BLOCK_SIZE) + 2)
            }
            _ => all,
        }
    }

    /// Blocks freed behind sliding windows since the engine started.
    pub fn window_frees(&self) -> u64 {
        self.window_frees
    }

    /// Sequences sent back to wait for KV room since the engine started.
    pub fn preemptions(&self) -> u64 {
        self.preemptions
    }
}
