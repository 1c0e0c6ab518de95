//! The paged KV cache storage of one model: fixed-size blocks of positions, per layer. The engine
//! owns which block belongs to which sequence (block tables); this type owns the memory.
//!
//! A block holds, for each KV head in turn, its `BLOCK_SIZE` positions' rows of `head_dim`
//! values: what attention reads for one head (a few KiB) lies in one run of memory, which the
//! hardware prefetchers follow.
//!
//! Keys and values are stored in a [`KvFormat`]: f32, bf16 (the default) or q8_0. A row (one
//! position's `kv_dim` keys or values) is converted when it is written, by a pure function of
//! that row ([`bf16_from_f32`], or [`actq::quantize_block_ref`] per 32 values), and read back
//! widened to f32 by one exact step (a shift, or one multiplication by the block's scale), so
//! attention computes exactly what it computes over f32 keys and values that happen to hold the
//! rounded numbers: every exactness rule holds unchanged for every format.

use crate::actq;
use tf_core::BlockId;

/// Positions per KV block.
pub const BLOCK_SIZE: usize = 16;

/// Values per scale of the q8_0 format.
pub const Q8_BLOCK: usize = 32;

/// How keys and values are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvFormat {
    /// 4 bytes a value, the numbers as computed.
    F32,
    /// 2 bytes a value: f32 rounded to nearest-even on its upper 16 bits (f32's range, 8
    /// significant bits).
    #[default]
    Bf16,
    /// 1 byte a value and one f32 scale per 32 values: the activation quantizer's rule.
    Q8,
}

impl KvFormat {
    pub const ALL: [KvFormat; 3] = [KvFormat::F32, KvFormat::Bf16, KvFormat::Q8];

    pub fn name(self) -> &'static str {
        match self {
            KvFormat::F32 => "f32",
            KvFormat::Bf16 => "bf16",
            KvFormat::Q8 => "q8_0",
        }
    }

    /// The format named `s` (`f32`, `bf16`, `q8_0`; `q8` too).
    pub fn parse(s: &str) -> Option<KvFormat> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Some(KvFormat::F32),
            "bf16" => Some(KvFormat::Bf16),
            "q8_0" | "q8" => Some(KvFormat::Q8),
            _ => None,
        }
    }

    /// Bytes of one stored row of `kv_dim` values.
    pub fn row_bytes(self, kv_dim: usize) -> usize {
        match self {
            KvFormat::F32 => 4 * kv_dim,
            KvFormat::Bf16 => 2 * kv_dim,
            KvFormat::Q8 => kv_dim + 4 * kv_dim.div_ceil(Q8_BLOCK),
        }
    }

    /// Why heads of `head_dim` values cannot be stored in this format, if they cannot (a q8_0
    /// scale must cover values of one head and position only).
    pub fn check(self, head_dim: usize) -> Result<(), String> {
        if self == KvFormat::Q8 && !head_dim.is_multiple_of(Q8_BLOCK) {
            return Err(format!(
                "KV type q8_0 needs a head size that is a multiple of {Q8_BLOCK} (this model's is \
                 {head_dim})"
            ));
        }
        Ok(())
    }
}

/// `x` rounded to bf16, to nearest with ties to even (a NaN stays a quiet NaN with its sign and
/// upper payload). Bit-exact on every machine: the GPU backend applies the same integer steps.
#[inline(always)]
pub fn bf16_from_f32(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x0040) as u16;
    }
    ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) as u16
}

/// The f32 whose upper half is `h` (exact).
#[inline(always)]
pub fn f32_from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// One layer's keys or values.
enum Plane {
    F32(Vec<f32>),
    Bf16(Vec<u16>),
    Q8 { q: Vec<i8>, d: Vec<f32> },
}

/// A layer's keys or values, read-only.
#[derive(Clone, Copy)]
pub enum PlaneRef<'a> {
    F32(&'a [f32]),
    Bf16(&'a [u16]),
    Q8 { q: &'a [i8], d: &'a [f32] },
}

impl PlaneRef<'_> {
    /// Values `off..off + out.len()` widened to f32 (for q8_0, `off` and the length cover whole
    /// rows or lie inside one: the scale of value i is `d[i / 32]`).
    #[inline(always)]
    pub fn widen(&self, off: usize, out: &mut [f32]) {
        let n = out.len();
        match *self {
            PlaneRef::F32(x) => out.copy_from_slice(&x[off..off + n]),
            PlaneRef::Bf16(x) => {
                for (o, &h) in out.iter_mut().zip(&x[off..off + n]) {
                    *o = f32_from_bf16(h);
                }
            }
            PlaneRef::Q8 { q, d } => {
                // Block by block, so that the loop over a block's values vectorizes.
                let mut i = 0;
                while i < n {
                    let blk = (off + i) / Q8_BLOCK;
                    let end = ((blk + 1) * Q8_BLOCK - off).min(n);
                    let s = d[blk];
                    for (o, &x) in out[i..end].iter_mut().zip(&q[off + i..off + end]) {
                        *o = x as f32 * s;
                    }
                    i = end;
                }
            }
        }
    }

    /// Values `off..off + n` as f32: borrowed from the cache when it stores f32, else widened
    /// into `buf`.
    #[inline(always)]
    pub fn row<'b>(&'b self, off: usize, n: usize, buf: &'b mut [f32]) -> &'b [f32] {
        match *self {
            PlaneRef::F32(x) => &x[off..off + n],
            _ => {
                self.widen(off, &mut buf[..n]);
                &buf[..n]
            }
        }
    }

    /// The stored f32 values, if this plane stores f32.
    #[inline(always)]
    pub fn as_f32(&self) -> Option<&[f32]> {
        match *self {
            PlaneRef::F32(x) => Some(x),
            _ => None,
        }
    }

    /// Asks for the cache lines of values `off..off + n` to be brought into L2. Changes nothing.
    #[inline(always)]
    pub fn prefetch(&self, off: usize, n: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
            let (base, bytes) = match *self {
                PlaneRef::F32(x) => (x[off..off + n].as_ptr() as *const i8, 4 * n),
                PlaneRef::Bf16(x) => (x[off..off + n].as_ptr() as *const i8, 2 * n),
                PlaneRef::Q8 { q, .. } => (q[off..off + n].as_ptr(), n),
            };
            for line in (0..bytes).step_by(64) {
                // SAFETY: the addresses are inside the slice; a prefetch reads nothing.
                unsafe { _mm_prefetch::<_MM_HINT_T1>(base.add(line)) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (off, n);
    }
}

/// `n` zeros whose memory the kernel may back with 2 MiB pages: a long sequence's keys and
/// values span hundreds of megabytes read in 256-byte pieces, and with 4 KiB pages nearly every
/// block is a TLB miss. (Linux's `madvise(MADV_HUGEPAGE)`, asked before the pages are touched;
/// elsewhere, or if refused, plain pages.)
fn zeroed<T: Clone + Default>(n: usize) -> Vec<T> {
    let v = vec![T::default(); n];
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = v.as_ptr() as usize;
        let end = start + n * std::mem::size_of::<T>();
        let (a, b) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if b > a {
            // SAFETY: [a, b) lies inside the vector's allocation; the advice changes how pages
            // are backed, never their contents.
            unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
        }
    }
    v
}

impl Plane {
    fn new(format: KvFormat, values: usize) -> Plane {
        match format {
            KvFormat::F32 => Plane::F32(zeroed(values)),
            KvFormat::Bf16 => Plane::Bf16(zeroed(values)),
            KvFormat::Q8 => Plane::Q8 {
                q: zeroed(values),
                d: zeroed(values.div_ceil(Q8_BLOCK)),
            },
        }
    }

    fn view(&self) -> PlaneRef<'_> {
        match self {
            Plane::F32(x) => PlaneRef::F32(x),
            Plane::Bf16(x) => PlaneRef::Bf16(x),
            Plane::Q8 { q, d } => PlaneRef::Q8 { q, d },
        }
    }

    /// Stores the row `x` at value `off` (a row start).
    fn store(&mut self, off: usize, x: &[f32]) {
        match self {
            Plane::F32(p) => p[off..off + x.len()].copy_from_slice(x),
            Plane::Bf16(p) => {
                for (o, &v) in p[off..off + x.len()].iter_mut().zip(x) {
                    *o = bf16_from_f32(v);
                }
            }
            Plane::Q8 { q, d } => {
                for (i, blk) in x.chunks(Q8_BLOCK).enumerate() {
                    let at = off + i * Q8_BLOCK;
                    d[at / Q8_BLOCK] = actq::quantize_block_ref(blk, &mut q[at..at + blk.len()]);
                }
            }
        }
    }

    /// Copies values `from..from + n` to `to..` (row starts and whole rows).
    fn copy_within(&mut self, from: usize, to: usize, n: usize) {
        match self {
            Plane::F32(p) => p.copy_within(from..from + n, to),
            Plane::Bf16(p) => p.copy_within(from..from + n, to),
            Plane::Q8 { q, d } => {
                q.copy_within(from..from + n, to);
                let (f, t, m) = (from / Q8_BLOCK, to / Q8_BLOCK, n.div_ceil(Q8_BLOCK));
                d.copy_within(f..f + m, t);
            }
        }
    }

    /// Appends the stored bytes of values `at..at + n` (whole rows; q8_0: the quants, then the
    /// scales), little-endian.
    fn read_bytes(&self, at: usize, n: usize, out: &mut Vec<u8>) {
        match self {
            Plane::F32(p) => p[at..at + n]
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
            Plane::Bf16(p) => p[at..at + n]
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            Plane::Q8 { q, d } => {
                out.extend(q[at..at + n].iter().map(|&x| x as u8));
                let (f, m) = (at / Q8_BLOCK, n / Q8_BLOCK);
                d[f..f + m]
                    .iter()
                    .for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes()));
            }
        }
    }

    /// Overwrites values `at..at + n` from `b` as [`read_bytes`](Self::read_bytes) wrote them.
    fn write_bytes(&mut self, at: usize, n: usize, b: &[u8]) {
        fn f32s(b: &[u8]) -> impl Iterator<Item = f32> + '_ {
            b.chunks_exact(4)
                .map(|c| f32::from_bits(u32::from_le_bytes(c.try_into().expect("4 bytes"))))
        }
        match self {
            Plane::F32(p) => p[at..at + n]
                .iter_mut()
                .zip(f32s(b))
                .for_each(|(o, x)| *o = x),
            Plane::Bf16(p) => p[at..at + n]
                .iter_mut()
                .zip(b.chunks_exact(2))
                .for_each(|(o, c)| *o = u16::from_le_bytes([c[0], c[1]])),
            Plane::Q8 { q, d } => {
                let (qs, ds) = b.split_at(n);
                q[at..at + n]
                    .iter_mut()
                    .zip(qs)
                    .for_each(|(o, &x)| *o = x as i8);
                let (f, m) = (at / Q8_BLOCK, n / Q8_BLOCK);
                d[f..f + m]
                    .iter_mut()
                    .zip(f32s(ds))
                    .for_each(|(o, x)| *o = x);
            }
        }
    }
}

pub struct KvCache {
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// `kv_heads * head_dim`: the values of one position.
    pub kv_dim: usize,
    pub blocks: usize,
    pub format: KvFormat,
    /// Per layer: `blocks * BLOCK_SIZE * kv_dim` keys, then the same for values.
    k: Vec<Plane>,
    v: Vec<Plane>,
}

/// Where the `head_dim` values of KV head `kvh` at cache slot `slot` (of a sequence with block
/// table `table`) start.
#[inline(always)]
fn head_at(table: &[BlockId], slot: usize, kvh: usize, kv_heads: usize, head_dim: usize) -> usize {
    let b = table[slot / BLOCK_SIZE] as usize;
    ((b * kv_heads + kvh) * BLOCK_SIZE + slot % BLOCK_SIZE) * head_dim
}

/// One layer's keys and values, read-only, for attention.
#[derive(Clone, Copy)]
pub struct KvLayer<'a> {
    pub k: PlaneRef<'a>,
    pub v: PlaneRef<'a>,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl KvLayer<'_> {
    /// Where the values of KV head `kvh` at slot `slot` of a sequence with block table `table`
    /// start (in `k` and in `v`).
    #[inline(always)]
    pub fn head_at(&self, table: &[BlockId], slot: usize, kvh: usize) -> usize {
        head_at(table, slot, kvh, self.kv_heads, self.head_dim)
    }
}

impl KvCache {
    /// A cache of `blocks` blocks of `kv_heads` heads of `head_dim` values in `format`. Panics if
    /// the format cannot hold such heads ([`KvFormat::check`], which callers check first).
    pub fn new(
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        blocks: usize,
        format: KvFormat,
    ) -> KvCache {
        if let Err(e) = format.check(head_dim) {
            panic!("{e}");
        }
        let kv_dim = kv_heads * head_dim;
        let per = blocks * BLOCK_SIZE * kv_dim;
        KvCache {
            layers,
            kv_heads,
            head_dim,
            kv_dim,
            blocks,
            format,
            k: (0..layers).map(|_| Plane::new(format, per)).collect(),
            v: (0..layers).map(|_| Plane::new(format, per)).collect(),
        }
    }

    /// Bytes of cache per token position (all layers, keys and values).
    pub fn bytes_per_position(layers: usize, kv_dim: usize, format: KvFormat) -> usize {
        layers * 2 * format.row_bytes(kv_dim)
    }

    pub fn layer(&self, l: usize) -> KvLayer<'_> {
        KvLayer {
            k: self.k[l].view(),
            v: self.v[l].view(),
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
        }
    }

    fn at(&self, table: &[BlockId], slot: usize, kvh: usize) -> usize {
        head_at(table, slot, kvh, self.kv_heads, self.head_dim)
    }

    /// Writes the key and value of one position (`kv_dim` values each, head by head),
    /// converted to the cache's format.
    pub fn write(&mut self, l: usize, table: &[BlockId], pos: usize, k: &[f32], v: &[f32]) {
        let hd = self.head_dim;
        for h in 0..self.kv_heads {
            let off = self.at(table, pos, h);
            self.k[l].store(off, &k[h * hd..(h + 1) * hd]);
            self.v[l].store(off, &v[h * hd..(h + 1) * hd]);
        }
    }

    /// Copies slot `from` of a sequence to its slot `to` in every layer (a tree-draft branch's
    /// accepted rows moving to their positions).
    pub fn copy_slot(&mut self, table: &[BlockId], from: usize, to: usize) {
        for h in 0..self.kv_heads {
            let (f, t) = (self.at(table, from, h), self.at(table, to, h));
            for l in 0..self.layers {
                self.k[l].copy_within(f, t, self.head_dim);
                self.v[l].copy_within(f, t, self.head_dim);
            }
        }
    }

    /// Bytes of one block over all layers, as [`read_block`](Self::read_block) returns it.
    pub fn block_bytes(&self) -> usize {
        self.layers * 2 * BLOCK_SIZE * self.format.row_bytes(self.kv_dim)
    }

    /// The stored keys and values of block `b`: for each layer, its keys then its values, each
    /// as the cache holds them (per KV head, its `BLOCK_SIZE` rows in position order; f32 or
    /// bf16 values little-endian; q8_0: all the quants, then the scales).
    pub fn read_block(&self, b: BlockId) -> Vec<u8> {
        let n = BLOCK_SIZE * self.kv_dim;
        let at = b as usize * n;
        let mut out = Vec::with_capacity(self.block_bytes());
        for l in 0..self.layers {
            self.k[l].read_bytes(at, n, &mut out);
            self.v[l].read_bytes(at, n, &mut out);
        }
        out
    }

    /// Writes block `b` from `data`, laid out as [`read_block`](Self::read_block) returns it.
    /// `data` must hold exactly [`block_bytes`](Self::block_bytes) bytes.
    pub fn write_block(&mut self, b: BlockId, data: &[u8]) {
        assert_eq!(data.len(), self.block_bytes(), "KV block length");
        let n = BLOCK_SIZE * self.kv_dim;
        let half = BLOCK_SIZE * self.format.row_bytes(self.kv_dim);
        let at = b as usize * n;
        for (l, layer) in data.chunks_exact(2 * half).enumerate() {
            self.k[l].write_bytes(at, n, &layer[..half]);
            self.v[l].write_bytes(at, n, &layer[half..]);
        }
    }

    /// Copies the first `n` positions of block `src` into block `dst` in every layer
    /// (copy-on-write of a shared partial block).
    pub fn copy_block(&mut self, src: BlockId, dst: BlockId, n: usize) {
        let len = n * self.head_dim;
        for h in 0..self.kv_heads {
            let (s, d) = (self.at(&[src], 0, h), self.at(&[dst], 0, h));
            for l in 0..self.layers {
                self.k[l].copy_within(s, d, len);
                self.v[l].copy_within(s, d, len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_core::SplitMix64;

    /// A cache of `format` whose every position of every layer holds distinct random rows.
    fn filled(format: KvFormat, layers: usize, kv_dim: usize, blocks: usize) -> KvCache {
        let mut kv = KvCache::new(layers, kv_dim / 32, 32, blocks, format);
        let mut rng = SplitMix64::new(7);
        let table: Vec<BlockId> = (0..blocks as BlockId).collect();
        for l in 0..layers {
            for p in 0..blocks * BLOCK_SIZE {
                let k: Vec<f32> = (0..kv_dim).map(|_| rng.next_f32_signed() * 4.0).collect();
                let v: Vec<f32> = (0..kv_dim).map(|_| rng.next_f32_signed()).collect();
                kv.write(l, &table, p, &k, &v);
            }
        }
        kv
    }

    /// Cache slot `slot`'s keys and values in layer `l` (all heads), widened.
    fn row(kv: &KvCache, l: usize, slot: usize) -> Vec<u32> {
        let layer = kv.layer(l);
        let (hd, kvd) = (kv.head_dim, kv.kv_dim);
        let table: Vec<BlockId> = (0..kv.blocks as BlockId).collect();
        let mut out = vec![0f32; 2 * kvd];
        for h in 0..kv.kv_heads {
            let at = layer.head_at(&table, slot, h);
            layer.k.widen(at, &mut out[h * hd..(h + 1) * hd]);
            layer
                .v
                .widen(at, &mut out[kvd + h * hd..kvd + (h + 1) * hd]);
        }
        out.iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        let cases: [(u32, u16); 9] = [
            (0x3F80_0000, 0x3F80), // 1.0
            (0x3F80_8000, 0x3F80), // tie, even below
            (0x3F81_8000, 0x3F82), // tie, even above
            (0x3F80_8001, 0x3F81), // above the tie
            (0x8000_0000, 0x8000), // -0
            (0x0000_0001, 0x0000), // smallest subnormal rounds to +0
            (0x7F7F_FFFF, 0x7F80), // the largest f32 rounds to infinity
            (0xFF80_0000, 0xFF80), // -infinity
            (0x7F80_0001, 0x7FC0), // a signalling NaN stays a NaN
        ];
        for (x, want) in cases {
            assert_eq!(bf16_from_f32(f32::from_bits(x)), want, "{x:#010x}");
        }
        // Exhaustive over the dropped half for one upper half: the nearest of the two
        // neighbours, ties to even.
        for low in 0..=0xFFFFu32 {
            let x = f32::from_bits(0x4049_0000 | low);
            let got = f32_from_bf16(bf16_from_f32(x));
            let (a, b) = (f32::from_bits(0x4049_0000), f32::from_bits(0x404A_0000));
            // Ties go to 0x404A, the even one.
            let want = if x - a < b - x { a } else { b };
            assert_eq!(got.to_bits(), want.to_bits(), "{low:#06x}");
        }
    }

    #[test]
    fn rows_read_back_as_their_conversion() {
        let kv_dim = 64;
        for format in KvFormat::ALL {
            let mut kv = KvCache::new(2, 2, 32, 2, format);
            let mut rng = SplitMix64::new(3);
            let k: Vec<f32> = (0..kv_dim).map(|_| rng.next_f32_signed() * 9.0).collect();
            let v: Vec<f32> = (0..kv_dim).map(|_| rng.next_f32_signed()).collect();
            kv.write(1, &[1, 0], 5, &k, &v);
            let want: Vec<f32> = match format {
                KvFormat::F32 => k.clone(),
                KvFormat::Bf16 => k.iter().map(|&x| f32_from_bf16(bf16_from_f32(x))).collect(),
                KvFormat::Q8 => k
                    .chunks(Q8_BLOCK)
                    .flat_map(|b| {
                        let mut q = [0i8; Q8_BLOCK];
                        let d = actq::quantize_block_ref(b, &mut q);
                        q.map(|x| x as f32 * d)
                    })
                    .collect(),
            };
            let got = row(&kv, 1, BLOCK_SIZE + 5);
            let want: Vec<u32> = want.iter().map(|x| x.to_bits()).collect();
            assert_eq!(&got[..kv_dim], &want[..], "{format:?}");
            // Nothing else was written.
            assert!(row(&kv, 0, BLOCK_SIZE + 5).iter().all(|&x| x == 0));
            assert!(row(&kv, 1, 5).iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn blocks_round_trip_as_bytes_and_leave_other_blocks_alone() {
        for format in KvFormat::ALL {
            let src = filled(format, 3, 64, 4);
            assert_eq!(src.block_bytes(), 3 * 2 * BLOCK_SIZE * format.row_bytes(64));
            let data = src.read_block(1);
            assert_eq!(data.len(), src.block_bytes());
            let mut dst = filled(format, 3, 64, 4);
            let before: Vec<Vec<u8>> = (0..4).map(|b| dst.read_block(b)).collect();
            dst.write_block(3, &data);
            assert_eq!(dst.read_block(3), data, "{format:?}");
            for b in 0..3 {
                assert_eq!(
                    dst.read_block(b),
                    before[b as usize],
                    "{format:?} block {b}"
                );
            }
            for l in 0..3 {
                for i in 0..BLOCK_SIZE {
                    assert_eq!(
                        row(&dst, l, 3 * BLOCK_SIZE + i),
                        row(&src, l, BLOCK_SIZE + i)
                    );
                }
            }
        }
    }

    #[test]
    fn slot_and_block_copies_move_whole_rows() {
        for format in KvFormat::ALL {
            let mut kv = filled(format, 2, 64, 4);
            let table: Vec<BlockId> = vec![2, 0, 3, 1];
            let want: Vec<Vec<u32>> = (0..2).map(|l| row(&kv, l, 3 * BLOCK_SIZE + 4)).collect();
            // Table position 36 is block 3, slot 4; position 7 is block 2, slot 7.
            kv.copy_slot(&table, 36, 7);
            for (l, w) in want.iter().enumerate() {
                assert_eq!(&row(&kv, l, 2 * BLOCK_SIZE + 7), w, "{format:?}");
            }
            let src: Vec<Vec<u32>> = (0..5).map(|i| row(&kv, 1, BLOCK_SIZE + i)).collect();
            let untouched = row(&kv, 1, 5);
            kv.copy_block(1, 0, 5);
            for (i, w) in src.iter().enumerate() {
                assert_eq!(&row(&kv, 1, i), w, "{format:?}");
            }
            assert_eq!(row(&kv, 1, 5), untouched);
        }
    }

    #[test]
    fn formats_parse_and_size() {
        for f in KvFormat::ALL {
            assert_eq!(KvFormat::parse(f.name()), Some(f));
        }
        assert_eq!(KvFormat::parse("f16"), None);
        assert_eq!(KvFormat::F32.row_bytes(256), 1024);
        assert_eq!(KvFormat::Bf16.row_bytes(256), 512);
        assert_eq!(KvFormat::Q8.row_bytes(256), 256 + 32);
        assert!(KvFormat::Q8.check(48).is_err());
        assert!(KvFormat::Q8.check(64).is_ok());
        // Head-major blocks: head 1 of slot 3 of block 2 (of 3 heads of 8 values).
        let layer = KvCache::new(1, 3, 8, 4, KvFormat::F32);
        let l = layer.layer(0);
        assert_eq!(
            l.head_at(&[5, 2], 16 + 3, 1),
            ((2 * 3 + 1) * BLOCK_SIZE + 3) * 8
        );
    }
}
