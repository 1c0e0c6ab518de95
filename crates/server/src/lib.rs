//! tf-server: TensorFold's HTTP API. OpenAI chat completions, completions and the Responses API
//! (SSE and WebSocket), Anthropic Messages, tokenization, health and Prometheus metrics, over the
//! engine's handle. No numerics here: requests become token ids and sampling parameters
//! ([`generate`]), the engine's events become text ([`output`]) and API replies ([`routes`]).

pub mod auth;
pub mod blocking;
pub mod error;
pub mod extract;
pub mod fields;
pub mod generate;
pub mod metrics;
pub mod output;
pub mod params;
pub mod prompt;
pub mod routes;
pub mod state;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::{middleware, Router};

pub use error::{ApiError, ApiResult};
pub use state::{AppState, Backend, SamplingDefaults, ServerConfig, SharedState, ToolFormat};

use routes::{chat, completions, info, messages, responses};

/// Every route, with the body limit and the API key check.
pub fn router(state: SharedState) -> Router {
    let limit = state.config.body_limit_bytes;
    Router::new()
        .route("/health", get(info::health))
        .route("/metrics", get(info::metrics))
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

/// Serves [`router`] on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, state: SharedState) -> std::io::Result<()> {
    axum::serve(listener, router(state)).await
}
