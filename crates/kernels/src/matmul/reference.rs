//! The scalar oracle of every quantized dot product: integer sums inside a block (exact in any
//! order), then one fixed float step per block in ascending block order.

use super::unpack::{unpack_k, unpack_legacy, Shape};
use crate::actq::QuantAct;
use tf_core::DType;

/// One block's float step. Every implementation (scalar, SIMD, GPU) must use exactly this
/// sequence of IEEE operations, without FMA contraction.
#[inline(always)]
pub fn block_step(acc: f32, shape: Shape, d: f32, dmin: f32, dx: f32, isum: i32, msum: i32) -> f32 {
    match shape {
        Shape::Scale => acc + (d * dx) * isum as f32,
        Shape::ScaleMinusMin => acc + ((d * dx) * isum as f32 - (dmin * dx) * msum as f32),
        Shape::ScalePlusMin => acc + ((d * dx) * isum as f32 + (dmin * dx) * msum as f32),
    }
}

/// Dot product of one weight row (`w`, quantized) with activation row `row` of `x`.
pub fn dot_ref(dtype: DType, w: &[u8], x: &QuantAct, row: usize) -> f32 {
    let qs = x.row_qs(row);
    let ds = x.row_d(row);
    let sums = x.row_sums(row);
    let bb = dtype.block_bytes();
    let mut acc = 0f32;
    if dtype.block_elems() == 256 {
        for (b, blk) in w.chunks_exact(bb).enumerate() {
            let k = unpack_k(dtype, blk);
            let xq = &qs[256 * b..256 * (b + 1)];
            let mut isum = 0i32;
            let mut msum = 0i32;
            for g in 0..16 {
                let s: i32 = (0..16)
                    .map(|i| k.q[16 * g + i] as i32 * xq[16 * g + i] as i32)
                    .sum();
                isum += k.scale[g] * s;
                msum += k.min[g] * sums[16 * b + g] as i32;
            }
            acc = block_step(acc, k.shape, k.d, k.dmin, ds[b], isum, msum);
        }
    } else {
        for (b, blk) in w.chunks_exact(bb).enumerate() {
            let l = unpack_legacy(dtype, blk);
            let xq = &qs[32 * b..32 * (b + 1)];
            let isum: i32 = (0..32).map(|i| l.q[i] as i32 * xq[i] as i32).sum();
            acc = block_step(acc, l.shape, l.d, l.m, ds[b], isum, sums[b] as i32);
        }
    }
    acc
}
