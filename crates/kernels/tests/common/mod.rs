//! Test data: deterministic random activations and valid random quant blocks.
#![allow(dead_code)]

use half::f16;
use tf_core::DType;

pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

pub fn activations(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = rng.f32() * 2.0;
            if i % 61 == 0 {
                v * 30.0
            } else {
                v
            }
        })
        .collect()
}

fn put_f16(b: &mut [u8], at: usize, v: f32) {
    b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes());
}

/// `n` values of random weights of `dtype`: random code bits, sane scales.
pub fn weights(rng: &mut Rng, dtype: DType, n: usize) -> Vec<u8> {
    let bytes = dtype.bytes_for(n).unwrap();
    let mut out: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
    let bb = dtype.block_bytes();
    for blk in out.chunks_exact_mut(bb) {
        let d = 0.001 + 0.02 * (rng.f32() + 1.0);
        let m = 0.001 + 0.02 * (rng.f32() + 1.0);
        match dtype {
            DType::F32 => blk.copy_from_slice(&(rng.f32() * 0.1).to_le_bytes()),
            DType::F16 => put_f16(blk, 0, rng.f32() * 0.1),
            DType::BF16 => blk.copy_from_slice(
                &half::bf16::from_f32(rng.f32() * 0.1)
                    .to_bits()
                    .to_le_bytes(),
            ),
            DType::Q4_0 | DType::Q5_0 | DType::Q8_0 => put_f16(blk, 0, d),
            DType::Q4_1 | DType::Q5_1 => {
                put_f16(blk, 0, d);
                put_f16(blk, 2, -m);
            }
            DType::Q2K => {
                put_f16(blk, 80, d);
                put_f16(blk, 82, m);
            }
            DType::Q3K => put_f16(blk, 108, d),
            DType::Q4K | DType::Q5K => {
                put_f16(blk, 0, d);
                put_f16(blk, 2, m);
            }
            DType::Q6K => put_f16(blk, 208, d),
            // Scales 2^-8..2^-4, some subnormal-free spread.
            DType::MXFP4 => blk[0] = 119 + (rng.next_u64() % 5) as u8,
        }
    }
    out
}

pub fn bits_eq(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}
