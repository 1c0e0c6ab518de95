//! API keys: `Authorization: Bearer KEY` (OpenAI clients) or `x-api-key: KEY` (Anthropic
//! clients), compared in constant time. `/health` stays open so that load balancers can probe,
//! and `/dashboard`'s page (no data in it) so that a browser can load it.

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{AnthropicError, ApiError};
use crate::state::SharedState;

/// Equal length and bytes, in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // Keep the optimizer from turning the loop into an early exit.
    std::hint::black_box(diff) == 0
}

fn presented_key(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get("authorization").and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer ") {
            return Some(v[7..].trim());
        }
        return Some(v);
    }
    headers.get("x-api-key").and_then(|v| v.to_str().ok())
}

pub async fn require_key(State(state): State<SharedState>, req: Request, next: Next) -> Response {
    let Some(expected) = state.config.api_key.as_deref() else {
        return next.run(req).await;
    };
    // The dashboard page holds no data (it sends the key from its URL fragment to /stats).
    if ["/health", "/dashboard"].contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let error = match presented_key(req.headers()) {
        Some(key) if constant_time_eq(key.as_bytes(), expected.as_bytes()) => {
            return next.run(req).await
        }
        Some(_) => ApiError::unauthorized("Incorrect API key provided."),
        None => ApiError::unauthorized(
            "Missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>').",
        ),
    };
    if req.uri().path().starts_with("/v1/messages") {
        AnthropicError(error).into_response()
    } else {
        error.into_response()
    }
}

/// Refuses with 413 at once a request whose declared `Content-Length` is over the body limit,
/// before any of the body is read (a client that declares a terabyte and sends a few bytes
/// would otherwise hold the connection until it gives up).
pub async fn declared_length(
    State(state): State<SharedState>,
    req: Request,
    next: Next,
) -> Response {
    let limit = state.config.body_limit_bytes;
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(n) if n > limit as u64 => {
            let error = ApiError::payload_too_large(limit);
            if req.uri().path().starts_with("/v1/messages") {
                AnthropicError(error).into_response()
            } else {
                error.into_response()
            }
        }
        _ => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn compares_whole_keys() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret1"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
