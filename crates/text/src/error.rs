//! The crate's one error type. Errors that come from a file name that file.

use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, TextError>;

#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A GGUF file lacks a tokenizer key that its tokenizer model needs.
    #[error("{}: tokenizer metadata key '{key}' is missing", path.display())]
    MissingKey { path: PathBuf, key: String },

    /// `tokenizer.ggml.model` names a tokenizer kind TensorFold does not implement.
    #[error(
        "{}: unsupported tokenizer model '{model}' (tokenizer.ggml.model; supported: gpt2, llama)",
        path.display()
    )]
    UnsupportedModel { path: PathBuf, model: String },

    /// `tokenizer.ggml.pre` names a pre-tokenizer TensorFold does not know.
    #[error(
        "{}: unsupported pre-tokenizer '{pre}' (tokenizer.ggml.pre; supported: {supported})",
        path.display()
    )]
    UnsupportedPreTokenizer {
        path: PathBuf,
        pre: String,
        supported: String,
    },

    /// Tokenizer data is present but inconsistent (lengths differ, a merge is malformed, ...).
    #[error("{}: invalid tokenizer data: {what}", path.display())]
    InvalidVocab { path: PathBuf, what: String },

    /// A GGUF metadata value has the wrong type (the message names file and key).
    #[error(transparent)]
    Weights(#[from] tf_weights::WeightsError),

    /// Reading a Hugging Face tokenizer directory failed.
    #[error("{}: {what}", path.display())]
    HfFile { path: PathBuf, what: String },

    /// The tokenization pipeline failed on some input.
    #[error("tokenizer: {0}")]
    Encode(String),

    /// A chat template failed to compile or to render (includes `raise_exception` messages).
    #[error("chat template: {0}")]
    Template(String),
}
