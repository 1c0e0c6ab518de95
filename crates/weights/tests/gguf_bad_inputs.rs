//! Corrupt and hostile GGUF inputs: each gives its own error naming the file, never a panic.

use tf_weights::{random_blocks, DType, GgufFile, GgufWriter, MetaValue, WeightsError};

const NAME: &str = "bad-input.gguf";

fn parse(bytes: Vec<u8>) -> Result<GgufFile, WeightsError> {
    let r = GgufFile::from_bytes(bytes, NAME);
    if let Err(e) = &r {
        assert!(
            e.to_string().contains(NAME),
            "message does not name the file: {e}"
        );
    }
    r
}

fn sample() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()));
    w.meta("a.count", MetaValue::U32(7));
    w.meta(
        "a.list",
        MetaValue::Array(vec![
            MetaValue::String("x".into()),
            MetaValue::String("yz".into()),
        ]),
    );
    w.meta(
        "a.nested",
        MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::I8(1)])]),
    );
    w.tensor(
        "tok_embd",
        &[32, 4],
        DType::Q8_0,
        random_blocks(DType::Q8_0, 128, 1),
    );
    w.tensor("norm", &[32], DType::F32, random_blocks(DType::F32, 32, 2));
    w.to_bytes()
}

/// A file with no metadata and one tensor "t" of dims [32], so field offsets are easy to find:
/// header 24 bytes, name length 8 + 1, n_dims at 33, dims at 37, type at 45, offset at 49.
fn one_tensor(dtype: DType) -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.tensor("t", &[32], dtype, random_blocks(dtype, 32, 3));
    w.to_bytes()
}
const N_DIMS_AT: usize = 33;
const DIMS_AT: usize = 37;
const TYPE_AT: usize = 45;
const OFFSET_AT: usize = 49;

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn layout_constants_match_the_writer() {
    let b = one_tensor(DType::F32);
    assert_eq!(&b[24..32], &1u64.to_le_bytes());
    assert_eq!(b[32], b't');
    assert_eq!(&b[N_DIMS_AT..N_DIMS_AT + 4], &1u32.to_le_bytes());
    assert_eq!(&b[DIMS_AT..DIMS_AT + 8], &32u64.to_le_bytes());
    assert_eq!(&b[TYPE_AT..TYPE_AT + 4], &0u32.to_le_bytes());
    assert_eq!(&b[OFFSET_AT..OFFSET_AT + 8], &0u64.to_le_bytes());
    assert!(parse(b).is_ok());
}

#[test]
fn every_truncation_is_an_error() {
    let full = sample();
    let f = parse(full.clone()).unwrap();
    let data_end = f
        .tensors()
        .iter()
        .map(|t| t.offset + t.n_bytes)
        .max()
        .unwrap();
    let data_start = f.tensors().iter().map(|t| t.offset).min().unwrap();
    for cut in 0..data_end {
        let err = parse(full[..cut].to_vec()).expect_err(&format!("cut at {cut} parsed"));
        if cut < data_start {
            let header_error = matches!(
                err,
                WeightsError::Truncated { .. } | WeightsError::TensorOutOfBounds { .. }
            );
            assert!(header_error, "cut at {cut}: {err:?}");
        } else {
            assert!(
                matches!(err, WeightsError::TensorOutOfBounds { .. }),
                "cut at {cut}: {err:?}"
            );
        }
    }
    // Cutting only trailing padding is fine.
    assert!(parse(full[..data_end].to_vec()).is_ok());
}

#[test]
fn truncated_reports_offset() {
    let full = sample();
    match parse(full[..30].to_vec()).unwrap_err() {
        WeightsError::Truncated { offset, what, .. } => {
            assert_eq!(offset, 24, "{what}");
            assert!(what.contains("metadata key"), "{what}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        parse(Vec::new()),
        Err(WeightsError::Truncated { .. })
    ));
}

#[test]
fn wrong_magic() {
    let mut b = sample();
    b[..4].copy_from_slice(b"GGML");
    match parse(b).unwrap_err() {
        WeightsError::BadMagic { found, .. } => assert_eq!(&found, b"GGML"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn unsupported_versions() {
    for version in [0u32, 1, 4, u32::MAX] {
        let mut b = sample();
        put_u32(&mut b, 4, version);
        match parse(b).unwrap_err() {
            WeightsError::UnsupportedVersion { version: v, .. } => assert_eq!(v, version),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn tensor_past_the_end() {
    // Data shorter than the dims say, as the last tensor.
    let mut w = GgufWriter::new();
    w.tensor("short", &[32, 1000], DType::F32, vec![0u8; 64]);
    match parse(w.to_bytes()).unwrap_err() {
        WeightsError::TensorOutOfBounds {
            tensor,
            size,
            file_size,
            ..
        } => {
            assert_eq!(tensor, "short");
            assert_eq!(size, 32 * 1000 * 4);
            assert!(file_size < size);
        }
        other => panic!("{other:?}"),
    }
    // An aligned offset far past the end, and one that overflows.
    for offset in [1u64 << 20, u64::MAX - 31] {
        let mut b = one_tensor(DType::F32);
        put_u64(&mut b, OFFSET_AT, offset);
        let err = parse(b).unwrap_err();
        assert!(
            matches!(err, WeightsError::TensorOutOfBounds { .. }),
            "{err:?}"
        );
    }
}

#[test]
fn unknown_tensor_type() {
    for (id, label) in [(15u32, "Q8_K"), (9, "Q8_1"), (1000, "unknown")] {
        let mut b = one_tensor(DType::F32);
        put_u32(&mut b, TYPE_AT, id);
        let err = parse(b).unwrap_err();
        assert!(err.to_string().contains(label), "{err}");
        match err {
            WeightsError::UnsupportedTensorType {
                tensor,
                type_id,
                type_name,
                ..
            } => {
                assert_eq!((tensor.as_str(), type_id), ("t", id));
                assert!(type_name.contains(label), "{type_name}");
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn huge_counts_and_lengths_do_not_allocate() {
    let huge = 1u64 << 60;
    // tensor_count, kv_count.
    for at in [8, 16] {
        let mut b = sample();
        put_u64(&mut b, at, huge);
        let err = parse(b).unwrap_err();
        assert!(matches!(err, WeightsError::Truncated { .. }), "{err:?}");
    }
    // Length of the first key.
    let mut b = sample();
    put_u64(&mut b, 24, huge);
    let err = parse(b).unwrap_err();
    assert!(matches!(err, WeightsError::Truncated { .. }), "{err:?}");
    assert!(err.to_string().contains("1152921504606846976"), "{err}");
    // Tensor name length.
    let mut b = one_tensor(DType::F32);
    put_u64(&mut b, 24, u64::MAX);
    assert!(matches!(parse(b), Err(WeightsError::Truncated { .. })));

    // Array count and array string length: one key "k" holding an array of strings.
    let mut w = GgufWriter::new();
    w.meta("k", MetaValue::Array(vec![MetaValue::String("abc".into())]));
    let base = w.to_bytes();
    // 24 header + 8 + 1 key + 4 value type + 4 element type = count at 41; string length at 49.
    assert_eq!(&base[41..49], &1u64.to_le_bytes());
    for at in [41, 49] {
        let mut b = base.clone();
        put_u64(&mut b, at, huge);
        let err = parse(b).unwrap_err();
        assert!(
            matches!(err, WeightsError::Truncated { .. }),
            "at {at}: {err:?}"
        );
    }
}

#[test]
fn unaligned_tensor_offset() {
    let mut b = one_tensor(DType::F32);
    put_u64(&mut b, OFFSET_AT, 4);
    match parse(b).unwrap_err() {
        WeightsError::Corrupt { what, .. } => assert!(what.contains("alignment"), "{what}"),
        other => panic!("{other:?}"),
    }
}

fn expect_corrupt(bytes: Vec<u8>, needle: &str) {
    match parse(bytes).unwrap_err() {
        WeightsError::Corrupt { what, .. } => assert!(what.contains(needle), "{what}"),
        other => panic!("expected Corrupt containing {needle:?}, got {other:?}"),
    }
}

#[test]
fn corrupt_shapes() {
    let mut b = one_tensor(DType::F32);
    put_u32(&mut b, N_DIMS_AT, 5);
    expect_corrupt(b, "dimensions");

    let mut w = GgufWriter::new();
    w.tensor("big", &[1 << 40, 1 << 40], DType::F32, Vec::new());
    expect_corrupt(w.to_bytes(), "overflows");

    // Bytes overflow although the element count does not.
    let mut w = GgufWriter::new();
    w.tensor("big", &[1 << 31, 1 << 31], DType::F32, Vec::new());
    expect_corrupt(w.to_bytes(), "overflows");

    let mut w = GgufWriter::new();
    w.tensor("ragged", &[100, 2], DType::Q4K, Vec::new());
    expect_corrupt(w.to_bytes(), "block size");

    let mut b = one_tensor(DType::Q4_0);
    put_u64(&mut b, DIMS_AT, 33);
    expect_corrupt(b, "block size");
}

#[test]
fn corrupt_metadata() {
    // Invalid UTF-8 in a key.
    let mut w = GgufWriter::new();
    w.meta("ab", MetaValue::U8(1));
    let mut b = w.to_bytes();
    b[32] = 0xFF;
    expect_corrupt(b, "UTF-8");

    // Unknown value type, at top level and as an array element type.
    let mut b = w.to_bytes();
    put_u32(&mut b, 34, 13);
    expect_corrupt(b, "unknown value type 13");
    let mut w2 = GgufWriter::new();
    w2.meta("k", MetaValue::Array(vec![MetaValue::U8(1)]));
    let mut b = w2.to_bytes();
    put_u32(&mut b, 37, 99);
    expect_corrupt(b, "unknown value type 99");

    // Bad alignments.
    for a in [
        MetaValue::U32(0),
        MetaValue::U32(3),
        MetaValue::I32(-32),
        MetaValue::String("32".into()),
    ] {
        let mut w = GgufWriter::new();
        w.meta("general.alignment", a);
        expect_corrupt(w.to_bytes(), "general.alignment");
    }

    // Arrays nested deeper than any real file.
    let mut deep = MetaValue::Array(vec![MetaValue::U8(1)]);
    for _ in 0..40 {
        deep = MetaValue::Array(vec![deep]);
    }
    let mut w = GgufWriter::new();
    w.meta("deep", deep);
    expect_corrupt(w.to_bytes(), "nests arrays");
}

#[test]
fn duplicates() {
    // Same key twice: rename the second of two equal-length keys.
    let mut w = GgufWriter::new();
    w.meta("k1", MetaValue::U8(1));
    w.meta("k2", MetaValue::U8(2));
    let mut b = w.to_bytes();
    let second = b.windows(2).rposition(|x| x == b"k2").unwrap();
    b[second + 1] = b'1';
    expect_corrupt(b, "appears twice");

    let mut w = GgufWriter::new();
    w.tensor("t", &[32], DType::F32, vec![0; 128]);
    w.tensor("t", &[32], DType::F32, vec![0; 128]);
    expect_corrupt(w.to_bytes(), "appears twice");
}

#[test]
fn missing_file_is_io_error_naming_it() {
    let path = std::path::Path::new("/nonexistent/dir/model.gguf");
    let err = GgufFile::open(path).unwrap_err();
    assert!(matches!(err, WeightsError::Io { .. }), "{err:?}");
    assert!(
        err.to_string().contains("/nonexistent/dir/model.gguf"),
        "{err}"
    );
}

/// Random byte damage anywhere in the header never panics.
#[test]
fn random_corruption_never_panics() {
    let full = sample();
    let header_end = parse(full.clone()).unwrap().tensors()[0].offset;
    let mut state = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..3000 {
        let mut b = full.clone();
        for _ in 0..1 + next() % 4 {
            let at = (next() as usize) % header_end;
            b[at] = match next() % 4 {
                0 => 0xFF,
                1 => 0,
                2 => b[at] ^ (1 << (next() % 8)),
                _ => next() as u8,
            };
        }
        let _ = parse(b);
    }
}
