use thiserror::Error;

#[derive(Debug, Error)]
pub enum ModelError {
    #[error("{source_path}: unsupported architecture '{arch}' (supported: {supported})")]
    UnsupportedArchitecture {
        source_path: String,
        arch: String,
        supported: String,
    },
    #[error("{source_path}: missing tensor '{name}'")]
    MissingTensor { source_path: String, name: String },
    #[error("{source_path}: tensor '{name}' has shape {found:?}, expected {expected:?}")]
    BadShape {
        source_path: String,
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("{source_path}: config: {what}")]
    Config { source_path: String, what: String },
    #[error("token id {token} is outside the vocabulary (size {vocab})")]
    InvalidToken { token: u32, vocab: usize },
    #[error("position {pos} is beyond the model's context of {context}")]
    PositionOutOfRange { pos: usize, context: usize },
    #[error(
        "sequence {seq}: no recurrent state for position {pos} (its earlier positions were \
         neither run nor kept)"
    )]
    StateUnavailable { seq: u64, pos: usize },
    #[error("the model has recurrent layers: run it with a state cache (Model::state_cache)")]
    NoStateCache,
    #[error("the model has no multi-token-prediction head")]
    NoMtp,
    #[error(transparent)]
    Weights(#[from] tf_weights::WeightsError),
}

pub type Result<T> = std::result::Result<T, ModelError>;
