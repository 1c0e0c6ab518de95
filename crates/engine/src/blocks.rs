//! KV block ids and the prefix cache over them. The engine decides which blocks a sequence
//! uses; the runner owns the memory.
//!
//! A block is *free* (never holding a cached prefix), *in use* by one or more sequences
//! (reference-counted: sequences that share a prompt prefix share its blocks), or *cached*:
//! unreferenced, but still holding the keys and values of a known token prefix, indexed by the
//! block's chain hash and reused by any later sequence that starts with the same tokens.
//! Cached blocks are evicted least recently used first, when a sequence needs room or the
//! cache passes its budget.
//!
//! Exactness: every kernel is row-exact and a position's keys and values depend only on the
//! tokens up to it, so a cached block holds exactly the bits a fresh prefill would write (design
//! guide §2). The chain hash covers every token from position 0 and the engine's salt (model
//! and kernel identity), so a hit is only taken where the bits are the same.

use std::collections::{BTreeMap, HashMap};

use sha2::{Digest, Sha256};
use tf_core::{BlockId, TokenId};
use tf_kernels::kv::BLOCK_SIZE;

/// The identity of a full block: SHA-256 over the previous block's hash and this block's token
/// ids (the first block starts from the salt).
pub type BlockHash = [u8; 32];

/// The chain hashes of the first `blocks` full blocks of `tokens`, continuing `prev`.
pub fn chain_hashes(
    salt: &BlockHash,
    prev: &[BlockHash],
    tokens: &[TokenId],
    blocks: usize,
) -> Vec<BlockHash> {
    let mut out = Vec::with_capacity(blocks.saturating_sub(prev.len()));
    let mut last = prev.last().copied().unwrap_or(*salt);
    for b in prev.len()..blocks {
        let mut h = Sha256::new();
        h.update(last);
        for t in &tokens[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE] {
            h.update(t.to_le_bytes());
        }
        last = h.finalize().into();
        out.push(last);
    }
    out
}

/// Prefix cache counters, since the start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Requests that reused at least one cached block (from RAM or from the disk tier).
    pub hits: u64,
    /// Prompt tokens served from the cache (either tier).
    pub hit_tokens: u64,
    /// Cached blocks dropped from RAM to make room (with a disk tier, written there first).
    pub evictions: u64,
}

/// A block-table entry whose block went back to the pool: every layer of a sliding-window
/// model has left those positions behind, so nothing reads or writes them again.
pub const FREED: BlockId = BlockId::MAX;

pub struct BlockPool {
    total: usize,
    /// Blocks holding nothing reusable.
    free: Vec<BlockId>,
    refs: Vec<u32>,
    hash_of: Vec<Option<BlockHash>>,
    index: HashMap<BlockHash, BlockId>,
    /// Cached, unreferenced blocks by last use (tick → block).
    lru: BTreeMap<u64, BlockId>,
    lru_tick: Vec<u64>,
    tick: u64,
    /// Cached, unreferenced blocks kept at most.
    max_cached: usize,
    /// Whether evicted blocks are reported in `evicted` (a disk tier takes them).
    report: bool,
    /// Blocks evicted since the last `drain_evicted`, with the hash they stood for. Their keys
    /// and values are intact until the block is written again, which the engine only does after
    /// draining.
    evicted: Vec<(BlockId, BlockHash)>,
    pub stats: CacheStats,
}

impl BlockPool {
    pub fn new(total: usize) -> BlockPool {
        BlockPool {
            total,
            // Reversed so that allocation hands out low ids first (easier to read in tests).
            free: (0..total as BlockId).rev().collect(),
            refs: vec![0; total],
            hash_of: vec![None; total],
            index: HashMap::new(),
            lru: BTreeMap::new(),
            lru_tick: vec![0; total],
            tick: 0,
            max_cached: total,
            report: false,
            evicted: Vec::new(),
            stats: CacheStats::default(),
        }
    }

    /// Reports evicted blocks (see [`drain_evicted`](Self::drain_evicted)) from now on. With it
    /// on, full blocks are indexed even with a cache budget of 0, so that they reach the disk
    /// tier when released.
    pub fn report_evictions(&mut self, on: bool) {
        self.report = on;
        if !on {
            self.evicted.clear();
        }
    }

    /// The blocks evicted (and their hashes) since the last call, oldest first.
    pub fn drain_evicted(&mut self) -> Vec<(BlockId, BlockHash)> {
        std::mem::take(&mut self.evicted)
    }

    /// Whether evicted blocks wait to be drained.
    pub fn has_evicted(&self) -> bool {
        !self.evicted.is_empty()
    }

    /// Every block with a cached identity: the unreferenced ones least recently used first,
    /// then those in use.
    pub fn indexed(&self) -> Vec<(BlockId, BlockHash)> {
        let mut out: Vec<(BlockId, BlockHash)> = self
            .lru
            .values()
            .map(|&b| {
                (
                    b,
                    self.hash_of[b as usize].expect("cached blocks have a hash"),
                )
            })
            .collect();
        for (b, h) in self.hash_of.iter().enumerate() {
            if let (Some(h), true) = (h, self.refs[b] > 0) {
                out.push((b as BlockId, *h));
            }
        }
        out
    }

    /// Keeps at most `blocks` cached, unreferenced blocks (0 turns the prefix cache off, unless
    /// evictions are reported to a disk tier).
    pub fn set_cache_budget(&mut self, blocks: usize) {
        self.max_cached = blocks;
        self.trim_cache();
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Blocks a sequence could get now: free ones and cached ones (evicted on demand).
    pub fn free_count(&self) -> usize {
        self.free.len() + self.lru.len()
    }

    /// Cached, unreferenced blocks.
    pub fn cached_count(&self) -> usize {
        self.lru.len()
    }

    fn take(&mut self) -> Option<BlockId> {
        if let Some(b) = self.free.pop() {
            return Some(b);
        }
        let (_, b) = self.lru.pop_first()?;
        self.evict(b);
        Some(b)
    }

    /// Drops a cached block's identity (reporting it if asked to).
    fn evict(&mut self, b: BlockId) {
        self.lru_tick[b as usize] = 0;
        if let Some(h) = self.hash_of[b as usize].take() {
            self.index.remove(&h);
            if self.report {
                self.evicted.push((b, h));
            }
        }
        self.stats.evictions += 1;
    }

    fn trim_cache(&mut self) {
        while self.lru.len() > self.max_cached {
            let (_, b) = self.lru.pop_first().expect("non-empty");
            self.evict(b);
            self.free.push(b);
        }
    }

    /// Extends `table` until it covers `slots` positions; false (and nothing taken) if the pool
    /// cannot.
    pub fn grow(&mut self, table: &mut Vec<BlockId>, slots: usize) -> bool {
        let need = slots.div_ceil(BLOCK_SIZE).saturating_sub(table.len());
        if need > self.free_count() {
            return false;
        }
        for _ in 0..need {
            let b = self.take().expect("checked above");
            self.refs[b as usize] = 1;
            table.push(b);
        }
        true
    }

    /// Returns a sequence's blocks; the last reference to a cached block keeps it cached.
    /// Blocks are released last first, so that a sequence's later blocks are evicted before its
    /// earlier ones: a block is only reachable through the chain before it, so evicting a
    /// prefix's first block would strand all the others.
    pub fn release(&mut self, table: &mut Vec<BlockId>) {
        for b in table.drain(..).rev() {
            self.unref(b);
        }
        self.trim_cache();
    }

    /// Returns one block of a table (left behind by every layer's window); its entry becomes
    /// [`FREED`].
    pub fn release_one(&mut self, entry: &mut BlockId) {
        self.unref(std::mem::replace(entry, FREED));
        self.trim_cache();
    }

    fn unref(&mut self, b: BlockId) {
        if b == FREED {
            return;
        }
        let r = &mut self.refs[b as usize];
        *r -= 1;
        if *r > 0 {
            return;
        }
        if self.hash_of[b as usize].is_some() {
            self.tick += 1;
            self.lru.insert(self.tick, b);
            self.lru_tick[b as usize] = self.tick;
        } else {
            self.free.push(b);
        }
    }

    /// The cached blocks of the longest prefix of `hashes`, each now referenced once more.
    pub fn lookup(&mut self, hashes: &[BlockHash]) -> Vec<BlockId> {
        let mut found = Vec::new();
        for h in hashes {
            let Some(&b) = self.index.get(h) else { break };
            let i = b as usize;
            if self.refs[i] == 0 {
                self.lru.remove(&self.lru_tick[i]);
                self.lru_tick[i] = 0;
            }
            self.refs[i] += 1;
            found.push(b);
        }
        found
    }

    /// Records that block `b` (in use) holds the full block with chain hash `h`. A block that
    /// already has an identity, or a hash another block already stands for, is left alone.
    pub fn register(&mut self, b: BlockId, h: BlockHash) {
        if (self.max_cached == 0 && !self.report)
            || self.hash_of[b as usize].is_some()
            || self.index.contains_key(&h)
        {
            return;
        }
        self.index.insert(h, b);
        self.hash_of[b as usize] = Some(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hashes(tokens: &[TokenId]) -> Vec<BlockHash> {
        chain_hashes(&[7; 32], &[], tokens, tokens.len() / BLOCK_SIZE)
    }

    #[test]
    fn chain_hashes_depend_on_every_earlier_token_and_the_salt() {
        let a: Vec<TokenId> = (0..48).collect();
        let mut b = a.clone();
        b[3] = 99;
        let (ha, hb) = (hashes(&a), hashes(&b));
        assert!(ha.iter().zip(&hb).all(|(x, y)| x != y));
        let other_salt = chain_hashes(&[8; 32], &[], &a, 3);
        assert_ne!(ha[0], other_salt[0]);
        // Continuing a chain equals hashing at once.
        let first = chain_hashes(&[7; 32], &[], &a, 1);
        let rest = chain_hashes(&[7; 32], &first, &a, 3);
        assert_eq!([first, rest].concat(), ha);
    }

    #[test]
    fn released_blocks_stay_cached_and_are_found_again() {
        let mut pool = BlockPool::new(8);
        let tokens: Vec<TokenId> = (0..32).collect();
        let hs = hashes(&tokens);
        let mut table = Vec::new();
        assert!(pool.grow(&mut table, 40));
        pool.register(table[0], hs[0]);
        pool.register(table[1], hs[1]);
        let kept = table[..2].to_vec();
        pool.release(&mut table);
        assert_eq!(pool.free_count(), 8);
        assert_eq!(pool.cached_count(), 2);
        let found = pool.lookup(&hs);
        assert_eq!(found, kept);
        assert_eq!(pool.cached_count(), 0);
        // A shared block needs both releases before it is cached again.
        let again = pool.lookup(&hs[..1]);
        let mut t1 = found;
        let mut t2 = again;
        pool.release(&mut t1);
        assert_eq!(pool.cached_count(), 1);
        pool.release(&mut t2);
        assert_eq!(pool.cached_count(), 2);
    }

    #[test]
    fn eviction_takes_the_least_recently_used_and_forgets_it() {
        let mut pool = BlockPool::new(3);
        let tokens: Vec<TokenId> = (0..48).collect();
        let hs = hashes(&tokens);
        for h in &hs {
            let mut t = Vec::new();
            assert!(pool.grow(&mut t, 1));
            pool.register(t[0], *h);
            pool.release(&mut t);
        }
        assert_eq!(pool.cached_count(), 3);
        let mut t = Vec::new();
        assert!(pool.grow(&mut t, 1));
        assert_eq!(pool.stats.evictions, 1);
        assert!(pool.lookup(&hs[..1]).is_empty(), "the oldest went first");
        assert_eq!(pool.lookup(&hs[1..2]).len(), 1);
        pool.set_cache_budget(0);
        assert_eq!(pool.cached_count(), 0);
    }

    #[test]
    fn a_trimmed_sequence_keeps_its_first_blocks() {
        let mut pool = BlockPool::new(8);
        let tokens: Vec<TokenId> = (0..64).collect();
        let hs = hashes(&tokens);
        let mut table = Vec::new();
        assert!(pool.grow(&mut table, 64));
        for (b, h) in table.clone().into_iter().zip(&hs) {
            pool.register(b, *h);
        }
        let first = table[..2].to_vec();
        pool.set_cache_budget(2);
        pool.release(&mut table);
        assert_eq!(pool.cached_count(), 2);
        assert_eq!(pool.lookup(&hs), first, "the chain's start survives");
    }

    #[test]
    fn evictions_are_reported_with_their_hashes_when_asked() {
        let mut pool = BlockPool::new(3);
        let tokens: Vec<TokenId> = (0..48).collect();
        let hs = hashes(&tokens);
        let mut t = Vec::new();
        assert!(pool.grow(&mut t, 48));
        assert_eq!(t, vec![0, 1, 2]);
        for (b, h) in t.clone().into_iter().zip(&hs) {
            pool.register(b, *h);
        }
        pool.release(&mut t);
        // Not asked: an eviction leaves nothing behind.
        assert!(pool.grow(&mut t, 16));
        assert_eq!(t, vec![2], "the chain's last block goes first");
        assert!(!pool.has_evicted());
        pool.release(&mut t);
        pool.report_evictions(true);
        assert_eq!(pool.indexed(), vec![(1, hs[1]), (0, hs[0])]);
        // A free block is no eviction; a cached one taken by grow is.
        assert!(pool.grow(&mut t, 16));
        assert!(!pool.has_evicted());
        assert!(pool.grow(&mut t, 32));
        assert_eq!(t, vec![2, 1]);
        assert_eq!(pool.drain_evicted(), vec![(1, hs[1])]);
        assert!(!pool.has_evicted());
        // Trimmed by the budget.
        pool.set_cache_budget(0);
        assert_eq!(pool.drain_evicted(), vec![(0, hs[0])]);
        // With reporting on, a budget of 0 still indexes full blocks, and releasing one evicts
        // (reports) it at once.
        pool.register(2, hs[2]);
        assert_eq!(pool.indexed(), vec![(2, hs[2])]);
        pool.release(&mut t);
        assert_eq!(pool.drain_evicted(), vec![(2, hs[2])]);
        assert_eq!(pool.free_count(), 3);
    }
}
