//! Panel-layout matmuls for a few rows on AVX-512 VNNI (no tiles). The tile order of a panel
//! puts four consecutive values of each of 16 columns in one 32-bit lane, so one `vpdpbusd`
//! of a tile row against the row's four activations (broadcast) adds four products to each
//! column's own lane: a unit's integer sums come out per column with no horizontal reduction,
//! and the codes never leave the registers. Codes go in unsigned; a type's offset is taken out
//! through the unit's activation sum, which starts the lane (`-offset · Σx`). The integers and
//! the float step are those of the tile kernels ([`super::panel_kernel`]), so the bits are too.

use super::panel::{Kind, Layout, PackedMatrix, FP4_CODES};
use super::panel_kernel::{prefetch, q6k_unit_codes, scales16, step16, Q4kTail};
use crate::actq::QuantAct;
use std::arch::x86_64::*;

/// [`FP4_CODES`] in every 128-bit lane, for `vpshufb`.
#[inline(always)]
unsafe fn fp4_table() -> __m512i {
    _mm512_broadcast_i32x4(_mm_loadu_si128(FP4_CODES.as_ptr() as *const __m128i))
}

/// Four activations of a row as one 32-bit lane, broadcast.
#[inline(always)]
unsafe fn x4(p: *const i8) -> __m512i {
    _mm512_set1_epi32((p as *const i32).read_unaligned())
}

/// The panel's 16 columns for rows `r0 .. r0 + R` (R <= 8): one accumulator per row, written to
/// `acc`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
pub(crate) unsafe fn panel_rows<const R: usize>(
    p: &PackedMatrix,
    x: &QuantAct,
    panel: usize,
    r0: usize,
    acc: &mut [__m512; 8],
) {
    let l = &p.layout;
    for a in acc.iter_mut() {
        *a = _mm512_setzero_ps();
    }
    let rows: [*const i8; R] = std::array::from_fn(|i| x.qs.as_ptr().add((r0 + i) * x.k));
    for b in 0..p.blocks {
        let blk = p.block(panel, b);
        prefetch(blk, l.bytes);
        match l.kind {
            Kind::Q4K => q4k_block::<R>(blk, b, x, r0, &rows, acc),
            Kind::Q6K => q6k_block::<R>(blk, b, x, r0, &rows, acc),
            _ => legacy_block::<R>(l, blk, b, x, r0, &rows, acc),
        }
    }
}

#[inline(always)]
unsafe fn q4k_block<const R: usize>(
    blk: *const u8,
    b: usize,
    x: &QuantAct,
    r0: usize,
    rows: &[*const i8; R],
    acc: &mut [__m512; 8],
) {
    let m4 = _mm512_set1_epi8(0x0F);
    let zero = _mm512_setzero_si512();
    let mut isum = [zero; R];
    for u in 0..8 {
        let sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(blk.add(2048 + 16 * u) as *const __m128i));
        let mut a = [zero; R];
        for t in 0..4 {
            let v = _mm512_loadu_si512(blk.add(256 * u + 64 * t) as *const _);
            let lo = _mm512_and_si512(v, m4);
            let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
            let at = 256 * b + 32 * u + 8 * t;
            for i in 0..R {
                a[i] = _mm512_dpbusd_epi32(a[i], lo, x4(rows[i].add(at)));
                a[i] = _mm512_dpbusd_epi32(a[i], hi, x4(rows[i].add(at + 4)));
            }
        }
        for i in 0..R {
            isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(a[i], sc));
        }
    }
    let tail = Q4kTail::of(blk);
    for i in 0..R {
        acc[i] = tail.step(acc[i], x, b, r0 + i, isum[i]);
    }
}

#[inline(always)]
unsafe fn q6k_block<const R: usize>(
    blk: *const u8,
    b: usize,
    x: &QuantAct,
    r0: usize,
    rows: &[*const i8; R],
    acc: &mut [__m512; 8],
) {
    let zero = _mm512_setzero_si512();
    let nsum = x.k / 16;
    let mut isum = [zero; R];
    for u in 0..16 {
        let sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk.add(3072 + 16 * u) as *const __m128i));
        let codes = q6k_unit_codes(blk, u);
        // Unsigned 6-bit codes; the offset of 32 goes in through the unit's activation sum.
        let mut a: [__m512i; R] = std::array::from_fn(|i| {
            let s = *x.sums.get_unchecked((r0 + i) * nsum + 16 * b + u) as i32;
            _mm512_set1_epi32(-32 * s)
        });
        for (r, c) in codes.into_iter().enumerate() {
            let at = 256 * b + 16 * u + 4 * r;
            for i in 0..R {
                a[i] = _mm512_dpbusd_epi32(a[i], c, x4(rows[i].add(at)));
            }
        }
        for i in 0..R {
            isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(a[i], sc));
        }
    }
    let d = scales16(blk.add(3328));
    for i in 0..R {
        let dx = _mm512_set1_ps(*x.d_t.get_unchecked(b * x.rows + r0 + i));
        acc[i] = step16(acc[i], d, None, dx, isum[i]);
    }
}

#[inline(always)]
unsafe fn legacy_block<const R: usize>(
    l: &Layout,
    blk: *const u8,
    b: usize,
    x: &QuantAct,
    r0: usize,
    rows: &[*const i8; R],
    acc: &mut [__m512; 8],
) {
    let m4 = _mm512_set1_epi8(0x0F);
    let nblk = x.k / 32;
    let (five, offset, min, fp4) = match l.kind {
        Kind::Legacy {
            five,
            offset,
            min,
            fp4,
        } => (five, offset as i32, min, fp4),
        _ => (false, 128, false, false), // Q8_0: signed codes, made unsigned below
    };
    let table = fp4_table();
    let mut a: [__m512i; R] = std::array::from_fn(|i| {
        let s = *x.sums.get_unchecked((r0 + i) * nblk + b) as i32;
        _mm512_set1_epi32(-offset * s)
    });
    let at = 32 * b;
    if l.kind == Kind::Q8_0 {
        let flip = _mm512_set1_epi8(-128);
        for r in 0..8 {
            let c = _mm512_xor_si512(_mm512_loadu_si512(blk.add(64 * r) as *const _), flip);
            for i in 0..R {
                a[i] = _mm512_dpbusd_epi32(a[i], c, x4(rows[i].add(at + 4 * r)));
            }
        }
    } else {
        let sixteen = _mm512_set1_epi8(16);
        for t in 0..4 {
            let v = _mm512_loadu_si512(blk.add(64 * t) as *const _);
            let mut lo = _mm512_and_si512(v, m4);
            let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4);
            if five {
                let high = blk.add(l.high_at + 16 * t) as *const u64;
                lo = _mm512_mask_add_epi8(lo, high.read_unaligned(), lo, sixteen);
                hi = _mm512_mask_add_epi8(hi, high.add(1).read_unaligned(), hi, sixteen);
            }
            if fp4 {
                lo = _mm512_shuffle_epi8(table, lo);
                hi = _mm512_shuffle_epi8(table, hi);
            }
            for i in 0..R {
                a[i] = _mm512_dpbusd_epi32(a[i], lo, x4(rows[i].add(at + 8 * t)));
                a[i] = _mm512_dpbusd_epi32(a[i], hi, x4(rows[i].add(at + 8 * t + 4)));
            }
        }
    }
    let d = scales16(blk.add(l.d_at));
    let m = if min {
        scales16(blk.add(l.m_at))
    } else {
        _mm512_setzero_ps()
    };
    for i in 0..R {
        let r = r0 + i;
        let dx = _mm512_set1_ps(*x.d.get_unchecked(r * nblk + b));
        let mn = min.then(|| {
            let s = *x.sums.get_unchecked(r * nblk + b) as i32;
            (m, _mm512_set1_epi32(s), true)
        });
        acc[i] = step16(acc[i], d, mn, dx, a[i]);
    }
}
