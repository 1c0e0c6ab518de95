//! Safetensors: Hugging Face model directories (config.json plus model.safetensors, or shards
//! listed in model.safetensors.index.json), each shard mmapped.
//!
//! A shard is an 8-byte little-endian header length, a JSON header mapping tensor names to
//! {dtype, shape, data_offsets}, then the data; offsets are relative to the end of the header.
//! Only F32, F16 and BF16 tensors are read. Dims are handed out in ggml order (the safetensors
//! shape reversed: shape [out, in] becomes dims [in, out]).

mod header;
mod writer;

pub use writer::write_safetensors;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use tf_core::DType;

use crate::error::{Result, WeightsError};
use crate::mmap::{map_file, Storage};
use crate::tensor::{TensorSource, TensorView};

pub(crate) const SINGLE_FILE: &str = "model.safetensors";
pub(crate) const INDEX_FILE: &str = "model.safetensors.index.json";

struct Shard {
    storage: Storage,
}

struct StTensor {
    name: String,
    /// `None`: raw bytes (`U8`).
    dtype: Option<DType>,
    /// ggml order.
    dims: Vec<usize>,
    shard: usize,
    /// Absolute byte range in the shard file.
    start: usize,
    end: usize,
}

/// An opened Hugging Face model directory.
pub struct SafetensorsModel {
    dir: PathBuf,
    config: serde_json::Value,
    shards: Vec<Shard>,
    tensors: Vec<StTensor>,
    index: HashMap<String, usize>,
}

impl std::fmt::Debug for SafetensorsModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsModel")
            .field("dir", &self.dir)
            .field("n_shards", &self.shards.len())
            .field("n_tensors", &self.tensors.len())
            .finish()
    }
}

impl SafetensorsModel {
    /// Opens `dir`: reads config.json and maps every shard. The files must not be modified
    /// while the model is open.
    pub fn open(dir: &Path) -> Result<Self> {
        let config = read_json(&dir.join("config.json"))?;
        let index_path = dir.join(INDEX_FILE);
        let mut model = SafetensorsModel {
            dir: dir.to_path_buf(),
            config,
            shards: Vec::new(),
            tensors: Vec::new(),
            index: HashMap::new(),
        };
        if index_path.exists() {
            let weight_map = read_weight_map(&index_path)?;
            let files: BTreeSet<&str> = weight_map.values().map(String::as_str).collect();
            let mut shard_of_file = HashMap::new();
            for file in files {
                shard_of_file.insert(file, model.add_shard(&dir.join(file))?);
            }
            for (tensor, file) in &weight_map {
                let listed_in = model.index.get(tensor).map(|&i| model.tensors[i].shard);
                if listed_in != shard_of_file.get(file.as_str()).copied() {
                    return Err(WeightsError::safetensors(
                        &index_path,
                        format!("weight_map puts tensor '{tensor}' in {file}, which lacks it"),
                    ));
                }
            }
        } else {
            let single = dir.join(SINGLE_FILE);
            if !single.exists() {
                return Err(WeightsError::safetensors(
                    dir,
                    format!("neither {SINGLE_FILE} nor {INDEX_FILE} is present"),
                ));
            }
            model.add_shard(&single)?;
        }
        Ok(model)
    }

    /// Maps one shard and indexes its tensors; returns the shard number.
    fn add_shard(&mut self, path: &Path) -> Result<usize> {
        let storage = map_file(path)?;
        let entries = header::parse(path, storage.bytes())?;
        let shard = self.shards.len();
        for e in entries {
            if self.index.contains_key(&e.name) {
                return Err(WeightsError::safetensors(
                    path,
                    format!("tensor '{}' also appears in another shard", e.name),
                ));
            }
            self.index.insert(e.name.clone(), self.tensors.len());
            self.tensors.push(StTensor {
                name: e.name,
                dtype: e.dtype,
                dims: e.shape.into_iter().rev().collect(),
                shard,
                start: e.start,
                end: e.end,
            });
        }
        self.shards.push(Shard { storage });
        Ok(shard)
    }

    /// The parsed config.json.
    pub fn config(&self) -> &serde_json::Value {
        &self.config
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl SafetensorsModel {
    /// The tensor `name` and its bytes.
    fn entry(&self, name: &str) -> Option<(&StTensor, &[u8])> {
        let t = self.tensors.get(*self.index.get(name)?)?;
        let data = self
            .shards
            .get(t.shard)?
            .storage
            .bytes()
            .get(t.start..t.end)?;
        Some((t, data))
    }
}

impl TensorSource for SafetensorsModel {
    fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        let (t, data) = self.entry(name)?;
        Some(TensorView {
            name: &t.name,
            dtype: t.dtype?,
            dims: &t.dims,
            data,
        })
    }

    fn raw_bytes(&self, name: &str) -> Option<(&[usize], &[u8])> {
        let (t, data) = self.entry(name)?;
        t.dtype.is_none().then_some((&t.dims[..], data))
    }

    fn tensor_names(&self) -> Vec<&str> {
        self.tensors.iter().map(|t| t.name.as_str()).collect()
    }

    fn describe(&self) -> String {
        self.dir.display().to_string()
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read(path).map_err(|e| WeightsError::io(path, e))?;
    serde_json::from_slice(&text)
        .map_err(|e| WeightsError::safetensors(path, format!("invalid JSON: {e}")))
}

/// The `weight_map` of an index file: tensor name -> shard file name (a plain file name in the
/// same directory; anything with a path separator is refused).
fn read_weight_map(path: &Path) -> Result<std::collections::BTreeMap<String, String>> {
    let json = read_json(path)?;
    let map = json
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| WeightsError::safetensors(path, "no \"weight_map\" object"))?;
    map.iter()
        .map(|(tensor, file)| {
            let file = file.as_str().ok_or_else(|| {
                WeightsError::safetensors(path, format!("weight_map['{tensor}'] is not a string"))
            })?;
            let plain =
                !file.is_empty() && file != "." && file != ".." && !file.contains(['/', '\\']);
            if !plain {
                return Err(WeightsError::safetensors(
                    path,
                    format!("weight_map['{tensor}'] = '{file}' is not a plain file name"),
                ));
            }
            Ok((tensor.clone(), file.to_string()))
        })
        .collect()
}
