//! The access log (`serve --access-log`): one stderr line per HTTP request when its response
//! starts (`http METHOD PATH -> STATUS in SECSs`; a streamed reply counts to its first byte) and
//! one per `response.create` on a Responses WebSocket (`ws response.create -> ok` or `-> error
//! CODE`). Paths only: a query string may hold a key.

use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::state::SharedState;

pub async fn log(State(state): State<SharedState>, req: Request, next: Next) -> Response {
    if !state.config.access_log {
        return next.run(req).await;
    }
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let start = Instant::now();
    let response = next.run(req).await;
    eprintln!(
        "{}http {method} {path} -> {} in {:.3}s",
        crate::routes::dashboard::clear_prefix(),
        response.status().as_u16(),
        start.elapsed().as_secs_f64()
    );
    response
}

/// The line for one `response.create` on a WebSocket: `None` = it was accepted.
pub fn ws_create(state: &SharedState, error: Option<u16>) {
    if !state.config.access_log {
        return;
    }
    let outcome = match error {
        None => "ok".to_string(),
        Some(code) => format!("error {code}"),
    };
    eprintln!(
        "{}ws response.create -> {outcome}",
        crate::routes::dashboard::clear_prefix()
    );
}
