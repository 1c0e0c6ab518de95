//! `tensorfold`: the TensorFold command-line binary.
//!
//! Subcommands live one per module; errors travel as `anyhow` values and are printed, with their
//! whole context chain, only here.

mod alloc;
mod bench;
mod cells;
mod chat;
mod device;

mod gpu_check;
#[cfg(feature = "cuda")]
mod gpu_check_replies;
mod info;
mod lanes;
mod load;
mod memory;
mod models;
mod prompts;
mod pull;
mod run;

mod serve;
mod synth;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "tensorfold",
    version,
    about = "TensorFold: exact, fast LLM inference on the CPU",
    propagate_version = true
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Options every subcommand accepts (before or after the subcommand name).
#[derive(Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Model cache root (default: $TENSORFOLD_CACHE, else $XDG_CACHE_HOME/tensorfold, else
    /// ~/.cache/tensorfold).
    #[arg(
        long = "cache-dir",
        visible_alias = "cache",
        value_name = "DIR",
        global = true
    )]
    pub cache_dir: Option<PathBuf>,
    /// Worker threads for the forward pass (default: available parallelism).
    #[arg(long, value_name = "N", global = true, value_parser = clap::value_parser!(u32).range(1..=4096))]
    threads: Option<u32>,
    /// Use only local files and the cache: never download.
    #[arg(long, global = true)]
    pub offline: bool,
    /// Where the forward pass runs: the CPU, an NVIDIA GPU (binary built with the `cuda`
    /// feature), or the GPU when one is found.
    #[arg(long, value_enum, default_value = "cpu", global = true)]
    pub device: device::Device,
    /// Token ids a CPU draft model's output head keeps: the N lowest (byte-level BPE ids come
    /// roughly by frequency) and the control tokens; 0 keeps all. Only speed changes: the
    /// replies are the target's draws whatever the draft guesses.
    #[arg(long, value_name = "N", default_value_t = 65536, global = true)]
    pub draft_vocab: usize,
    /// A CPU draft model's weights: `q4_0` requantizes its wider matrices (Q5_0, Q8_0, Q6_K,
    /// F16...) to Q4_0 in memory at load, so each guess reads fewer bytes; `keep` uses the
    /// file's. Only speed changes.
    #[arg(long, value_enum, default_value = "q4-0", global = true)]
    pub draft_quant: DraftQuant,
    /// Tokens of a long prompt the draft model runs: its first block and about its last N
    /// (the draft guesses from those alone); 0 runs every token. Only speed changes.
    #[arg(long, value_name = "N", default_value_t = tf_engine::proposer::DEFAULT_WINDOW, global = true)]
    pub draft_window: usize,
    /// Draft with the model's own multi-token-prediction head where its file has one (Qwen3.5,
    /// Qwen3-Next GGUF conversions), weighed by the cost model like any drafter; `off` never
    /// runs it. Only speed changes.
    #[arg(long, value_enum, default_value = "on", global = true)]
    pub mtp: Switch,
    /// How the KV cache stores keys and values: `bf16` (2 bytes a value), `q8_0` (1 byte, and
    /// a scale per 32 values) or `f32` (4 bytes). Every format gives exact replies (drafted ==
    /// serial, resumed == fresh); replies in different formats may differ.
    #[arg(long = "kv-type", value_name = "TYPE", default_value = "bf16", global = true,
          value_parser = parse_kv_type)]
    pub kv_type: tf_kernels::kv::KvFormat,
}

fn parse_kv_type(s: &str) -> Result<tf_kernels::kv::KvFormat, String> {
    tf_kernels::kv::KvFormat::parse(s)
        .ok_or_else(|| format!("unknown KV type '{s}': use bf16, q8_0 or f32"))
}

/// On or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// What a CPU draft model's weights become at load (`--draft-quant`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DraftQuant {
    /// The file's types.
    Keep,
    /// Matrices of more than 4.6 bits a weight requantized to Q4_0.
    #[value(name = "q4-0", alias = "q4_0")]
    Q4_0,
}

impl GlobalArgs {
    pub fn cache_dir(&self) -> PathBuf {
        tf_fetch::cache_dir(self.cache_dir.as_deref())
    }

    pub fn threads(&self) -> Option<usize> {
        self.threads.map(|n| n as usize)
    }

    /// Ids a CPU draft model's head keeps (`--draft-vocab`, 0 = all).
    pub fn draft_keep(&self) -> usize {
        match self.draft_vocab {
            0 => usize::MAX,
            n => n,
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate text: a raw completion (--prompt), one chat turn (--chat --prompt) or an
    /// interactive chat (--chat).
    Run(run::RunArgs),
    /// Show a model's architecture, sizes and memory needs (does not download).
    Info(info::InfoArgs),
    /// List the built-in model catalogue.
    Models,
    /// Download a model into the cache (if needed) and print its path.
    Pull(pull::PullArgs),
    /// Serve the model over HTTP: OpenAI chat/completions/responses (SSE and WebSocket) and
    /// Anthropic messages.
    Serve(serve::ServeArgs),
    /// Measure the drafting engine on the code/chat/edit cells (drafted vs serial, exactness
    /// checked), or raw prefill/decode speed with --raw.
    Bench(bench::BenchArgs),
    /// Write a model with a real model's shapes and tensor types and random weights.
    Synth(synth::SynthArgs),
    /// Check every GPU kernel against the CPU, bit for bit (needs the `cuda` feature).
    GpuCheck(gpu_check::GpuCheckArgs),
}

fn main() -> ExitCode {
    alloc::keep_large_blocks();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Run(args) => run::run(args, &cli.global),
        Command::Info(args) => info::run(args, &cli.global),
        Command::Models => models::run(&cli.global),
        Command::Pull(args) => pull::run(args, &cli.global),
        Command::Bench(args) => bench::run(args, &cli.global),
        Command::Serve(args) => serve::run(args, &cli.global),
        Command::Synth(args) => synth::run(args, &cli.global),
        Command::GpuCheck(args) => gpu_check::run(args, &cli.global),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            let _ = std::io::stdout().flush();
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// A closed stdout (`tensorfold run ... | head`) is the reader's choice, not a failure.
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
