//! Tensor element types, numbered as in the GGUF format (ggml type ids).

use std::fmt;

/// Element type of a weight tensor. Quantized types store `block_elems()` values in
/// `block_bytes()` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    /// OCP microscaling FP4: 32 E2M1 values (±{0, 0.5, 1, 1.5, 2, 3, 4, 6}) sharing one E8M0
    /// power-of-two scale (gpt-oss's expert weights).
    MXFP4,
}

/// A ggml type id that TensorFold does not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownDType(pub u32);

impl fmt::Display for UnknownDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            9 => "Q8_1",
            15 => "Q8_K",
            16..=23 => "an IQ type",
            24 => "I8",
            25 => "I16",
            26 => "I32",
            27 => "I64",
            28 => "F64",
            29 => "IQ1_M",
            34 => "TQ1_0",
            35 => "TQ2_0",
            40 => "NVFP4",
            _ => "unknown",
        };
        write!(f, "tensor type {} (ggml id {})", name, self.0)
    }
}

impl DType {
    pub const ALL: [DType; 14] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q8_0,
        DType::Q2K,
        DType::Q3K,
        DType::Q4K,
        DType::Q5K,
        DType::Q6K,
        DType::MXFP4,
    ];

    /// The ggml type id used in GGUF files.
    pub fn ggml_id(self) -> u32 {
        match self {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::Q4_0 => 2,
            DType::Q4_1 => 3,
            DType::Q5_0 => 6,
            DType::Q5_1 => 7,
            DType::Q8_0 => 8,
            DType::Q2K => 10,
            DType::Q3K => 11,
            DType::Q4K => 12,
            DType::Q5K => 13,
            DType::Q6K => 14,
            DType::BF16 => 30,
            DType::MXFP4 => 39,
        }
    }

    pub fn from_ggml_id(id: u32) -> Result<DType, UnknownDType> {
        DType::ALL
            .iter()
            .copied()
            .find(|t| t.ggml_id() == id)
            .ok_or(UnknownDType(id))
    }

    /// Values per block (1 for plain float types).
    pub fn block_elems(self) -> usize {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => 1,
            DType::Q4_0 | DType::Q4_1 | DType::Q5_0 | DType::Q5_1 | DType::Q8_0 => 32,
            DType::MXFP4 => 32,
            DType::Q2K | DType::Q3K | DType::Q4K | DType::Q5K | DType::Q6K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Q4_0 => 18,
            DType::Q4_1 => 20,
            DType::Q5_0 => 22,
            DType::Q5_1 => 24,
            DType::Q8_0 => 34,
            DType::Q2K => 84,
            DType::Q3K => 110,
            DType::Q4K => 144,
            DType::Q5K => 176,
            DType::Q6K => 210,
            DType::MXFP4 => 17,
        }
    }

    /// Bytes of `n` values, or `None` when `n` is not a whole number of blocks.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_elems()) {
            return None;
        }
        (n / self.block_elems()).checked_mul(self.block_bytes())
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::Q4_0 => "Q4_0",
            DType::Q4_1 => "Q4_1",
            DType::Q5_0 => "Q5_0",
            DType::Q5_1 => "Q5_1",
            DType::Q8_0 => "Q8_0",
            DType::Q2K => "Q2_K",
            DType::Q3K => "Q3_K",
            DType::Q4K => "Q4_K",
            DType::Q5K => "Q5_K",
            DType::Q6K => "Q6_K",
            DType::MXFP4 => "MXFP4",
        }
    }
}

/// Twice each MXFP4 (E2M1) code's value, an integer (code 8 is -0).
pub const MXFP4_TWICE: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// `2^(e - 128)`, half an E8M0 scale: with [`MXFP4_TWICE`], an MXFP4 value is
/// `e8m0_half(e) * MXFP4_TWICE[code]`, exactly (2^-128 and 2^-127 are subnormal).
pub fn e8m0_half(e: u8) -> f32 {
    if e < 2 {
        f32::from_bits(0x0020_0000 << e)
    } else {
        f32::from_bits(u32::from(e - 1) << 23)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for t in DType::ALL {
            assert_eq!(DType::from_ggml_id(t.ggml_id()), Ok(t));
        }
        assert_eq!(DType::from_ggml_id(15), Err(UnknownDType(15)));
        assert!(UnknownDType(15).to_string().contains("Q8_K"));
    }

    #[test]
    fn sizes() {
        assert_eq!(DType::Q4K.bytes_for(512), Some(288));
        assert_eq!(DType::Q4K.bytes_for(100), None);
        assert_eq!(DType::F16.bytes_for(3), Some(6));
    }
}
