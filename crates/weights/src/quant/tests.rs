use super::*;
use crate::error::WeightsError;

#[test]
fn wrong_lengths_are_errors_not_panics() {
    for dtype in DType::ALL {
        let be = dtype.block_elems();
        let data = random_blocks(dtype, 2 * be, 1);
        let mut out = vec![0f32; 2 * be];
        assert!(dequantize(dtype, &data, &mut out).is_ok(), "{dtype}");
        // One byte short, one byte long, one block of values too many.
        let short = dequantize(dtype, &data[..data.len() - 1], &mut out);
        assert!(
            matches!(short, Err(WeightsError::DataLength { .. })),
            "{dtype}"
        );
        let mut long = data.clone();
        long.push(0);
        assert!(dequantize(dtype, &long, &mut out).is_err(), "{dtype}");
        let mut more = vec![0f32; 3 * be];
        assert!(dequantize(dtype, &data, &mut more).is_err(), "{dtype}");
        if be > 1 {
            let mut partial = vec![0f32; be + 1];
            let err = dequantize(dtype, &data, &mut partial).unwrap_err();
            assert!(err.to_string().contains("multiple of"), "{err}");
        }
    }
}

#[test]
fn random_blocks_are_deterministic_finite_and_weight_sized() {
    for dtype in DType::ALL {
        let n = 4 * 256;
        let a = random_blocks(dtype, n, 7);
        assert_eq!(a, random_blocks(dtype, n, 7), "{dtype}: not deterministic");
        assert_ne!(a, random_blocks(dtype, n, 8), "{dtype}: seed ignored");
        assert_eq!(Some(a.len()), dtype.bytes_for(n));
        let mut out = vec![0f32; n];
        dequantize(dtype, &a, &mut out).unwrap();
        let max = out.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(out.iter().all(|x| x.is_finite()), "{dtype}");
        assert!(max > 1e-3 && max < 2.0, "{dtype}: max |x| {max}");
        let distinct: std::collections::BTreeSet<u32> = out.iter().map(|x| x.to_bits()).collect();
        assert!(
            distinct.len() > 8,
            "{dtype}: only {} distinct values",
            distinct.len()
        );
    }
    // Rounded up to whole blocks.
    assert_eq!(random_blocks(DType::Q4K, 1, 0).len(), 144);
}

/// MXFP4 as the OCP format defines it: E2M1 codes (low nibbles first), one E8M0 scale.
#[test]
fn mxfp4_decodes_e2m1_codes_under_a_power_of_two() {
    let mut block = [0u8; 17];
    block[0] = 127 + 3; // 2^3
    for j in 0..16u8 {
        block[1 + j as usize] = j | ((15 - j) << 4);
    }
    let mut out = [0f32; 32];
    dequantize(DType::MXFP4, &block, &mut out).unwrap();
    let e2m1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
    for j in 0..16 {
        let value = |code: usize| {
            if code < 8 {
                e2m1[code]
            } else {
                -e2m1[code - 8]
            }
        };
        assert_eq!(out[j], 8.0 * value(j), "low nibble {j}");
        assert_eq!(out[j + 16], 8.0 * value(15 - j), "high nibble {j}");
    }
    // The smallest scales are subnormal, exactly.
    block[0] = 0;
    dequantize(DType::MXFP4, &block, &mut out).unwrap();
    assert_eq!(out[7], 6.0 * 2f32.powi(-127));
    block[0] = 255;
    dequantize(DType::MXFP4, &block, &mut out).unwrap();
    assert_eq!(out[1], 2f32.powi(127)); // 0.5 * 2^128
}

#[test]
fn float_helpers() {
    assert_eq!(f16_to_f32(0x3C00), 1.0);
    assert_eq!(f16_to_f32(0xC000), -2.0);
    assert_eq!(bf16_to_f32(0x3F80), 1.0);
    assert_eq!(bf16_to_f32(0xC020), -2.5);
}

#[test]
fn q4_0_by_hand() {
    // d = 0.5; qs[0] = 0x1F: value 0 = (15 - 8) * 0.5, value 16 = (1 - 8) * 0.5.
    let mut block = vec![0u8; 18];
    block[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
    block[2] = 0x1F;
    let mut out = [0f32; 32];
    dequantize(DType::Q4_0, &block, &mut out).unwrap();
    assert_eq!(out[0], 3.5);
    assert_eq!(out[16], -3.5);
    assert_eq!(out[1], -4.0);
}

#[test]
fn row_variant_tolerates_mismatch_in_release() {
    // In release builds a mismatch fills only whole blocks; in debug builds it asserts.
    if cfg!(debug_assertions) {
        return;
    }
    let data = random_blocks(DType::Q6K, 256, 3);
    let mut out = vec![0f32; 300];
    dequantize_row(DType::Q6K, &data[..100], &mut out);
    dequantize_row(DType::Q6K, &data, &mut out);
}
