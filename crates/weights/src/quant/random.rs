//! Valid random blocks: random quant bits with small, finite f16 scales chosen per type so the
//! dequantized values have roughly the magnitude of real weights (|x| up to ~0.1..1).

use tf_core::{DType, SplitMix64};

/// Test data's generator (`tf_core::SplitMix64`) with the draws this file needs.
struct Gen(SplitMix64);

impl Gen {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        self.0.next_f32()
    }

    fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }

    /// Roughly N(0, 1): Irwin-Hall sum of 12 uniforms (pure arithmetic, so bit-reproducible).
    fn normal(&mut self) -> f32 {
        (0..12).map(|_| self.unit()).sum::<f32>() - 6.0
    }

    fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }
}

/// Packs random 6-bit scales into a Q4_K/Q5_K block with every group's min equal to its scale,
/// so that `dmin = mid * d` centres the group's values on zero (`mid` = the middle code).
fn centre_k4(b: &mut [u8], rng: &mut Gen) {
    let s: Vec<u8> = (0..8).map(|_| (rng.next_u64() & 63) as u8).collect();
    for j in 0..4 {
        let packed = s[j] | ((s[j + 4] >> 4) << 6);
        b[4 + j] = packed; // scale j, top bits of scale j+4
        b[4 + j + 4] = packed; // min j (= scale j), top bits of min j+4
        b[4 + 8 + j] = (s[j + 4] & 0x0F) | ((s[j + 4] & 0x0F) << 4);
    }
}

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
}

/// Random valid data for `n_elems` values of `dtype` (rounded up to whole blocks), deterministic
/// in `seed`. Float types get values ~N(0, 0.02); quantized types get random quant bits and
/// per-type scale ranges (see the table below) with random signs where the format has them.
pub fn random_blocks(dtype: DType, n_elems: usize, seed: u64) -> Vec<u8> {
    let n_blocks = n_elems.div_ceil(dtype.block_elems());
    let bb = dtype.block_bytes();
    let mut rng = Gen(SplitMix64::new(seed ^ (u64::from(dtype.ggml_id()) << 56)));
    let mut out = vec![0u8; n_blocks * bb];
    match dtype {
        DType::F32 => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&(0.02 * rng.normal()).to_le_bytes());
            }
            return out;
        }
        DType::F16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&half::f16::from_f32(0.02 * rng.normal()).to_le_bytes());
            }
            return out;
        }
        DType::BF16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&half::bf16::from_f32(0.02 * rng.normal()).to_le_bytes());
            }
            return out;
        }
        _ => {}
    }
    rng.fill(&mut out);
    for b in out.chunks_exact_mut(bb) {
        let sign = if rng.next_u64() & 1 == 1 { -1.0 } else { 1.0 };
        // Ranges: max |q * scale| of the format times d lands near 0.05..0.5. Lower bounds
        // stay above the f16 normal minimum (6.1e-5).
        match dtype {
            DType::Q4_0 | DType::Q5_0 => put_f16(b, 0, sign * rng.range(1e-3, 1e-2)),
            DType::Q4_1 | DType::Q5_1 => {
                let d = rng.range(1e-3, 1e-2);
                let levels = if dtype == DType::Q4_1 { 16.0 } else { 32.0 };
                put_f16(b, 0, d);
                put_f16(b, 2, -d * levels * rng.range(0.3, 0.7));
            }
            DType::Q8_0 => put_f16(b, 0, sign * rng.range(1e-4, 1e-3)),
            DType::Q2K => {
                // Each group's min equals its scale and dmin = 1.5 d: values d*s*(q - 1.5)
                // centre on zero, as trained weights do.
                for byte in &mut b[0..16] {
                    *byte = (*byte & 0x0F) | ((*byte & 0x0F) << 4);
                }
                let d = rng.range(1e-3, 5e-3);
                put_f16(b, 80, d);
                put_f16(b, 82, 1.5 * d);
            }
            DType::Q3K => put_f16(b, 108, sign * rng.range(2e-4, 1e-3)),
            DType::Q4K => {
                centre_k4(b, &mut rng);
                let d = rng.range(1e-4, 5e-4);
                put_f16(b, 0, d);
                put_f16(b, 2, 7.5 * d);
            }
            DType::Q5K => {
                centre_k4(b, &mut rng);
                let d = rng.range(6.2e-5, 2.5e-4);
                put_f16(b, 0, d);
                put_f16(b, 2, 15.5 * d);
            }
            DType::Q6K => put_f16(b, 208, sign * rng.range(6.2e-5, 2e-4)),
            // Scales 2^-9..2^-6: values up to 6/64 (the sign lives in each code).
            DType::MXFP4 => b[0] = 118 + (rng.next_u64() % 4) as u8,
            DType::F32 | DType::F16 | DType::BF16 => {}
        }
    }
    out
}

#[cfg(test)]
mod centring {
    use super::*;

    /// Trained weights are centred on zero; random ones should be too, or synthetic models
    /// degenerate into repeating one token.
    #[test]
    fn k_quant_random_weights_are_centred() {
        for dtype in [DType::Q2K, DType::Q4K, DType::Q5K, DType::Q4_1, DType::Q4_0] {
            let n = 256 * 64;
            let bytes = random_blocks(dtype, n, 7);
            let mut v = vec![0f32; n];
            crate::quant::dequantize(dtype, &bytes, &mut v).unwrap();
            let mean: f64 = v.iter().map(|x| *x as f64).sum::<f64>() / n as f64;
            let rms: f64 = (v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>() / n as f64).sqrt();
            assert!(mean.abs() < 0.1 * rms, "{dtype}: mean {mean} vs rms {rms}");
        }
    }
}
