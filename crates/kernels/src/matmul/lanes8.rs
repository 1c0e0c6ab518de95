//! Eight rows in the eight lanes of one 256-bit vector, shared by the AVX2 and AVX-512 multi-row
//! kernels: per-row integer accumulators reduced to one vector of row sums, and the float step of
//! [`block_step`](super::reference::block_step) applied lane by lane (the same IEEE operations in
//! the same order as the scalar step, so each lane equals that row's scalar result bit for bit).

#![allow(clippy::missing_safety_doc)]

use super::unpack::Shape;
use std::arch::x86_64::*;

/// Eight per-row 8-lane integer accumulators reduced to one vector of eight sums (exact).
#[inline(always)]
pub(super) unsafe fn reduce8_256(a: &[__m256i; 8]) -> __m256i {
    let h01 = _mm256_hadd_epi32(a[0], a[1]);
    let h23 = _mm256_hadd_epi32(a[2], a[3]);
    let h45 = _mm256_hadd_epi32(a[4], a[5]);
    let h67 = _mm256_hadd_epi32(a[6], a[7]);
    let q0 = _mm256_hadd_epi32(h01, h23);
    let q1 = _mm256_hadd_epi32(h45, h67);
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(q0, q1),
        _mm256_permute2x128_si256::<0x31>(q0, q1),
    )
}

/// The first `R` rows' accumulators (`R <= 8`) reduced to one vector: lane r is the sum of the
/// lanes of `a[r]`, lanes from `R` on are zero.
#[inline(always)]
pub(super) unsafe fn reduce_rows<const R: usize>(a: &[__m256i; R]) -> __m256i {
    let mut all = [_mm256_setzero_si256(); 8];
    all[..R].copy_from_slice(a);
    reduce8_256(&all)
}

/// All ones in the lanes of the first `R` rows: the mask of `_mm256_maskload_ps` and
/// `_mm256_maskstore_ps`, which never touch memory in the other lanes.
#[inline(always)]
pub(super) unsafe fn row_lanes<const R: usize>() -> __m256i {
    let r = R as i32;
    _mm256_cmpgt_epi32(
        _mm256_set1_epi32(r),
        _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
    )
}

/// `acc + ((d*dx)*isum - (dmin*dx)*msum)` on eight lanes: [`block_step`](super::reference::block_step) lane
/// by lane.
#[inline(always)]
pub(super) unsafe fn step8(
    acc: __m256,
    shape: Shape,
    d: f32,
    dmin: f32,
    dx: __m256,
    isum: __m256i,
    msum: __m256i,
) -> __m256 {
    let (d, dmin) = (_mm256_set1_ps(d), _mm256_set1_ps(dmin));
    step8v(acc, shape, d, dmin, dx, isum, msum)
}

/// [`step8`] with every factor a vector: lane j is `block_step` with lane j of each (eight
/// weight rows' blocks against one activation row, or one block against eight rows).
#[inline(always)]
pub(super) unsafe fn step8v(
    acc: __m256,
    shape: Shape,
    d: __m256,
    dmin: __m256,
    dx: __m256,
    isum: __m256i,
    msum: __m256i,
) -> __m256 {
    let t1 = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum));
    match shape {
        Shape::Scale => _mm256_add_ps(acc, t1),
        Shape::ScaleMinusMin => {
            let t2 = _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum));
            _mm256_add_ps(acc, _mm256_sub_ps(t1, t2))
        }
        Shape::ScalePlusMin => {
            let t2 = _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum));
            _mm256_add_ps(acc, _mm256_add_ps(t1, t2))
        }
    }
}

/// Bytes ahead of the block in use that the Q4_K / Q6_K row kernels ask the cache for
/// (`TENSORFOLD_CPU_PREFETCH`, default 2048, `0` off): with several rows the vector work per
/// weight byte leaves too few loads in flight for one core's share of the memory bandwidth, so
/// the weight stream is requested this far ahead. A prefetch never faults and changes no
/// result. On the 2-core AVX-512 machine, Qwen2.5-Coder-1.5B Q4_K_M, forward of 4 / 8 rows:
/// 57.4-58.4 -> 44.9-45.6 ms and 86.5-87.2 -> 66.2-67.8 ms (two threads).
fn prefetch_distance() -> usize {
    static D: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *D.get_or_init(|| {
        std::env::var("TENSORFOLD_CPU_PREFETCH")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2048)
    })
}

/// Prefetches the cache lines of the `len` bytes at `p` plus the prefetch distance.
#[inline(always)]
pub(super) unsafe fn prefetch_ahead(p: *const u8, len: usize) {
    let d = prefetch_distance();
    if d == 0 {
        return;
    }
    let at = p.wrapping_add(d);
    let mut off = 0;
    while off < len + 63 {
        _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(off) as *const i8);
        off += 64;
    }
}
