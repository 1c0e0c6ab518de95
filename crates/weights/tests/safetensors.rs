//! Safetensors model directories: single file, shards, dtypes, dims order, bad headers.

use std::path::{Path, PathBuf};

use tf_weights::{
    random_blocks, write_safetensors, DType, SafetensorsModel, TensorSource, WeightsError,
};

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tf-weights-st-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.json"),
            r#"{"model_type": "llama", "hidden_size": 64}"#,
        )
        .unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

type Tensor = (&'static str, DType, Vec<usize>, Vec<u8>);

fn tensors() -> Vec<Tensor> {
    vec![
        (
            "model.embed_tokens.weight",
            DType::BF16,
            vec![10, 8],
            random_blocks(DType::BF16, 80, 1),
        ),
        (
            "model.norm.weight",
            DType::F32,
            vec![8],
            random_blocks(DType::F32, 8, 2),
        ),
        (
            "lm_head.weight",
            DType::F16,
            vec![10, 8],
            random_blocks(DType::F16, 80, 3),
        ),
        (
            "layers.0.q_proj.weight",
            DType::F32,
            vec![2, 3, 4],
            random_blocks(DType::F32, 24, 4),
        ),
    ]
}

fn check(model: &SafetensorsModel, expected: &[Tensor]) {
    assert_eq!(model.config()["hidden_size"], 64);
    assert_eq!(model.tensor_names().len(), expected.len());
    for (name, dtype, shape, data) in expected {
        let v = model
            .tensor(name)
            .unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(v.dtype, *dtype, "{name}");
        let reversed: Vec<usize> = shape.iter().rev().copied().collect();
        assert_eq!(
            v.dims,
            &reversed[..],
            "{name}: dims must be the shape reversed"
        );
        assert_eq!(v.data, &data[..], "{name}");
        assert_eq!(v.cols(), *shape.last().unwrap());
        assert_eq!(v.to_f32().unwrap().len(), shape.iter().product::<usize>());
    }
    assert!(model.tensor("nope").is_none());
}

#[test]
fn single_file_round_trip() {
    let dir = TempDir::new("single");
    let t = tensors();
    write_safetensors(&dir.0.join("model.safetensors"), &t).unwrap();
    let model = SafetensorsModel::open(&dir.0).unwrap();
    assert_eq!(model.dir(), dir.0);
    assert!(model.describe().contains("tf-weights-st"));
    check(&model, &t);
    // BF16 1.0 and F16 1.0 decode exactly.
    let one = [(DType::BF16, 0x3F80u16), (DType::F16, 0x3C00u16)];
    for (dtype, bits) in one {
        let path = dir.0.join("model.safetensors");
        write_safetensors(&path, &[("x", dtype, vec![1], bits.to_le_bytes().to_vec())]).unwrap();
        let m = SafetensorsModel::open(&dir.0).unwrap();
        assert_eq!(m.tensor("x").unwrap().to_f32().unwrap(), vec![1.0]);
    }
}

fn write_index(dir: &Path, map: &[(&str, &str)]) {
    let weight_map: serde_json::Map<String, serde_json::Value> = map
        .iter()
        .map(|(t, f)| (t.to_string(), serde_json::json!(f)))
        .collect();
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": weight_map});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

#[test]
fn sharded_directory() {
    let dir = TempDir::new("sharded");
    let t = tensors();
    let (a, b) = t.split_at(2);
    write_safetensors(&dir.0.join("model-00001-of-00002.safetensors"), a).unwrap();
    write_safetensors(&dir.0.join("model-00002-of-00002.safetensors"), b).unwrap();
    let mut map: Vec<(&str, &str)> = a
        .iter()
        .map(|x| (x.0, "model-00001-of-00002.safetensors"))
        .collect();
    map.extend(b.iter().map(|x| (x.0, "model-00002-of-00002.safetensors")));
    write_index(&dir.0, &map);
    let model = SafetensorsModel::open(&dir.0).unwrap();
    check(&model, &t);

    // The index naming the wrong shard for a tensor is an error naming the index file.
    map[0].1 = "model-00002-of-00002.safetensors";
    write_index(&dir.0, &map);
    let err = SafetensorsModel::open(&dir.0).unwrap_err();
    assert!(err.to_string().contains("index.json"), "{err}");
    assert!(err.to_string().contains(t[0].0), "{err}");

    // Shard names cannot leave the directory.
    write_index(&dir.0, &[("x", "../elsewhere.safetensors")]);
    let err = SafetensorsModel::open(&dir.0).unwrap_err();
    assert!(err.to_string().contains("plain file name"), "{err}");

    // A missing shard is an I/O error naming it.
    write_index(&dir.0, &[("x", "model-00009.safetensors")]);
    let err = SafetensorsModel::open(&dir.0).unwrap_err();
    assert!(matches!(err, WeightsError::Io { .. }), "{err:?}");
    assert!(err.to_string().contains("model-00009.safetensors"), "{err}");
}

#[test]
fn missing_files() {
    let dir = TempDir::new("missing");
    let err = SafetensorsModel::open(&dir.0).unwrap_err();
    assert!(matches!(err, WeightsError::Safetensors { .. }), "{err:?}");
    std::fs::remove_file(dir.0.join("config.json")).unwrap();
    let err = SafetensorsModel::open(&dir.0).unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");
}

/// Writes `header` (raw JSON) plus `data` as model.safetensors and returns the open error.
fn open_raw(dir: &TempDir, header_len: Option<u64>, header: &str, data: &[u8]) -> WeightsError {
    let mut bytes = header_len
        .unwrap_or(header.len() as u64)
        .to_le_bytes()
        .to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    let path = dir.0.join("model.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let err = SafetensorsModel::open(&dir.0).unwrap_err();
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    err
}

fn expect_bad(err: WeightsError, needle: &str) {
    match err {
        WeightsError::Safetensors { what, .. } => assert!(what.contains(needle), "{what}"),
        other => panic!("expected Safetensors error containing {needle:?}, got {other:?}"),
    }
}

#[test]
fn bad_headers() {
    let dir = TempDir::new("bad");
    let ok = r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    // Sanity: the good one opens.
    std::fs::write(dir.0.join("model.safetensors"), {
        let mut b = (ok.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(ok.as_bytes());
        b.extend_from_slice(&[0; 8]);
        b
    })
    .unwrap();
    assert!(SafetensorsModel::open(&dir.0).is_ok());

    std::fs::write(dir.0.join("model.safetensors"), [1u8, 2, 3]).unwrap();
    expect_bad(SafetensorsModel::open(&dir.0).unwrap_err(), "header length");
    expect_bad(open_raw(&dir, Some(1 << 62), ok, &[0; 8]), "header length");
    expect_bad(open_raw(&dir, None, "{not json", &[]), "not valid JSON");
    expect_bad(open_raw(&dir, None, "[1,2]", &[]), "not a JSON object");
    let cases = [
        (
            r#"{"x":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}"#,
            "dtype I64",
        ),
        (
            r#"{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            "do not hold",
        ),
        (
            r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}"#,
            "do not hold",
        ),
        (
            r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#,
            "do not hold",
        ),
        (
            r#"{"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}"#,
            "shape",
        ),
        (
            r#"{"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}}"#,
            "data_offsets",
        ),
        (
            r#"{"x":{"shape":[2],"data_offsets":[0,8]}}"#,
            "no \"dtype\"",
        ),
        (
            r#"{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}"#,
            "overflows",
        ),
    ];
    for (header, needle) in cases {
        let err = open_raw(&dir, None, header, &[0; 8]);
        assert!(err.to_string().contains("'x'"), "{err}");
        expect_bad(err, needle);
    }
    // __metadata__ is skipped.
    let with_meta =
        r#"{"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut b = (with_meta.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(with_meta.as_bytes());
    b.extend_from_slice(&[0; 8]);
    std::fs::write(dir.0.join("model.safetensors"), b).unwrap();
    let m = SafetensorsModel::open(&dir.0).unwrap();
    assert_eq!(m.tensor_names(), vec!["x"]);
}

/// U8 tensors (an MXFP4 checkpoint's blocks and scales) are raw bytes: not a numeric tensor,
/// but readable as bytes with their dims in ggml order.
#[test]
fn u8_tensors_are_raw_bytes() {
    let dir = TempDir::new("u8");
    let header = r#"{"s":{"dtype":"U8","shape":[2,3],"data_offsets":[0,6]},"x":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}"#;
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(&[1, 2, 3, 4, 5, 6, 0, 0]);
    b.extend_from_slice(&2.5f32.to_le_bytes());
    std::fs::write(dir.0.join("model.safetensors"), b).unwrap();
    let m = SafetensorsModel::open(&dir.0).unwrap();
    assert!(m.tensor("s").is_none());
    let (dims, data) = m.raw_bytes("s").unwrap();
    assert_eq!((dims, data), (&[3usize, 2][..], &[1u8, 2, 3, 4, 5, 6][..]));
    assert!(m.raw_bytes("x").is_none());
    assert_eq!(m.tensor("x").unwrap().to_f32().unwrap(), [2.5]);
    // A U8 tensor whose offsets do not hold its bytes is refused like any other.
    let bad = r#"{"s":{"dtype":"U8","shape":[4],"data_offsets":[0,3]}}"#;
    expect_bad(open_raw(&dir, None, bad, &[0; 4]), "'s'");
}

#[test]
fn writer_refuses_bad_input() {
    let dir = TempDir::new("writer");
    let path = dir.0.join("model.safetensors");
    let err = write_safetensors(&path, &[("q", DType::Q4_0, vec![32], vec![0; 18])]).unwrap_err();
    assert!(err.to_string().contains("Q4_0"), "{err}");
    let err = write_safetensors(&path, &[("f", DType::F32, vec![3], vec![0; 8])]).unwrap_err();
    assert!(err.to_string().contains("'f'"), "{err}");
}
