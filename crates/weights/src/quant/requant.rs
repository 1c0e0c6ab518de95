//! Quantization into Q4_0, for requantizing a draft model (whose guesses only change speed, so
//! its weights need not be the file's). Deterministic: the same floats give the same bytes.

use half::f16;
use tf_core::DType;

/// One row of `x` (a multiple of 32 values) as Q4_0 blocks: `d = m / -8` where `m` is the
/// block's value of largest magnitude, codes `round(x / d) + 8` clamped to 0..=15.
pub fn quantize_row_q4_0(x: &[f32], out: &mut [u8]) {
    assert!(x.len().is_multiple_of(32) && out.len() == x.len() / 32 * 18);
    for (blk, o) in x.chunks_exact(32).zip(out.chunks_exact_mut(18)) {
        let m = blk
            .iter()
            .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        let d = m / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        o[0..2].copy_from_slice(&f16::from_f32(d).to_bits().to_le_bytes());
        let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
        for j in 0..16 {
            o[2 + j] = q(blk[j]) | (q(blk[j + 16]) << 4);
        }
    }
}

/// `n` rows of `k` values of `dtype` (`data`) as Q4_0, or `None` when `k` is not a multiple
/// of 32 or `data` is not `n` rows of `dtype`.
pub fn requantize_q4_0(dtype: DType, data: &[u8], k: usize, n: usize) -> Option<Vec<u8>> {
    if !k.is_multiple_of(32) || dtype.bytes_for(k)?.checked_mul(n)? != data.len() {
        return None;
    }
    let (src_row, dst_row) = (dtype.bytes_for(k)?, k / 32 * 18);
    let mut out = vec![0u8; dst_row * n];
    let mut row = vec![0f32; k];
    for (src, dst) in data
        .chunks_exact(src_row)
        .zip(out.chunks_exact_mut(dst_row))
    {
        super::dequantize_row(dtype, src, &mut row);
        quantize_row_q4_0(&row, dst);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_round_trip_is_close_and_deterministic() {
        let x: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let mut q = vec![0u8; 8 * 18];
        quantize_row_q4_0(&x, &mut q);
        let mut again = vec![0u8; 8 * 18];
        quantize_row_q4_0(&x, &mut again);
        assert_eq!(q, again);
        let mut back = vec![0f32; 256];
        super::super::dequantize_row(DType::Q4_0, &q, &mut back);
        for (blk, b) in x.chunks(32).zip(back.chunks(32)) {
            let amax = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (a, c) in blk.iter().zip(b) {
                // Half a step, or a whole one at the clamped end opposite the largest value.
                assert!((a - c).abs() <= amax / 8.0 + 1e-3, "{a} {c}");
            }
        }
        let zeros = [0f32; 32];
        let mut z = [0u8; 18];
        quantize_row_q4_0(&zeros, &mut z);
        let mut zb = [1f32; 32];
        super::super::dequantize_row(DType::Q4_0, &z, &mut zb);
        assert!(zb.iter().all(|v| *v == 0.0));
    }
}
