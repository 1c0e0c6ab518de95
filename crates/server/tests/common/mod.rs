//! What both test binaries share: the real models from the model cache, loaded once per binary,
//! and `tf_server` states over engines that run them.
//!
//! The models are never committed: `scripts/fetch-test-models` puts them in
//! `$TENSORFOLD_CACHE/models` (default `~/.cache/tensorfold/models`). A missing file fails.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use tf_engine::cost::CostModel;
use tf_engine::{Engine, EngineConfig, EngineHandle, ModelRunner};
use tf_kernels::ThreadPool;
use tf_models::Model;
use tf_server::{AppState, Backend, ServerConfig, SharedState};
use tf_text::Tokenizer;

/// Qwen chat template with tools: most tests run on it.
pub const QWEN: &str = "qwen2.5-coder-0.5b-instruct.gguf";
pub const SMOLLM: &str = "smollm2-135m-instruct-q4_1.gguf";
/// The id every test state serves.
pub const MODEL_ID: &str = "test-model";
/// Longest sequence (prompt + reply): small, so that context errors are easy to trigger.
pub const CONTEXT: usize = 2048;
/// KV positions of the shared engine: several concurrent requests of a few hundred positions.
pub const KV_POSITIONS: usize = 4096;

/// `$TENSORFOLD_CACHE/models/<file>`, else `~/.cache/tensorfold/models/<file>`.
pub fn model_path(file: &str) -> PathBuf {
    let dir = match std::env::var_os("TENSORFOLD_CACHE") {
        Some(cache) => PathBuf::from(cache).join("models"),
        None => {
            let home = std::env::var_os("HOME").expect("HOME is set");
            PathBuf::from(home).join(".cache/tensorfold/models")
        }
    };
    let path = dir.join(file);
    assert!(
        path.exists(),
        "test model {} is missing: run scripts/fetch-test-models (or set TENSORFOLD_CACHE)",
        path.display()
    );
    path
}

/// A model loaded once; engines over it are cheap (the weights are mapped, each engine owns
/// only its KV cache).
pub struct Loaded {
    pub file: &'static str,
    pub model: Arc<Model>,
    pub pool: Arc<ThreadPool>,
}

fn load(file: &'static str) -> Loaded {
    let path = model_path(file);
    let model = Model::load(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()));
    Loaded {
        file,
        model: Arc::new(model),
        // One pool per model: it serializes its callers, so engines may share it.
        pool: Arc::new(ThreadPool::new(2)),
    }
}

pub fn qwen() -> &'static Loaded {
    static QWEN_MODEL: OnceLock<Loaded> = OnceLock::new();
    QWEN_MODEL.get_or_init(|| load(QWEN))
}

pub fn smollm() -> &'static Loaded {
    static SMOLLM_MODEL: OnceLock<Loaded> = OnceLock::new();
    SMOLLM_MODEL.get_or_init(|| load(SMOLLM))
}

impl Loaded {
    pub fn tokenizer(&self) -> Tokenizer {
        Tokenizer::from_gguf(self.model.gguf().expect("a GGUF model")).expect("the tokenizer")
    }

    /// A fresh engine (its own KV cache of `kv_positions`) and what the server needs around it.
    pub fn backend(&self, kv_positions: usize) -> Backend {
        self.backend_with_context(kv_positions, CONTEXT)
    }

    pub fn backend_with_context(&self, kv_positions: usize, context: usize) -> Backend {
        self.backend_with(kv_positions, context, None, usize::MAX)
    }

    /// `cache_blocks`: the prefix cache budget in blocks (`Some(0)`: no prompt cache).
    pub fn backend_with(
        &self,
        kv_positions: usize,
        context: usize,
        cache_blocks: Option<usize>,
        max_waiting: usize,
    ) -> Backend {
        let tokenizer = self.tokenizer();
        let runner = ModelRunner::new(self.model.clone(), self.pool.clone(), kv_positions, context);
        let engine = Engine::new(
            Box::new(runner),
            EngineConfig {
                max_waiting,
                ..Default::default()
            },
            CostModel::flat(),
        );
        let mut engine = engine;
        if let Some(blocks) = cache_blocks {
            engine.set_cache_budget(blocks);
        }
        let total_blocks = engine.free_blocks();
        // The engine thread ends when every handle is gone and it is idle.
        let (engine, _join) = EngineHandle::spawn(engine);
        let backend = Backend::new(engine, tokenizer, context, total_blocks, true)
            .expect("the chat template compiles");
        assert!(
            backend.template.is_some(),
            "the test models have chat templates"
        );
        backend
    }

    /// A ready state with its own engine.
    pub fn state(&self, config: ServerConfig, kv_positions: usize) -> SharedState {
        let state = AppState::new(config);
        state.set_backend(self.backend(kv_positions));
        state
    }
}

/// The ready state most tests share: Qwen 0.5B, no API key, id [`MODEL_ID`].
pub fn shared_state() -> SharedState {
    static STATE: OnceLock<SharedState> = OnceLock::new();
    STATE
        .get_or_init(|| qwen().state(ServerConfig::new(MODEL_ID), KV_POSITIONS))
        .clone()
}

/// Whether `s` is `n` lowercase hex digits.
pub fn is_hex(s: &str, n: usize) -> bool {
    s.len() == n
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A chat request body with one user message, greedy.
pub fn chat_body(prompt: &str, max_tokens: u64) -> serde_json::Value {
    serde_json::json!({
        "model": MODEL_ID,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
    })
}

/// Python source with the repetition real code has, so that context copies find matches.
pub const PYTHON: &str = r#"import math


def mean(values):
    """The arithmetic mean of values."""
    return sum(values) / len(values)


def variance(values):
    """The population variance of values."""
    m = mean(values)
    return sum((v - m) ** 2 for v in values) / len(values)


def stddev(values):
    """The population standard deviation of values."""
"#;
