//! Plain float types: F32, F16 (IEEE half), BF16 (the top 16 bits of an f32).

use tf_core::DType;

/// IEEE half to f32 (exact).
#[inline]
pub fn f16_to_f32(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// bfloat16 to f32 (exact: the bits shifted into the top half).
#[inline]
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// Converts as many values as both sides hold.
pub(super) fn convert(dtype: DType, data: &[u8], out: &mut [f32]) {
    match dtype {
        DType::F32 => {
            for (b, y) in data.chunks_exact(4).zip(out.iter_mut()) {
                *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        DType::F16 => {
            for (b, y) in data.chunks_exact(2).zip(out.iter_mut()) {
                *y = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        DType::BF16 => {
            for (b, y) in data.chunks_exact(2).zip(out.iter_mut()) {
                *y = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        _ => debug_assert!(false, "convert called for {dtype}"),
    }
}
