//! The HTTP API driven without a socket: `tf_server::router(state)` called through
//! `tower::ServiceExt::oneshot`, on the real Qwen2.5-Coder 0.5B (and SmolLM2 135M) from the
//! model cache. Every error case's status and envelope, authentication, readiness, and the plain
//! JSON replies of each endpoint.

#[path = "../common/mod.rs"]
mod common;

mod anthropic;
mod auth;
mod errors;
mod limits;
mod replies;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use tf_server::SharedState;
use tower::ServiceExt;

/// A reply: status, headers and the whole body.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: the body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("a UTF-8 body")
    }
}

/// Sends one request through a fresh router over `state`.
pub async fn send(
    state: &SharedState,
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    body: impl Into<Body>,
) -> Reply {
    let mut request = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let request = request.body(body.into()).expect("a valid request");
    let response = tf_server::router(state.clone())
        .oneshot(request)
        .await
        .expect("the router is infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("reading the body")
        .to_bytes()
        .to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

pub async fn post(state: &SharedState, uri: &str, body: &Value) -> Reply {
    send(
        state,
        Method::POST,
        uri,
        &[("content-type", "application/json")],
        body.to_string(),
    )
    .await
}

pub async fn get(state: &SharedState, uri: &str) -> Reply {
    send(state, Method::GET, uri, &[], Body::empty()).await
}

/// Asserts an OpenAI error envelope: `{"error": {"message", "type", "param", "code"}}`, all
/// four keys present, with this status, `param` and `code` (`None` = JSON null), and a message
/// containing `message_has`. Returns the message.
#[track_caller]
pub fn assert_openai_error(
    reply: &Reply,
    status: u16,
    param: Option<&str>,
    code: Option<&str>,
    message_has: &str,
) -> String {
    let body = reply.json();
    assert_eq!(reply.status.as_u16(), status, "status; body {body}");
    let top = body.as_object().expect("an object");
    assert_eq!(top.len(), 1, "only 'error' at the top: {body}");
    let error = body["error"].as_object().expect("an 'error' object");
    for key in ["message", "type", "param", "code"] {
        assert!(error.contains_key(key), "'error.{key}' is missing: {body}");
    }
    assert_eq!(error.len(), 4, "exactly four keys: {body}");
    let message = error["message"].as_str().expect("a string message");
    assert!(
        message.contains(message_has),
        "message {message:?} should contain {message_has:?}"
    );
    assert!(error["type"].is_string(), "type: {body}");
    assert_eq!(error["param"].as_str(), param, "param: {body}");
    if param.is_none() {
        assert!(error["param"].is_null(), "param: {body}");
    }
    assert_eq!(error["code"].as_str(), code, "code: {body}");
    if code.is_none() {
        assert!(error["code"].is_null(), "code: {body}");
    }
    message.to_string()
}

/// Asserts Anthropic's envelope: `{"type": "error", "error": {"type", "message"}}`.
#[track_caller]
pub fn assert_anthropic_error(reply: &Reply, status: u16, kind: &str, message_has: &str) {
    let body = reply.json();
    assert_eq!(reply.status.as_u16(), status, "status; body {body}");
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], kind, "{body}");
    let message = body["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains(message_has),
        "message {message:?} should contain {message_has:?}"
    );
    assert!(body.get("param").is_none() && body.get("code").is_none());
}
