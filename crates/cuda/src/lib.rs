//! tf-cuda: TensorFold's CUDA backend.
//!
//! Kernels are CUDA C sources in `crates/cuda/kernels/` (embedded in the binary), compiled at
//! start-up with NVRTC for the GPU present and cached on disk ([`compile`]). The CUDA libraries
//! are loaded dynamically, so this crate builds on a machine without CUDA, and [`Gpu::open`]
//! returns an error (no panic) where no driver or GPU is found.
//!
//! Every kernel is row-exact and replays the CPU's integer sums and float chains
//! (`tf_kernels`), so its results equal the CPU's bit for bit ([`ops`]).

pub mod compile;
pub mod conformance;
pub mod gemv;
pub mod launch;
pub mod mma;
pub mod ops;
pub mod rowops;
pub mod runner;
pub mod sample;

pub use cudarc::driver::CudaSlice;
pub use runner::CudaRunner;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream};
use cudarc::nvrtc::Ptx;
use tf_core::DType;

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("CUDA is not available: {0}")]
    Unavailable(String),
    #[error("CUDA driver: {0}")]
    Driver(String),
    #[error("NVRTC compilation failed: {0}")]
    Compile(String),
    #[error("{0}")]
    Usage(String),
    /// A model or engine check could not run.
    #[error("{0}")]
    Check(String),
}

impl From<tf_models::ModelError> for CudaError {
    fn from(e: tf_models::ModelError) -> Self {
        CudaError::Check(e.to_string())
    }
}

impl From<tf_engine::EngineError> for CudaError {
    fn from(e: tf_engine::EngineError) -> Self {
        CudaError::Check(e.to_string())
    }
}

impl From<cudarc::driver::DriverError> for CudaError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        CudaError::Driver(format!("{e:?}"))
    }
}

pub type Result<T> = std::result::Result<T, CudaError>;

/// How the kernel program was obtained at start-up.
#[derive(Clone, Debug)]
pub struct ProgramInfo {
    pub cached: bool,
    pub millis: f64,
    pub bytes: usize,
    pub path: Option<std::path::PathBuf>,
}

/// One opened GPU with the kernel program loaded.
pub struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub module: Arc<CudaModule>,
    pub name: String,
    pub cc: (i32, i32),
    /// How the program's kernels store keys and values (f32 or bf16).
    pub kv: tf_kernels::kv::KvFormat,
    /// Shared memory one block may ask for (bytes, with the opt-in attribute).
    pub smem_optin: usize,
    /// Streaming multiprocessors.
    pub sms: usize,
    pub program: ProgramInfo,
    /// The quantized matmul kernel form (`TENSORFOLD_CUDA_MATMUL`).
    pub matmul_form: ops::MatmulForm,
    /// Q4_K and Q6_K matmuls on tensor cores (`TENSORFOLD_CUDA_MMA`, default on; `0` keeps
    /// the dp4a tile kernels for Q4_K and Q6_K in the GGUF layout).
    pub mma: bool,
    /// Attention in tiles of rows sharing each staged key chunk (`TENSORFOLD_CUDA_ATT_TILE`,
    /// default on; `0` keeps one block per row).
    pub att_tile: bool,
    /// Calls of up to this many rows of interleaved Q4_K / Q6_K weights take the few-row
    /// kernels (`matmul_gemv.cu`; `TENSORFOLD_CUDA_GEMV=N`, `0` for the tensor-core kernels).
    pub gemv_rows: usize,
    /// Wide and Q6_K calls of 4 rows on the tensor cores ([`gemv::GV_WIDE_N`];
    /// `TENSORFOLD_CUDA_GEMV_WIDE=0` turns it off).
    pub gemv_wide: bool,
    /// Split attention of up to this many rows takes `attention_few.cu` (one block per row
    /// and KV head, no work for absent heads; `TENSORFOLD_CUDA_ATT_FEW=N`, `0` for the tiles).
    pub att_few: usize,
    /// Forces the k split of the few-row tensor-core kernels (`TENSORFOLD_CUDA_MMA_S=N`, for
    /// measuring; `0` keeps the split of [`mma::MmaCfg::for_rows`]; unset: by shape,
    /// [`mma::MmaCfg::for_call`]).
    pub mma_split: Option<usize>,
    /// Forces the tensor-core configuration of calls over 64 rows (`TENSORFOLD_CUDA_MMA_MANY`
    /// = a staged suffix such as `st_2_4_2`, for measuring; which runs never changes a bit; the
    /// other forms read the activations' tensor-core copy, written for up to 64 rows).
    pub mma_many: Option<mma::MmaCfg>,
    /// Forces the tensor-core configuration of calls of up to 64 rows that the few-row form
    /// does not take, per type (`TENSORFOLD_CUDA_MMA_MID=q6k:1_1_1,q4k:2_1_1`, for measuring;
    /// which runs never changes a bit).
    pub mma_mid: Vec<(DType, mma::MmaCfg)>,
    /// The few-row tensor-core form on the calls [`mma::MmaCfg::few_for`] gives it
    /// (`TENSORFOLD_CUDA_MMA_FEW`, for measuring: `0` turns it off (`Some(None)`), a suffix
    /// such as `fws_2_8_1` puts that configuration there instead; unset: `None`).
    pub mma_few: Option<Option<mma::MmaCfg>>,
    /// Launches ask for programmatic dependent launch (`launch.rs`; sm_90 and newer,
    /// `TENSORFOLD_CUDA_PDL=0` turns it off).
    pub pdl: bool,
    functions: Mutex<HashMap<String, CudaFunction>>,
}

/// Runs `f`, turning a panic of cudarc's dynamic loader (library or symbol missing) into an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    match r {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            if msg.contains("Unable to dynamically load") {
                return Err(CudaError::Unavailable(format!(
                    "{what} was not found (no NVIDIA driver or CUDA library on this machine)"
                )));
            }
            Err(CudaError::Unavailable(format!("{what}: {msg}")))
        }
    }
}

impl Gpu {
    /// Opens GPU `ordinal` and loads the kernels, compiling them only when `cache_dir` holds no
    /// cubin for this source, these options and this GPU.
    /// Opens GPU `ordinal` with the kernel program for a KV cache in `kv` (f32 or bf16).
    pub fn open(
        ordinal: usize,
        cache_dir: Option<&Path>,
        kv: tf_kernels::kv::KvFormat,
    ) -> Result<Gpu> {
        if kv == tf_kernels::kv::KvFormat::Q8 {
            return Err(CudaError::Usage(
                "the CUDA backend stores keys and values as bf16 or f32, not q8_0 (--kv-type)"
                    .into(),
            ));
        }
        let ctx = guarded("libcuda", || {
            let n = CudaContext::device_count()?;
            if n <= ordinal as i32 {
                return Err(CudaError::Unavailable(format!(
                    "GPU {ordinal} asked for, {n} found"
                )));
            }
            Ok(CudaContext::new(ordinal)?)
        })?;
        let name = ctx.name()?;
        let cc = ctx.compute_capability()?;
        let smem_optin = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as usize;
        let sms = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as usize;
        let src = compile::program_source(kv);
        let compiled = guarded("libnvrtc", || compile::cubin(&src, &name, cc, cache_dir))?;
        let program = ProgramInfo {
            cached: compiled.cached,
            millis: compiled.millis,
            bytes: compiled.cubin.len(),
            path: compiled.path.clone(),
        };
        // One stream per GPU and no cross-stream event tracking: every launch and copy is
        // ordered on this stream, and a non-default stream can be captured into CUDA graphs.
        // SAFETY: nothing is allocated yet, and this crate never uses a second stream.
        unsafe { ctx.disable_event_tracking() };
        let module = ctx.load_module(Ptx::from_binary(compiled.cubin))?;
        let stream = ctx.new_stream()?;
        Ok(Gpu {
            ctx,
            stream,
            module,
            name,
            cc,
            kv,
            smem_optin,
            sms,
            program,
            matmul_form: ops::MatmulForm::from_env(),
            mma: !std::env::var("TENSORFOLD_CUDA_MMA").is_ok_and(|v| v == "0"),
            att_tile: !std::env::var("TENSORFOLD_CUDA_ATT_TILE").is_ok_and(|v| v == "0"),
            gemv_rows: std::env::var("TENSORFOLD_CUDA_GEMV")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(gemv::GV_DEFAULT_ROWS)
                .min(gemv::GV_MAX_ROWS),
            gemv_wide: !std::env::var("TENSORFOLD_CUDA_GEMV_WIDE").is_ok_and(|v| v == "0"),
            mma_split: std::env::var("TENSORFOLD_CUDA_MMA_S")
                .ok()
                .and_then(|v| v.parse().ok()),
            mma_many: std::env::var("TENSORFOLD_CUDA_MMA_MANY")
                .ok()
                .and_then(|v| mma::MMA_CFGS.iter().copied().find(|c| c.suffix() == v)),
            mma_mid: std::env::var("TENSORFOLD_CUDA_MMA_MID")
                .map(|v| mma::MmaCfg::parse_mid(&v))
                .unwrap_or_default(),
            mma_few: std::env::var("TENSORFOLD_CUDA_MMA_FEW").ok().map(|v| {
                mma::MMA_CFGS
                    .iter()
                    .copied()
                    .find(|c| c.h > 0 && c.suffix() == v)
            }),
            att_few: std::env::var("TENSORFOLD_CUDA_ATT_FEW")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(4),
            pdl: cc.0 >= 9 && !std::env::var("TENSORFOLD_CUDA_PDL").is_ok_and(|v| v == "0"),
            functions: Mutex::new(HashMap::new()),
        })
    }

    /// GPU time per call of `f` in microseconds: CUDA events around `n` back-to-back calls
    /// (no host synchronization in between, as in a replayed graph).
    pub fn time_calls(&self, n: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
        use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;
        let start = self.stream.record_event(Some(CU_EVENT_DEFAULT))?;
        for _ in 0..n {
            f()?;
        }
        let end = self.stream.record_event(Some(CU_EVENT_DEFAULT))?;
        let ms = start.elapsed_ms(&end)?;
        Ok(ms as f64 * 1e3 / n.max(1) as f64)
    }

    /// A kernel of the program by name (looked up once, then cached).
    pub fn function(&self, name: &str) -> Result<CudaFunction> {
        let mut cache = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = cache.get(name) {
            return Ok(f.clone());
        }
        let f = self.module.load_function(name)?;
        cache.insert(name.to_string(), f.clone());
        Ok(f)
    }

    /// A launch of `f` on this GPU's stream (`launch::Launch`).
    pub fn launcher<'a>(&'a self, f: &'a CudaFunction) -> launch::Launch<'a> {
        launch::Launch::new(&self.stream, f, self.pdl)
    }

    pub fn sync(&self) -> Result<()> {
        Ok(self.stream.synchronize()?)
    }
}

/// Compiles the kernel program for compute capability `cc` without a GPU (NVRTC alone): the
/// cubin's size, or `Ok(None)` where libnvrtc is not found.
pub fn compile_check(cc: (i32, i32), kv: tf_kernels::kv::KvFormat) -> Result<Option<usize>> {
    let src = compile::program_source(kv);
    match guarded("libnvrtc", || compile::compile(&src, &compile::options(cc))) {
        Ok(c) => Ok(Some(c.len())),
        Err(CudaError::Unavailable(_)) => Ok(None),
        Err(e) => Err(e),
    }
}
