//! Per-row q8 quantization of activations, the left operand of every quantized matmul.
//!
//! One rounding rule, fully specified: for each block of `B` values (32 for the legacy quant types,
//! 256 for the k-quants), `amax = max |x|`, `d = amax / 127`, `q = round_ties_even(x * (127 /
//! amax))` saturated to i8 (all zero when `amax == 0`). The SIMD versions perform the same two
//! IEEE operations per value, so every level gives the same bytes. A row's quantization reads only
//! that row.

use crate::SimdLevel;

/// Which block size a weight type's integer dot product needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActBlock {
    /// 32 values per scale, plus the integer sum of each block (legacy quant types).
    B32,
    /// 256 values per scale, plus integer sums of every 16 values (k-quants).
    B256,
}

impl ActBlock {
    pub fn values(self) -> usize {
        match self {
            ActBlock::B32 => 32,
            ActBlock::B256 => 256,
        }
    }
    /// Values per stored partial sum.
    pub fn sum_len(self) -> usize {
        match self {
            ActBlock::B32 => 32,
            ActBlock::B256 => 16,
        }
    }
}

/// Quantized activation rows.
#[derive(Clone, Debug)]
pub struct QuantAct {
    pub block: ActBlock,
    pub rows: usize,
    pub k: usize,
    /// `rows * k` quantized values.
    pub qs: Vec<i8>,
    /// One scale per block: `rows * k / block.values()`.
    pub d: Vec<f32>,
    /// One integer sum per `block.sum_len()` values: `rows * k / sum_len`.
    pub sums: Vec<i16>,
    /// Block-major copies for the multi-row kernels (B256 only): scales `[block][row]`, sums of
    /// 16 values `[block][row][16]` and of 32 values `[block][row][8]`.
    pub d_t: Vec<f32>,
    pub sums16_t: Vec<i16>,
    pub sums32_t: Vec<i16>,
    /// The sums of 32 values once more, rows innermost (B256 only): `[block][pair][row][2]`,
    /// pair p holding groups 2p and 2p + 1, so that one 256-bit load gives eight rows' pair.
    pub sums32_p: Vec<i16>,
    /// B256 at the AVX-512 level: `qs` with each 128 values reordered for the Q4_K kernel
    /// ([`K4_ORDER`]); empty otherwise.
    pub qs_k4: Vec<i8>,
}

/// Where the AVX-512 Q4_K kernel reads each 16 values of a 128-value half: the 16-value pieces
/// 0, 4, 2, 6, 1, 5, 3, 7 (values 0..16, 64..80, 32..48, 96..112, then 16..32, ...), so that two
/// `dpbusd` over its four 64-byte vectors sum the same 32-value group in each lane.
pub const K4_ORDER: [usize; 8] = [0, 4, 2, 6, 1, 5, 3, 7];

impl QuantAct {
    /// Quantizes `rows` rows of `k` values (`x.len() == rows * k`, `k` a multiple of the block).
    pub fn new(level: SimdLevel, block: ActBlock, x: &[f32], rows: usize, k: usize) -> QuantAct {
        assert_eq!(x.len(), rows * k);
        assert_eq!(
            k % block.values(),
            0,
            "k={k} is not a multiple of {}",
            block.values()
        );
        let mut q = QuantAct {
            block,
            rows,
            k,
            qs: vec![0; rows * k],
            d: vec![0.0; rows * k / block.values()],
            sums: vec![0; rows * k / block.sum_len()],
            d_t: Vec::new(),
            sums16_t: Vec::new(),
            sums32_t: Vec::new(),
            sums32_p: Vec::new(),
            qs_k4: Vec::new(),
        };
        let bl = block.values();
        for (bi, chunk) in x.chunks_exact(bl).enumerate() {
            let out = &mut q.qs[bi * bl..(bi + 1) * bl];
            q.d[bi] = quantize_block(level, chunk, out);
        }
        let sl = block.sum_len();
        for (si, chunk) in q.qs.chunks_exact(sl).enumerate() {
            q.sums[si] = chunk.iter().map(|&v| v as i16).sum();
        }
        if block == ActBlock::B256 && level == SimdLevel::Avx512Vnni {
            q.qs_k4 = vec![0; rows * k];
            for (half, out) in q.qs.chunks_exact(128).zip(q.qs_k4.chunks_exact_mut(128)) {
                for (piece, &from) in K4_ORDER.iter().enumerate() {
                    out[16 * piece..16 * piece + 16]
                        .copy_from_slice(&half[16 * from..16 * from + 16]);
                }
            }
        }
        if block == ActBlock::B256 {
            let nb = k / 256;
            q.d_t = vec![0.0; rows * nb];
            q.sums16_t = vec![0; rows * nb * 16];
            q.sums32_t = vec![0; rows * nb * 8];
            q.sums32_p = vec![0; rows * nb * 8];
            for r in 0..rows {
                for b in 0..nb {
                    q.d_t[b * rows + r] = q.d[r * nb + b];
                    for g in 0..16 {
                        let v = q.sums[(r * nb + b) * 16 + g];
                        q.sums16_t[(b * rows + r) * 16 + g] = v;
                        q.sums32_t[(b * rows + r) * 8 + g / 2] += v;
                        let (pair, half) = (g / 4, g / 2 % 2);
                        q.sums32_p[((b * 4 + pair) * rows + r) * 2 + half] += v;
                    }
                }
            }
        }
        q
    }

    #[inline(always)]
    pub fn row_qs(&self, row: usize) -> &[i8] {
        &self.qs[row * self.k..(row + 1) * self.k]
    }
    #[inline(always)]
    pub fn row_qs_k4(&self, row: usize) -> &[i8] {
        &self.qs_k4[row * self.k..(row + 1) * self.k]
    }
    #[inline(always)]
    pub fn row_d(&self, row: usize) -> &[f32] {
        let n = self.k / self.block.values();
        &self.d[row * n..(row + 1) * n]
    }
    #[inline(always)]
    pub fn row_sums(&self, row: usize) -> &[i16] {
        let n = self.k / self.block.sum_len();
        &self.sums[row * n..(row + 1) * n]
    }
}

/// Quantizes one block, returning its scale `d`.
pub fn quantize_block(level: SimdLevel, x: &[f32], out: &mut [i8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 && x.len().is_multiple_of(8) {
        // SAFETY: AVX2 was detected on this CPU.
        return unsafe { quantize_block_avx2(x, out) };
    }
    let _ = level;
    quantize_block_ref(x, out)
}

/// The scalar oracle of the rounding rule.
pub fn quantize_block_ref(x: &[f32], out: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let id = 127.0 / amax;
    if amax == 0.0 || !id.is_finite() {
        // All zero, or so close to zero (below ~3.7e-37) that the scale overflows: a zero block.
        out.fill(0);
        return 0.0;
    }
    for (o, v) in out.iter_mut().zip(x) {
        *o = (v * id).round_ties_even().clamp(-128.0, 127.0) as i8;
    }
    amax / 127.0
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_block_avx2(x: &[f32], out: &mut [i8]) -> f32 {
    use std::arch::x86_64::*;
    let n = x.len();
    let sign = _mm256_set1_ps(-0.0);
    let mut m = _mm256_setzero_ps();
    for i in (0..n).step_by(8) {
        m = _mm256_max_ps(
            m,
            _mm256_andnot_ps(sign, _mm256_loadu_ps(x.as_ptr().add(i))),
        );
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), m);
    let amax = lanes.iter().fold(0f32, |a, v| a.max(*v));
    if amax == 0.0 || !(127.0 / amax).is_finite() {
        out.fill(0);
        return 0.0;
    }
    let id = _mm256_set1_ps(127.0 / amax);
    let lo = _mm256_set1_ps(-128.0);
    let hi = _mm256_set1_ps(127.0);
    for i in (0..n).step_by(8) {
        let v = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(i)), id);
        let v = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
        let v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        let q = _mm256_cvtps_epi32(v);
        let mut tmp = [0i32; 8];
        _mm256_storeu_si256(tmp.as_mut_ptr() as *mut __m256i, q);
        for (j, t) in tmp.iter().enumerate() {
            out[i + j] = *t as i8;
        }
    }
    amax / 127.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_agree_and_rows_are_independent() {
        let k = 512;
        let rows = 5;
        let mut s = 7u64;
        let x: Vec<f32> = (0..rows * k)
            .map(|i| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
                let v = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0;
                if i % 97 == 0 {
                    v * 40.0
                } else {
                    v
                }
            })
            .collect();
        for block in [ActBlock::B32, ActBlock::B256] {
            let want = QuantAct::new(SimdLevel::Scalar, block, &x, rows, k);
            for level in SimdLevel::available() {
                let got = QuantAct::new(level, block, &x, rows, k);
                assert_eq!(got.qs, want.qs);
                assert_eq!(got.sums, want.sums);
                assert!(got
                    .d
                    .iter()
                    .zip(&want.d)
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
            for r in 0..rows {
                let one = QuantAct::new(SimdLevel::Scalar, block, &x[r * k..(r + 1) * k], 1, k);
                assert_eq!(one.row_qs(0), want.row_qs(r));
                assert_eq!(one.row_sums(0), want.row_sums(r));
            }
        }
        let zeros = QuantAct::new(SimdLevel::Scalar, ActBlock::B32, &[0.0; 32], 1, 32);
        assert_eq!(zeros.d[0], 0.0);
        // A block so small that 127/amax overflows quantizes to zeros at every level.
        let mut tiny = [1e-38f32; 32];
        tiny[5] = 0.0;
        for level in SimdLevel::available() {
            let q = QuantAct::new(level, ActBlock::B32, &tiny, 1, 32);
            assert!(q.qs.iter().all(|v| *v == 0) && q.d[0] == 0.0, "{level:?}");
        }
    }
}
