//! Parsing and checking one safetensors file header.

use std::path::Path;

use tf_core::DType;

use crate::error::{Result, WeightsError};

/// Headers above this are refused (the reference implementation's limit), so a corrupt length
/// cannot make us parse gigabytes of JSON.
const MAX_HEADER_BYTES: u64 = 100 << 20;

pub(super) struct Entry {
    pub name: String,
    /// `None`: raw bytes (`U8`), such as the blocks and scales of an MXFP4 checkpoint.
    pub dtype: Option<DType>,
    /// Safetensors order (row-major, last dim contiguous).
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub start: usize,
    pub end: usize,
}

pub(crate) fn dtype_name(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F32 => Some("F32"),
        DType::F16 => Some("F16"),
        DType::BF16 => Some("BF16"),
        _ => None,
    }
}

fn parse_dtype(s: &str) -> Option<DType> {
    match s {
        "F32" => Some(DType::F32),
        "F16" => Some(DType::F16),
        "BF16" => Some(DType::BF16),
        _ => None,
    }
}

/// Parses and bounds-checks the header of the file `bytes`; entries come sorted by offset.
pub(super) fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<Entry>> {
    let bad = |what: String| WeightsError::safetensors(path, what);
    let len_bytes: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            bad(format!(
                "file of {} bytes has no 8-byte header length",
                bytes.len()
            ))
        })?;
    let header_len = u64::from_le_bytes(len_bytes);
    let available = bytes.len() as u64 - 8;
    if header_len > available || header_len > MAX_HEADER_BYTES {
        return Err(bad(format!(
            "header length {header_len} exceeds the {available} bytes after it (or {MAX_HEADER_BYTES})"
        )));
    }
    let data_start = 8 + header_len as usize;
    let data_len = bytes.len() - data_start;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..data_start])
        .map_err(|e| bad(format!("header is not valid JSON: {e}")))?;
    let object = header
        .as_object()
        .ok_or_else(|| bad("header is not a JSON object".to_string()))?;

    let mut entries = Vec::with_capacity(object.len());
    for (name, info) in object {
        if name == "__metadata__" {
            continue;
        }
        let field = |key: &str| {
            info.get(key)
                .ok_or_else(|| bad(format!("tensor '{name}' has no \"{key}\"")))
        };
        let dtype_str = field("dtype")?
            .as_str()
            .ok_or_else(|| bad(format!("tensor '{name}': dtype is not a string")))?;
        let dtype = match dtype_str {
            "U8" => None,
            s => Some(parse_dtype(s).ok_or_else(|| {
                bad(format!(
                    "tensor '{name}' has dtype {dtype_str}; only F32, F16, BF16 and U8 are \
                     supported"
                ))
            })?),
        };
        let type_name = dtype.map_or("U8", |d| d.name());
        let shape = usize_list(field("shape")?)
            .ok_or_else(|| bad(format!("tensor '{name}': shape is not a list of sizes")))?;
        let offsets = usize_list(field("data_offsets")?)
            .filter(|o| o.len() == 2)
            .ok_or_else(|| bad(format!("tensor '{name}': data_offsets is not [begin, end]")))?;
        let (begin, end) = (offsets[0], offsets[1]);
        let n_bytes = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .and_then(|n| dtype.map_or(Some(n), |d| d.bytes_for(n)))
            .ok_or_else(|| {
                bad(format!(
                    "tensor '{name}': size of shape {shape:?} overflows"
                ))
            })?;
        if begin > end || end > data_len || end - begin != n_bytes {
            return Err(bad(format!(
                "tensor '{name}': data_offsets [{begin}, {end}] do not hold {n_bytes} bytes of \
                 {type_name} {shape:?} within the {data_len} data bytes"
            )));
        }
        entries.push(Entry {
            name: name.clone(),
            dtype,
            shape,
            start: data_start + begin,
            end: data_start + end,
        });
    }
    entries.sort_by_key(|e| (e.start, e.end));
    Ok(entries)
}

fn usize_list(v: &serde_json::Value) -> Option<Vec<usize>> {
    v.as_array()?
        .iter()
        .map(|x| x.as_u64().and_then(|x| usize::try_from(x).ok()))
        .collect()
}
