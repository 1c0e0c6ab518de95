use thiserror::Error;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Model(#[from] tf_models::ModelError),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("the prompt ({prompt} tokens) and max_tokens ({max_tokens}) exceed the context of {context} tokens")]
    ContextExceeded {
        prompt: usize,
        max_tokens: usize,
        context: usize,
    },
    #[error("the server is busy: {waiting} requests are waiting for room; retry shortly")]
    QueueFull { waiting: usize },
    /// A compute backend (e.g. the GPU) failed.
    #[error("backend: {0}")]
    Backend(String),
    #[error("the engine has stopped")]
    Stopped,
}
