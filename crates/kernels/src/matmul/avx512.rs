//! AVX-512 VNNI dot products. Integer block sums come from `vpdpbusd` (unsigned weight codes times
//! signed activations), per-group scales are applied in integers, and the float step per block is
//! [`block_step`] exactly, so the result equals the scalar reference bit for bit.

#![allow(clippy::missing_safety_doc)]

use super::avx2::kquant_dot;
use super::lanes8::{prefetch_ahead, reduce8_256, step8};
use super::reference::block_step;
use super::unpack::{f16_at, scales_mins_k4, Shape};
use crate::actq::QuantAct;
use std::arch::x86_64::*;

#[inline(always)]
unsafe fn nibble_mask() -> __m512i {
    _mm512_set1_epi8(0x0F)
}

/// Lanes of the first `R` rows.
#[inline(always)]
fn row_mask<const R: usize>() -> __mmask8 {
    ((1u32 << R) - 1) as __mmask8
}

/// 32 i16 of block-major row metadata (`per_row` values a row) starting `at` values past `p`;
/// zero past the first `R` rows, which are never read (they may lie beyond the array).
#[inline(always)]
unsafe fn load_i16<const R: usize>(p: *const i16, at: usize, per_row: usize) -> __m512i {
    let valid = (R * per_row).saturating_sub(at).min(32);
    let mask: __mmask32 = if valid == 32 {
        u32::MAX
    } else {
        (1u32 << valid) - 1
    };
    _mm512_maskz_loadu_epi16(mask, p.add(at) as *const _)
}

/// Eight per-row 16-lane integer accumulators reduced to one vector of eight sums (exact).
#[inline(always)]
unsafe fn reduce8(v: &[__m512i; 8]) -> __m256i {
    let mut a = [_mm256_setzero_si256(); 8];
    for r in 0..8 {
        a[r] = _mm256_add_epi32(
            _mm512_castsi512_si256(v[r]),
            _mm512_extracti64x4_epi64::<1>(v[r]),
        );
    }
    reduce8_256(&a)
}

/// Every i32 lane becomes the sum of the four lanes of its 128-bit lane (exact integer adds).
#[inline(always)]
unsafe fn sum4_lanes(p: __m512i) -> __m512i {
    let t = _mm512_add_epi32(p, _mm512_shuffle_epi32::<0b10_11_00_01>(p));
    _mm512_add_epi32(t, _mm512_shuffle_epi32::<0b01_00_11_10>(t))
}

/// Permutation picking lane 0 of each 128-bit lane of two vectors: rows 0..4 then 4..8.
#[inline(always)]
unsafe fn every4() -> __m512i {
    _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 28, 24, 20, 16, 12, 8, 4, 0)
}

/// One row's scaled integer sums over a 256-value block: `acc` plus, in some lanes,
/// Σ_g scale_g · Σ_(i in g) w_i x_i. Each `dpbusd` gives 16 lanes of four-product sums (at most
/// 4 · 63 · 128 = 32256 in magnitude: the 6-bit Q6_K codes are the widest), so two such vectors
/// pack into i16 without saturating and one `dpwssd` multiplies both by their scales (`sv`,
/// packed the same way) and adds the pairs into i32 lanes — three vector operations per 128
/// values instead of four. Lanes differ from the unpacked form, the row total (`reduce8`) is the
/// same integer.
#[inline(always)]
unsafe fn paired_sums(
    xb: *const i8,
    wv: &[__m512i; 4],
    sv: &[__m512i; 2],
    acc: __m512i,
) -> __m512i {
    let zero = _mm512_setzero_si512();
    let dp: [__m512i; 4] = std::array::from_fn(|g| {
        _mm512_dpbusd_epi32(zero, wv[g], _mm512_loadu_si512(xb.add(64 * g) as *const _))
    });
    let acc = _mm512_dpwssd_epi32(acc, _mm512_packs_epi32(dp[0], dp[1]), sv[0]);
    _mm512_dpwssd_epi32(acc, _mm512_packs_epi32(dp[2], dp[3]), sv[1])
}

/// [`paired_sums`] of block `b` for rows `r0 .. r0 + R` (the other lanes zero), with the
/// groups' scales `svs` (i32 lanes) packed to i16 once for all rows.
#[inline(always)]
unsafe fn rows_paired_sums<const R: usize>(
    x: &QuantAct,
    r0: usize,
    b: usize,
    wv: &[__m512i; 4],
    svs: &[__m512i; 4],
) -> [__m512i; 8] {
    let sv = [
        _mm512_packs_epi32(svs[0], svs[1]),
        _mm512_packs_epi32(svs[2], svs[3]),
    ];
    let mut isums = [_mm512_setzero_si512(); 8];
    for (r, isum) in isums.iter_mut().enumerate().take(R) {
        *isum = paired_sums(x.row_qs(r0 + r).as_ptr().add(256 * b), wv, &sv, *isum);
    }
    isums
}

/// Q4_K, eight rows at once: the weight block is decoded once, integer sums are reduced together
/// and the float step runs on eight lanes (the same IEEE operations as [`block_step`]).
///
/// Each 128 values (64 code bytes) become two vectors whose lanes hold the same 32-value group
/// (`A`: code bytes 0-15, 32-47 low nibbles, then high; `B`: bytes 16-31, 48-63), against the
/// activations in [`K4_ORDER`](crate::actq::K4_ORDER): two `dpbusd` sum eight products of one
/// group per lane (at most 8 · 15 · 127 = 15240, an i16), the two halves' vectors pack into one
/// and one `dpwssd` applies the eight group scales. The row total is the same integer.
#[inline(always)]
unsafe fn q4k_rows8<const R: usize>(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
    let nb = w.len() / 144;
    let rows = x.rows;
    let mut acc = _mm256_setzero_ps();
    let m4 = nibble_mask();
    let zero = _mm512_setzero_si512();
    // i16 lane t of the packed sums: half t % 8 / 4, 128-bit lane t / 8 (groups 0 2 1 3 of the
    // half); its group's scale from the eight scales.
    let sidx = _mm512_set_epi16(
        7, 7, 7, 7, 3, 3, 3, 3, 5, 5, 5, 5, 1, 1, 1, 1, 6, 6, 6, 6, 2, 2, 2, 2, 4, 4, 4, 4, 0, 0,
        0, 0,
    );
    for b in 0..nb {
        let blk = &w[144 * b..144 * (b + 1)];
        prefetch_ahead(blk.as_ptr(), 144);
        let (scales, mins) = scales_mins_k4(&blk[4..16]);
        let s16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_set_epi64x(0, scales as i64)));
        let sv = _mm512_permutexvar_epi16(sidx, s16);
        let mv = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_set_epi64x(0, mins as i64)));
        let q = blk.as_ptr().add(16);
        let mut wv = [zero; 4];
        for h in 0..2 {
            let v = _mm512_loadu_si512(q.add(64 * h) as *const _);
            let lo = _mm512_and_si512(v, m4);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
            wv[2 * h] = _mm512_shuffle_i64x2::<0x88>(lo, hi);
            wv[2 * h + 1] = _mm512_shuffle_i64x2::<0xDD>(lo, hi);
        }
        let mut isums = [zero; 8];
        for (r, isum) in isums.iter_mut().enumerate().take(R) {
            let xb = x.row_qs_k4(r0 + r).as_ptr().add(256 * b);
            let mut p = [zero; 2];
            for (h, ph) in p.iter_mut().enumerate() {
                let xa = _mm512_loadu_si512(xb.add(128 * h) as *const _);
                let xc = _mm512_loadu_si512(xb.add(128 * h + 64) as *const _);
                *ph = _mm512_dpbusd_epi32(
                    _mm512_dpbusd_epi32(zero, wv[2 * h], xa),
                    wv[2 * h + 1],
                    xc,
                );
            }
            *isum = _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(p[0], p[1]), sv);
        }
        // Σ_j min_j * sum32_j per row, from the block-major sums: 8 rows x 8 i16 = two vectors,
        // each row's four i32 partial sums in one 128-bit lane.
        let sp = x.sums32_t.as_ptr().add((b * rows + r0) * 8);
        let p0 = sum4_lanes(_mm512_madd_epi16(load_i16::<R>(sp, 0, 8), mv));
        let p1 = sum4_lanes(_mm512_madd_epi16(load_i16::<R>(sp, 32, 8), mv));
        let msum = _mm512_castsi512_si256(_mm512_permutex2var_epi32(p0, every4(), p1));
        let dx = _mm256_maskz_loadu_ps(row_mask::<R>(), x.d_t.as_ptr().add(b * rows + r0));
        acc = step8(
            acc,
            Shape::ScaleMinusMin,
            f16_at(blk, 0),
            f16_at(blk, 2),
            dx,
            reduce8(&isums),
            msum,
        );
    }
    _mm256_mask_storeu_ps(out.as_mut_ptr(), row_mask::<R>(), acc);
}

/// Q6_K, eight rows at once (see [`q4k_rows8`]).
#[inline(always)]
unsafe fn q6k_rows8<const R: usize>(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
    let nb = w.len() / 210;
    let rows = x.rows;
    let mut acc = _mm256_setzero_ps();
    let m4 = nibble_mask();
    let m2 = _mm512_set1_epi8(0x03);
    let zero = _mm512_setzero_si512();
    let sh_a = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
    let sh_b = _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4);
    let pa = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    let pb = _mm512_set_epi32(7, 7, 7, 7, 6, 6, 6, 6, 5, 5, 5, 5, 4, 4, 4, 4);
    for b in 0..nb {
        let blk = blk_at(w, b, 210);
        prefetch_ahead(blk.as_ptr(), 210);
        let scp = blk.as_ptr().add(192) as *const i8;
        let mut wv = [zero; 4];
        let mut svs = [zero; 4];
        for n in 0..2 {
            let ql = _mm512_loadu_si512(blk.as_ptr().add(64 * n) as *const _);
            let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                blk.as_ptr().add(128 + 32 * n) as *const __m256i
            ));
            let ha = _mm512_slli_epi16::<4>(_mm512_and_si512(_mm512_srlv_epi64(qh, sh_a), m2));
            let hb = _mm512_slli_epi16::<4>(_mm512_and_si512(_mm512_srlv_epi64(qh, sh_b), m2));
            wv[2 * n] = _mm512_or_si512(_mm512_and_si512(ql, m4), ha);
            wv[2 * n + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16::<4>(ql), m4), hb);
            // Signed scales in i32 lanes (the pack below keeps them as i16).
            let s8 = _mm_loadl_epi64(scp.add(8 * n) as *const __m128i);
            let s32 = _mm512_castsi256_si512(_mm256_cvtepi8_epi32(s8));
            svs[2 * n] = _mm512_permutexvar_epi32(pa, s32);
            svs[2 * n + 1] = _mm512_permutexvar_epi32(pb, s32);
        }
        let isums = rows_paired_sums::<R>(x, r0, b, &wv, &svs);
        // Σ_g scale_g * sum16_g per row: 8 rows x 16 i16 = four vectors.
        let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(scp as *const __m128i));
        let scv = _mm512_broadcast_i64x4(sc16);
        let sp = x.sums16_t.as_ptr().add((b * rows + r0) * 16);
        // Each vector: two rows of eight i32 partial sums; fold each 256-bit half to one value.
        let mut c = [zero; 4];
        for (i, ci) in c.iter_mut().enumerate() {
            let p = sum4_lanes(_mm512_madd_epi16(load_i16::<R>(sp, 32 * i, 16), scv));
            *ci = _mm512_add_epi32(p, _mm512_shuffle_i64x2::<0b10_11_00_01>(p, p));
        }
        let pick = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24, 16, 8, 0);
        let c01 = _mm512_permutex2var_epi32(c[0], pick, c[1]);
        let c23 = _mm512_permutex2var_epi32(c[2], pick, c[3]);
        let join = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 19, 18, 17, 16, 3, 2, 1, 0);
        let c = _mm512_castsi512_si256(_mm512_permutex2var_epi32(c01, join, c23));
        let isum = _mm256_sub_epi32(reduce8(&isums), _mm256_slli_epi32::<5>(c));
        let dx = _mm256_maskz_loadu_ps(row_mask::<R>(), x.d_t.as_ptr().add(b * rows + r0));
        acc = step8(
            acc,
            Shape::Scale,
            f16_at(blk, 208),
            0.0,
            dx,
            isum,
            _mm256_setzero_si256(),
        );
    }
    _mm256_mask_storeu_ps(out.as_mut_ptr(), row_mask::<R>(), acc);
}

rows_by_eight!(rows_q4k, q4k_rows8, "avx512f,avx512bw,avx512vl,avx512vnni");

rows_by_eight!(rows_q6k, q6k_rows8, "avx512f,avx512bw,avx512vl,avx512vnni");

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
    codes: impl Fn(&[u8]) -> (__m256i, i32, f32),
) -> f32 {
    let qs = x.row_qs(row).as_ptr();
    let ds = x.row_d(row);
    let sums = x.row_sums(row);
    let nb = w.len() / bytes;
    let mut acc = 0f32;
    for b in 0..nb {
        let blk = blk_at(w, b, bytes);
        let (u, offset, d) = codes(blk);
        let xv = _mm256_loadu_si256(qs.add(32 * b) as *const __m256i);
        let dp = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, xv);
        let sx = sums[b] as i32;
        let isum = hsum256(dp) - offset * sx;
        let m = if shape == Shape::ScalePlusMin {
            f16_at(blk, 2)
        } else {
            0.0
        };
        acc = block_step(acc, shape, d, m, ds[b], isum, sx);
    }
    acc
}

/// A legacy type (32-value blocks), rows `r0..r0+R` (R <= 8) against one weight row: each block
/// decoded once, the rows' integer sums reduced together, the float step on eight lanes (the
/// same IEEE operations per row as [`legacy_dot`]).
#[inline(always)]
unsafe fn legacy_rows8<const R: usize>(
    w: &[u8],
    x: &QuantAct,
    r0: usize,
    out: &mut [f32],
    bytes: usize,
    shape: Shape,
    codes: impl Fn(&[u8]) -> (__m256i, i32, f32),
) {
    let nb = w.len() / bytes;
    let zero = _mm256_setzero_si256();
    let mut acc = _mm256_setzero_ps();
    let qs: [*const i8; R] = std::array::from_fn(|r| x.row_qs(r0 + r).as_ptr());
    let ds: [&[f32]; R] = std::array::from_fn(|r| x.row_d(r0 + r));
    let sums: [&[i16]; R] = std::array::from_fn(|r| x.row_sums(r0 + r));
    for b in 0..nb {
        let blk = blk_at(w, b, bytes);
        let (u, offset, d) = codes(blk);
        let mut dps = [zero; 8];
        let mut dx = [0f32; 8];
        let mut sx = [0i32; 8];
        for r in 0..R {
            let xv = _mm256_loadu_si256(qs[r].add(32 * b) as *const __m256i);
            dps[r] = _mm256_dpbusd_epi32(zero, u, xv);
            dx[r] = ds[r][b];
            sx[r] = sums[r][b] as i32;
        }
        let sxv = _mm256_loadu_si256(sx.as_ptr() as *const __m256i);
        let isum = _mm256_sub_epi32(
            reduce8_256(&dps),
            _mm256_mullo_epi32(_mm256_set1_epi32(offset), sxv),
        );
        let m = if shape == Shape::ScalePlusMin {
            f16_at(blk, 2)
        } else {
            0.0
        };
        let dxv = _mm256_loadu_ps(dx.as_ptr());
        acc = step8(acc, shape, d, m, dxv, isum, sxv);
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    out[..R].copy_from_slice(&lanes[..R]);
}

/// Rows `r0..r0 + out.len()` of a legacy type: one row through `dot`, more eight at a time.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn legacy_rows(
    w: &[u8],
    x: &QuantAct,
    r0: usize,
    out: &mut [f32],
    bytes: usize,
    shape: Shape,
    codes: impl Fn(&[u8]) -> (__m256i, i32, f32) + Copy,
    dot: unsafe fn(&[u8], &QuantAct, usize) -> f32,
) {
    let mut r = 0;
    while r < out.len() {
        let n = (out.len() - r).min(8);
        let o = &mut out[r..r + n];
        match n {
            1 => o[0] = dot(w, x, r0 + r),
            2 => legacy_rows8::<2>(w, x, r0 + r, o, bytes, shape, codes),
            3 => legacy_rows8::<3>(w, x, r0 + r, o, bytes, shape, codes),
            4 => legacy_rows8::<4>(w, x, r0 + r, o, bytes, shape, codes),
            5 => legacy_rows8::<5>(w, x, r0 + r, o, bytes, shape, codes),
            6 => legacy_rows8::<6>(w, x, r0 + r, o, bytes, shape, codes),
            7 => legacy_rows8::<7>(w, x, r0 + r, o, bytes, shape, codes),
            _ => legacy_rows8::<8>(w, x, r0 + r, o, bytes, shape, codes),
        }
        r += n;
    }
}

#[inline(always)]
unsafe fn codes_q4_0(b: &[u8]) -> (__m256i, i32, f32) {
    (nibbles32(b.as_ptr().add(2)), 8, f16_at(b, 0))
}

#[inline(always)]
unsafe fn codes_q4_1(b: &[u8]) -> (__m256i, i32, f32) {
    (nibbles32(b.as_ptr().add(4)), 0, f16_at(b, 0))
}

#[inline(always)]
unsafe fn codes_q5_0(b: &[u8]) -> (__m256i, i32, f32) {
    (five_bit(b, 2), 16, f16_at(b, 0))
}

#[inline(always)]
unsafe fn codes_q5_1(b: &[u8]) -> (__m256i, i32, f32) {
    (five_bit(b, 4), 0, f16_at(b, 0))
}

#[inline(always)]
unsafe fn codes_q8_0(b: &[u8]) -> (__m256i, i32, f32) {
    let v = _mm256_loadu_si256(b.as_ptr().add(2) as *const __m256i);
    (
        _mm256_xor_si256(v, _mm256_set1_epi8(-128)),
        128,
        f16_at(b, 0),
    )
}

/// MXFP4: each nibble looked up as twice its E2M1 value plus 12 (unsigned), 12 subtracted
/// through the activations' sum, under half the E8M0 scale.
#[inline(always)]
unsafe fn codes_mxfp4(b: &[u8]) -> (__m256i, i32, f32) {
    let lut = _mm256_setr_epi8(
        12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24,
        12, 11, 10, 9, 8, 6, 4, 0,
    );
    let codes = _mm256_shuffle_epi8(lut, nibbles32(b.as_ptr().add(1)));
    (codes, 12, tf_core::dtype::e8m0_half(b[0]))
}

macro_rules! legacy_rows_fn {
    ($name:ident, $bytes:expr, $shape:expr, $codes:ident, $dot:ident) => {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
        pub unsafe fn $name(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
            legacy_rows(w, x, r0, out, $bytes, $shape, |b| $codes(b), $dot)
        }
    };
}
legacy_rows_fn!(rows_q4_0, 18, Shape::Scale, codes_q4_0, dot_q4_0);
legacy_rows_fn!(rows_q4_1, 20, Shape::ScalePlusMin, codes_q4_1, dot_q4_1);
legacy_rows_fn!(rows_q5_0, 22, Shape::Scale, codes_q5_0, dot_q5_0);
legacy_rows_fn!(rows_q5_1, 24, Shape::ScalePlusMin, codes_q5_1, dot_q5_1);
legacy_rows_fn!(rows_q8_0, 34, Shape::Scale, codes_q8_0, dot_q8_0);
legacy_rows_fn!(rows_mxfp4, 17, Shape::Scale, codes_mxfp4, dot_mxfp4);

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_mxfp4(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 17, Shape::Scale, |b| codes_mxfp4(b))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q4_0(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 18, Shape::Scale, |b| codes_q4_0(b))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q4_1(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 20, Shape::ScalePlusMin, |b| codes_q4_1(b))
}

#[inline(always)]
unsafe fn five_bit(b: &[u8], qh_at: usize) -> __m256i {
    let qh = u32::from_le_bytes([b[qh_at], b[qh_at + 1], b[qh_at + 2], b[qh_at + 3]]);
    let high = _mm256_and_si256(_mm256_movm_epi8(qh), _mm256_set1_epi8(0x10));
    _mm256_or_si256(nibbles32(b.as_ptr().add(qh_at + 4)), high)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q5_0(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 22, Shape::Scale, |b| codes_q5_0(b))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q5_1(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 24, Shape::ScalePlusMin, |b| codes_q5_1(b))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q8_0(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 34, Shape::Scale, |b| codes_q8_0(b))
}

// ---------------------------------------------------------------------------------------------
// Q2_K, Q3_K, Q5_K: one row per call. Each 512-bit step covers 64 values; `vpdpbusd` lanes hold
// sums of 4 products (|lane| < 2^15), so `vpmaddwd` against i32 lanes holding the group scale in
// their low i16 (high i16 zero) multiplies each lane by its scale exactly.

/// Sum of the 8 i32 lanes.
#[inline(always)]
unsafe fn hsum_8(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b0100_1110>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b1011_0001>(s));
    _mm_cvtsi128_si32(s)
}

/// Scales of groups 4q..4q+4 over four lanes each, from 16 i32 lanes of group scales.
#[inline(always)]
unsafe fn group_scales(s32: __m512i, q: i32) -> __m512i {
    let (a, b, c, d) = (4 * q, 4 * q + 1, 4 * q + 2, 4 * q + 3);
    let idx = _mm512_set_epi32(d, d, d, d, c, c, c, c, b, b, b, b, a, a, a, a);
    _mm512_permutexvar_epi32(idx, s32)
}

/// 2-bit fields of the 64 values `128n + 64h .. +64` of a Q2_K/Q3_K block (fields `2h`, `2h + 1`
/// of the 32 bytes at `qs`), as bytes 0..4.
#[inline(always)]
unsafe fn two_bit_quarter(qs: *const u8, h: usize) -> __m512i {
    let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(qs as *const __m256i));
    let (a, b) = (4 * h as i64, 4 * h as i64 + 2);
    let sh = _mm512_set_epi64(b, b, b, b, a, a, a, a);
    _mm512_and_si512(_mm512_srlv_epi64(v, sh), _mm512_set1_epi8(3))
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q2k(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    kquant_dot(w, x, row, 84, Shape::ScaleMinusMin, |blk, xb, sums16| {
        let p = blk.as_ptr();
        let packed = _mm_loadu_si128(p as *const __m128i);
        let m4 = _mm_set1_epi8(0x0F);
        let s32 = _mm512_cvtepu8_epi32(_mm_and_si128(packed, m4));
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let msum = hsum_8(_mm256_madd_epi16(mins, sums16));
        let zero = _mm512_setzero_si512();
        let mut acc = zero;
        for q in 0..4 {
            let (n, h) = (q / 2, q % 2);
            let u = two_bit_quarter(p.add(16 + 32 * n), h);
            let xv = _mm512_loadu_si512(xb.add(64 * q) as *const _);
            let dp = _mm512_dpbusd_epi32(zero, u, xv);
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(dp, group_scales(s32, q as i32)));
        }
        let isum = _mm512_reduce_add_epi32(acc);
        (isum, msum, f16_at(blk, 80), f16_at(blk, 82))
    })
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q3k(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    kquant_dot(w, x, row, 110, Shape::Scale, |blk, xb, sums16| {
        let p = blk.as_ptr();
        let sc = &blk[96..108];
        let a0 = u32::from_le_bytes([sc[0], sc[1], sc[2], sc[3]]);
        let a1 = u32::from_le_bytes([sc[4], sc[5], sc[6], sc[7]]);
        let t = u32::from_le_bytes([sc[8], sc[9], sc[10], sc[11]]);
        const M1: u32 = 0x0303_0303;
        const M2: u32 = 0x0f0f_0f0f;
        let s8 = _mm_sub_epi8(
            _mm_set_epi32(
                (((a1 >> 4) & M2) | (((t >> 6) & M1) << 4)) as i32,
                (((a0 >> 4) & M2) | (((t >> 4) & M1) << 4)) as i32,
                ((a1 & M2) | (((t >> 2) & M1) << 4)) as i32,
                ((a0 & M2) | ((t & M1) << 4)) as i32,
            ),
            _mm_set1_epi8(32),
        );
        let s16 = _mm256_cvtepi8_epi16(s8);
        // Signed scales in the low i16 of each i32 lane, zero above.
        let s32 = _mm512_cvtepu16_epi32(s16);
        // Codes are u - 4 with u = low2 + 4 * hbit in 0..8; the -4 goes through the group sums.
        let corr = hsum_8(_mm256_madd_epi16(s16, sums16));
        let hmask = _mm512_broadcast_i64x4(_mm256_loadu_si256(p as *const __m256i));
        let one = _mm512_set1_epi8(1);
        let zero = _mm512_setzero_si512();
        let mut acc = zero;
        for q in 0..4 {
            let (n, h) = (q / 2, q % 2);
            let low = two_bit_quarter(p.add(32 + 32 * n), h);
            let (a, b) = (2 * q as i64, 2 * q as i64 + 1);
            let sh = _mm512_set_epi64(b, b, b, b, a, a, a, a);
            let hb = _mm512_and_si512(_mm512_srlv_epi64(hmask, sh), one);
            let u = _mm512_or_si512(low, _mm512_slli_epi16::<2>(hb));
            let xv = _mm512_loadu_si512(xb.add(64 * q) as *const _);
            let dp = _mm512_dpbusd_epi32(zero, u, xv);
            acc = _mm512_add_epi32(acc, _mm512_madd_epi16(dp, group_scales(s32, q as i32)));
        }
        let isum = _mm512_reduce_add_epi32(acc) - 4 * corr;
        (isum, 0, f16_at(blk, 108), 0.0)
    })
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn dot_q5k(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    kquant_dot(w, x, row, 176, Shape::ScaleMinusMin, |blk, xb, sums16| {
        let p = blk.as_ptr();
        // The 8 six-bit scales (bytes 0..8) and mins (bytes 8..16), as `scale_min_k4` reads them.
        let s = &blk[4..16];
        let u0 = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        let u1 = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
        let u2 = u32::from_le_bytes([s[8], s[9], s[10], s[11]]);
        const K1: u32 = 0x3f3f_3f3f;
        const K2: u32 = 0x0f0f_0f0f;
        const K3: u32 = 0x0303_0303;
        let sm = _mm_set_epi32(
            (((u2 >> 4) & K2) | (((u1 >> 6) & K3) << 4)) as i32,
            (u1 & K1) as i32,
            ((u2 & K2) | (((u0 >> 6) & K3) << 4)) as i32,
            (u0 & K1) as i32,
        );
        let s32 = _mm512_cvtepu8_epi32(sm);
        // Each min repeated for its two groups of 16.
        let midx = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
        let m16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, midx));
        let msum = hsum_8(_mm256_madd_epi16(m16, sums16));
        let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(16) as *const __m256i));
        let m4 = _mm512_set1_epi8(0x0F);
        let nib_sh = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
        let one = _mm512_set1_epi8(1);
        let zero = _mm512_setzero_si512();
        let mut acc = zero;
        for g in 0..4 {
            // Values 64g..64g+32 are the low nibbles, 64g+32..64g+64 the high ones.
            let v =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(48 + 32 * g) as *const __m256i));
            let nib = _mm512_and_si512(_mm512_srlv_epi64(v, nib_sh), m4);
            let (a, b) = (2 * g as i64, 2 * g as i64 + 1);
            let sh = _mm512_set_epi64(b, b, b, b, a, a, a, a);
            let hb = _mm512_and_si512(_mm512_srlv_epi64(qh, sh), one);
            let u = _mm512_or_si512(nib, _mm512_slli_epi16::<4>(hb));
            let xv = _mm512_loadu_si512(xb.add(64 * g) as *const _);
            let dp = _mm512_dpbusd_epi32(zero, u, xv);
            let (c, d) = (2 * g as i32, 2 * g as i32 + 1);
            let idx = _mm512_set_epi32(d, d, d, d, d, d, d, d, c, c, c, c, c, c, c, c);
            acc = _mm512_add_epi32(
                acc,
                _mm512_madd_epi16(dp, _mm512_permutexvar_epi32(idx, s32)),
            );
        }
        let isum = _mm512_reduce_add_epi32(acc);
        (isum, msum, f16_at(blk, 0), f16_at(blk, 2))
    })
}
