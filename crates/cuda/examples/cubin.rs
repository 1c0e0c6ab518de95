//! Compiles the kernel program with NVRTC for sm_90 (as the H200 runs it) and writes the cubin,
//! for reading its SASS without a GPU (`scripts/sass-loops`).
//!
//! Usage: cubin OUT.cubin [NAME=VALUE ...]   (each pair becomes a -D define)

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(out) = args.next() else {
        eprintln!("usage: cubin OUT.cubin [NAME=VALUE ...]");
        std::process::exit(2);
    };
    let src = tf_cuda::compile::program_source(tf_kernels::kv::KvFormat::default());
    let mut opts = tf_cuda::compile::options((9, 0));
    opts.extend(args.map(|d| format!("-D{d}")));
    match tf_cuda::compile::compile(&src, &opts) {
        Ok(cubin) => {
            if let Err(e) = std::fs::write(&out, cubin) {
                eprintln!("cubin: cannot write {out}: {e}");
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("cubin: {e}");
            std::process::exit(1);
        }
    }
}
