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

    /// Floats of one block over all layers: keys then values, `BLOCK_SIZE * kv_dim` each.
    pub fn block_floats(&self) -> usize {
        self.layers * 2 * BLOCK_SIZE * self.kv_dim
    }

    /// The keys and values of block `b`: for each layer, its `BLOCK_SIZE` keys then its
    /// `BLOCK_SIZE` values (`kv_dim` floats each, position order).
    pub fn read_block(&self, b: BlockId) -> Vec<f32> {
        let n = BLOCK_SIZE * self.kv_dim;
        let at = b as usize * n;
        let mut out = Vec::with_capacity(self.block_floats());
        for l in 0..self.layers {
            out.extend_from_slice(&self.k[l][at..at + n]);
            out.extend_from_slice(&self.v[l][at..at + n]);
        }
        out
    }

    /// Writes block `b` from `data`, laid out as [`read_block`](Self::read_block) returns it.
    /// `data` must hold exactly [`block_floats`](Self::block_floats) values.
    pub fn write_block(&mut self, b: BlockId, data: &[f32]) {
        assert_eq!(data.len(), self.block_floats(), "KV block length");
        let n = BLOCK_SIZE * self.kv_dim;
        let at = b as usize * n;
        for (l, layer) in data.chunks_exact(2 * n).enumerate() {
            self.k[l][at..at + n].copy_from_slice(&layer[..n]);
            self.v[l][at..at + n].copy_from_slice(&layer[n..]);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A cache whose every float is distinct (its index in a global numbering).
    fn numbered(layers: usize, kv_dim: usize, blocks: usize) -> KvCache {
        let mut kv = KvCache::new(layers, kv_dim, blocks);
        let mut x = 0.0f32;
        for l in 0..layers {
            for v in kv.k[l].iter_mut().chain(kv.v[l].iter_mut()) {
                x += 1.0;
                *v = x;
            }
        }
        kv
    }

    #[test]
    fn read_block_is_keys_then_values_per_layer() {
        let kv = numbered(2, 3, 4);
        let b = kv.read_block(2);
        let n = BLOCK_SIZE * 3;
        assert_eq!(b.len(), kv.block_floats());
        assert_eq!(b.len(), 2 * 2 * n);
        for l in 0..2 {
            assert_eq!(&b[l * 2 * n..l * 2 * n + n], &kv.k[l][2 * n..3 * n]);
            assert_eq!(&b[l * 2 * n + n..(l + 1) * 2 * n], &kv.v[l][2 * n..3 * n]);
        }
    }

    #[test]
    fn write_block_round_trips_and_leaves_other_blocks_alone() {
        let src = numbered(3, 5, 4);
        let mut dst = KvCache::new(3, 5, 4);
        // Bit patterns that float arithmetic would not keep: a NaN payload, -0, a subnormal.
        let mut data = src.read_block(1);
        data[0] = f32::from_bits(0x7FC0_1234);
        data[1] = -0.0;
        data[2] = f32::from_bits(1);
        dst.write_block(3, &data);
        let back = dst.read_block(3);
        assert_eq!(
            back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            data.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        for b in 0..3 {
            assert!(
                dst.read_block(b).iter().all(|x| x.to_bits() == 0),
                "block {b}"
            );
        }
        // Writing into a full cache changes only the target block.
        let mut full = numbered(3, 5, 4);
        let before: Vec<Vec<f32>> = (0..4).map(|b| full.read_block(b)).collect();
        full.write_block(0, &data);
        assert_eq!(
            full.read_block(0)
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>(),
            data.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        for (b, want) in before.iter().enumerate().skip(1) {
            assert_eq!(&full.read_block(b as BlockId), want, "block {b}");
        }
    }
}
