//! The small endpoints: `/health`, `/v1/models`, `/tokenize`, `/detokenize`, `/metrics`, and
//! the 404 for everything else.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use tf_core::TokenId;

use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::fields::Fields;
use crate::routes::chat;
use crate::state::SharedState;

pub async fn health(State(state): State<SharedState>) -> Response {
    if state.is_ready() {
        (StatusCode::OK, Json(json!({"status": "ok"}))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "loading"})),
        )
            .into_response()
    }
}

fn model_json(state: &SharedState, id: &str) -> Value {
    let mut m = json!({
        "id": id,
        "object": "model",
        "created": 0,
        "owned_by": "tensorfold",
    });
    if let Ok(backend) = state.backend() {
        m["max_model_len"] = json!(backend.context);
    }
    m
}

pub async fn models(State(state): State<SharedState>) -> Json<Value> {
    let data: Vec<Value> = state
        .config
        .model_names()
        .iter()
        .map(|id| model_json(&state, id))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

pub async fn model(State(state): State<SharedState>, Path(id): Path<String>) -> Response {
    match state.check_model(Some(&id)) {
        Ok(()) => Json(model_json(&state, &id)).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn tokenize(State(state): State<SharedState>, JsonBody(body): JsonBody) -> Response {
    match crate::blocking::run(move || tokenize_inner(&state, &body)).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

fn tokenize_inner(state: &SharedState, body: &Value) -> ApiResult<Value> {
    let f = Fields::new(body)?;
    state.check_model(f.str("model")?)?;
    let backend = state.backend()?;
    let tokens = if f.has("messages") {
        let req = chat::parse(state, body)?;
        crate::prompt::render(&backend, &req.chat)?.tokens
    } else {
        let text = match (f.str("content")?, f.str("prompt")?) {
            (Some(t), _) | (None, Some(t)) => t,
            (None, None) => {
                return Err(ApiError::invalid(
                    "content",
                    "give the text as 'content' (or 'prompt'), or a chat as 'messages'",
                ))
            }
        };
        let add_special = f.bool("add_special")?.unwrap_or(false);
        let tok = &backend.tokenizer;
        let mut ids = tok
            .encode(text, true)
            .map_err(|e| ApiError::bad_request(format!("cannot tokenize: {e}")))?;
        if add_special && tok.add_bos() {
            if let Some(bos) = tok.bos_id() {
                if ids.first() != Some(&bos) {
                    ids.insert(0, bos);
                }
            }
        }
        ids
    };
    Ok(json!({
        "tokens": tokens,
        "count": tokens.len(),
        "max_model_len": backend.context,
    }))
}

pub async fn detokenize(State(state): State<SharedState>, JsonBody(body): JsonBody) -> Response {
    let result = (|| -> ApiResult<Value> {
        let f = Fields::new(&body)?;
        state.check_model(f.str("model")?)?;
        let backend = state.backend()?;
        let list = f
            .array("tokens")?
            .ok_or_else(|| ApiError::invalid("tokens", "'tokens' is required"))?;
        let vocab = backend.tokenizer.vocab_size();
        let ids = list
            .iter()
            .map(|v| {
                v.as_u64()
                    .filter(|id| (*id as usize) < vocab)
                    .map(|id| id as TokenId)
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "tokens",
                            format!("'tokens' must be token ids below {vocab}, got {v}"),
                        )
                    })
            })
            .collect::<ApiResult<Vec<_>>>()?;
        let text = backend.tokenizer.decode(&ids, false);
        Ok(json!({"content": text, "prompt": text}))
    })();
    match result {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

pub async fn metrics(State(state): State<SharedState>) -> Response {
    let (stats, total) = match state.backend() {
        Ok(b) => (b.engine.stats_async().await, b.total_blocks),
        Err(_) => (None, 0),
    };
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(stats, total),
    )
        .into_response()
}

pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("there is no endpoint {}", uri.path())).with_code("unknown_url")
}

pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        ..ApiError::bad_request(format!("{} does not accept {method}", uri.path()))
    }
}
