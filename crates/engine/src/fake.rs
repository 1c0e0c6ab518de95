//! A fake target for engine tests: its next-token logits are a pseudo-random function of the
//! whole history it can see through its KV cache (every position's token, read through the block
//! table and any tree remap). Anything the engine gets wrong about KV contents, positions or
//! rollback changes the output, so drafted == serial comparisons are sharp and fast.

use crate::error::EngineError;
use crate::runner::{Row, Runner};
use tf_kernels::kv::BLOCK_SIZE;

pub struct FakeRunner {
    vocab: usize,
    blocks: usize,
    /// Token stored in each slot of each block (u32::MAX = never written).
    kv: Vec<u32>,
    /// Number of forward calls and rows seen (for tests of the cost side).
    pub calls: usize,
    pub rows_seen: usize,
    /// Logit sharpness: higher = more peaked distributions (more predictable sampling).
    pub sharpness: f32,
    /// Positions the next token depends on (the last ones); 0 = the whole history. A short
    /// context makes text repeat, so copies and tree drafts get accepted.
    pub context: usize,
}

impl FakeRunner {
    pub fn new(vocab: usize, blocks: usize) -> FakeRunner {
        FakeRunner {
            vocab,
            blocks,
            kv: vec![u32::MAX; blocks * BLOCK_SIZE],
            calls: 0,
            rows_seen: 0,
            sharpness: 4.0,
            context: 0,
        }
    }

    fn slot_index(table: &[u32], slot: usize) -> usize {
        table[slot / BLOCK_SIZE] as usize * BLOCK_SIZE + slot % BLOCK_SIZE
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Runner for FakeRunner {
    fn vocab(&self) -> usize {
        self.vocab
    }
    fn kv_blocks(&self) -> usize {
        self.blocks
    }
    fn context_len(&self) -> usize {
        1 << 20
    }
    fn copy_slots(&mut self, _seq: u64, table: &[u32], moves: &[(usize, usize)]) {
        for &(from, to) in moves {
            self.kv[Self::slot_index(table, to)] = self.kv[Self::slot_index(table, from)];
        }
    }
    fn forward(&mut self, rows: &[Row]) -> Result<Vec<f32>, EngineError> {
        self.calls += 1;
        self.rows_seen += rows.len();
        for r in rows {
            let i = Self::slot_index(r.table, r.slot());
            self.kv[i] = r.token;
        }
        let mut out = Vec::new();
        for r in rows.iter().filter(|r| r.logits) {
            let mut h = 0x1234_5678u64;
            let from = if self.context == 0 {
                0
            } else {
                (r.pos + 1).saturating_sub(self.context)
            };
            for p in from..=r.pos {
                let slot = match r.tree {
                    Some(t) if p >= t.remap.base => t.remap.slots[p - t.remap.base],
                    _ => p,
                };
                let tok = self.kv[Self::slot_index(r.table, slot)];
                assert_ne!(
                    tok,
                    u32::MAX,
                    "fake runner: position {p} read before it was written"
                );
                h = mix(h ^ (tok as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            }
            // Mostly-predictable text: one strongly preferred token, a few runners-up.
            let favourite = (mix(h) % self.vocab as u64) as usize;
            for t in 0..self.vocab {
                let noise = (mix(h ^ (t as u64) << 20) >> 40) as f32 / (1u64 << 24) as f32;
                let bonus = if t == favourite { self.sharpness } else { 0.0 };
                out.push(noise * 2.0 + bonus);
            }
        }
        Ok(out)
    }
}
