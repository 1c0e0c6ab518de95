//! `--device cpu|cuda|auto`: where the forward pass runs. The CPU is the default; `cuda` needs a
//! binary built with the `cuda` feature and a GPU; `auto` takes the GPU when there is one.

use std::sync::Arc;

#[cfg(feature = "cuda")]
use anyhow::Context;
use anyhow::Result;
use tf_engine::{ModelRunner, Runner};
use tf_kernels::kv::KvFormat;
use tf_kernels::ThreadPool;
use tf_models::Model;

use crate::GlobalArgs;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    #[default]
    Cpu,
    Cuda,
    Auto,
}

/// The backend a command runs on, opened once, and the format of its runners' KV caches.
pub enum Backend {
    Cpu(KvFormat),
    #[cfg(feature = "cuda")]
    Cuda(Arc<tf_cuda::Gpu>, KvFormat),
}

impl Backend {
    pub fn open(global: &GlobalArgs) -> Result<Backend> {
        let kv = global.kv_type;
        match global.device {
            Device::Cpu => Ok(Backend::Cpu(kv)),
            #[cfg(feature = "cuda")]
            Device::Cuda | Device::Auto => {
                let cache = global.cache_dir().join("cuda");
                match tf_cuda::Gpu::open(0, Some(&cache), kv) {
                    Ok(gpu) => {
                        eprintln!(
                            "device: {} (sm_{}{}), kernels {}",
                            gpu.name,
                            gpu.cc.0,
                            gpu.cc.1,
                            if gpu.program.cached {
                                "from the cache".to_string()
                            } else {
                                format!("compiled in {:.1} s", gpu.program.millis / 1000.0)
                            }
                        );
                        Ok(Backend::Cuda(Arc::new(gpu), kv))
                    }
                    Err(e) if global.device == Device::Auto => {
                        eprintln!("device: CPU (no usable GPU: {e})");
                        Ok(Backend::Cpu(kv))
                    }
                    Err(e) => Err(e).context("--device cuda: opening the GPU"),
                }
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda => anyhow::bail!(
                "--device cuda: this tensorfold was built without CUDA support; rebuild with \
                 `cargo build --release -p tensorfold --features cuda`"
            ),
            #[cfg(not(feature = "cuda"))]
            Device::Auto => Ok(Backend::Cpu(kv)),
        }
    }

    pub fn name(&self) -> String {
        match self {
            Backend::Cpu(_) => "cpu".into(),
            #[cfg(feature = "cuda")]
            Backend::Cuda(g, _) => format!("cuda ({})", g.name),
        }
    }

    pub fn is_gpu(&self) -> bool {
        !matches!(self, Backend::Cpu(_))
    }

    /// How this backend's runners store keys and values (`--kv-type`).
    pub fn kv_format(&self) -> KvFormat {
        match self {
            Backend::Cpu(kv) => *kv,
            #[cfg(feature = "cuda")]
            Backend::Cuda(_, kv) => *kv,
        }
    }

    /// A draft model's weights as this backend runs them: on the CPU requantized to Q4_0 when
    /// `--draft-quant` says so (its guesses only change speed), elsewhere as loaded.
    pub fn draft_weights(&self, model: Arc<Model>, global: &GlobalArgs) -> Result<Arc<Model>> {
        if global.draft_quant == crate::DraftQuant::Q4_0 && !self.is_gpu() {
            return Ok(Arc::new(model.requantized_q4_0()?));
        }
        Ok(model)
    }

    /// A runner for `model` with a cache of `kv_positions` positions, calls of up to
    /// `max_rows` rows at once on a GPU.
    pub fn runner(
        &self,
        model: &Arc<Model>,
        pool: &Arc<ThreadPool>,
        kv_positions: usize,
        context: usize,
        max_rows: usize,
    ) -> Result<Box<dyn Runner>> {
        self.runner_with_head(model, pool, (kv_positions, context, max_rows), None)
    }

    /// [`runner`](Backend::runner) of a draft model whose output head keeps its `keep` most
    /// frequent ids on the CPU ([`Model::pruned_head`]); a GPU reads the whole head anyway.
    pub fn draft_runner(
        &self,
        model: &Arc<Model>,
        pool: &Arc<ThreadPool>,
        sizes: (usize, usize, usize),
        keep: usize,
    ) -> Result<Box<dyn Runner>> {
        self.runner_with_head(model, pool, sizes, Some(keep))
    }

    fn runner_with_head(
        &self,
        model: &Arc<Model>,
        pool: &Arc<ThreadPool>,
        (kv_positions, context, max_rows): (usize, usize, usize),
        keep: Option<usize>,
    ) -> Result<Box<dyn Runner>> {
        let _ = max_rows;
        match self {
            Backend::Cpu(kv) => {
                kv.check(model.config.head_dim)
                    .map_err(|e| anyhow::anyhow!("--kv-type: {e}"))?;
                let r = ModelRunner::with_format(
                    model.clone(),
                    pool.clone(),
                    kv_positions,
                    context,
                    *kv,
                );
                Ok(Box::new(match keep {
                    Some(keep) => r.with_head(model.pruned_head(keep)),
                    None => r,
                }))
            }
            #[cfg(feature = "cuda")]
            Backend::Cuda(gpu, kv) => {
                let r = tf_cuda::CudaRunner::new(
                    gpu.clone(),
                    model.clone(),
                    kv_positions,
                    context,
                    max_rows,
                    *kv,
                )
                .with_context(|| format!("loading {} onto the GPU", model.path().display()))?;
                Ok(Box::new(r))
            }
        }
    }
}
