//! Q4_0 in panel layout ([`PackedMatrix`]) on AVX2, for any row count: what a draft model
//! requantized to Q4_0 reads on a CPU without AVX-512.
//!
//! The tile order puts four consecutive codes of each of 16 columns in one 32-bit lane, so a
//! `vpmaddubsw` of 32 code bytes (eight columns) against a row's four activations, broadcast,
//! leaves each column's products in its own lane: no horizontal reduction, no gather of the
//! block scales (they sit side by side after the codes), and the eight columns are one
//! contiguous stream rather than eight. A 32-value block is eight such products per lane
//! pair, at most 16 · 15 · 128 = 30720 in magnitude, so they add up exactly in 16 bits and one
//! `vpmaddwd` per eight columns finishes the block: half the multiply µops of the per-column
//! kernels. Codes go in unsigned; the offset of 8 comes out through the block's activation
//! sum. The integer sums are those of every other kernel and the float step is
//! [`step8v`] (`block_step` lane by lane, ascending blocks), so the bits are the reference's
//! whatever the row count, the chunking or the thread count.

use super::lanes8::{prefetch_ahead, step8v};
use super::panel::{Kind, PackedMatrix, PANEL};
use super::unpack::Shape;
use crate::actq::QuantAct;
use crate::pool::{SharedOut, ThreadPool};
use tf_core::DType;

use std::arch::x86_64::*;

/// Rows that share one unpacking of a panel block.
const ROWS: usize = 4;

/// Whether matrices of `dtype` have an AVX2 panel kernel (and are worth packing for one).
pub fn packs(dtype: DType) -> bool {
    dtype == DType::Q4_0
}

/// Whether `p` can go through [`matmul_packed`].
pub(crate) fn supports(p: &PackedMatrix) -> bool {
    p.dtype == DType::Q4_0
        && matches!(
            p.layout.kind,
            Kind::Legacy {
                five: false,
                offset: 8,
                min: false
            }
        )
}

/// Columns `cols` of `p` (a range starting on a panel boundary) for every row of `x` into
/// `out[r * out_stride + (c - cols.start)]`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `p` must be [`supports`]ed; `out` must hold the rows
/// and columns written.
pub(crate) unsafe fn matmul_packed(
    pool: &ThreadPool,
    p: &PackedMatrix,
    x: &QuantAct,
    out: &mut [f32],
    cols: std::ops::Range<usize>,
    out_stride: usize,
) {
    assert!(supports(p) && cols.start.is_multiple_of(PANEL));
    assert!(cols.end <= p.n && x.k == p.k && x.k.is_multiple_of(32));
    let dst = SharedOut(out.as_mut_ptr());
    let base = cols.start;
    pool.for_ranges(cols.len(), PANEL, &|range| {
        let first = (base + range.start) / PANEL;
        let last = (base + range.end).div_ceil(PANEL);
        for panel in first..last {
            // SAFETY: the caller's contract (CPU features, output size).
            unsafe { panel_all_rows(p, x, panel, &dst, base, base + range.end, out_stride) };
        }
    });
}

/// Every row of `x` against one panel, in groups of up to [`ROWS`] rows (the panel's blocks
/// stay in cache from one group to the next); columns from `col_end` on are not written.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn panel_all_rows(
    p: &PackedMatrix,
    x: &QuantAct,
    panel: usize,
    dst: &SharedOut,
    base: usize,
    col_end: usize,
    out_stride: usize,
) {
    let mut acc = [[_mm256_setzero_ps(); 2]; ROWS];
    let mut r0 = 0;
    while r0 < x.rows {
        let n = (x.rows - r0).min(ROWS);
        match n {
            1 => panel_rows::<1>(p, x, panel, r0, &mut acc),
            2 => panel_rows::<2>(p, x, panel, r0, &mut acc),
            3 => panel_rows::<3>(p, x, panel, r0, &mut acc),
            _ => panel_rows::<ROWS>(p, x, panel, r0, &mut acc),
        }
        let c0 = panel * PANEL;
        let width = (col_end - c0).min(PANEL);
        for (i, a) in acc.iter().enumerate().take(n) {
            let mut lanes = [0f32; PANEL];
            _mm256_storeu_ps(lanes.as_mut_ptr(), a[0]);
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8), a[1]);
            let at = (r0 + i) * out_stride + (c0 - base);
            for (j, v) in lanes.iter().enumerate().take(width) {
                // SAFETY: each thread writes its own columns; in bounds by the caller.
                dst.write(at + j, *v);
            }
        }
        r0 += n;
    }
}

/// Four activations of a row as one 32-bit lane, broadcast.
#[inline(always)]
unsafe fn x4(p: *const i8) -> __m256i {
    _mm256_set1_epi32((p as *const i32).read_unaligned())
}

/// The panel's 16 columns (two vectors of eight) for rows `r0 .. r0 + R`, into `acc`.
#[allow(clippy::needless_range_loop)] // `h` and `i` index codes, scales and rows together
#[inline(always)]
unsafe fn panel_rows<const R: usize>(
    p: &PackedMatrix,
    x: &QuantAct,
    panel: usize,
    r0: usize,
    acc: &mut [[__m256; 2]; ROWS],
) {
    let l = &p.layout;
    let nblk = x.k / 32;
    let m4 = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let (zf, zi) = (_mm256_setzero_ps(), _mm256_setzero_si256());
    for a in acc.iter_mut() {
        *a = [zf; 2];
    }
    let rows: [*const i8; R] = std::array::from_fn(|i| x.qs.as_ptr().add((r0 + i) * x.k));
    for b in 0..p.blocks {
        let blk = p.block(panel, b);
        prefetch_ahead(blk, l.bytes);
        let at = 32 * b;
        for h in 0..2 {
            let mut a16 = [zi; R];
            for t in 0..4 {
                let v = _mm256_loadu_si256(blk.add(64 * t + 32 * h) as *const __m256i);
                let lo = _mm256_and_si256(v, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                for i in 0..R {
                    let s_lo = _mm256_maddubs_epi16(lo, x4(rows[i].add(at + 8 * t)));
                    let s_hi = _mm256_maddubs_epi16(hi, x4(rows[i].add(at + 8 * t + 4)));
                    a16[i] = _mm256_add_epi16(a16[i], _mm256_add_epi16(s_lo, s_hi));
                }
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(l.d_at + 16 * h) as *const __m128i));
            for i in 0..R {
                let r = r0 + i;
                let sx = *x.sums.get_unchecked(r * nblk + b) as i32;
                let isum =
                    _mm256_sub_epi32(_mm256_madd_epi16(a16[i], ones), _mm256_set1_epi32(8 * sx));
                let dx = _mm256_set1_ps(*x.d.get_unchecked(r * nblk + b));
                acc[i][h] = step8v(acc[i][h], Shape::Scale, d, zf, dx, isum, zi);
            }
        }
    }
}
