//! The crate's one error type. Every variant that comes from a file names that file.

use std::path::PathBuf;

use tf_core::DType;

pub type Result<T> = std::result::Result<T, WeightsError>;

#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{}: not a GGUF file (magic {found:02x?}, expected \"GGUF\")", path.display())]
    BadMagic { path: PathBuf, found: [u8; 4] },

    #[error("{}: unsupported GGUF version {version} (only 2 and 3 are read)", path.display())]
    UnsupportedVersion { path: PathBuf, version: u32 },

    #[error("{}: truncated while reading {what} at byte offset {offset}", path.display())]
    Truncated {
        path: PathBuf,
        what: String,
        offset: u64,
    },

    #[error("{}: corrupt: {what}", path.display())]
    Corrupt { path: PathBuf, what: String },

    #[error("{}: tensor '{tensor}' has {type_name}, which is not supported", path.display())]
    UnsupportedTensorType {
        path: PathBuf,
        tensor: String,
        type_id: u32,
        type_name: String,
    },

    #[error(
        "{}: tensor '{tensor}' data [{offset}, {offset} + {size}) lies outside the file ({file_size} bytes)",
        path.display()
    )]
    TensorOutOfBounds {
        path: PathBuf,
        tensor: String,
        offset: u64,
        size: u64,
        file_size: u64,
    },

    #[error("{}: metadata key '{key}' is missing", path.display())]
    MissingKey { path: PathBuf, key: String },

    #[error("{}: metadata key '{key}' should be {expected} but is {found}", path.display())]
    WrongType {
        path: PathBuf,
        key: String,
        expected: &'static str,
        found: &'static str,
    },

    #[error("{}: safetensors: {what}", path.display())]
    Safetensors { path: PathBuf, what: String },

    /// Raw bytes handed to `dequantize` do not match the value count. No file is involved here:
    /// callers that know the tensor (e.g. [`crate::TensorView::to_f32`]) name it in `context`.
    #[error("{context}: {dtype} data of {data_bytes} bytes does not hold {n_elems} values (expected {expected})")]
    DataLength {
        context: String,
        dtype: DType,
        n_elems: usize,
        data_bytes: usize,
        expected: String,
    },
}

impl WeightsError {
    pub(crate) fn corrupt(path: &std::path::Path, what: impl Into<String>) -> Self {
        WeightsError::Corrupt {
            path: path.to_path_buf(),
            what: what.into(),
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        WeightsError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn safetensors(path: &std::path::Path, what: impl Into<String>) -> Self {
        WeightsError::Safetensors {
            path: path.to_path_buf(),
            what: what.into(),
        }
    }
}

impl WeightsError {
    /// Names the tensor in a [`WeightsError::DataLength`]; other variants already name their file.
    pub(crate) fn in_context(self, what: &str) -> Self {
        match self {
            WeightsError::DataLength {
                dtype,
                n_elems,
                data_bytes,
                expected,
                ..
            } => WeightsError::DataLength {
                context: format!("tensor '{what}'"),
                dtype,
                n_elems,
                data_bytes,
                expected,
            },
            other => other,
        }
    }
}
