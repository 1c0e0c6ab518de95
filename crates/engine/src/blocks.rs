//! KV block ids: a free list. The engine decides which blocks a sequence uses; the runner owns
//! the memory.

use tf_core::BlockId;

pub struct BlockPool {
    free: Vec<BlockId>,
    total: usize,
}

impl BlockPool {
    pub fn new(total: usize) -> BlockPool {
        BlockPool {
            // Reversed so that allocation hands out low ids first (easier to read in tests).
            free: (0..total as BlockId).rev().collect(),
            total,
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Extends `table` until it covers `slots` positions; false (and nothing taken) if the pool
    /// cannot.
    pub fn grow(&mut self, table: &mut Vec<BlockId>, slots: usize) -> bool {
        let need = slots
            .div_ceil(tf_kernels::kv::BLOCK_SIZE)
            .saturating_sub(table.len());
        if need > self.free.len() {
            return false;
        }
        for _ in 0..need {
            table.push(self.free.pop().expect("checked above"));
        }
        true
    }

    pub fn release(&mut self, table: &mut Vec<BlockId>) {
        self.free.append(table);
    }
}
