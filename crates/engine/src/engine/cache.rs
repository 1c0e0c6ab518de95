//! The prefix cache's side of the engine: indexing committed blocks, the RAM budget, and the
//! disk tier (evicted blocks written, found blocks loaded back and checked).

use super::Engine;
use crate::blocks::{chain_hashes, BlockHash, CacheStats};
use crate::spill::{SpillStats, SpillStore};
use tf_kernels::kv::BLOCK_SIZE;

impl Engine {
    /// Offers every newly committed full block to the prefix cache, so that later (and
    /// concurrent) requests with the same prefix reuse it.
    pub(super) fn index_blocks(&mut self) {
        for s in &mut self.running {
            // Positions past the last kept token (guesses accepted beyond a stop) are not part
            // of the sequence.
            let full = s.kv_len.min(s.tokens.len()) / BLOCK_SIZE;
            if full <= s.hashes.len() {
                continue;
            }
            let new = chain_hashes(&self.salt, &s.hashes, &s.tokens, full);
            for h in new {
                self.blocks.register(s.table[s.hashes.len()], h);
                s.hashes.push(h);
            }
        }
    }

    /// (prompt rows run, reply tokens sent) since the engine started.
    pub fn token_totals(&self) -> (u64, u64) {
        (self.prefilled, self.generated)
    }

    /// Prefix cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.blocks.stats
    }

    /// Cached, unreferenced KV blocks.
    pub fn cached_blocks(&self) -> usize {
        self.blocks.cached_count()
    }

    /// Keeps at most `blocks` cached, unreferenced KV blocks in RAM. 0 turns the prefix cache
    /// off, or, with a disk tier, keeps cached blocks on disk only.
    pub fn set_cache_budget(&mut self, blocks: usize) {
        self.blocks.set_cache_budget(blocks);
        self.spill_evicted();
    }

    /// The prefix cache salt (the runner's model and kernel identity): what a
    /// [`SpillStore`] for this engine must be opened with.
    pub fn salt(&self) -> BlockHash {
        self.salt
    }

    /// Adds a disk tier to the prefix cache: blocks evicted from RAM are written to `store`,
    /// and admission continues a RAM hit with the blocks found there. Refused (InvalidInput) if
    /// the store was opened with another salt. Replaces any earlier store.
    pub fn set_spill(&mut self, store: SpillStore) -> std::io::Result<()> {
        if *store.salt() != self.salt {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the spill store was opened with another salt than this engine's",
            ));
        }
        self.spill = Some(store);
        self.blocks.report_evictions(true);
        Ok(())
    }

    /// The disk tier's counters, if there is one.
    pub fn spill_stats(&self) -> Option<SpillStats> {
        self.spill.as_ref().map(SpillStore::stats)
    }

    /// The disk tier, if any (for inspection).
    pub fn spill(&self) -> Option<&SpillStore> {
        self.spill.as_ref()
    }

    /// Writes every cached block that is not on disk yet (the RAM cache keeps them too), least
    /// recently used first; for a shutdown, so that a restarted engine finds them. Returns the
    /// blocks written.
    pub fn spill_all(&mut self) -> usize {
        self.spill_evicted();
        let Some(store) = &mut self.spill else {
            return 0;
        };
        let mut written = 0;
        for (b, h) in self.blocks.indexed() {
            if store.contains(&h) {
                continue;
            }
            if let Some(data) = self.runner.block_data(b) {
                written += usize::from(store.put(&h, &data));
            }
        }
        written
    }

    /// Writes the blocks the pool has evicted since the last call to the disk tier (those
    /// already there are only marked used). Called right after every `grow`, `release` and
    /// budget change, before anything can write to the blocks.
    pub(super) fn spill_evicted(&mut self) {
        let evicted = self.blocks.drain_evicted();
        let Some(store) = &mut self.spill else {
            return;
        };
        for (b, h) in evicted {
            if store.contains(&h) {
                store.touch(&h);
            } else if let Some(data) = self.runner.block_data(b) {
                store.put(&h, &data);
            }
        }
    }

    /// Loads the chain `hashes` from the disk tier into the fresh blocks `blocks`, as far as
    /// the files are there and sound, registering each in the RAM cache. Returns how many.
    pub(super) fn load_spilled(
        &mut self,
        blocks: &[tf_core::BlockId],
        hashes: &[BlockHash],
    ) -> usize {
        let Some(store) = &mut self.spill else {
            return 0;
        };
        let mut n = 0;
        for (&b, h) in blocks.iter().zip(hashes) {
            let Some(data) = store.get(h) else { break };
            if !self.runner.load_block(b, &data) {
                store.discard(h);
                break;
            }
            self.blocks.register(b, *h);
            n += 1;
        }
        // A chain's first blocks are its most valuable (the rest are only reachable through
        // them): make them the most recently used.
        for h in hashes[..n].iter().rev() {
            store.touch(h);
        }
        n
    }
}
