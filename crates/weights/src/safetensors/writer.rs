//! Safetensors writer, for tests and synthetic models.

use std::path::Path;

use tf_core::DType;

use super::header::dtype_name;
use crate::error::{Result, WeightsError};

/// Writes a safetensors file atomically. Each tensor is (name, dtype: F32/F16/BF16, shape in
/// safetensors order, raw little-endian bytes); the data length must match the shape.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(&str, DType, Vec<usize>, Vec<u8>)],
) -> Result<()> {
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, dtype, shape, data) in tensors {
        let dtype_str = dtype_name(*dtype).ok_or_else(|| {
            WeightsError::safetensors(path, format!("tensor '{name}': cannot write {dtype}"))
        })?;
        let expected = dtype.bytes_for(shape.iter().product());
        if expected != Some(data.len()) {
            return Err(WeightsError::safetensors(
                path,
                format!(
                    "tensor '{name}': {} bytes given for {dtype} {shape:?}",
                    data.len()
                ),
            ));
        }
        header.insert(
            name.to_string(),
            serde_json::json!({
                "dtype": dtype_str,
                "shape": shape,
                "data_offsets": [offset, offset + data.len()],
            }),
        );
        offset += data.len();
    }
    let mut header_bytes = serde_json::to_vec(&serde_json::Value::Object(header))
        .map_err(|e| WeightsError::safetensors(path, format!("cannot encode header: {e}")))?;
    // Pad with spaces so the data starts 8-byte aligned, as the reference writer does.
    while header_bytes.len() % 8 != 0 {
        header_bytes.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + header_bytes.len() + offset);
    out.extend_from_slice(&(header_bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&header_bytes);
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
    }
    crate::write_atomic(path, &out)
}
