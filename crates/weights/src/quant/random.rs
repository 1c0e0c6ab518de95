//! Valid random blocks: random quant bits with small, finite f16 scales chosen per type so the
//! dequantized values have roughly the magnitude of real weights (|x| up to ~0.1..1).

use tf_core::DType;

/// splitmix64: tiny, deterministic on every platform, good enough for test data.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
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

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
}

/// Random valid data for `n_elems` values of `dtype` (rounded up to whole blocks), deterministic
/// in `seed`. Float types get values ~N(0, 0.02); quantized types get random quant bits and
/// per-type scale ranges (see the table below) with random signs where the format has them.
pub fn random_blocks(dtype: DType, n_elems: usize, seed: u64) -> Vec<u8> {
    let n_blocks = n_elems.div_ceil(dtype.block_elems());
    let bb = dtype.block_bytes();
    let mut rng = SplitMix64(seed ^ (u64::from(dtype.ggml_id()) << 56));
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
                put_f16(b, 80, rng.range(1e-3, 5e-3));
                put_f16(b, 82, rng.range(1e-3, 5e-3));
            }
            DType::Q3K => put_f16(b, 108, sign * rng.range(2e-4, 1e-3)),
            DType::Q4K => {
                put_f16(b, 0, rng.range(1e-4, 5e-4));
                put_f16(b, 2, rng.range(1e-4, 5e-4));
            }
            DType::Q5K => {
                put_f16(b, 0, rng.range(6.2e-5, 2.5e-4));
                put_f16(b, 2, rng.range(6.2e-5, 2.5e-4));
            }
            DType::Q6K => put_f16(b, 208, sign * rng.range(6.2e-5, 2e-4)),
            DType::F32 | DType::F16 | DType::BF16 => {}
        }
    }
    out
}
