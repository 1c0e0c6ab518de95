//! tf-server: TensorFold's HTTP API. OpenAI chat completions, completions and the Responses API
//! (SSE and WebSocket), Anthropic Messages, tokenization, health and Prometheus metrics, over the
//! engine's handle. No numerics here: requests become token ids and sampling parameters
//! ([`generate`]), the engine's events become text ([`output`]) and API replies ([`routes`]).

pub mod access;
pub mod auth;
pub mod blocking;
pub mod error;
pub mod extract;
pub mod fields;
pub mod framing;
pub mod generate;
pub mod metrics;
pub mod output;
pub mod params;
pub mod prompt;
pub mod reply;
pub mod routes;
pub mod state;
pub mod store;
pub mod structured;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::{middleware, Router};

pub use error::{ApiError, ApiResult};
pub use state::{AppState, Backend, SamplingDefaults, ServerConfig, SharedState, ToolFormat};

use routes::{chat, completions, dashboard, info, messages, responses};

/// Every route, with the body limit and the API key check.
pub fn router(state: SharedState) -> Router {
    let limit = state.config.body_limit_bytes;
    Router::new()
        .route("/health", get(info::health))
        .route("/metrics", get(info::metrics))
        .route("/stats", get(dashboard::stats))
        .route("/dashboard", get(dashboard::page))
        .route("/v1/models", get(info::models))
        .route("/v1/models/{id}", get(info::model))
        .route("/tokenize", post(info::tokenize))
        .route("/detokenize", post(info::detokenize))
        .route("/v1/chat/completions", post(chat::handle))
        .route("/v1/completions", post(completions::handle))
        .route(
            "/v1/responses",
            post(responses::create).get(responses::websocket),
        )
        .route(
            "/v1/responses/{id}",
            get(responses::retrieve).delete(responses::delete),
        )
        .route("/v1/messages", post(messages::create))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .fallback(info::not_found)
        .method_not_allowed_fallback(info::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::declared_length,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), access::log))
        .with_state(state)
}

/// The tool call format a chat template teaches its model.
pub fn tool_format_of(template_source: &str) -> ToolFormat {
    if template_source.contains("<|channel|>") {
        ToolFormat::Harmony
    } else if template_source.contains("<tool_call>") {
        ToolFormat::Tagged
    } else if template_source.contains("<|eot_id|>") || template_source.contains("<|python_tag|>") {
        ToolFormat::BareJson
    } else {
        ToolFormat::Tagged
    }
}

/// Serves [`router`] on `listener` until the process ends: HTTP/1.1 with upgrades (WebSocket),
/// a connection that has not sent a whole request header within the configured time closed,
/// and at most the configured number of connections open (one more is answered 503 and
/// closed, so a flood of idle sockets cannot starve the file table).
pub async fn serve(listener: tokio::net::TcpListener, state: SharedState) -> std::io::Result<()> {
    let (header_timeout, cap) = (state.config.header_timeout, state.config.max_connections);
    tokio::spawn(dashboard::sample(state.clone()));
    let app = router(state);
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(cap));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) if connection_error(&e) => continue,
            // Out of file descriptors and the like: wait a little instead of spinning.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, cap));
            continue;
        };
        let app = app.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let mut app = app.clone();
                tower_service::Service::call(&mut app, req)
            });
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = http.serve_connection(
                hyper_util::rt::TokioIo::new(framing::JsonParseErrors::new(stream)),
                service,
            );
            // A client that goes away or times out ends its connection; nothing to report.
            let _ = conn.with_upgrades().await;
        });
    }
}

/// An accept error about one connection (the next accept may well succeed).
fn connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// The answer to a connection over the cap: a 503 with the API's error body, then close.
async fn refuse(mut stream: tokio::net::TcpStream, cap: usize) {
    use tokio::io::AsyncWriteExt;
    let body = ApiError::unavailable(format!(
        "the server has {cap} connections open, its limit; retry shortly"
    ))
    .body()
    .to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}
