//! The fuzz targets: one file each.

pub mod gguf;
pub mod requests;
pub mod safetensors;
pub mod template;
pub mod tokenizer;

use std::path::PathBuf;

/// The tiny family checkpoints under `crates/models/tests/fixtures/families/` (GGUF files and
/// Hugging Face folders), the fuzzers' model seeds.
pub fn family_fixtures() -> PathBuf {
    crate::repo_dir().join("crates/models/tests/fixtures/families")
}

/// A real model file of the test cache (`$TENSORFOLD_CACHE/models`, else
/// `~/.cache/tensorfold/models`), fetched by `scripts/fetch-test-models`.
pub fn cached_model(file: &str) -> anyhow::Result<PathBuf> {
    let root = match std::env::var_os("TENSORFOLD_CACHE").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/tensorfold")
        }
    };
    let path = root.join("models").join(file);
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: run scripts/fetch-test-models (or set TENSORFOLD_CACHE)",
        path.display()
    );
    Ok(path)
}
