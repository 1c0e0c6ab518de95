//! Test data: deterministic random activations and valid random quant blocks.
#![allow(dead_code)]

use half::f16;
use tf_core::DType;
pub use tf_core::SplitMix64;

pub fn activations(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = rng.next_f32_signed() * 2.0;
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
pub fn weights(rng: &mut SplitMix64, dtype: DType, n: usize) -> Vec<u8> {
    let bytes = dtype.bytes_for(n).unwrap();
    let mut out: Vec<u8> = (0..bytes).map(|_| rng.next_u64() as u8).collect();
    let bb = dtype.block_bytes();
    for blk in out.chunks_exact_mut(bb) {
        let d = 0.001 + 0.02 * (rng.next_f32_signed() + 1.0);
        let m = 0.001 + 0.02 * (rng.next_f32_signed() + 1.0);
        match dtype {
            DType::F32 => blk.copy_from_slice(&(rng.next_f32_signed() * 0.1).to_le_bytes()),
            DType::F16 => put_f16(blk, 0, rng.next_f32_signed() * 0.1),
            DType::BF16 => blk.copy_from_slice(
                &half::bf16::from_f32(rng.next_f32_signed() * 0.1)
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
