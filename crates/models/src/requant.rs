//! A model copied with its wider matrices requantized to Q4_0: for a draft model on the CPU,
//! where decode reads every weight once per token and fewer bytes a weight is what makes a
//! guess cheap. A draft's guesses only change speed (the target verifies every one), so its
//! weights need not be the file's; the copy is a model of its own, whose kernels and panels
//! keep every exactness rule for what it computes.

use crate::error::{ModelError, Result};
use crate::model::Model;
use tf_core::DType;
use tf_weights::{GgufFile, GgufWriter};

/// Bits per weight above which a matrix is requantized (Q4_0 and Q4_K stay as they are).
const KEEP_BITS: f64 = 4.6;

/// Whether a tensor of `dtype` and `dims` (ggml order) is requantized.
fn narrows(dtype: DType, dims: &[usize]) -> bool {
    let bits = dtype.bytes_for(256).map_or(0.0, |b| b as f64 * 8.0 / 256.0);
    dims.len() == 2 && dims[0].is_multiple_of(32) && bits > KEEP_BITS && dtype != DType::F32
}

impl Model {
    /// This model with every 2-D tensor of more than 4.6 bits a weight (Q5_0, Q8_0, Q6_K,
    /// F16, ...) requantized to Q4_0, built in memory. GGUF models only.
    pub fn requantized_q4_0(&self) -> Result<Model> {
        let g = self.gguf().ok_or_else(|| ModelError::Config {
            source_path: self.path().display().to_string(),
            what: "only GGUF models can be requantized".into(),
        })?;
        let mut w = GgufWriter::new().alignment(g.alignment());
        for (k, v) in g.metadata() {
            w.meta(k, v.clone());
        }
        let infos = g.tensors().to_vec();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done: Vec<std::sync::Mutex<Option<Vec<u8>>>> =
            infos.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..threads.min(infos.len()).max(1) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(t) = infos.get(i) else { break };
                    if !narrows(t.dtype, &t.dims) {
                        continue;
                    }
                    let data = g.tensor_data(t).unwrap_or_default();
                    let q = tf_weights::requantize_q4_0(t.dtype, data, t.dims[0], t.dims[1]);
                    *done[i].lock().unwrap_or_else(|e| e.into_inner()) = q;
                });
            }
        });
        for (t, q) in infos.iter().zip(done) {
            let q = q.into_inner().unwrap_or_else(|e| e.into_inner());
            match q {
                Some(bytes) => w.tensor(&t.name, &t.dims, DType::Q4_0, bytes),
                None => {
                    let data = g.tensor_data(t).unwrap_or_default().to_vec();
                    w.tensor(&t.name, &t.dims, t.dtype, data);
                }
            }
        }
        let name = format!("{} (Q4_0)", self.path().display());
        let file = GgufFile::from_bytes(w.to_bytes(), &name)?;
        Model::from_gguf(file)
    }
}
