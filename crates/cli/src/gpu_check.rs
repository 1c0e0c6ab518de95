//! `tensorfold gpu-check`: conformance of every GPU kernel against the CPU oracle, bit for bit,
//! at every requested row count (row invariance follows: each row equals the CPU's, which is
//! row-exact). Needs the `cuda` feature and a GPU.

use anyhow::Result;
use clap::Args;

use crate::GlobalArgs;

#[derive(Args, Debug)]
pub struct GpuCheckArgs {
    /// Row counts to run every op with (comma-separated, at most 512).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,3,4,5,7,8,9,15,16,17,31,32,33,63,64,65,200"
    )]
    pub rows: Vec<usize>,
    /// Seed of the random weights and activations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// Also check this model (a GGUF file) end to end: GPU logits against the CPU's, and the
    /// engine's exactness on the GPU.
    #[arg(long, value_name = "FILE")]
    pub model: Option<std::path::PathBuf>,
    /// Draft model (same vocabulary) for the engine checks of --model.
    #[arg(long, value_name = "FILE", requires = "model")]
    pub draft: Option<std::path::PathBuf>,
    /// With --model (a model with its tokenizer): also compare its replies on the GPU with the
    /// CPU's, the bench cells' requests and a 12-turn conversation.
    #[arg(long, requires = "model")]
    pub replies: bool,
    /// Skip the kernel conformance checks (with --model: only the model checks).
    #[arg(long)]
    pub skip_ops: bool,
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
    use anyhow::Context;
    let ops = if args.skip_ops {
        Ok(())
    } else {
        let rows = args.rows.clone();
        tf_cuda::conformance::run(&tf_cuda::conformance::Options {
            rows,
            seed: args.seed,
            gpu: args.gpu,
            cache: global.cache_dir().join("cuda"),
        })
        .map_err(anyhow::Error::from)
    };
    if let Some(model) = &args.model {
        let cache = global.cache_dir().join("cuda");
        let gpu = std::sync::Arc::new(
            tf_cuda::Gpu::open(args.gpu, Some(&cache), global.kv_type)
                .context("opening the GPU")?,
        );
        use tf_cuda::conformance::{model, tally};
        let mut tallies = model::checks(&gpu, model, args.draft.as_deref())?;
        if args.replies {
            let draft = args.draft.as_deref();
            tallies.extend(crate::gpu_check_replies::checks(model, draft, global)?);
        }
        let failed = tally::print(&tallies);
        if failed > 0 {
            anyhow::bail!("{failed} model checks failed");
        }
    }
    ops
}
