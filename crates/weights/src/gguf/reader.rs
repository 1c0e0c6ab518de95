//! GGUF reader: parses the header, metadata and tensor index, bounds-checking every read, and
//! serves tensor data zero-copy from the mmap.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use tf_core::DType;

use super::value::{type_id, type_id_name, MetaValue};
use super::{DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
use crate::error::{Result, WeightsError};
use crate::mmap::{map_file, Storage};
use crate::tensor::{TensorSource, TensorView};

/// Nested arrays deeper than this are refused: real files nest at most once, and unbounded
/// recursion on a hostile file would overflow the stack.
const MAX_ARRAY_DEPTH: usize = 16;
/// Smallest encoded key/value: key length u64 + 0-byte key + type u32 + 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
/// Smallest encoded tensor info: name length u64 + n_dims u32 + type u32 + offset u64.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;
/// `general.alignment` above this is treated as corrupt (ggml uses 32; nobody needs 1 GiB).
const MAX_ALIGNMENT: usize = 1 << 30;

/// One tensor of a GGUF file, as listed in its index.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is contiguous (the columns of a row).
    pub dims: Vec<usize>,
    pub dtype: DType,
    /// Absolute byte offset of the data in the file.
    pub offset: usize,
    pub n_bytes: usize,
}

/// An opened GGUF file: metadata and tensor index parsed, tensor data left in the mmap.
pub struct GgufFile {
    path: PathBuf,
    storage: Storage,
    version: u32,
    alignment: usize,
    metadata: BTreeMap<String, MetaValue>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Opens and parses a GGUF v2/v3 file. The file must not be modified while it is open.
    pub fn open(path: &Path) -> Result<GgufFile> {
        let storage = map_file(path)?;
        Self::parse(path.to_path_buf(), storage)
    }

    /// Parses GGUF bytes held in memory (writer output in tests); `name` stands in for the path
    /// in error messages. Same checks as [`GgufFile::open`].
    pub fn from_bytes(bytes: Vec<u8>, name: &str) -> Result<GgufFile> {
        Self::parse(PathBuf::from(name), Storage::Owned(bytes))
    }

    fn parse(path: PathBuf, storage: Storage) -> Result<GgufFile> {
        let header = parse_header(&path, storage.bytes())?;
        let tensor_index = header
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Ok(GgufFile {
            path,
            storage,
            version: header.version,
            alignment: header.alignment,
            metadata: header.metadata,
            tensors: header.tensors,
            tensor_index,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> usize {
        self.alignment
    }

    pub fn metadata(&self) -> &BTreeMap<String, MetaValue> {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    fn require(&self, key: &str) -> Result<&MetaValue> {
        self.metadata
            .get(key)
            .ok_or_else(|| WeightsError::MissingKey {
                path: self.path.clone(),
                key: key.to_string(),
            })
    }

    fn wrong_type(&self, key: &str, expected: &'static str, found: &'static str) -> WeightsError {
        WeightsError::WrongType {
            path: self.path.clone(),
            key: key.to_string(),
            expected,
            found,
        }
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str()
            .ok_or_else(|| self.wrong_type(key, "string", v.type_name()))
    }

    /// Any integer type holding a value >= 0.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_u64()
            .ok_or_else(|| self.wrong_type(key, "non-negative integer", v.type_name()))
    }

    /// F32 or F64.
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f32()
            .ok_or_else(|| self.wrong_type(key, "float", v.type_name()))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        let v = self.require(key)?;
        v.as_bool()
            .ok_or_else(|| self.wrong_type(key, "bool", v.type_name()))
    }

    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.map_array(key, "array of string", MetaValue::as_str)
    }

    /// Any integer element type, each value fitting i32.
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>> {
        self.map_array(key, "array of integers fitting i32", |v| {
            v.as_i64().and_then(|x| i32::try_from(x).ok())
        })
    }

    /// F32 or F64 elements.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        self.map_array(key, "array of float", MetaValue::as_f32)
    }

    fn map_array<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        f: impl Fn(&'a MetaValue) -> Option<T>,
    ) -> Result<Vec<T>> {
        let v = self.require(key)?;
        let items = v
            .as_array()
            .ok_or_else(|| self.wrong_type(key, expected, v.type_name()))?;
        items
            .iter()
            .map(|item| {
                f(item).ok_or_else(|| {
                    let found = match item {
                        MetaValue::Array(_) => "array of array",
                        _ => v.array_type_name(),
                    };
                    self.wrong_type(key, expected, found)
                })
            })
            .collect()
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    pub fn file_size(&self) -> usize {
        self.storage.bytes().len()
    }

    /// The raw bytes of a tensor listed in this file's index.
    /// Whether the file's bytes are held in memory (built or read whole), not mapped.
    pub fn in_memory(&self) -> bool {
        matches!(self.storage, Storage::Owned(_))
    }

    /// Tells the OS that this process no longer needs the pages under `data` (tensor bytes of
    /// this file, e.g. of a tensor kept in another layout). They stay readable: a later read
    /// faults them in again from the file.
    pub fn drop_pages(&self, data: &[u8]) {
        self.storage.drop_pages(data);
    }

    pub fn tensor_data(&self, info: &TensorInfo) -> Option<&[u8]> {
        let end = info.offset.checked_add(info.n_bytes)?;
        self.storage.bytes().get(info.offset..end)
    }
}

impl TensorSource for GgufFile {
    fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        let info = self.tensor_info(name)?;
        Some(TensorView {
            name: &info.name,
            dtype: info.dtype,
            dims: &info.dims,
            data: self.tensor_data(info)?,
        })
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

struct Header {
    version: u32,
    alignment: usize,
    metadata: BTreeMap<String, MetaValue>,
    tensors: Vec<TensorInfo>,
}

/// A tensor info as read, before the data section start is known.
struct RawTensorInfo {
    name: String,
    dims: Vec<usize>,
    dtype: DType,
    relative_offset: u64,
}

fn parse_header(path: &Path, bytes: &[u8]) -> Result<Header> {
    let mut cur = Cursor {
        bytes,
        pos: 0,
        path,
    };
    let magic: [u8; 4] = cur.array("magic")?;
    if magic != GGUF_MAGIC {
        return Err(WeightsError::BadMagic {
            path: path.to_path_buf(),
            found: magic,
        });
    }
    let version = cur.u32("version")?;
    if version != 2 && version != 3 {
        return Err(WeightsError::UnsupportedVersion {
            path: path.to_path_buf(),
            version,
        });
    }
    let tensor_count = cur.u64("tensor count")?;
    let kv_count = cur.u64("metadata count")?;

    cur.check_count(kv_count, MIN_KV_BYTES, "metadata key/values")?;
    let mut metadata = BTreeMap::new();
    for _ in 0..kv_count {
        let key = cur.string("metadata key")?;
        let value_type = cur.u32(&format!("type of metadata '{key}'"))?;
        let value = cur.value(value_type, &key, 0)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(WeightsError::corrupt(
                path,
                format!("metadata key '{key}' appears twice"),
            ));
        }
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(v) => v
            .as_u64()
            .and_then(|a| usize::try_from(a).ok())
            .filter(|&a| a.is_power_of_two() && a <= MAX_ALIGNMENT)
            .ok_or_else(|| {
                WeightsError::corrupt(
                    path,
                    format!("general.alignment {v:?} is not a power of two up to {MAX_ALIGNMENT}"),
                )
            })?,
    };

    cur.check_count(tensor_count, MIN_TENSOR_INFO_BYTES, "tensor infos")?;
    let mut raw = Vec::with_capacity(tensor_count as usize);
    for _ in 0..tensor_count {
        raw.push(cur.tensor_info()?);
    }

    let data_start = align_up(cur.pos, alignment)
        .ok_or_else(|| WeightsError::corrupt(path, "data section offset overflows"))?;
    let mut tensors = Vec::with_capacity(raw.len());
    let mut seen = HashMap::with_capacity(raw.len());
    for t in raw {
        if seen.insert(t.name.clone(), ()).is_some() {
            return Err(WeightsError::corrupt(
                path,
                format!("tensor '{}' appears twice", t.name),
            ));
        }
        tensors.push(locate_tensor(path, t, data_start, alignment, bytes.len())?);
    }

    Ok(Header {
        version,
        alignment,
        metadata,
        tensors,
    })
}

/// Checks a tensor's shape, alignment and byte range and turns it into a [`TensorInfo`].
fn locate_tensor(
    path: &Path,
    t: RawTensorInfo,
    data_start: usize,
    alignment: usize,
    file_size: usize,
) -> Result<TensorInfo> {
    let corrupt =
        |what: String| WeightsError::corrupt(path, format!("tensor '{}': {what}", t.name));
    let n_elems = t
        .dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| corrupt(format!("element count of dims {:?} overflows", t.dims)))?;
    let cols = t.dims.first().copied().unwrap_or(1);
    if cols % t.dtype.block_elems() != 0 {
        return Err(corrupt(format!(
            "row length {cols} is not a multiple of the {} block size {}",
            t.dtype,
            t.dtype.block_elems()
        )));
    }
    let n_bytes = t
        .dtype
        .bytes_for(n_elems)
        .ok_or_else(|| corrupt(format!("byte size of dims {:?} overflows", t.dims)))?;
    if !t.relative_offset.is_multiple_of(alignment as u64) {
        return Err(corrupt(format!(
            "data offset {} is not a multiple of the alignment {alignment}",
            t.relative_offset
        )));
    }
    let out_of_bounds = |offset: u64| WeightsError::TensorOutOfBounds {
        path: path.to_path_buf(),
        tensor: t.name.clone(),
        offset,
        size: n_bytes as u64,
        file_size: file_size as u64,
    };
    let abs = (data_start as u64)
        .checked_add(t.relative_offset)
        .ok_or_else(|| out_of_bounds(u64::MAX))?;
    let end = abs
        .checked_add(n_bytes as u64)
        .ok_or_else(|| out_of_bounds(abs))?;
    if end > file_size as u64 {
        return Err(out_of_bounds(abs));
    }
    Ok(TensorInfo {
        name: t.name,
        dims: t.dims,
        dtype: t.dtype,
        // end <= file_size, so abs fits usize.
        offset: abs as usize,
        n_bytes,
    })
}

pub(crate) fn align_up(pos: usize, alignment: usize) -> Option<usize> {
    Some(pos.checked_add(alignment - 1)? / alignment * alignment)
}

/// Bounds-checked little-endian reads. Every read fails with `Truncated` rather than panicking.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    fn truncated(&self, what: impl Into<String>) -> WeightsError {
        WeightsError::Truncated {
            path: self.path.to_path_buf(),
            what: what.into(),
            offset: self.pos as u64,
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(self.truncated(what));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Fails unless `count` items of at least `min_bytes` each could fit in the rest of the
    /// file, so a corrupt count never drives an allocation.
    fn check_count(&self, count: u64, min_bytes: u64, what: &str) -> Result<()> {
        match count.checked_mul(min_bytes) {
            Some(need) if need <= self.remaining() as u64 => Ok(()),
            _ => Err(self.truncated(format!(
                "{what}: count {count} needs at least {min_bytes} bytes each, {} left",
                self.remaining()
            ))),
        }
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        if len > self.remaining() as u64 {
            return Err(self.truncated(format!(
                "{what}: string of {len} bytes, {} left",
                self.remaining()
            )));
        }
        let start = self.pos;
        let raw = self.take(len as usize, what)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_string()),
            Err(e) => Err(WeightsError::corrupt(
                self.path,
                format!("{what} at byte offset {start} is not valid UTF-8 ({e})"),
            )),
        }
    }

    fn value(&mut self, value_type: u32, key: &str, depth: usize) -> Result<MetaValue> {
        let what = || format!("value of metadata '{key}'");
        Ok(match value_type {
            type_id::U8 => MetaValue::U8(self.array::<1>(&what())?[0]),
            type_id::I8 => MetaValue::I8(i8::from_le_bytes(self.array(&what())?)),
            type_id::U16 => MetaValue::U16(u16::from_le_bytes(self.array(&what())?)),
            type_id::I16 => MetaValue::I16(i16::from_le_bytes(self.array(&what())?)),
            type_id::U32 => MetaValue::U32(u32::from_le_bytes(self.array(&what())?)),
            type_id::I32 => MetaValue::I32(i32::from_le_bytes(self.array(&what())?)),
            type_id::F32 => MetaValue::F32(f32::from_le_bytes(self.array(&what())?)),
            type_id::BOOL => MetaValue::Bool(self.array::<1>(&what())?[0] != 0),
            type_id::STRING => MetaValue::String(self.string(&what())?),
            type_id::U64 => MetaValue::U64(u64::from_le_bytes(self.array(&what())?)),
            type_id::I64 => MetaValue::I64(i64::from_le_bytes(self.array(&what())?)),
            type_id::F64 => MetaValue::F64(f64::from_le_bytes(self.array(&what())?)),
            type_id::ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(WeightsError::corrupt(
                        self.path,
                        format!("metadata '{key}' nests arrays deeper than {MAX_ARRAY_DEPTH}"),
                    ));
                }
                let elem_type = self.u32(&format!("element type of metadata '{key}'"))?;
                let count = self.u64(&format!("element count of metadata '{key}'"))?;
                let min_bytes = match min_value_bytes(elem_type) {
                    Some(n) => n,
                    None => return Err(self.unknown_value_type(elem_type, key)),
                };
                self.check_count(count, min_bytes, &format!("array metadata '{key}'"))?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem_type, key, depth + 1)?);
                }
                MetaValue::Array(items)
            }
            other => return Err(self.unknown_value_type(other, key)),
        })
    }

    fn unknown_value_type(&self, value_type: u32, key: &str) -> WeightsError {
        WeightsError::corrupt(
            self.path,
            format!(
                "metadata '{key}' has unknown value type {value_type} ({})",
                type_id_name(value_type)
            ),
        )
    }

    fn tensor_info(&mut self) -> Result<RawTensorInfo> {
        let name = self.string("tensor name")?;
        let n_dims = self.u32(&format!("dimension count of tensor '{name}'"))?;
        if n_dims as usize > MAX_DIMS {
            return Err(WeightsError::corrupt(
                self.path,
                format!("tensor '{name}' has {n_dims} dimensions (at most {MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for i in 0..n_dims {
            let d = self.u64(&format!("dimension {i} of tensor '{name}'"))?;
            let d = usize::try_from(d).map_err(|_| {
                WeightsError::corrupt(
                    self.path,
                    format!("tensor '{name}' dimension {d} too large"),
                )
            })?;
            dims.push(d);
        }
        let type_id = self.u32(&format!("type of tensor '{name}'"))?;
        let dtype = DType::from_ggml_id(type_id).map_err(|unknown| {
            WeightsError::UnsupportedTensorType {
                path: self.path.to_path_buf(),
                tensor: name.clone(),
                type_id,
                type_name: unknown.to_string(),
            }
        })?;
        let relative_offset = self.u64(&format!("data offset of tensor '{name}'"))?;
        Ok(RawTensorInfo {
            name,
            dims,
            dtype,
            relative_offset,
        })
    }
}

/// Smallest encoding of one value of a GGUF value type, or None for an unknown type.
fn min_value_bytes(value_type: u32) -> Option<u64> {
    Some(match value_type {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 => 8,
        type_id::STRING => 8,
        type_id::ARRAY => 4 + 8,
        _ => return None,
    })
}
