//! GgufWriter -> GgufFile round trips, typed getters, and (opt-in) the real model files.

use std::path::PathBuf;

use tf_weights::{
    dequantize, random_blocks, DType, GgufFile, GgufWriter, MetaValue, TensorSource, WeightsError,
};

fn all_value_types() -> Vec<(&'static str, MetaValue)> {
    use MetaValue::*;
    vec![
        ("t.u8", U8(200)),
        ("t.i8", I8(-100)),
        ("t.u16", U16(60000)),
        ("t.i16", I16(-30000)),
        ("t.u32", U32(4_000_000_000)),
        ("t.i32", I32(-2_000_000_000)),
        ("t.f32", F32(1e-6)),
        ("t.bool", Bool(true)),
        ("t.bool_false", Bool(false)),
        ("t.string", String("héllo ✓ 世界".into())),
        ("t.empty_string", String(std::string::String::new())),
        ("t.u64", U64(u64::MAX)),
        ("t.i64", I64(i64::MIN)),
        ("t.f64", F64(1e300)),
        ("t.i64_small", I64(7)),
        ("t.arr_u32", Array(vec![U32(1), U32(2), U32(3)])),
        ("t.arr_i64", Array(vec![I64(-1), I64(5)])),
        ("t.arr_u64_big", Array(vec![U64(1 << 40)])),
        (
            "t.arr_str",
            Array(vec![
                String("a".into()),
                String("".into()),
                String("ç".into()),
            ]),
        ),
        ("t.arr_f32", Array(vec![F32(0.5), F32(-1.25)])),
        ("t.arr_f64", Array(vec![F64(0.5)])),
        ("t.arr_bool", Array(vec![Bool(true), Bool(false)])),
        ("t.arr_empty", Array(vec![])),
        (
            "t.nested",
            Array(vec![
                Array(vec![I32(1), I32(-2)]),
                Array(vec![]),
                Array(vec![I32(3)]),
            ]),
        ),
        (
            "t.nested_str",
            Array(vec![Array(vec![Array(vec![String("deep".into())])])]),
        ),
    ]
}

/// One tensor of every type, plus assorted ranks and an empty tensor.
fn test_tensors() -> Vec<(String, Vec<usize>, DType, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        let dims = vec![256, 3];
        let data = random_blocks(dtype, 256 * 3, i as u64);
        out.push((format!("blk.{i}.{}", dtype.name()), dims, dtype, data));
    }
    out.push((
        "vec".into(),
        vec![5],
        DType::F32,
        random_blocks(DType::F32, 5, 1),
    ));
    out.push((
        "odd_f16".into(),
        vec![3, 7],
        DType::F16,
        random_blocks(DType::F16, 21, 2),
    ));
    let q = random_blocks(DType::Q8_0, 64 * 2 * 3 * 2, 3);
    out.push(("rank4".into(), vec![64, 2, 3, 2], DType::Q8_0, q));
    let q = random_blocks(DType::Q4K, 512 * 2 * 2, 4);
    out.push(("rank3".into(), vec![512, 2, 2], DType::Q4K, q));
    out.push(("empty".into(), vec![32, 0], DType::Q4_0, Vec::new()));
    out
}

fn build(alignment: usize) -> GgufWriter {
    let mut w = GgufWriter::new().alignment(alignment);
    w.meta("general.architecture", MetaValue::String("test".into()));
    for (k, v) in all_value_types() {
        w.meta(k, v);
    }
    for (name, dims, dtype, data) in test_tensors() {
        w.tensor(&name, &dims, dtype, data);
    }
    w
}

#[test]
fn round_trip_metadata_and_tensors_at_several_alignments() {
    for alignment in [32, 64, 1, 256] {
        let bytes = build(alignment).to_bytes();
        let f = GgufFile::from_bytes(bytes.clone(), "roundtrip.gguf").unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.alignment(), alignment);
        assert_eq!(f.file_size(), bytes.len());
        assert_eq!(f.path(), std::path::Path::new("roundtrip.gguf"));
        for (k, v) in all_value_types() {
            assert_eq!(f.get(k), Some(&v), "{k} at alignment {alignment}");
        }
        let expected_alignment_key = usize::from(alignment != 32);
        assert_eq!(
            f.metadata().len(),
            all_value_types().len() + 1 + expected_alignment_key
        );

        let expected = test_tensors();
        assert_eq!(f.tensors().len(), expected.len());
        let names: Vec<&str> = expected.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(f.tensor_names(), names);
        for (name, dims, dtype, data) in &expected {
            let info = f.tensor_info(name).unwrap();
            assert_eq!((&info.dims, info.dtype), (dims, *dtype), "{name}");
            assert_eq!(info.n_bytes, data.len(), "{name}");
            assert_eq!(info.offset % alignment, 0, "{name}");
            let view = f.tensor(name).unwrap();
            assert_eq!(view.data, &data[..], "{name}");
            assert_eq!(view.name, name);
            assert_eq!(view.cols(), dims[0]);
            assert_eq!(view.rows(), dims[1..].iter().product::<usize>());
            assert_eq!(view.n_elems(), dims.iter().product::<usize>());
            assert_eq!(view.row_bytes() * view.rows(), data.len(), "{name}");
            let mut want = vec![0f32; view.n_elems()];
            dequantize(*dtype, data, &mut want).unwrap();
            assert_eq!(view.to_f32().unwrap(), want, "{name}");
            if view.rows() > 1 {
                assert_eq!(view.row(1).unwrap().len(), view.row_bytes());
                assert!(view.row(view.rows()).is_none());
            }
        }
        assert!(f.tensor("nope").is_none());
        assert!(f.describe().contains("roundtrip.gguf"));
    }
}

#[test]
fn version_2_files_read_the_same() {
    let mut bytes = build(32).to_bytes();
    bytes[4..8].copy_from_slice(&2u32.to_le_bytes());
    let f = GgufFile::from_bytes(bytes, "v2.gguf").unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.tensors().len(), test_tensors().len());
}

#[test]
fn typed_getters() {
    let f = GgufFile::from_bytes(build(32).to_bytes(), "getters.gguf").unwrap();
    assert_eq!(f.get_str("general.architecture").unwrap(), "test");
    assert_eq!(f.get_u64("t.u8").unwrap(), 200);
    assert_eq!(f.get_u64("t.u32").unwrap(), 4_000_000_000);
    assert_eq!(f.get_u64("t.i64_small").unwrap(), 7);
    assert_eq!(f.get_u64("t.u64").unwrap(), u64::MAX);
    assert_eq!(f.get_f32("t.f32").unwrap(), 1e-6);
    assert_eq!(f.get_f32("t.f64").unwrap(), f32::INFINITY);
    assert!(f.get_bool("t.bool").unwrap());
    assert!(!f.get_bool("t.bool_false").unwrap());
    assert_eq!(f.get_str_array("t.arr_str").unwrap(), vec!["a", "", "ç"]);
    assert_eq!(f.get_str_array("t.arr_empty").unwrap(), Vec::<&str>::new());
    assert_eq!(f.get_i32_array("t.arr_u32").unwrap(), vec![1, 2, 3]);
    assert_eq!(f.get_i32_array("t.arr_i64").unwrap(), vec![-1, 5]);
    assert_eq!(f.get_f32_array("t.arr_f32").unwrap(), vec![0.5, -1.25]);
    assert_eq!(f.get_f32_array("t.arr_f64").unwrap(), vec![0.5]);

    let missing = f.get_str("no.such.key").unwrap_err();
    assert!(matches!(&missing, WeightsError::MissingKey { key, .. } if key == "no.such.key"));
    assert!(missing.to_string().contains("getters.gguf"), "{missing}");

    let wrong = |r: Result<(), WeightsError>, want_found: &str| {
        let e = r.unwrap_err();
        assert!(e.to_string().contains("getters.gguf"), "{e}");
        match e {
            WeightsError::WrongType { found, .. } => assert_eq!(found, want_found),
            other => panic!("expected WrongType, got {other:?}"),
        }
    };
    wrong(f.get_u64("t.i8").map(drop), "i8");
    wrong(f.get_u64("t.string").map(drop), "string");
    wrong(f.get_str("t.u32").map(drop), "u32");
    wrong(f.get_f32("t.u32").map(drop), "u32");
    wrong(f.get_bool("t.u8").map(drop), "u8");
    wrong(f.get_str_array("t.arr_u32").map(drop), "array of u32");
    wrong(f.get_str_array("t.string").map(drop), "string");
    wrong(f.get_i32_array("t.arr_u64_big").map(drop), "array of u64");
    wrong(f.get_i32_array("t.nested").map(drop), "array of array");
    wrong(f.get_f32_array("t.arr_bool").map(drop), "array of bool");

    let v = f.get("t.i8").unwrap();
    assert_eq!(
        (v.as_i64(), v.as_u64(), v.type_name()),
        (Some(-100), None, "i8")
    );
    assert_eq!(f.get("t.u64").unwrap().as_i64(), None);
    assert_eq!(f.get("t.nested").unwrap().as_array().unwrap().len(), 3);
}

fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tf-weights-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn write_then_open_from_disk() {
    let path = temp_path("disk.gguf");
    let w = build(64);
    w.write(&path).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.path(), path);
    assert_eq!(f.alignment(), 64);
    assert_eq!(std::fs::read(&path).unwrap(), w.to_bytes());
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers.len(),
        1,
        "temporary file left behind: {leftovers:?}"
    );
    let expected = test_tensors();
    let (name, _, _, data) = &expected[10];
    assert_eq!(f.tensor(name).unwrap().data, &data[..]);
    std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
}

/// Opens the real model files when TENSORFOLD_REAL_MODELS=1 (cheap: header parse only).
#[test]
fn real_models_open_when_enabled() {
    if std::env::var("TENSORFOLD_REAL_MODELS").as_deref() != Ok("1") {
        println!("note: set TENSORFOLD_REAL_MODELS=1 to open the real GGUF models");
        return;
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let dir = PathBuf::from(home).join(".cache/tensorfold/models");
    for name in [
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "qwen2.5-coder-0.5b-instruct.gguf",
        "smollm2-135m-instruct-q4_1.gguf",
    ] {
        let path = dir.join(name);
        if !path.exists() {
            println!("note: {} not present, skipped", path.display());
            continue;
        }
        let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let arch = f.get_str("general.architecture").unwrap();
        let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap();
        assert!(tokens.len() > 1000, "{name}");
        assert!(!f.tensors().is_empty(), "{name}");
        let mut types = std::collections::BTreeMap::<DType, usize>::new();
        for t in f.tensors() {
            *types.entry(t.dtype).or_default() += 1;
        }
        // Dequantize one small tensor of each type to make sure every layout in use decodes.
        for dtype in types.keys() {
            let t = f.tensors().iter().filter(|t| t.dtype == *dtype);
            let t = t.min_by_key(|t| t.n_bytes).unwrap();
            let values = f.tensor(&t.name).unwrap().to_f32().unwrap();
            assert!(values.iter().all(|x| x.is_finite()), "{name}: {}", t.name);
        }
        println!(
            "{name}: v{} arch {arch}, {} tensors {types:?}, {} tokens",
            f.version(),
            f.tensors().len(),
            tokens.len()
        );
    }
}
