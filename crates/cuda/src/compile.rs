//! NVRTC compilation of the kernel sources to a cubin for the GPU present, cached on disk.
//!
//! cudarc's safe NVRTC wrapper returns PTX only; a cubin takes the raw calls
//! `nvrtcGetCUBINSize` / `nvrtcGetCUBIN`. The cache key is SHA-256 over the source, the options
//! and the GPU (name and compute capability), so a second start compiles nothing.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use cudarc::nvrtc::{result, sys};
use sha2::{Digest, Sha256};

use crate::CudaError;

/// The kernel sources, concatenated in this order into one program.
pub const SOURCES: &[(&str, &str)] = &[
    ("prelude.cu", include_str!("../kernels/prelude.cu")),
    ("actq.cu", include_str!("../kernels/actq.cu")),
    ("matmul_q.cu", include_str!("../kernels/matmul_q.cu")),
    ("matmul_t.cu", include_str!("../kernels/matmul_t.cu")),
    ("matmul_mma.cu", include_str!("../kernels/matmul_mma.cu")),
    (
        "matmul_mma_few.cu",
        include_str!("../kernels/matmul_mma_few.cu"),
    ),
    ("matmul_gemv.cu", include_str!("../kernels/matmul_gemv.cu")),
    ("matmul_f.cu", include_str!("../kernels/matmul_f.cu")),
    ("rmsnorm.cu", include_str!("../kernels/rmsnorm.cu")),
    ("glu.cu", include_str!("../kernels/glu.cu")),
    ("deltanet.cu", include_str!("../kernels/deltanet.cu")),
    ("rope.cu", include_str!("../kernels/rope.cu")),
    ("attention.cu", include_str!("../kernels/attention.cu")),
    (
        "attention_tile.cu",
        include_str!("../kernels/attention_tile.cu"),
    ),
    (
        "attention_few.cu",
        include_str!("../kernels/attention_few.cu"),
    ),
    ("rows.cu", include_str!("../kernels/rows.cu")),
    ("sample.cu", include_str!("../kernels/sample.cu")),
    ("fused.cu", include_str!("../kernels/fused.cu")),
];

/// The whole program text, for a KV cache in `kv` (f32 or bf16: `kv_t` in `prelude.cu`).
pub fn program_source(kv: tf_kernels::kv::KvFormat) -> String {
    let mut s = String::new();
    if kv == tf_kernels::kv::KvFormat::Bf16 {
        s.push_str("#define KV_BF16\n");
    }
    for (name, text) in SOURCES {
        s.push_str(&format!("// ---- {name}\n"));
        s.push_str(text);
        s.push('\n');
    }
    s
}

/// NVRTC options for compute capability `(major, minor)`. `--fmad=false` keeps every multiply
/// and add separate, as the CPU's float chains are defined.
pub fn options(cc: (i32, i32)) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture=sm_{}{}", cc.0, cc.1),
        "--fmad=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--ftz=false".into(),
        "--std=c++17".into(),
    ];
    // Kernel compile options under test (`TENSORFOLD_CUDA_DEFINES="NAME NAME=VALUE ..."`, such
    // as `MMA_MINB1=16`, the blocks per multiprocessor asked of `matmul_mma.cu`'s one-warp,
    // one-tile kernel): each a macro that changes how a kernel runs, never what it computes.
    if let Ok(v) = std::env::var("TENSORFOLD_CUDA_DEFINES") {
        o.extend(v.split_whitespace().map(|d| format!("-D{d}")));
    }
    o
}

/// Hex SHA-256 of source, options and GPU identity.
pub fn cache_key(src: &str, opts: &[String], gpu: &str, cc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(src.as_bytes());
    h.update([0]);
    for o in opts {
        h.update(o.as_bytes());
        h.update([0]);
    }
    h.update(gpu.as_bytes());
    h.update([0]);
    h.update(format!("sm_{}{}", cc.0, cc.1).as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Where a compiled program and how it was obtained.
pub struct Compiled {
    pub cubin: Vec<u8>,
    pub path: Option<PathBuf>,
    /// True when read from the cache (nothing compiled).
    pub cached: bool,
    pub millis: f64,
}

/// The cubin for `src`, from `cache_dir` when present there, else compiled (and stored there).
pub fn cubin(
    src: &str,
    gpu: &str,
    cc: (i32, i32),
    cache_dir: Option<&Path>,
) -> Result<Compiled, CudaError> {
    let start = std::time::Instant::now();
    let opts = options(cc);
    let key = cache_key(src, &opts, gpu, cc);
    let path = cache_dir.map(|d| d.join(format!("{key}.cubin")));
    if let Some(p) = &path {
        if let Ok(cubin) = std::fs::read(p) {
            return Ok(Compiled {
                cubin,
                path: path.clone(),
                cached: true,
                millis: start.elapsed().as_secs_f64() * 1e3,
            });
        }
    }
    let cubin = compile(src, &opts)?;
    if let Some(p) = &path {
        // A cache that cannot be written costs a compile next time, nothing more.
        let _ = store(p, &cubin);
    }
    Ok(Compiled {
        cubin,
        path,
        cached: false,
        millis: start.elapsed().as_secs_f64() * 1e3,
    })
}

fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Compiles `src` with NVRTC and returns the cubin (needs only libnvrtc, no GPU).
pub fn compile(src: &str, opts: &[String]) -> Result<Vec<u8>, CudaError> {
    let c_src = CString::new(src).map_err(|_| CudaError::Compile("NUL in source".into()))?;
    let name = c"tensorfold.cu";
    let prog = result::create_program(&c_src, Some(name))
        .map_err(|e| CudaError::Compile(format!("nvrtcCreateProgram: {e:?}")))?;
    // SAFETY: `prog` was created above and is destroyed once, below.
    let out = unsafe {
        let compiled = result::compile_program(prog, opts);
        let log = result::get_program_log(prog)
            .map(|l| {
                let bytes: Vec<u8> = l.iter().map(|c| *c as u8).take_while(|c| *c != 0).collect();
                String::from_utf8_lossy(&bytes).into_owned()
            })
            .unwrap_or_default();
        match compiled {
            Err(e) => Err(CudaError::Compile(format!("{e:?}\n{log}"))),
            Ok(()) => {
                let mut size = 0usize;
                let r = sys::nvrtcGetCUBINSize(prog, &mut size);
                if r != sys::nvrtcResult::NVRTC_SUCCESS || size == 0 {
                    Err(CudaError::Compile(format!(
                        "nvrtcGetCUBINSize: {r:?} (size {size}); options {opts:?}"
                    )))
                } else {
                    let mut buf = vec![0u8; size];
                    let r = sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut std::ffi::c_char);
                    if r != sys::nvrtcResult::NVRTC_SUCCESS {
                        Err(CudaError::Compile(format!("nvrtcGetCUBIN: {r:?}")))
                    } else {
                        Ok(buf)
                    }
                }
            }
        }
    };
    // SAFETY: created above, not destroyed before.
    let _ = unsafe { result::destroy_program(prog) };
    out
}
