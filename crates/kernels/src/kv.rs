//! The paged KV cache storage of one model: fixed-size blocks of positions, per layer. The engine
//! owns which block belongs to which sequence (block tables); this type owns the memory.

use tf_core::BlockId;

/// Positions per KV block.
pub const BLOCK_SIZE: usize = 16;

pub struct KvCache {
    pub layers: usize,
    pub kv_dim: usize,
    pub blocks: usize,
    /// Per layer: `blocks * BLOCK_SIZE * kv_dim` keys, then the same for values.
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

/// One layer's keys and values, read-only, for attention.
#[derive(Clone, Copy)]
pub struct KvLayer<'a> {
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub kv_dim: usize,
}

impl KvLayer<'_> {
    /// Offset of position `pos` of a sequence with block table `table`.
    #[inline(always)]
    pub fn offset(&self, table: &[BlockId], pos: usize) -> usize {
        (table[pos / BLOCK_SIZE] as usize * BLOCK_SIZE + pos % BLOCK_SIZE) * self.kv_dim
    }
}

impl KvCache {
    pub fn new(layers: usize, kv_dim: usize, blocks: usize) -> KvCache {
        let per = blocks * BLOCK_SIZE * kv_dim;
        KvCache {
            layers,
            kv_dim,
            blocks,
            k: (0..layers).map(|_| vec![0.0; per]).collect(),
            v: (0..layers).map(|_| vec![0.0; per]).collect(),
        }
    }

    /// Bytes of cache per token position (all layers, keys and values).
    pub fn bytes_per_position(layers: usize, kv_dim: usize) -> usize {
        layers * kv_dim * 2 * std::mem::size_of::<f32>()
    }

    pub fn layer(&self, l: usize) -> KvLayer<'_> {
        KvLayer {
            k: &self.k[l],
            v: &self.v[l],
            kv_dim: self.kv_dim,
        }
    }

    /// Writes the key and value of one position.
    pub fn write(&mut self, l: usize, table: &[BlockId], pos: usize, k: &[f32], v: &[f32]) {
        let off = (table[pos / BLOCK_SIZE] as usize * BLOCK_SIZE + pos % BLOCK_SIZE) * self.kv_dim;
        self.k[l][off..off + self.kv_dim].copy_from_slice(k);
        self.v[l][off..off + self.kv_dim].copy_from_slice(v);
    }

    /// Copies slot `from` of a sequence to its slot `to` in every layer (a tree-draft branch's
    /// accepted rows moving to their positions).
    pub fn copy_slot(&mut self, table: &[BlockId], from: usize, to: usize) {
        let at = |slot: usize| {
            (table[slot / BLOCK_SIZE] as usize * BLOCK_SIZE + slot % BLOCK_SIZE) * self.kv_dim
        };
        let (f, t) = (at(from), at(to));
        for l in 0..self.layers {
            self.k[l].copy_within(f..f + self.kv_dim, t);
            self.v[l].copy_within(f..f + self.kv_dim, t);
        }
    }

    /// Copies the first `n` positions of block `src` into block `dst` in every layer
    /// (copy-on-write of a shared partial block).
    pub fn copy_block(&mut self, src: BlockId, dst: BlockId, n: usize) {
        let len = n * self.kv_dim;
        let (s, d) = (
            src as usize * BLOCK_SIZE * self.kv_dim,
            dst as usize * BLOCK_SIZE * self.kv_dim,
        );
        for l in 0..self.layers {
            self.k[l].copy_within(s..s + len, d);
            self.v[l].copy_within(s..s + len, d);
        }
    }
}
