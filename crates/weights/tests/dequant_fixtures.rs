//! Our dequantization equals gguf-py's reference bit for bit on every type.
//! Fixtures come from scripts/gen_dequant_fixtures.py.

use std::path::PathBuf;

use tf_weights::{dequantize, dequantize_row, DType};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/dequant")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn stem(dtype: DType) -> String {
    dtype.name().to_lowercase()
}

#[test]
fn every_type_matches_gguf_py_bit_for_bit() {
    for dtype in DType::ALL {
        let raw = fixture(&format!("{}.blocks", stem(dtype)));
        let expected: Vec<f32> = fixture(&format!("{}.f32", stem(dtype)))
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(dtype.bytes_for(expected.len()), Some(raw.len()), "{dtype}");
        assert!(
            expected.len() >= 2 * dtype.block_elems(),
            "{dtype}: too few blocks"
        );

        let mut got = vec![f32::NAN; expected.len()];
        dequantize(dtype, &raw, &mut got).unwrap();
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(
                g.to_bits(),
                e.to_bits(),
                "{dtype} value {i}: got {g}, want {e}"
            );
        }

        // The row variant agrees, block by block too.
        let mut row = vec![f32::NAN; expected.len()];
        dequantize_row(dtype, &raw, &mut row);
        assert_eq!(bits(&row), bits(&expected), "{dtype} dequantize_row");
        let (be, bb) = (dtype.block_elems(), dtype.block_bytes());
        let mut one = vec![0f32; be];
        dequantize(dtype, &raw[bb..2 * bb], &mut one).unwrap();
        assert_eq!(
            bits(&one),
            bits(&expected[be..2 * be]),
            "{dtype} second block alone"
        );
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
