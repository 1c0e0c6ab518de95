//! Q4_0 and Q4_K in panel layout ([`PackedMatrix`]) on AVX2, for any row count: a CPU
//! without AVX-512 reads a requantized draft model (Q4_0) and most of a Q4_K_M target so.
//! (Q6_K stays in its stored layout: a panel kernel of the same design was twice as fast
//! from cache but slower from memory, 8.1-13.2 against 6.6 ms for 16 matrices of
//! 1536 x 8960 at one row, and the 151936-column output head lost at every row count.)
//!
//! The tile order puts four consecutive codes of each of 16 columns in one 32-bit lane, so a
//! `vpmaddubsw` of 32 code bytes (eight columns) against a row's four activations, broadcast,
//! leaves each column's products in its own lane: no horizontal reduction, no gather of the
//! block scales (they sit side by side after the codes), and the eight columns are one
//! contiguous stream rather than eight. A 32-value block is eight such products per lane
//! pair, at most 16 · 15 · 128 = 30720 in magnitude, so they add up exactly in 16 bits and one
//! `vpmaddwd` per eight columns finishes the block: half the multiply µops of the per-column
//! kernels. Codes go in unsigned; the offset of 8 comes out through the block's activation
//! sum. Q4_K's 32-value groups are such blocks too, each group's 16-bit sums going through one
//! `vpmaddwd` against its integer scale; the mins meet the row's 32-value sums in four more.
//! The integer sums are those of every other kernel and the float step is [`step8v`]
//! (`block_step` lane by lane, ascending blocks), so the bits are the reference's whatever
//! the row count, the chunking or the thread count.

use super::lanes8::{prefetch_ahead, step8v};
use super::panel::{Kind, PackedMatrix, PANEL};
use super::panel_kernel::Job;
use super::unpack::Shape;
use crate::actq::QuantAct;
use crate::pool::ThreadPool;
use tf_core::DType;

use std::arch::x86_64::*;

/// Rows that share one unpacking of a panel block.
const ROWS: usize = 8;

/// Whether matrices of `dtype` have an AVX2 panel kernel (and are worth packing for one):
/// [`matmul_packed`] takes exactly these.
pub fn packs(dtype: DType) -> bool {
    matches!(dtype, DType::Q4_0 | DType::Q4K)
}

/// Columns `cols` of `p` (a range starting on a panel boundary) for every row of `x` into
/// `out[r * out_stride + (c - cols.start)]`.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C; `p`'s type must be one that [`packs`]; `out` must hold the rows
/// and columns written.
pub(crate) unsafe fn matmul_packed(
    pool: &ThreadPool,
    p: &PackedMatrix,
    x: &QuantAct,
    out: &mut [f32],
    cols: std::ops::Range<usize>,
    out_stride: usize,
) {
    assert!(packs(p.dtype) && x.k.is_multiple_of(32));
    Job::split(pool, p, x, out, cols, out_stride, &|job, panels| {
        // SAFETY: the caller's contract (CPU features, output size).
        unsafe { job.avx2(panels) }
    });
}

/// Float accumulators of up to [`ROWS`] rows × 16 columns (two vectors of eight).
type Acc = [[__m256; 2]; ROWS];

impl Job<'_> {
    /// The panels on AVX2, rows in groups of up to [`ROWS`] (a panel's blocks stay in cache
    /// from one group to the next).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn avx2(&self, panels: std::ops::Range<usize>) {
        let mut acc = [[_mm256_setzero_ps(); 2]; ROWS];
        let rows = self.x.rows;
        for panel in panels {
            let mut r0 = 0;
            while r0 < rows {
                let n = (rows - r0).min(ROWS);
                match n {
                    1 => self.panel_rows::<1>(panel, r0, &mut acc),
                    2 => self.panel_rows::<2>(panel, r0, &mut acc),
                    3 => self.panel_rows::<3>(panel, r0, &mut acc),
                    4 => self.panel_rows::<4>(panel, r0, &mut acc),
                    5 => self.panel_rows::<5>(panel, r0, &mut acc),
                    6 => self.panel_rows::<6>(panel, r0, &mut acc),
                    7 => self.panel_rows::<7>(panel, r0, &mut acc),
                    _ => self.panel_rows::<ROWS>(panel, r0, &mut acc),
                }
                self.store_rows(panel, r0, n, &acc);
                r0 += n;
            }
        }
    }

    /// Writes rows `r0 .. r0 + n` of one panel's accumulators, the columns before `col_end`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn store_rows(&self, panel: usize, r0: usize, n: usize, acc: &Acc) {
        let c0 = panel * PANEL;
        let width = (self.col_end - c0).min(PANEL);
        for (i, a) in acc.iter().enumerate().take(n) {
            let mut lanes = [0f32; PANEL];
            _mm256_storeu_ps(lanes.as_mut_ptr(), a[0]);
            _mm256_storeu_ps(lanes.as_mut_ptr().add(8), a[1]);
            let at = (r0 + i) * self.out_stride + (c0 - self.base);
            for (j, v) in lanes.iter().enumerate().take(width) {
                // SAFETY: each thread writes its own columns; in bounds by the caller.
                self.dst.write(at + j, *v);
            }
        }
    }

    /// Rows `r0 .. r0 + R` against one panel, block by block, into `acc`.
    #[inline(always)]
    unsafe fn panel_rows<const R: usize>(&self, panel: usize, r0: usize, acc: &mut Acc) {
        let (p, x) = (self.p, self.x);
        *acc = [[_mm256_setzero_ps(); 2]; ROWS];
        let rows: [*const i8; R] = std::array::from_fn(|i| x.qs.as_ptr().add((r0 + i) * x.k));
        let q4k = p.layout.kind == Kind::Q4K;
        for b in 0..p.blocks {
            let blk = p.block(panel, b);
            prefetch_ahead(blk, p.layout.bytes);
            if q4k && R <= 2 {
                q4k_sweep::<R, 2>(blk, 0, b, x, r0, &rows, acc);
                continue;
            }
            for h in 0..2 {
                if q4k {
                    q4k_sweep::<R, 1>(blk, h, b, x, r0, &rows, acc);
                } else {
                    q4_0_half::<R>(p, blk, h, b, x, r0, &rows, acc);
                }
            }
        }
    }
}

/// Four activations of a row as one 32-bit lane, broadcast.
#[inline(always)]
unsafe fn x4(p: *const i8) -> __m256i {
    _mm256_set1_epi32((p as *const i32).read_unaligned())
}

/// Q4_0 block `b`, columns `8h .. 8h + 8` of the panel block at `blk`, for rows
/// `r0 .. r0 + R`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn q4_0_half<const R: usize>(
    p: &PackedMatrix,
    blk: *const u8,
    h: usize,
    b: usize,
    x: &QuantAct,
    r0: usize,
    rows: &[*const i8; R],
    acc: &mut Acc,
) {
    let nblk = x.k / 32;
    let m4 = _mm256_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let (zf, zi) = (_mm256_setzero_ps(), _mm256_setzero_si256());
    let at = 32 * b;
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
    let d_at = p.layout.d_at + 16 * h;
    let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(d_at) as *const __m128i));
    for i in 0..R {
        let r = r0 + i;
        let sx = *x.sums.get_unchecked(r * nblk + b) as i32;
        let isum = _mm256_sub_epi32(_mm256_madd_epi16(a16[i], ones), _mm256_set1_epi32(8 * sx));
        let dx = _mm256_set1_ps(*x.d.get_unchecked(r * nblk + b));
        acc[i][h] = step8v(acc[i][h], Shape::Scale, d, zf, dx, isum, zi);
    }
}

/// Q4_K block `b`'s float step for columns `8h .. 8h + 8` and rows `r0 .. r0 + R`, given
/// their integer sums `isum`: msum = Σ_u min_u · Σx_u from the mins and the rows' 32-value
/// sums.
#[inline(always)]
unsafe fn q4k_tail<const R: usize>(
    blk: *const u8,
    h: usize,
    b: usize,
    x: &QuantAct,
    r0: usize,
    isum: &[__m256i; R],
    acc: &mut Acc,
) {
    let zi = _mm256_setzero_si256();
    // Mins of groups 2q and 2q + 1 side by side per column, against the row's two sums.
    let mins: [__m256i; 4] = std::array::from_fn(|q| {
        let m = _mm_loadu_si128(blk.add(2176 + 32 * q + 16 * h) as *const __m128i);
        _mm256_cvtepu8_epi16(m)
    });
    let d = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(2304 + 16 * h) as *const __m128i));
    let dmin = _mm256_cvtph_ps(_mm_loadu_si128(blk.add(2336 + 16 * h) as *const __m128i));
    for i in 0..R {
        let r = r0 + i;
        let pairs = x.sums32_t.as_ptr().add((b * x.rows + r) * 8) as *const i32;
        let mut msum = zi;
        for (q, mv) in mins.iter().enumerate() {
            let s = _mm256_set1_epi32(pairs.add(q).read_unaligned());
            msum = _mm256_add_epi32(msum, _mm256_madd_epi16(*mv, s));
        }
        let dx = _mm256_set1_ps(*x.d_t.get_unchecked(b * x.rows + r));
        acc[i][h] = step8v(acc[i][h], Shape::ScaleMinusMin, d, dmin, dx, isum[i], msum);
    }
}

/// Q4_K block `b`, the `H` halves (eight columns each) from `h0` of the panel block at
/// `blk`, for rows `r0 .. r0 + R`: isum = Σ_u scale_u · S_u over the eight groups, then the
/// float step. One or two rows take both halves in one sweep (each 64-byte line read once, in
/// order); more rows one half at a time, which keeps their sums in registers.
#[allow(clippy::needless_range_loop)] // `h` and `i` index codes, scales and rows together
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn q4k_sweep<const R: usize, const H: usize>(
    blk: *const u8,
    h0: usize,
    b: usize,
    x: &QuantAct,
    r0: usize,
    rows: &[*const i8; R],
    acc: &mut Acc,
) {
    let m4 = _mm256_set1_epi8(0x0F);
    let zi = _mm256_setzero_si256();
    let mut isum = [[zi; H]; R];
    for u in 0..8 {
        // The group's scales, one per column, in both 16-bit halves of the column's lane.
        let sc: [__m256i; H] = std::array::from_fn(|h| {
            let s = _mm_loadl_epi64(blk.add(2048 + 16 * u + 8 * (h0 + h)) as *const __m128i);
            let s = _mm256_cvtepu8_epi32(s);
            _mm256_or_si256(s, _mm256_slli_epi32::<16>(s))
        });
        let mut a16 = [[zi; H]; R];
        for t in 0..4 {
            let at = 256 * b + 32 * u + 8 * t;
            for h in 0..H {
                let line = blk.add(256 * u + 64 * t + 32 * (h0 + h));
                let v = _mm256_loadu_si256(line as *const __m256i);
                let lo = _mm256_and_si256(v, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                for i in 0..R {
                    let s_lo = _mm256_maddubs_epi16(lo, x4(rows[i].add(at)));
                    let s_hi = _mm256_maddubs_epi16(hi, x4(rows[i].add(at + 4)));
                    a16[i][h] = _mm256_add_epi16(a16[i][h], _mm256_add_epi16(s_lo, s_hi));
                }
            }
        }
        for i in 0..R {
            for h in 0..H {
                isum[i][h] = _mm256_add_epi32(isum[i][h], _mm256_madd_epi16(a16[i][h], sc[h]));
            }
        }
    }
    for h in 0..H {
        q4k_tail::<R>(blk, h0 + h, b, x, r0, &isum.map(|s| s[h]), acc);
    }
}
