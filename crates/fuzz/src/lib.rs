//! tf-fuzz: mutation fuzzing of everything that reads untrusted input, under stable Rust (no
//! libFuzzer): the GGUF and safetensors readers with the model loader behind them, the request
//! handling of all four APIs (through the real router, to the engine), the chat-template
//! renderer and the tokenizers.
//!
//! Each [`Target`] turns one input (bytes) into a verdict: `Ok` whatever the input was refused
//! with, as long as it was refused cleanly; `Err` for a finding that does not panic (a 5xx, an
//! error body that is not the API's JSON, a round trip that loses text). Panics, aborts and
//! hangs are caught by the driver (`src/main.rs`), which runs the target in a child process.
//! Inputs come from seeds (the repository's fixtures and built-in bodies) through
//! [`mutate::Mutator`]. Every finding is kept under `crates/fuzz/crashes/TARGET/` and replayed
//! by the tests, so once fixed it stays fixed.

pub mod mutate;
pub mod targets;

use std::path::{Path, PathBuf};

/// The crate's folder (seeds and crashes are found from it).
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The repository's root.
pub fn repo_dir() -> PathBuf {
    crate_dir().join("../..")
}

/// Kept findings of `target`, replayed by the tests.
pub fn crashes_dir(target: &str) -> PathBuf {
    crate_dir().join("crashes").join(target)
}

/// Every file directly in `dir` (sorted; none if it does not exist).
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// One fuzzed component.
pub trait Target {
    fn name(&self) -> &'static str;
    /// Valid inputs to start from.
    fn seeds(&self) -> Vec<Vec<u8>>;
    /// A new input from `input` (and `other`, another corpus entry, for splicing).
    fn mutate(&self, m: &mut mutate::Mutator, input: &[u8], other: &[u8]) -> Vec<u8> {
        m.bytes(input, other)
    }
    /// Runs one input: `Err` describes a finding that is not a panic.
    fn run(&self, input: &[u8]) -> Result<(), String>;
}

/// The targets' names.
pub const NAMES: [&str; 5] = ["gguf", "safetensors", "template", "tokenizer", "requests"];

/// The target called `name` (loading what it needs: fixtures, a real model for the server).
pub fn target(name: &str) -> anyhow::Result<Box<dyn Target>> {
    Ok(match name {
        "gguf" => Box::new(targets::gguf::Gguf),
        "safetensors" => Box::new(targets::safetensors::Safetensors::new()?),
        "template" => Box::new(targets::template::Template::new()?),
        "tokenizer" => Box::new(targets::tokenizer::Tokenizers::new()?),
        "requests" => Box::new(targets::requests::Requests::new()?),
        _ => anyhow::bail!(
            "unknown target '{name}' (one of {}, or all)",
            NAMES.join(", ")
        ),
    })
}
