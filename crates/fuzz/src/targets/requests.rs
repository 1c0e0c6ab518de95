//! The four APIs' request handling, through the real router and engine (SmolLM2 from the test
//! cache): chat completions, completions, Anthropic messages (and its token count) and the
//! Responses API, with structurally mutated JSON bodies and mutated bytes. Every answer must be
//! a success or a 4xx whose body is the API's JSON error, never a 5xx or a hang; streams must
//! end. Generation is kept short: any reply-length field of a mutated body is capped at 4
//! tokens (and `n` at 2) before it is sent, and that capped body is the input kept.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tf_engine::cost::CostModel;
use tf_engine::{Engine, EngineConfig, EngineHandle, ModelRunner};
use tf_server::{AppState, Backend, ServerConfig, SharedState};
use tf_text::Tokenizer;
use tower::ServiceExt;

use crate::mutate::Mutator;
use crate::Target;

/// The endpoints, chosen by an input's first byte.
const ROUTES: [&str; 5] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
];
/// Reply-length fields, capped before sending.
const LENGTHS: [&str; 4] = [
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "max_new_tokens",
];
const MODEL_ID: &str = "fuzz-model";

pub struct Requests {
    state: SharedState,
    rt: tokio::runtime::Runtime,
}

impl Requests {
    pub fn new() -> anyhow::Result<Self> {
        let path = super::cached_model("smollm2-135m-instruct-q4_1.gguf")?;
        let model = Arc::new(tf_models::Model::load(&path)?);
        let tokenizer = Tokenizer::from_gguf(model.gguf().expect("a GGUF model"))?;
        let pool = Arc::new(tf_kernels::ThreadPool::new(1));
        let context = 1024;
        let runner = ModelRunner::new(model, pool, 4096, context);
        let engine = Engine::new(Box::new(runner), EngineConfig::default(), CostModel::flat());
        let total_blocks = engine.free_blocks();
        let (engine, _join) = EngineHandle::spawn(engine);
        let state = AppState::new(ServerConfig::new(MODEL_ID));
        state.set_backend(Backend::new(
            engine,
            tokenizer,
            context,
            total_blocks,
            true,
        )?);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        Ok(Requests { state, rt })
    }
}

/// Caps reply lengths (recursively: nested objects too) and `n`.
fn cap(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if LENGTHS.contains(&k.as_str()) && x.as_u64().is_some_and(|n| n > 4) {
                    *x = json!(4);
                } else if k == "n" && x.as_u64().is_some_and(|n| n > 2) {
                    *x = json!(2);
                } else {
                    cap(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(cap),
        _ => {}
    }
}

fn seed_bodies() -> Vec<(u8, Value)> {
    let user = json!([{"role": "user", "content": "Write a haiku about Rust."}]);
    let tool = json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]);
    vec![
        (
            0,
            json!({"model": MODEL_ID, "messages": user, "max_tokens": 4}),
        ),
        (
            0,
            json!({"model": MODEL_ID, "messages": user, "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}, "temperature": 0.8, "seed": 7}),
        ),
        (
            0,
            json!({"model": MODEL_ID, "messages": user, "max_tokens": 4, "tools": tool, "tool_choice": "auto"}),
        ),
        (
            1,
            json!({"model": MODEL_ID, "prompt": "def fib(n):", "max_tokens": 4, "stop": ["\n\n"]}),
        ),
        (
            1,
            json!({"model": MODEL_ID, "prompt": [1, 2, 3], "max_tokens": 2, "stream": true}),
        ),
        (
            2,
            json!({"model": MODEL_ID, "max_tokens": 4, "system": "Be brief.", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}),
        ),
        (
            2,
            json!({"model": MODEL_ID, "max_tokens": 4, "stream": true, "messages": [{"role": "user", "content": "Hi"}], "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}),
        ),
        (
            3,
            json!({"model": MODEL_ID, "messages": [{"role": "user", "content": "count me"}]}),
        ),
        (
            4,
            json!({"model": MODEL_ID, "input": "Say hi.", "max_output_tokens": 4}),
        ),
        (
            4,
            json!({"model": MODEL_ID, "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}], "instructions": "Be brief.", "max_output_tokens": 3, "stream": true}),
        ),
    ]
}

fn encode(route: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![route];
    v.extend_from_slice(body);
    v
}

impl Target for Requests {
    fn name(&self) -> &'static str {
        "requests"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        seed_bodies()
            .into_iter()
            .map(|(r, b)| encode(r, &serde_json::to_vec(&b).unwrap()))
            .collect()
    }

    fn mutate(&self, m: &mut Mutator, input: &[u8], other: &[u8]) -> Vec<u8> {
        let (route, body) = input.split_first().map_or((0, &[][..]), |(r, b)| (*r, b));
        let route = if m.rng.chance(0.1) {
            m.rng.below(ROUTES.len()) as u8
        } else {
            route
        };
        let mut body = match serde_json::from_slice::<Value>(body) {
            Ok(v) if m.rng.chance(0.8) => serde_json::to_vec(&m.json(&v)).unwrap(),
            _ => m.bytes(body, other.get(1..).unwrap_or(&[])),
        };
        if let Ok(mut v) = serde_json::from_slice::<Value>(&body) {
            cap(&mut v);
            body = serde_json::to_vec(&v).unwrap();
        }
        encode(route, &body)
    }

    fn run(&self, input: &[u8]) -> Result<(), String> {
        let (route, body) = input.split_first().map_or((0, &[][..]), |(r, b)| (*r, b));
        let path = ROUTES[route as usize % ROUTES.len()];
        let anthropic = path.starts_with("/v1/messages");
        let req = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_vec()))
            .map_err(|e| e.to_string())?;
        let app = tf_server::router(self.state.clone());
        let (status, bytes) = self.rt.block_on(async {
            let answer = tokio::time::timeout(Duration::from_secs(60), async {
                let resp = app.oneshot(req).await.map_err(|e| e.to_string())?;
                let status = resp.status();
                let bytes = resp
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| format!("the body broke off: {e}"))?
                    .to_bytes();
                Ok::<_, String>((status, bytes))
            })
            .await;
            answer.map_err(|_| format!("{path}: no whole answer in 60 s"))?
        })?;
        if status.is_server_error() {
            return Err(format!(
                "{path}: {status}: {}",
                String::from_utf8_lossy(&bytes)
            ));
        }
        if status.is_client_error() && status != StatusCode::NOT_FOUND {
            let v: Value = serde_json::from_slice(&bytes).map_err(|_| {
                format!(
                    "{path}: {status} without a JSON body: {}",
                    String::from_utf8_lossy(&bytes)
                )
            })?;
            let ok = if anthropic {
                v["type"] == "error" && v["error"]["message"].is_string()
            } else {
                v["error"]["message"].is_string()
            };
            if !ok {
                return Err(format!(
                    "{path}: {status} with a body that is not the API's error: {v}"
                ));
            }
        }
        Ok(())
    }
}
