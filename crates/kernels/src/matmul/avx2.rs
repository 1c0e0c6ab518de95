//! AVX2 dot products; Q4_K, Q6_K and Q4_0 take several rows per decoded weight block. Integer block
//! sums come from `vpmaddubsw` (unsigned weight codes times signed activations, adjacent pairs
//! added into i16) widened to i32 by `vpmaddwd`, which also applies
//! the integer group scales; the float step per block is [`block_step`] exactly, in ascending
//! block order, so every result equals the scalar reference bit for bit.
//!
//! `vpmaddubsw` saturates its i16 pair sums, so every kernel keeps both products of a pair small
//! enough for any i8 activation, -128 included (the quantizer emits -128 when a block's `127 /
//! amax` overflows to infinity): weight codes have at most 6 bits, `|pair| <= 2 * 63 * 128 =
//! 16128`. Q8_0's signed weights are split as `w = (w & 0x7F) - (w & 0x80)`: two unsigned products
//! whose pair sums stay within `[-32768, 32512]`. Signed codes (Q3_K, Q6_K, Q4_0, Q5_0) are used
//! as unsigned codes plus an offset, and the offset is taken out with the activation sums.

#![allow(clippy::missing_safety_doc)]

use super::lanes8::{prefetch_ahead, reduce_rows, row_lanes, step8};
use super::reference::block_step;
use super::unpack::{f16_at, f16_to_f32, Shape};
use crate::actq::QuantAct;
use std::arch::x86_64::*;

#[inline(always)]
pub(super) unsafe fn load(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

#[inline(always)]
pub(super) unsafe fn load_x(p: *const i8) -> __m256i {
    _mm256_loadu_si256(p as *const __m256i)
}

/// Sum of the 4 i32 lanes.
#[inline(always)]
unsafe fn hsum128(s: __m128i) -> i32 {
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b0100_1110>(s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b1011_0001>(s));
    _mm_cvtsi128_si32(s)
}

/// Sum of the 8 i32 lanes.
#[inline(always)]
unsafe fn hsum(v: __m256i) -> i32 {
    hsum128(_mm_add_epi32(
        _mm256_castsi256_si128(v),
        _mm256_extracti128_si256::<1>(v),
    ))
}

/// `(Σ a, Σ b)` over the 8 i32 lanes of each.
#[inline(always)]
unsafe fn hsum2(a: __m256i, b: __m256i) -> (i32, i32) {
    let h = _mm256_hadd_epi32(a, b);
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
    let s = _mm_hadd_epi32(s, s);
    (_mm_cvtsi128_si32(s), _mm_extract_epi32::<1>(s))
}

/// Per i32 lane, the sum of four products `u * x` (u unsigned, at most 6 bits: no saturation).
#[inline(always)]
unsafe fn dot4(u: __m256i, x: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1))
}

/// `Σ u * x * scale` per i32 lane, where `scale16` holds each pair's i16 scale.
#[inline(always)]
pub(super) unsafe fn dot_scaled(u: __m256i, x: __m256i, scale16: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), scale16)
}

/// i16 scales for 32 values covering groups `2m` (low 16 values) and `2m + 1` (high 16), taken
/// from 16 i8 group scales.
#[inline(always)]
pub(super) unsafe fn pair_scales(sc: __m128i, m: usize) -> __m256i {
    const ONES: i64 = 0x0101_0101_0101_0101;
    let lo = ONES * (2 * m as i64);
    _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_set_epi64x(lo + ONES, lo)))
}

/// Scale `j` of 8 i16 scales (in both 128-bit lanes of `sc16`), as 16 i16 lanes.
#[inline(always)]
pub(super) unsafe fn bcast_scale(sc16: __m256i, j: usize) -> __m256i {
    let idx = (2 * j) as i16 | (((2 * j + 1) as i16) << 8);
    _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(idx))
}

// ---------------------------------------------------------------------------------------------
// Legacy 32-value blocks.

/// Sums of the lanes of four vectors: `[Σ a, Σ b, Σ c, Σ d]`.
#[inline(always)]
unsafe fn hsum4(a: __m256i, b: __m256i, c: __m256i, d: __m256i) -> [i32; 4] {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
    let mut out = [0i32; 4];
    _mm_storeu_si128(out.as_mut_ptr() as *mut __m128i, s);
    out
}

/// One weight row of legacy blocks of `bytes` bytes. `lanes(block, x)` gives i32 lanes whose sum
/// is the block's Σ u·x for unsigned codes u = q + `offset`. Four blocks share one reduction.
#[inline(always)]
unsafe fn legacy_dot(
    w: &[u8],
    x: &QuantAct,
    row: usize,
    bytes: usize,
    shape: Shape,
    offset: i32,
    lanes: impl Fn(*const u8, __m256i) -> __m256i,
) -> f32 {
    let qs = x.row_qs(row).as_ptr();
    let ds = x.row_d(row);
    let sums = x.row_sums(row);
    let nb = w.len() / bytes;
    assert!(32 * nb <= x.k && nb <= ds.len() && nb <= sums.len());
    let wp = w.as_ptr();
    let step = |acc: f32, b: usize, usum: i32| {
        let blk = wp.add(bytes * b);
        let sx = *sums.get_unchecked(b) as i32;
        let d = f16_to_f32(u16::from_le_bytes([*blk, *blk.add(1)]));
        let m = if shape == Shape::ScalePlusMin {
            f16_to_f32(u16::from_le_bytes([*blk.add(2), *blk.add(3)]))
        } else {
            0.0
        };
        block_step(
            acc,
            shape,
            d,
            m,
            *ds.get_unchecked(b),
            usum - offset * sx,
            sx,
        )
    };
    let v = |b: usize| lanes(wp.add(bytes * b), load_x(qs.add(32 * b)));
    let mut acc = 0f32;
    let mut b = 0;
    while b + 4 <= nb {
        let s = hsum4(v(b), v(b + 1), v(b + 2), v(b + 3));
        for (i, si) in s.into_iter().enumerate() {
            acc = step(acc, b + i, si);
        }
        b += 4;
    }
    while b < nb {
        acc = step(acc, b, hsum(v(b)));
        b += 1;
    }
    acc
}

/// The 32 4-bit codes of a legacy block, low nibbles first (values 0..16, then 16..32).
#[inline(always)]
pub(super) unsafe fn nibbles32(qs: *const u8) -> __m256i {
    let v = _mm_loadu_si128(qs as *const __m128i);
    let m = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(v, m);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m);
    _mm256_set_m128i(hi, lo)
}

/// Byte j is 0x10 where bit j of the u32 at `qh` (x86: little-endian) is set, else 0.
#[inline(always)]
unsafe fn high_bits32(qh: *const u8) -> __m256i {
    let bits = (qh as *const u32).read_unaligned();
    // Byte j takes byte j/8 of the word, then keeps only bit j%8.
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(bits as i32),
        _mm256_set_epi64x(
            0x0303_0303_0303_0303,
            0x0202_0202_0202_0202,
            0x0101_0101_0101_0101,
            0,
        ),
    );
    let sel = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q4_1(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 20, Shape::ScalePlusMin, 0, |b, xv| {
        dot4(nibbles32(b.add(4)), xv)
    })
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q5_0(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 22, Shape::Scale, 16, |b, xv| {
        dot4(
            _mm256_or_si256(nibbles32(b.add(6)), high_bits32(b.add(2))),
            xv,
        )
    })
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q5_1(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 24, Shape::ScalePlusMin, 0, |b, xv| {
        dot4(
            _mm256_or_si256(nibbles32(b.add(8)), high_bits32(b.add(4))),
            xv,
        )
    })
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q8_0(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    legacy_dot(w, x, row, 34, Shape::Scale, 0, |b, xv| {
        let v = load(b.add(2));
        let low7 = _mm256_and_si256(v, _mm256_set1_epi8(0x7F));
        let sign = _mm256_and_si256(v, _mm256_set1_epi8(-128));
        // w·x = (w & 0x7F)·x - 128·[w < 0]·x; 128·(x0 + x1) >= -32768 does not saturate.
        let pos = _mm256_maddubs_epi16(low7, xv);
        let neg = _mm256_maddubs_epi16(sign, xv);
        let one = _mm256_set1_epi16(1);
        _mm256_sub_epi32(_mm256_madd_epi16(pos, one), _mm256_madd_epi16(neg, one))
    })
}

/// Q4_0 rows `r0..r0 + R` against one weight row. Eight blocks at a time: their codes are
/// unpacked once for all rows, each row's eight block sums are reduced into one vector, the
/// eight products `(d * dx) * isum` are taken in one vector and added to the row's sum in
/// ascending block order: [`block_step`] exactly, with one horizontal reduction per eight
/// blocks instead of one per four and no scalar f16 conversions.
#[inline(always)]
unsafe fn q4_0_rows<const R: usize>(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
    let nb = w.len() / 18;
    assert!(r0 + R <= x.rows && 32 * nb <= x.k && out.len() >= R);
    let mut acc = [0f32; R];
    let mut b = 0;
    while b + 8 <= nb {
        q4_0_group::<R, 8>(w, x, r0, b, &mut acc);
        b += 8;
    }
    if b + 4 <= nb {
        q4_0_group::<R, 4>(w, x, r0, b, &mut acc);
        b += 4;
    }
    while b < nb {
        let blk = w.as_ptr().add(18 * b);
        let u = nibbles32(blk.add(2));
        let d = f16_one(blk);
        for (r, a) in acc.iter_mut().enumerate() {
            let row = r0 + r;
            let usum = hsum(dot4(u, load_x(x.row_qs(row).as_ptr().add(32 * b))));
            let sx = *x.row_sums(row).get_unchecked(b) as i32;
            let dx = *x.row_d(row).get_unchecked(b);
            *a = block_step(*a, Shape::Scale, d, 0.0, dx, usum - 8 * sx, 0);
        }
        b += 1;
    }
    out[..R].copy_from_slice(&acc);
}

/// [`reduce8_256`] for lanes of at most 7680 in magnitude (four products of a 4-bit code and
/// an i8 activation): partial sums stay within i16, so saturating packs and `vpmaddwd` by ones
/// do the pairwise adds, cheaper on AVX2 machines than `vphaddd`. Exact integer sums.
#[inline(always)]
pub(super) unsafe fn reduce8_small(p: &[__m256i; 8]) -> __m256i {
    let ones = _mm256_set1_epi16(1);
    let pair = |a: __m256i, b: __m256i| _mm256_madd_epi16(_mm256_packs_epi32(a, b), ones);
    // Per 128-bit half: two lanes of each of two vectors, then one lane of each of four.
    let q0 = pair(pair(p[0], p[1]), pair(p[2], p[3]));
    let q1 = pair(pair(p[4], p[5]), pair(p[6], p[7]));
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(q0, q1),
        _mm256_permute2x128_si256::<0x31>(q0, q1),
    )
}

/// Blocks `b..b + G` (G = 4 or 8) of [`q4_0_rows`].
#[inline(always)]
unsafe fn q4_0_group<const R: usize, const G: usize>(
    w: &[u8],
    x: &QuantAct,
    r0: usize,
    b: usize,
    acc: &mut [f32; R],
) {
    let p = w.as_ptr().add(18 * b);
    prefetch_ahead(p, 18 * G);
    // Each block's 16 code bytes in both halves, shifted by 0 and 4 bits: values 0..16, 16..32.
    let shifts = _mm256_setr_epi64x(0, 0, 4, 4);
    let m4 = _mm256_set1_epi8(0x0F);
    let codes: [__m256i; G] = std::array::from_fn(|i| {
        let v = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.add(18 * i + 2) as *const __m128i));
        _mm256_and_si256(_mm256_srlv_epi64(v, shifts), m4)
    });
    // The G block scales: four bytes at each block's start (its f16 and two code bytes, all
    // inside the block), the low two kept, converted by F16C as `f16_to_f32` would.
    let offsets = _mm256_setr_epi32(0, 18, 36, 54, 72, 90, 108, 126);
    let raw = _mm256_mask_i32gather_epi32::<1>(
        _mm256_setzero_si256(),
        p as *const i32,
        offsets,
        row_lanes::<G>(),
    );
    let low16 = _mm256_shuffle_epi8(
        raw,
        _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13, -1,
            -1, -1, -1, -1, -1, -1, -1,
        ),
    );
    let d = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64::<0b1000>(
        low16,
    )));
    let ones = _mm256_set1_epi16(1);
    let nbx = x.k / 32;
    for (r, a) in acc.iter_mut().enumerate() {
        let row = r0 + r;
        let xq = x.qs.as_ptr().add(row * x.k + 32 * b);
        let mut ps = [_mm256_setzero_si256(); 8];
        for (i, pi) in ps.iter_mut().take(G).enumerate() {
            *pi = _mm256_madd_epi16(_mm256_maddubs_epi16(codes[i], load_x(xq.add(32 * i))), ones);
        }
        let usum = reduce8_small(&ps);
        let sp = x.sums.as_ptr().add(row * nbx + b);
        let dp = x.d.as_ptr().add(row * nbx + b);
        let (sx, dx) = if G == 8 {
            (_mm_loadu_si128(sp as *const __m128i), _mm256_loadu_ps(dp))
        } else {
            (
                _mm_loadl_epi64(sp as *const __m128i),
                _mm256_maskload_ps(dp, row_lanes::<G>()),
            )
        };
        // Codes are u - 8: the 8 goes through the block sums of the activations.
        let isum = _mm256_sub_epi32(usum, _mm256_slli_epi32::<3>(_mm256_cvtepi16_epi32(sx)));
        let t = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum));
        let mut ts = [0f32; 8];
        _mm256_storeu_ps(ts.as_mut_ptr(), t);
        for &ti in &ts[..G] {
            *a += ti;
        }
    }
}

rows_by_eight!(rows_q4_0, q4_0_rows, "avx2,fma,f16c");

// ---------------------------------------------------------------------------------------------
// K-quant 256-value super-blocks.

/// One weight row of k-quant blocks of `bytes` bytes: `block(blk, x, sums)` returns
/// `(isum, msum, d, dmin)` given the block's 256 activations and their 16 group sums.
#[inline(always)]
pub(super) unsafe fn kquant_dot(
    w: &[u8],
    x: &QuantAct,
    row: usize,
    bytes: usize,
    shape: Shape,
    block: impl Fn(&[u8], *const i8, __m256i) -> (i32, i32, f32, f32),
) -> f32 {
    let qs = x.row_qs(row);
    let ds = x.row_d(row);
    let sums = x.row_sums(row);
    let nb = w.len() / bytes;
    assert!(256 * nb <= qs.len() && nb <= ds.len() && 16 * nb <= sums.len());
    let mut acc = 0f32;
    for b in 0..nb {
        let blk = w.get_unchecked(bytes * b..bytes * (b + 1));
        let sums16 = _mm256_loadu_si256(sums.as_ptr().add(16 * b) as *const __m256i);
        let (isum, msum, d, dmin) = block(blk, qs.as_ptr().add(256 * b), sums16);
        acc = block_step(acc, shape, d, dmin, *ds.get_unchecked(b), isum, msum);
    }
    acc
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q2k(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    kquant_dot(w, x, row, 84, Shape::ScaleMinusMin, |blk, xb, sums16| {
        let p = blk.as_ptr();
        let packed = _mm_loadu_si128(p as *const __m128i);
        let m4 = _mm_set1_epi8(0x0F);
        let scales = _mm_and_si128(packed, m4);
        let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
        let mprod = _mm256_madd_epi16(mins, sums16);
        let m3 = _mm256_set1_epi8(3);
        let mut acc = _mm256_setzero_si256();
        for n in 0..2 {
            let mut q = load(p.add(16 + 32 * n));
            for j in 0..4 {
                let u = _mm256_and_si256(q, m3);
                let xv = load_x(xb.add(128 * n + 32 * j));
                acc = _mm256_add_epi32(acc, dot_scaled(u, xv, pair_scales(scales, 4 * n + j)));
                q = _mm256_srli_epi16::<2>(q);
            }
        }
        let (isum, msum) = hsum2(acc, mprod);
        (isum, msum, f16_at(blk, 80), f16_at(blk, 82))
    })
}

/// Q3_K's 16 group scales (6 bits each, minus 32) as i8.
#[inline(always)]
unsafe fn q3k_scales(sc: &[u8]) -> __m128i {
    let a0 = u32::from_le_bytes([sc[0], sc[1], sc[2], sc[3]]);
    let a1 = u32::from_le_bytes([sc[4], sc[5], sc[6], sc[7]]);
    let t = u32::from_le_bytes([sc[8], sc[9], sc[10], sc[11]]);
    const M1: u32 = 0x0303_0303;
    const M2: u32 = 0x0f0f_0f0f;
    let v = _mm_set_epi32(
        (((a1 >> 4) & M2) | (((t >> 6) & M1) << 4)) as i32,
        (((a0 >> 4) & M2) | (((t >> 4) & M1) << 4)) as i32,
        ((a1 & M2) | (((t >> 2) & M1) << 4)) as i32,
        ((a0 & M2) | ((t & M1) << 4)) as i32,
    );
    _mm_sub_epi8(v, _mm_set1_epi8(32))
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q3k(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    kquant_dot(w, x, row, 110, Shape::Scale, |blk, xb, sums16| {
        let p = blk.as_ptr();
        let sc = q3k_scales(&blk[96..108]);
        // Codes are u - 4 with u = low2 + 4 * hbit in 0..8; the -4 goes through the group sums.
        let corr = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc), sums16);
        let mut acc = _mm256_slli_epi32::<2>(corr);
        acc = _mm256_sub_epi32(_mm256_setzero_si256(), acc);
        let m3 = _mm256_set1_epi8(3);
        let one = _mm256_set1_epi8(1);
        let mut hb = load(p);
        for n in 0..2 {
            let mut q = load(p.add(32 + 32 * n));
            for j in 0..4 {
                let high = _mm256_slli_epi16::<2>(_mm256_and_si256(hb, one));
                let u = _mm256_or_si256(_mm256_and_si256(q, m3), high);
                let xv = load_x(xb.add(128 * n + 32 * j));
                acc = _mm256_add_epi32(acc, dot_scaled(u, xv, pair_scales(sc, 4 * n + j)));
                q = _mm256_srli_epi16::<2>(q);
                hb = _mm256_srli_epi16::<1>(hb);
            }
        }
        (hsum(acc), 0, f16_at(blk, 108), 0.0)
    })
}

/// Q4_K/Q5_K's 8 six-bit scales (bytes 0..8) and mins (bytes 8..16), from the 12 packed bytes
/// at `blk[4..16]` of a block (`blk` must hold at least 20 bytes: they are read as one 16-byte
/// vector and unpacked with vector shifts, no round trip through general registers).
#[inline(always)]
pub(super) unsafe fn k4_scales_mins(blk: &[u8]) -> __m128i {
    assert!(blk.len() >= 20);
    // Dwords [u0, u1, u2, -]: u0 holds scales 0..4 and the top bits of scales 4..8, u1 the
    // same for mins, u2 the low four bits of scales 4..8 (low nibbles) and mins 4..8 (high).
    let v = _mm_loadu_si128(blk.as_ptr().add(4) as *const __m128i);
    let low6 = _mm_and_si128(v, _mm_set1_epi8(0x3f));
    let u2 = _mm_srlv_epi32(
        _mm_shuffle_epi32::<0b1010_1010>(v),
        _mm_set_epi32(0, 0, 4, 0),
    );
    let nib = _mm_and_si128(u2, _mm_set1_epi8(0x0f));
    let top = _mm_and_si128(_mm_srli_epi32::<6>(v), _mm_set1_epi8(0x03));
    let high = _mm_or_si128(nib, _mm_slli_epi32::<4>(top));
    // [scales 0..4, scales 4..8, mins 0..4, mins 4..8].
    _mm_unpacklo_epi32(low6, high)
}

/// The 8 mins in bytes 8..16 of `sm` as i16, each repeated for its two groups of 16.
#[inline(always)]
pub(super) unsafe fn k4_min_pairs(sm: __m128i) -> __m256i {
    let idx = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, idx))
}

/// Lanes summing to Σ min_j · (sums[2j] + sums[2j+1]) for the 8 mins in bytes 8..16 of `sm`.
#[inline(always)]
unsafe fn k4_mins(sm: __m128i, sums16: __m256i) -> __m256i {
    _mm256_madd_epi16(k4_min_pairs(sm), sums16)
}

/// Q4_K (`high = None`) and Q5_K blocks: codes of sub-block j (32 values) use scale j.
#[inline(always)]
unsafe fn k4_block(
    blk: &[u8],
    xb: *const i8,
    sums16: __m256i,
    qs_at: usize,
    high: Option<usize>,
) -> (i32, i32, f32, f32) {
    let p = blk.as_ptr();
    let sm = k4_scales_mins(blk);
    let mprod = k4_mins(sm, sums16);
    let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    let m4 = _mm256_set1_epi8(0x0F);
    let bit4 = _mm256_set1_epi8(0x10);
    let mut hb = match high {
        Some(at) => load(p.add(at)),
        None => _mm256_setzero_si256(),
    };
    let mut acc = _mm256_setzero_si256();
    for j in 0..4 {
        let v = load(p.add(qs_at + 32 * j));
        let mut lo = _mm256_and_si256(v, m4);
        let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
        if high.is_some() {
            // Bits 2j and 2j+1 of qh (now bits 0 and 1) become bit 4 of the two codes.
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16::<4>(hb), bit4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16::<3>(hb), bit4));
            hb = _mm256_srli_epi16::<2>(hb);
        }
        let x0 = load_x(xb.add(64 * j));
        let x1 = load_x(xb.add(64 * j + 32));
        acc = _mm256_add_epi32(acc, dot_scaled(lo, x0, bcast_scale(sc16, 2 * j)));
        acc = _mm256_add_epi32(acc, dot_scaled(hi, x1, bcast_scale(sc16, 2 * j + 1)));
    }
    let (isum, msum) = hsum2(acc, mprod);
    (isum, msum, f16_at(blk, 0), f16_at(blk, 2))
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_q5k(w: &[u8], x: &QuantAct, row: usize) -> f32 {
    kquant_dot(w, x, row, 176, Shape::ScaleMinusMin, |blk, xb, sums16| {
        k4_block(blk, xb, sums16, 48, Some(16))
    })
}

// ---------------------------------------------------------------------------------------------
// Several rows per weight block (Q4_K, Q6_K). Each 32 codes are unpacked once per block and
// meet every row's activations while in a register: three vector operations per 32 values and
// row (`vpmaddubsw`, `vpmaddwd` by the group scales, `vpaddd`), the least AVX2 allows. Each row
// keeps its own i32 lanes; at the end of a block the rows' lanes are reduced into one vector of
// row sums and the float step runs for all rows at once ([`step8`], `block_step` lane by lane,
// in ascending block order per row), so a row's result is the scalar reference's whatever the
// row count.

/// Pointers to the quantized activations of rows `r0..r0 + R`.
#[inline(always)]
unsafe fn row_ptrs<const R: usize>(x: &QuantAct, r0: usize, nb: usize) -> [*const i8; R] {
    assert!(r0 + R <= x.rows && 256 * nb <= x.k && x.d_t.len() == x.rows * (x.k / 256));
    std::array::from_fn(|r| x.qs.as_ptr().add((r0 + r) * x.k))
}

/// The two f16 factors at `p` (d, then dmin; the four bytes must be readable) by F16C, which converts every value as
/// [`f16_to_f32`] does (NaN quieting included) in one instruction instead of two branchy ones.
#[inline(always)]
unsafe fn f16_pair(p: *const u8) -> (f32, f32) {
    let v = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
    (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
}

/// The f16 factor at `p` by F16C (see [`f16_pair`]).
#[inline(always)]
unsafe fn f16_one(p: *const u8) -> f32 {
    let h = (p as *const u16).read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

/// The sums of the lanes of `a` and of `b`, in lane 0 of the first and of the second vector.
#[inline(always)]
unsafe fn reduce_one(a: __m256i, b: __m256i) -> (__m256i, __m256i) {
    // Lanes [Σa, Σb, Σa, Σb] after two horizontal adds.
    let h = _mm256_hadd_epi32(a, b);
    let s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
    let s = _mm_hadd_epi32(s, s);
    (
        _mm256_castsi128_si256(s),
        _mm256_castsi128_si256(_mm_shuffle_epi32::<0b01>(s)),
    )
}

/// Stores the first `R` lanes of `acc` to `out`.
#[inline(always)]
unsafe fn store_rows<const R: usize>(acc: __m256, out: &mut [f32]) {
    assert!(out.len() >= R);
    _mm256_maskstore_ps(out.as_mut_ptr(), row_lanes::<R>(), acc);
}

/// Lane r: Σ_j min_j · (sum of group j of row r0 + r) for block `b`, from the pair-major sums
/// ([`QuantAct::sums32_p`]): four `vpmaddwd`, one per pair of groups, each over eight rows, so
/// the mins need no per-row reduction.
#[inline(always)]
unsafe fn k4_mins_by_row<const R: usize>(
    sm: __m128i,
    x: &QuantAct,
    b: usize,
    r0: usize,
) -> __m256i {
    let mins = _mm_cvtepu8_epi16(_mm_srli_si128::<8>(sm));
    let at = x.sums32_p.as_ptr().add((b * 4 * x.rows + r0) * 2) as *const i32;
    let rows = x.rows;
    macro_rules! load {
        ($p:literal) => {{
            let src = at.add($p * rows);
            if R == 8 {
                _mm256_loadu_si256(src as *const __m256i)
            } else {
                _mm256_maskload_epi32(src, row_lanes::<R>())
            }
        }};
    }
    let m0 = _mm256_madd_epi16(_mm256_broadcastd_epi32(mins), load!(0));
    let m1 = _mm256_madd_epi16(
        _mm256_broadcastd_epi32(_mm_shuffle_epi32::<1>(mins)),
        load!(1),
    );
    let m2 = _mm256_madd_epi16(
        _mm256_broadcastd_epi32(_mm_shuffle_epi32::<2>(mins)),
        load!(2),
    );
    let m3 = _mm256_madd_epi16(
        _mm256_broadcastd_epi32(_mm_shuffle_epi32::<3>(mins)),
        load!(3),
    );
    _mm256_add_epi32(_mm256_add_epi32(m0, m1), _mm256_add_epi32(m2, m3))
}

/// Q4_K rows `r0..r0 + R` against one weight row.
#[inline(always)]
unsafe fn q4k_rows<const R: usize>(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
    let nb = w.len() / 144;
    let xp = row_ptrs::<R>(x, r0, nb);
    let rows = x.rows;
    let m4 = _mm256_set1_epi8(0x0F);
    let zero = _mm256_setzero_si256();
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = w.get_unchecked(144 * b..144 * (b + 1));
        let p = blk.as_ptr();
        prefetch_ahead(p, 144);
        let sm = k4_scales_mins(blk);
        let sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        let mut isums = [zero; R];
        // Written out four times (not a loop): the compiler keeps a loop over j, whose
        // bookkeeping and scale shuffles then run between the rows' products.
        macro_rules! group {
            ($j:literal) => {
                let v = load(p.add(16 + 32 * $j));
                let lo = _mm256_and_si256(v, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                let s_lo = bcast_scale(sc16, 2 * $j);
                let s_hi = bcast_scale(sc16, 2 * $j + 1);
                for (r, isum) in isums.iter_mut().enumerate() {
                    let xb = xp[r].add(256 * b + 64 * $j);
                    *isum = _mm256_add_epi32(*isum, dot_scaled(lo, load_x(xb), s_lo));
                    *isum = _mm256_add_epi32(*isum, dot_scaled(hi, load_x(xb.add(32)), s_hi));
                }
            };
        }
        group!(0);
        group!(1);
        group!(2);
        group!(3);
        let (isum, msum) = if R == 1 {
            // One row: its mins' lanes join the same reduction tree as its products.
            let sp = x.sums16_t.as_ptr().add((b * rows + r0) * 16) as *const __m256i;
            reduce_one(
                isums[0],
                _mm256_madd_epi16(k4_min_pairs(sm), _mm256_loadu_si256(sp)),
            )
        } else {
            (reduce_rows(&isums), k4_mins_by_row::<R>(sm, x, b, r0))
        };
        let dx = _mm256_maskload_ps(x.d_t.as_ptr().add(b * rows + r0), row_lanes::<R>());
        let (d, dmin) = f16_pair(p);
        acc = step8(acc, Shape::ScaleMinusMin, d, dmin, dx, isum, msum);
    }
    store_rows::<R>(acc, out);
}

/// Q6_K rows `r0..r0 + R` against one weight row.
#[inline(always)]
unsafe fn q6k_rows<const R: usize>(w: &[u8], x: &QuantAct, r0: usize, out: &mut [f32]) {
    let nb = w.len() / 210;
    let xp = row_ptrs::<R>(x, r0, nb);
    let rows = x.rows;
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(0x30);
    let mut acc = _mm256_setzero_ps();
    for b in 0..nb {
        let blk = w.get_unchecked(210 * b..210 * (b + 1));
        let p = blk.as_ptr();
        prefetch_ahead(p, 210);
        let sc = _mm_loadu_si128(p.add(192) as *const __m128i);
        // Codes are u - 32 with u in 0..64: each row starts from -32 Σ_g scale_g * sum_g
        // (an i8 scale times -32 fits i16).
        let neg32 = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(sc), _mm256_set1_epi16(-32));
        let sp = x.sums16_t.as_ptr().add((b * rows + r0) * 16);
        let mut isums: [__m256i; R] = std::array::from_fn(|r| {
            _mm256_madd_epi16(neg32, _mm256_loadu_si256(sp.add(16 * r) as *const __m256i))
        });
        for n in 0..2 {
            let ql0 = load(p.add(64 * n));
            let ql1 = load(p.add(64 * n + 32));
            let qh = load(p.add(128 + 32 * n));
            for i in 0..4 {
                let (ql, hi) = match i {
                    0 => (ql0, _mm256_slli_epi16::<4>(qh)),
                    1 => (ql1, _mm256_slli_epi16::<2>(qh)),
                    2 => (_mm256_srli_epi16::<4>(ql0), qh),
                    _ => (_mm256_srli_epi16::<4>(ql1), _mm256_srli_epi16::<2>(qh)),
                };
                let u = _mm256_or_si256(_mm256_and_si256(ql, m4), _mm256_and_si256(hi, m2));
                let s = pair_scales(sc, 4 * n + i);
                for (r, isum) in isums.iter_mut().enumerate() {
                    let xb = xp[r].add(256 * b + 128 * n + 32 * i);
                    *isum = _mm256_add_epi32(*isum, dot_scaled(u, load_x(xb), s));
                }
            }
        }
        let dx = _mm256_maskload_ps(x.d_t.as_ptr().add(b * rows + r0), row_lanes::<R>());
        let none = _mm256_setzero_si256();
        let d = f16_one(p.add(208));
        acc = step8(acc, Shape::Scale, d, 0.0, dx, reduce_rows(&isums), none);
    }
    store_rows::<R>(acc, out);
}

rows_by_eight!(rows_q4k, q4k_rows, "avx2,fma,f16c");
rows_by_eight!(rows_q6k, q6k_rows, "avx2,fma,f16c");

#[cfg(test)]
mod tests {
    #[test]
    fn f16_conversion_matches_half_for_every_value() {
        for h in 0..=u16::MAX {
            let want = half::f16::from_bits(h).to_f32().to_bits();
            assert_eq!(super::f16_to_f32(h).to_bits(), want, "{h:#06x}");
        }
    }
}
