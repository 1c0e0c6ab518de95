//! GGUF v3 writer, for tests and synthetic models.
//!
//! It writes what it is given: data lengths are not checked against dims, so tests can also
//! build deliberately broken files. Array elements must all have the first element's type.

use std::path::Path;

use tf_core::DType;

use super::reader::align_up;
use super::value::{type_id, MetaValue};
use super::{DEFAULT_ALIGNMENT, GGUF_MAGIC};
use crate::error::Result;

struct PendingTensor {
    name: String,
    dims: Vec<usize>,
    dtype: DType,
    data: Vec<u8>,
    /// Bytes of a tensor whose data is produced at write time ([`GgufWriter::tensor_deferred`]).
    deferred: Option<usize>,
}

pub struct GgufWriter {
    alignment: usize,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<PendingTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter {
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Data alignment (a power of two). Written as `general.alignment` (u32) when it differs
    /// from the default 32, unless that key was set explicitly with [`GgufWriter::meta`].
    pub fn alignment(mut self, a: usize) -> Self {
        assert!(
            a.is_power_of_two(),
            "GGUF alignment must be a power of two, got {a}"
        );
        self.alignment = a;
        self
    }

    /// Adds a metadata key, replacing an earlier value of the same key in place.
    pub fn meta(&mut self, key: &str, v: MetaValue) {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = v,
            None => self.metadata.push((key.to_string(), v)),
        }
    }

    /// Adds a tensor; `dims` in ggml order, `data` its raw bytes.
    pub fn tensor(&mut self, name: &str, dims: &[usize], dtype: DType, data: Vec<u8>) {
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            dtype,
            data,
            deferred: None,
        });
    }

    /// Declares a tensor of `len` bytes whose data [`GgufWriter::write_streaming`] asks for when
    /// it reaches it, so a large file never needs all its tensors in memory at once.
    pub fn tensor_deferred(&mut self, name: &str, dims: &[usize], dtype: DType, len: usize) {
        self.tensors.push(PendingTensor {
            name: name.to_string(),
            dims: dims.to_vec(),
            dtype,
            data: Vec::new(),
            deferred: Some(len),
        });
    }

    fn data_len(t: &PendingTensor) -> usize {
        t.deferred.unwrap_or(t.data.len())
    }

    /// The whole file in memory. Panics if a tensor is deferred (use
    /// [`GgufWriter::write_streaming`]).
    pub fn to_bytes(&self) -> Vec<u8> {
        assert!(
            self.tensors.iter().all(|t| t.deferred.is_none()),
            "GgufWriter::to_bytes with deferred tensors"
        );
        let mut out = self.header();
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            pad_to(&mut out, self.alignment);
        }
        out
    }

    /// Metadata and tensor infos, padded to the data alignment.
    fn header(&self) -> Vec<u8> {
        let a = self.alignment;
        let mut metadata: Vec<(&str, MetaValue)> = self
            .metadata
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        if a != DEFAULT_ALIGNMENT && !self.metadata.iter().any(|(k, _)| k == "general.alignment") {
            metadata.push(("general.alignment", MetaValue::U32(a as u32)));
        }

        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (key, value) in &metadata {
            put_string(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut out, value);
        }

        let mut offset = 0usize;
        for t in &self.tensors {
            put_string(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for &d in &t.dims {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&t.dtype.ggml_id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset = align_up(offset + Self::data_len(t), a).unwrap_or(usize::MAX);
        }

        pad_to(&mut out, a);
        out
    }

    /// Writes the file tensor by tensor (through a temporary file and a rename, like
    /// [`GgufWriter::write`]): `fill(name)` is called for each deferred tensor in order and must
    /// return exactly its declared length, so only one tensor's data is in memory at a time.
    pub fn write_streaming(
        &self,
        path: &Path,
        mut fill: impl FnMut(&str) -> Vec<u8>,
    ) -> Result<()> {
        use std::io::Write;
        let a = self.alignment;
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "weights".to_string());
        let tmp = path.with_file_name(format!(".{file_name}.tmp.{}", std::process::id()));
        let result = (|| -> std::io::Result<()> {
            let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&tmp)?);
            let header = self.header();
            f.write_all(&header)?;
            let mut pos = header.len();
            for t in &self.tensors {
                let filled;
                let data: &[u8] = match t.deferred {
                    Some(len) => {
                        filled = fill(&t.name);
                        if filled.len() != len {
                            return Err(std::io::Error::other(format!(
                                "tensor {}: {} bytes given, {len} declared",
                                t.name,
                                filled.len()
                            )));
                        }
                        &filled
                    }
                    None => &t.data,
                };
                f.write_all(data)?;
                pos += data.len();
                let padded = align_up(pos, a).unwrap_or(pos);
                f.write_all(&vec![0u8; padded - pos])?;
                pos = padded;
            }
            let f = f.into_inner().map_err(|e| e.into_error())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(crate::WeightsError::io(path, e));
        }
        Ok(())
    }

    /// Writes the file atomically: a temporary file beside `path`, then a rename.
    pub fn write(&self, path: &Path) -> Result<()> {
        crate::write_atomic(path, &self.to_bytes())
    }
}

fn pad_to(out: &mut Vec<u8>, a: usize) {
    let len = align_up(out.len(), a).unwrap_or(out.len());
    out.resize(len, 0);
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(u8::from(*x)),
        MetaValue::String(s) => put_string(out, s),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Array(items) => {
            let elem_type = items.first().map_or(type_id::U8, MetaValue::type_id);
            out.extend_from_slice(&elem_type.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
    }
}
