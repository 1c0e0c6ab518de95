//! AVX-512 VNNI dot products. Integer block sums come from `vpdpbusd` (unsigned weight codes times
//! signed activations), per-group scales are applied in integers, and the float step per block is
//! [`block_step`] exactly, so the result equals the scalar reference bit for bit.

#![allow(clippy::missing_safety_doc)]

use super::reference::block_step;
use super::unpack::{f16_at, scale_min_k4, Shape};
use crate::actq::QuantAct;
use std::arch::x86_64::*;

#[inline(always)]
unsafe fn nibble_mask() -> __m512i {
    _mm512_set1_epi8(0x0F)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q4k(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    let qs = x.row_qs(row).as_ptr();
    let ds = x.row_d(row);
    let sums = x.row_sums(row);
    let nb = w.len() / 144;
    let mut acc = 0f32;
    let m4 = nibble_mask();
    let zero = _mm512_setzero_si512();
    for b in 0..nb {
        let blk = &w[144 * b..144 * (b + 1)];
        let sc = &blk[4..16];
        let mut scales = [0u8; 16];
        let mut msum = 0i32;
        for j in 0..8 {
            let (s, m) = scale_min_k4(j, sc);
            scales[j] = s;
            msum += m as i32 * (sums[16 * b + 2 * j] as i32 + sums[16 * b + 2 * j + 1] as i32);
        }
        let sv = _mm512_cvtepu8_epi32(_mm_loadu_si128(scales.as_ptr() as *const __m128i));
        let q = blk.as_ptr().add(16);
        let xb = qs.add(256 * b);
        let mut isum = zero;
        for g in 0..4 {
            let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(q.add(32 * g) as *const __m256i));
            let lo = _mm512_and_si512(v, m4);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
            let wv = _mm512_mask_blend_epi64(0xF0, lo, hi);
            let xv = _mm512_loadu_si512(xb.add(64 * g) as *const _);
            let dp = _mm512_dpbusd_epi32(zero, wv, xv);
            let idx = _mm512_set_epi32(
                2 * g as i32 + 1,
                2 * g as i32 + 1,
                2 * g as i32 + 1,
                2 * g as i32 + 1,
                2 * g as i32 + 1,
                2 * g as i32 + 1,
                2 * g as i32 + 1,
                2 * g as i32 + 1,
                2 * g as i32,
                2 * g as i32,
                2 * g as i32,
                2 * g as i32,
                2 * g as i32,
                2 * g as i32,
                2 * g as i32,
                2 * g as i32,
            );
            let s = _mm512_permutexvar_epi32(idx, sv);
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(dp, s));
        }
        let isum = _mm512_reduce_add_epi32(isum);
        acc = block_step(
            acc,
            Shape::ScaleMinusMin,
            f16_at(blk, 0),
            f16_at(blk, 2),
            ds[b],
            isum,
            msum,
        );
    }
    acc
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q6k(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    let qs = x.row_qs(row).as_ptr();
    let ds = x.row_d(row);
    let sums = x.row_sums(row);
    let nb = w.len() / 210;
    let mut acc = 0f32;
    let m4 = nibble_mask();
    let m2 = _mm512_set1_epi8(0x03);
    let zero = _mm512_setzero_si512();
    let sh_a = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    let sh_b = _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4);
    for b in 0..nb {
        let blk = blk_at(w, b, 210);
        let scp = blk.as_ptr().add(192) as *const i8;
        let mut corr = 0i32;
        for g in 0..16 {
            corr += *scp.add(g) as i32 * sums[16 * b + g] as i32;
        }
        let xb = qs.add(256 * b);
        let mut isum = zero;
        for n in 0..2 {
            let ql = _mm512_loadu_si512(blk.as_ptr().add(64 * n) as *const _);
            let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                blk.as_ptr().add(128 + 32 * n) as *const __m256i
            ));
            let ha = _mm512_slli_epi16::<4>(_mm512_and_si512(_mm512_srlv_epi64(qh, sh_a), m2));
            let hb = _mm512_slli_epi16::<4>(_mm512_and_si512(_mm512_srlv_epi64(qh, sh_b), m2));
            let ua = _mm512_or_si512(_mm512_and_si512(ql, m4), ha);
            let ub = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4), hb);
            let xa = _mm512_loadu_si512(xb.add(128 * n) as *const _);
            let xbv = _mm512_loadu_si512(xb.add(128 * n + 64) as *const _);
            let da = _mm512_dpbusd_epi32(zero, ua, xa);
            let db = _mm512_dpbusd_epi32(zero, ub, xbv);
            // Scales of groups 8n..8n+8, each over four i32 lanes, as (scale, 0) i16 pairs.
            let s8 = _mm_loadl_epi64(scp.add(8 * n) as *const __m128i);
            let s16 = _mm_cvtepi8_epi16(s8);
            let s32 = _mm256_cvtepu16_epi32(s16);
            let sa = _mm512_permutexvar_epi32(
                _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                _mm512_castsi256_si512(s32),
            );
            let sb = _mm512_permutexvar_epi32(
                _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4),
                _mm512_castsi256_si512(s32),
            );
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(da, sa));
            isum = _mm512_add_epi32(isum, _mm512_madd_epi16(db, sb));
        }
        let isum = _mm512_reduce_add_epi32(isum) - 32 * corr;
        acc = block_step(acc, Shape::Scale, f16_at(blk, 208), 0.0, ds[b], isum, 0);
    }
    acc
}

#[inline(always)]
fn blk_at(w: &[u8], b: usize, bytes: usize) -> &[u8] {
    &w[bytes * b..bytes * (b + 1)]
}

/// Sum of the 8 i32 lanes.
#[inline(always)]
unsafe fn hsum256(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b0100_1110>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b1011_0001>(s));
    _mm_cvtsi128_si32(s)
}

/// The 32 4-bit codes of a legacy block, low nibbles first (values 0..16, then 16..32).
#[inline(always)]
unsafe fn nibbles32(qs: *const u8) -> __m256i {
    let v = _mm_loadu_si128(qs as *const __m128i);
    let m = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(v, m);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m);
    _mm256_set_m128i(hi, lo)
}

/// Legacy 32-value blocks: `u` = unsigned codes, `offset` subtracted from each code.
#[inline(always)]
unsafe fn legacy_dot(
    w: &[u8],
    x: &QuantAct,
    row: usize,
    bytes: usize,
    shape: Shape,
    codes: impl Fn(&[u8]) -> (__m256i, i32),
) -> f32 {
    let qs = x.row_qs(row).as_ptr();
    let ds = x.row_d(row);
    let sums = x.row_sums(row);
    let nb = w.len() / bytes;
    let mut acc = 0f32;
    for b in 0..nb {
        let blk = blk_at(w, b, bytes);
        let (u, offset) = codes(blk);
        let xv = _mm256_loadu_si256(qs.add(32 * b) as *const __m256i);
        let dp = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, xv);
        let sx = sums[b] as i32;
        let isum = hsum256(dp) - offset * sx;
        let m = if shape == Shape::ScalePlusMin {
            f16_at(blk, 2)
        } else {
            0.0
        };
        acc = block_step(acc, shape, f16_at(blk, 0), m, ds[b], isum, sx);
    }
    acc
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q4_0(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 18, Shape::Scale, |b| {
        (nibbles32(b.as_ptr().add(2)), 8)
    })
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q4_1(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 20, Shape::ScalePlusMin, |b| {
        (nibbles32(b.as_ptr().add(4)), 0)
    })
}

#[inline(always)]
unsafe fn five_bit(b: &[u8], qh_at: usize) -> __m256i {
    let qh = u32::from_le_bytes([b[qh_at], b[qh_at + 1], b[qh_at + 2], b[qh_at + 3]]);
    let high = _mm256_and_si256(_mm256_movm_epi8(qh), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibbles32(b.as_ptr().add(qh_at + 4)), high)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q5_0(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 22, Shape::Scale, |b| (five_bit(b, 2), 16))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q5_1(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 24, Shape::ScalePlusMin, |b| (five_bit(b, 4), 0))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q8_0(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 34, Shape::Scale, |b| {
        let v = _mm256_loadu_si256(b.as_ptr().add(2) as *const __m256i);
        (_mm256_xor_si256(v, _mm256_set1_epi8(-128)), 128)
    })
}
