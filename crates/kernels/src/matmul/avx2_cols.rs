//! AVX2 kernels for one or two activation rows (a decode step, a draft model's guess): eight
//! short weight rows (eight output columns) at once, each column's sums in one lane of a
//! vector. Q4_0 and Q4_K; Q6_K's rows kernel already runs near the memory's rate with one row.
//!
//! With a single activation row the per-column kernels of [`avx2`](super::avx2) reduce every
//! block's integer sums horizontally and then wait on that column's own chain of float steps.
//! Here a block's eight integer sums (one per column) are reduced together into one vector and
//! the float step of eight columns is one vector step: [`block_step`] lane by lane, in
//! ascending block order, so every lane has the bits of the reference and of the rows kernels.
//! The block factors of the eight columns come in one gather.
//!
//! [`block_step`]: super::reference::block_step

#![allow(clippy::missing_safety_doc)]

use super::avx2::{
    bcast_scale, dot_scaled, k4_min_pairs, k4_scales_mins, load, load_x, nibbles32, reduce8_small,
};
use super::lanes8::{reduce8_256, step8v};
use super::unpack::Shape;
use crate::actq::QuantAct;
use std::arch::x86_64::*;

/// Byte offsets of eight weight rows `stride` bytes apart, for gathers.
#[inline(always)]
unsafe fn offsets8(stride: usize) -> __m256i {
    let s = i32::try_from(stride).expect("a weight row under 256 MiB");
    _mm256_setr_epi32(0, s, 2 * s, 3 * s, 4 * s, 5 * s, 6 * s, 7 * s)
}

/// The low (`HIGH == false`) or high 16 bits of each gathered 32-bit word, as f16 converted by
/// F16C (the conversion of [`f16_to_f32`](super::unpack::f16_to_f32), NaN quieting included).
#[inline(always)]
unsafe fn f16_lanes<const HIGH: bool>(words: __m256i) -> __m256 {
    let (a, b) = if HIGH { (2, 3) } else { (0, 1) };
    let half = _mm_setr_epi8(
        a,
        b,
        a + 4,
        b + 4,
        a + 8,
        b + 8,
        a + 12,
        b + 12,
        -1,
        -1,
        -1,
        -1,
        -1,
        -1,
        -1,
        -1,
    );
    let pick = _mm256_broadcastsi128_si256(half);
    let packed = _mm256_permute4x64_epi64::<0b1000>(_mm256_shuffle_epi8(words, pick));
    _mm256_cvtph_ps(_mm256_castsi256_si128(packed))
}

/// Asks the cache for the `len` bytes at `p` (a prefetch never faults).
#[inline(always)]
unsafe fn prefetch_span(p: *const u8, len: usize) {
    let mut off = 0;
    while off < len {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8);
        off += 64;
    }
    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(len - 1) as *const i8);
}

/// Block step `b`'s prefetch for a group of eight rows of `bb`-byte blocks at `p`: its share
/// of the next eight rows. Eight rows read side by side are one region that the hardware
/// prefetchers only follow once inside it.
#[inline(always)]
unsafe fn prefetch_group(p: *const u8, stride: usize, bb: usize, b: usize) {
    prefetch_span(p.wrapping_add(8 * stride + 8 * bb * b), 8 * bb);
}

/// `(stride, blocks)` of eight weight rows of `bb`-byte blocks back to back in `w`.
#[inline(always)]
fn layout(w: &[u8], bb: usize, x: &QuantAct, r0: usize, rows: usize) -> (usize, usize) {
    let stride = w.len() / 8;
    let nb = stride / bb;
    assert!(stride * 8 == w.len() && nb * bb == stride);
    assert!(r0 + rows <= x.rows && nb * x.block.values() <= x.k);
    (stride, nb)
}

/// Stores each row's eight columns: `out[8 * r + j]`.
#[inline(always)]
unsafe fn store<const R: usize>(acc: &[__m256; R], out: &mut [f32]) {
    assert!(out.len() >= 8 * R);
    for (r, a) in acc.iter().enumerate() {
        _mm256_storeu_ps(out.as_mut_ptr().add(8 * r), *a);
    }
}

/// Q4_0, one activation row `row` against the eight weight rows in `w`.
#[inline(always)]
unsafe fn q4_0_one(w: &[u8], x: &QuantAct, row: usize, out: &mut [f32]) {
    let (stride, nb) = layout(w, 18, x, row, 1);
    let p = w.as_ptr();
    let xq = x.row_qs(row).as_ptr();
    let sums = x.row_sums(row);
    let ds = x.row_d(row);
    let offsets = offsets8(stride);
    let ones = _mm256_set1_epi16(1);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = p.add(18 * b);
        prefetch_group(p, stride, 18, b);
        let xv = load_x(xq.add(32 * b));
        let ps: [__m256i; 8] = std::array::from_fn(|j| {
            let u = nibbles32(blk.add(j * stride + 2));
            _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), ones)
        });
        // Codes are u - 8: the 8 goes through the block sum of the activations.
        let sx = *sums.get_unchecked(b) as i32;
        let isum = _mm256_sub_epi32(reduce8_small(&ps), _mm256_set1_epi32(8 * sx));
        // Four bytes at each block's start (its f16 scale and two code bytes).
        let d = f16_lanes::<false>(_mm256_i32gather_epi32::<1>(blk as *const i32, offsets));
        let dx = _mm256_set1_ps(*ds.get_unchecked(b));
        let none = _mm256_setzero_si256();
        acc = step8v(acc, Shape::Scale, d, _mm256_setzero_ps(), dx, isum, none);
    }
    store::<1>(&[acc], out);
}

/// Q4_0: rows `r0..r0 + out.len() / 8`, each against the eight weight rows in `w` (one pass per
/// row; the eight weight rows stay in cache for the next).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn cols8_q4_0(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
    for (r, o) in out.chunks_exact_mut(8).enumerate() {
        q4_0_one(w, x, r0 + r, o);
    }
}

/// Q4_K, rows `r0..r0 + R` against the eight weight rows in `w`: each column's block is
/// unpacked once for the R rows.
#[inline(always)]
unsafe fn q4k_cols<const R: usize>(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
    let (stride, nb) = layout(w, 144, x, r0, R);
    let p = w.as_ptr();
    let xq: [*const i8; R] = std::array::from_fn(|r| x.row_qs(r0 + r).as_ptr());
    let sums: [*const i16; R] = std::array::from_fn(|r| x.row_sums(r0 + r).as_ptr());
    let ds: [*const f32; R] = std::array::from_fn(|r| x.row_d(r0 + r).as_ptr());
    let offsets = offsets8(stride);
    let m4 = _mm256_set1_epi8(0x0F);
    let zero = _mm256_setzero_si256();
    let mut acc = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let blk = p.add(144 * b);
        prefetch_group(p, stride, 144, b);
        let mut isums = [[zero; 8]; R];
        let mut msums = [[zero; 8]; R];
        for j in 0..8 {
            let c = blk.add(j * stride);
            let sm = k4_scales_mins(std::slice::from_raw_parts(c, 144));
            let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
            let mut is = [zero; R];
            for s in 0..4 {
                let v = load(c.add(16 + 32 * s));
                let lo = _mm256_and_si256(v, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                let s_lo = bcast_scale(sc16, 2 * s);
                let s_hi = bcast_scale(sc16, 2 * s + 1);
                for (r, i) in is.iter_mut().enumerate() {
                    let xb = xq[r].add(256 * b + 64 * s);
                    *i = _mm256_add_epi32(*i, dot_scaled(lo, load_x(xb), s_lo));
                    *i = _mm256_add_epi32(*i, dot_scaled(hi, load_x(xb.add(32)), s_hi));
                }
            }
            let mins = k4_min_pairs(sm);
            for r in 0..R {
                isums[r][j] = is[r];
                let s16 = _mm256_loadu_si256(sums[r].add(16 * b) as *const __m256i);
                msums[r][j] = _mm256_madd_epi16(mins, s16);
            }
        }
        // d and dmin: the block's first four bytes.
        let words = _mm256_i32gather_epi32::<1>(blk as *const i32, offsets);
        let (d, dmin) = (f16_lanes::<false>(words), f16_lanes::<true>(words));
        for r in 0..R {
            let dx = _mm256_set1_ps(*ds[r].add(b));
            let (isum, msum) = (reduce8_256(&isums[r]), reduce8_256(&msums[r]));
            acc[r] = step8v(acc[r], Shape::ScaleMinusMin, d, dmin, dx, isum, msum);
        }
    }
    store::<R>(&acc, out);
}

/// `pub unsafe fn $name(w, x, r0, out)`: rows `r0..r0 + out.len() / 8` (one or two) against
/// the eight weight rows in `w`, through `$cols::<R>`.
macro_rules! cols_by_rows {
    ($name:ident, $cols:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $name(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
            match out.len() / 8 {
                1 => $cols::<1>(w, x, r0, out),
                2 => $cols::<2>(w, x, r0, out),
                n => panic!("{} takes one or two rows, not {n}", stringify!($name)),
            }
        }
    };
}

cols_by_rows!(cols8_q4k, q4k_cols);
