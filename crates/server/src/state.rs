//! What every handler shares: the configuration, the loaded model (absent while loading), the
//! metrics and the stored responses.

use std::sync::{Arc, OnceLock};

use tf_engine::EngineHandle;
use tf_text::{ChatTemplate, Tokenizer};

use crate::error::{ApiError, ApiResult};
use crate::metrics::Metrics;
use crate::store::ResponseStore;

/// Sampling defaults set on the command line; a request's own fields win.
#[derive(Clone, Debug, Default)]
pub struct SamplingDefaults {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The id `/v1/models` lists and replies carry.
    pub model_id: String,
    /// Further names a request's `model` may use.
    pub aliases: Vec<String>,
    /// Cap on an omitted `max_tokens` (besides the room left in the context).
    pub max_tokens: Option<usize>,
    pub defaults: SamplingDefaults,
    pub api_key: Option<String>,
    /// Largest accepted request body.
    pub body_limit_bytes: usize,
    /// Stored responses: at most this many, and this many bytes.
    pub store_max_count: usize,
    pub store_max_bytes: usize,
    /// A connection that has not sent a request's whole header this long after it opened
    /// (or after its last request) is closed.
    pub header_timeout: std::time::Duration,
    /// A request body not received whole in this time gets a 408.
    pub body_timeout: std::time::Duration,
    /// Open connections at most; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Serve `/dashboard` (the page; `/stats` is always there).
    pub dashboard: bool,
    /// One stderr line per HTTP request and per WebSocket `response.create` (`access.rs`).
    pub access_log: bool,
}

impl ServerConfig {
    pub fn new(model_id: impl Into<String>) -> ServerConfig {
        ServerConfig {
            model_id: model_id.into(),
            aliases: Vec::new(),
            max_tokens: None,
            defaults: SamplingDefaults::default(),
            api_key: None,
            body_limit_bytes: 32 << 20,
            store_max_count: 1000,
            store_max_bytes: 64 << 20,
            header_timeout: std::time::Duration::from_secs(30),
            body_timeout: std::time::Duration::from_secs(60),
            max_connections: 1024,
            dashboard: true,
            access_log: false,
        }
    }

    /// Every name this server answers to.
    pub fn model_names(&self) -> Vec<String> {
        std::iter::once(self.model_id.clone())
            .chain(self.aliases.iter().cloned())
            .collect()
    }
}

/// How the model writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name": .., "arguments": ..}</tool_call>` (Qwen, Hermes).
    Tagged,
    /// The whole reply is `{"name": .., "parameters": ..}` (Llama 3).
    BareJson,
    /// The harmony format (gpt-oss): reasoning, answer and calls in channels, each message
    /// between control tokens (which the reply's text then keeps, for the parser).
    Harmony,
}

/// The loaded model: what requests run on.
pub struct Backend {
    pub engine: EngineHandle,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
    pub context: usize,
    pub total_blocks: usize,
    pub tool_format: ToolFormat,
    /// Whether the engine drafts at all (`--no-drafts` turns it off).
    pub drafts: bool,
    /// The structured-output compiler for this vocabulary, built on first use.
    grammar: OnceLock<Result<Arc<tf_grammar::Vocabulary>, String>>,
}

impl Backend {
    /// The backend of an engine serving a model with `tokenizer`: its chat template (if the
    /// model has one) compiled, and the tool-call format that template teaches.
    pub fn new(
        engine: EngineHandle,
        tokenizer: Tokenizer,
        context: usize,
        total_blocks: usize,
        drafts: bool,
    ) -> tf_text::Result<Backend> {
        let source = tokenizer.chat_template().unwrap_or("");
        let template = match tokenizer.chat_template() {
            Some(s) => Some(ChatTemplate::new(
                s,
                tokenizer.bos_token_text(),
                tokenizer.eos_token_text(),
            )?),
            None => None,
        };
        let tool_format = crate::tool_format_of(source);
        Ok(Backend {
            engine,
            tokenizer,
            template,
            context,
            total_blocks,
            tool_format,
            drafts,
            grammar: OnceLock::new(),
        })
    }

    /// The structured-output compiler for this model's vocabulary (built by the first request
    /// that asks: a fraction of a second for a large vocabulary; run it off the async workers).
    pub fn grammar_vocabulary(&self) -> Result<Arc<tf_grammar::Vocabulary>, String> {
        self.grammar
            .get_or_init(|| {
                tf_grammar::Vocabulary::new(&self.tokenizer)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }
}

pub struct AppState {
    pub config: ServerConfig,
    backend: OnceLock<Arc<Backend>>,
    pub metrics: Metrics,
    pub store: ResponseStore,
    /// The engine's load once a second (`routes::dashboard::sample`), for `/stats`.
    pub series: crate::routes::dashboard::Series,
}

pub type SharedState = Arc<AppState>;

impl AppState {
    pub fn new(config: ServerConfig) -> SharedState {
        let store = ResponseStore::new(config.store_max_count, config.store_max_bytes);
        Arc::new(AppState {
            config,
            backend: OnceLock::new(),
            metrics: Metrics::default(),
            store,
            series: Default::default(),
        })
    }

    /// Makes the server ready (once).
    pub fn set_backend(&self, backend: Backend) {
        let _ = self.backend.set(Arc::new(backend));
    }

    pub fn backend(&self) -> ApiResult<Arc<Backend>> {
        self.backend
            .get()
            .cloned()
            .ok_or_else(|| ApiError::unavailable("the model is still loading; retry shortly"))
    }

    pub fn is_ready(&self) -> bool {
        self.backend.get().is_some()
    }

    /// Checks a request's `model` field (absent = the served model).
    pub fn check_model(&self, model: Option<&str>) -> ApiResult<()> {
        match model {
            None => Ok(()),
            Some(m) if m == self.config.model_id || self.config.aliases.iter().any(|a| a == m) => {
                Ok(())
            }
            Some(m) => Err(ApiError::model_not_found(m, &self.config.model_names())),
        }
    }
}
