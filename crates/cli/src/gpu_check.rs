//! `tensorfold gpu-check`: conformance of every GPU kernel against the CPU oracle, bit for bit,
//! at every requested row count (row invariance follows: each row equals the CPU's, which is
//! row-exact). Needs the `cuda` feature and a GPU.

use anyhow::Result;
use clap::Args;

use crate::GlobalArgs;

#[derive(Args, Debug)]
pub struct GpuCheckArgs {
    /// Row counts to run every op with (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,3,4,5,7,8,9,15,16,17,31,32,33,63,64"
    )]
    pub rows: Vec<usize>,
    /// Seed of the random weights and activations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
}

#[cfg(not(feature = "cuda"))]
pub fn run(_args: &GpuCheckArgs, _global: &GlobalArgs) -> Result<()> {
    anyhow::bail!(
        "this tensorfold was built without CUDA support: rebuild with \
         `cargo build --release -p tensorfold --features cuda`"
    )
}

#[cfg(feature = "cuda")]
pub fn run(args: &GpuCheckArgs, global: &GlobalArgs) -> Result<()> {
    crate::gpu_check_ops::run(args, global)
}
