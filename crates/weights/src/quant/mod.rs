//! ggml block layouts and the scalar dequantization reference for every [`DType`].
//!
//! The arithmetic follows ggml's `dequantize_row_*` (and gguf-py's numpy port) operation for
//! operation, so results are bit-identical to them: e.g. Q4_K computes `(d * sc) * q - (dmin * m)`
//! in f32, never fused. Faster kernels elsewhere are checked against these functions.
//!
//! - `float.rs`: F32, F16, BF16
//! - `legacy.rs`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32 values per block)
//! - `kquants.rs`: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (256 values per block)
//! - `random.rs`: valid random blocks for tests and synthetic models

mod float;
mod kquants;
mod legacy;
mod random;
mod requant;

pub use float::{bf16_to_f32, f16_to_f32};
pub use random::random_blocks;
pub use requant::{quantize_row_q4_0, requantize_q4_0};

use tf_core::DType;

use crate::error::{Result, WeightsError};

/// Dequantizes `out.len()` values; `data.len()` must be exactly `dtype.bytes_for(out.len())`.
pub fn dequantize(dtype: DType, data: &[u8], out: &mut [f32]) -> Result<()> {
    let expected = dtype.bytes_for(out.len());
    if expected != Some(data.len()) {
        return Err(WeightsError::DataLength {
            context: "dequantize".to_string(),
            dtype,
            n_elems: out.len(),
            data_bytes: data.len(),
            expected: match expected {
                Some(n) => format!("{n} bytes"),
                None => format!("a multiple of {} values", dtype.block_elems()),
            },
        });
    }
    dequantize_blocks(dtype, data, out);
    Ok(())
}

/// Like [`dequantize`] for hot-ish loops (embedding lookup): the length check is a
/// `debug_assert`; in release builds a mismatch fills only the whole blocks both sides hold.
/// Never panics in release builds.
pub fn dequantize_row(dtype: DType, data: &[u8], out: &mut [f32]) {
    debug_assert_eq!(
        dtype.bytes_for(out.len()),
        Some(data.len()),
        "dequantize_row: {dtype} data of {} bytes for {} values",
        data.len(),
        out.len()
    );
    dequantize_blocks(dtype, data, out);
}

/// Dequantizes the whole blocks that both `data` and `out` hold.
fn dequantize_blocks(dtype: DType, data: &[u8], out: &mut [f32]) {
    let block: fn(&[u8], &mut [f32]) = match dtype {
        // One value per "block": convert directly.
        DType::F32 | DType::F16 | DType::BF16 => return float::convert(dtype, data, out),
        DType::Q4_0 => legacy::q4_0,
        DType::Q4_1 => legacy::q4_1,
        DType::Q5_0 => legacy::q5_0,
        DType::Q5_1 => legacy::q5_1,
        DType::Q8_0 => legacy::q8_0,
        DType::Q2K => kquants::q2_k,
        DType::Q3K => kquants::q3_k,
        DType::Q4K => kquants::q4_k,
        DType::Q5K => kquants::q5_k,
        DType::Q6K => kquants::q6_k,
        DType::MXFP4 => legacy::mxfp4,
    };
    for (b, y) in data
        .chunks_exact(dtype.block_bytes())
        .zip(out.chunks_exact_mut(dtype.block_elems()))
    {
        block(b, y);
    }
}

/// The little-endian f16 at `b[i..i + 2]`, widened.
#[inline]
fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

#[cfg(test)]
mod tests;
