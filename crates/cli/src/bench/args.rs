//! `tensorfold bench`'s arguments, and how a list of runs is printed: shared by the raw
//! benchmark (`bench.rs`), the drafting cells (`cells.rs`) and the server's (`url.rs`).

use clap::Args;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Model: a catalogue name, a GGUF file, a Hugging Face model directory, or
    /// owner/repo/file.gguf (default: the catalogue's default model).
    #[arg(value_name = "MODEL")]
    pub model: Option<String>,
    /// Prompt tokens of the prefill test (0 skips it).
    #[arg(long, value_name = "N", default_value_t = 512)]
    pub pp: usize,
    /// Tokens of the decode test (0 skips it).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub tg: usize,
    /// Measured repetitions of each test (after one warm-up run).
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub reps: u32,
    /// Raw model speed (prefill --pp and decode --tg, like llama-bench) instead of the engine
    /// cells.
    #[arg(long)]
    pub raw: bool,
    /// Engine cells: comma-separated of code-sampled, chat-sampled, code-greedy, chat-greedy,
    /// edit, or all.
    #[arg(long, default_value = "all")]
    pub cells: String,
    /// Reply lengths of the engine cells (ignore_eos), comma-separated.
    #[arg(long, default_value = "64,256")]
    pub tokens: String,
    /// Runs per cell and length, each with its own prompt and seed (after one warm-up).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=5))]
    pub runs: u32,
    /// Draft model: a model spec, or `none` (default: the catalogue's draft for the model).
    #[arg(long)]
    pub draft: Option<String>,
    /// Serve every request serially (the engine's --no-drafts).
    #[arg(long)]
    pub no_drafts: bool,
    /// Measure the engine cells on an OpenAI-compatible server at URL (streamed over HTTP)
    /// instead of in-process.
    #[arg(long, value_name = "URL", conflicts_with_all = ["model", "raw", "draft", "no_drafts"])]
    pub url: Option<String>,
    /// With --url: the requests' `model` (default: the first id of GET URL/v1/models).
    #[arg(long = "model", value_name = "NAME", requires = "url")]
    pub served_model: Option<String>,
    /// With --url: sent as `Authorization: Bearer KEY`.
    #[arg(long, value_name = "KEY", requires = "url")]
    pub api_key: Option<String>,
    /// With --raw: also time one forward of each of these row counts (a verify round) after a
    /// context of --verify-context tokens, against one row.
    #[arg(long, value_delimiter = ',', requires = "raw")]
    pub verify: Vec<usize>,
    /// Context before the timed verify rounds.
    #[arg(long, default_value_t = 512, requires = "raw")]
    pub verify_context: usize,
    /// With --raw: decode steps draw plain temperature samples at this temperature (as a
    /// request with only `temperature` set) instead of greedy tokens. On a GPU the draw is
    /// decided from a shortlist found on the device (`TENSORFOLD_CUDA_PICKS=0`: the logits come
    /// back and the host samples them).
    #[arg(long, requires = "raw")]
    pub temperature: Option<f32>,
    /// With --raw: measure the model the way the engine runs it as a draft model (on the CPU,
    /// requantized as --draft-quant says, its output head pruned to --draft-vocab ids).
    #[arg(long, requires = "raw")]
    pub as_draft: bool,
    /// Aggregate decode speed of this many concurrent streams, comma-separated (like
    /// llama-batched-bench's -npl), each reply checked against its solo run.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["raw", "url"])]
    pub streams: Vec<usize>,
    /// With --streams: prompt tokens of every stream.
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub stream_prompt: usize,
    /// With --streams: reply tokens of every stream.
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub stream_tokens: usize,
}

/// Runs' tok/s as printed in a table's runs column.
pub fn fmt_runs(runs: &[f64]) -> String {
    runs.iter()
        .map(|r| format!("{r:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}
