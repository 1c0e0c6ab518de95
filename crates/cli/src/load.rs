//! Finding, loading and describing a model: shared by every subcommand that needs one.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use tf_fetch::{ModelSpec, PullOptions};
use tf_kernels::ThreadPool;
use tf_models::Model;
use tf_text::Tokenizer;

use crate::GlobalArgs;

/// A loaded model and its tokenizer.
pub struct Loaded {
    pub model: std::sync::Arc<Model>,
    pub tokenizer: Tokenizer,
}

/// The spec to use when the user named none: the catalogue's default model.
pub fn spec_or_default(spec: Option<&str>) -> &str {
    spec.unwrap_or(tf_fetch::default_model().name)
}

/// The path of `spec`, fetched into the cache when missing (progress on stderr).
pub fn resolve(spec: &str, global: &GlobalArgs) -> Result<PathBuf> {
    if let Some(dir) = hf_dir(spec) {
        return Ok(dir);
    }
    let mut opts = PullOptions::new(global.cache_dir());
    opts.offline = global.offline;
    opts.progress = true;
    tf_fetch::resolve(spec, &opts).with_context(|| format!("cannot get model '{spec}'"))
}

/// The path of `spec` if it is already here (no network); an error that says how to get it
/// otherwise.
pub fn locate(spec: &str, global: &GlobalArgs) -> Result<PathBuf> {
    if let Some(dir) = hf_dir(spec) {
        return Ok(dir);
    }
    // Parsing first gives the precise message for a missing file or an unknown name.
    ModelSpec::parse(spec).with_context(|| format!("cannot find model '{spec}'"))?;
    let cache = global.cache_dir();
    tf_fetch::locate(spec, &cache).ok_or_else(|| {
        anyhow!(
            "model '{spec}' is not in the cache {} (or its cached copy is damaged); \
             fetch it with `tensorfold pull {spec}`",
            tf_fetch::models_dir(&cache).display()
        )
    })
}

/// `spec` as a Hugging Face model directory, when it names an existing directory (tf-fetch
/// specs name files only).
fn hf_dir(spec: &str) -> Option<PathBuf> {
    let path = Path::new(spec);
    path.is_dir().then(|| path.to_path_buf())
}

/// Loads the model at `path` (GGUF file or Hugging Face directory) and its tokenizer.
pub fn load(path: &Path) -> Result<Loaded> {
    let model =
        Model::load(path).with_context(|| format!("cannot load model {}", path.display()))?;
    let tokenizer = if let Some(gguf) = model.gguf() {
        Tokenizer::from_gguf(gguf)
    } else if let Some(hf) = model.hf() {
        Tokenizer::from_hf_dir(hf.dir())
    } else {
        return Err(anyhow!("{}: model has no tokenizer source", path.display()));
    }
    .with_context(|| format!("cannot load the tokenizer of {}", path.display()))?;
    Ok(Loaded {
        model: std::sync::Arc::new(model),
        tokenizer,
    })
}

/// What kind of tokenizer the model carries, for `info`.
pub fn tokenizer_kind(model: &Model) -> String {
    if let Some(gguf) = model.gguf() {
        match gguf.get_str("tokenizer.ggml.model") {
            Ok("gpt2") => "GGUF gpt2 (byte-level BPE)".to_string(),
            Ok("llama") => "GGUF llama (SentencePiece)".to_string(),
            Ok(other) => format!("GGUF {other}"),
            Err(_) => "GGUF (unknown)".to_string(),
        }
    } else {
        "Hugging Face tokenizer.json".to_string()
    }
}

/// The worker pool for `--threads` (default: one per available core).
pub fn thread_pool(global: &GlobalArgs) -> ThreadPool {
    match global.threads() {
        Some(n) => ThreadPool::new(n),
        None => ThreadPool::with_available_parallelism(),
    }
}

/// `bytes` in GiB, for tables.
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// `bytes` as a short human string (KiB/MiB/GiB).
pub fn human_bytes(bytes: u64) -> String {
    const K: f64 = 1024.0;
    let b = bytes as f64;
    if b >= K * K * K {
        format!("{:.2} GiB", b / (K * K * K))
    } else if b >= K * K {
        format!("{:.1} MiB", b / (K * K))
    } else if b >= K {
        format!("{:.1} KiB", b / K)
    } else {
        format!("{bytes} B")
    }
}
