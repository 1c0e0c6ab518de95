//! Size limits: the context (an explicit reply length that cannot fit, a prompt longer than the
//! context, a reply that fills it exactly) and the request body.

use axum::http::Method;
use serde_json::json;
use tf_server::{AppState, ServerConfig};

use crate::common::{chat_body, shared_state, smollm, CONTEXT, MODEL_ID};
use crate::{assert_anthropic_error, assert_openai_error, post, send};

#[tokio::test]
async fn context_limits() {
    let state = shared_state();
    let limit = CONTEXT.to_string();
    // An explicit reply length that cannot fit beside the prompt.
    let body = chat_body("Hi", CONTEXT as u64);
    let r = post(&state, "/v1/chat/completions", &body).await;
    let m = assert_openai_error(
        &r,
        400,
        Some("max_tokens"),
        Some("context_length_exceeded"),
        &limit,
    );
    assert!(m.contains("maximum context length"), "{m}");
    let body = json!({"messages": [{"role": "user", "content": "Hi"}],
        "max_completion_tokens": CONTEXT + 5});
    let r = post(&state, "/v1/chat/completions", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("max_completion_tokens"),
        Some("context_length_exceeded"),
        &limit,
    );
    let body = json!({"prompt": "def f():", "max_tokens": CONTEXT});
    let r = post(&state, "/v1/completions", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("max_tokens"),
        Some("context_length_exceeded"),
        &limit,
    );
    let body = json!({"input": "Hi", "max_output_tokens": CONTEXT});
    let r = post(&state, "/v1/responses", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("max_output_tokens"),
        Some("context_length_exceeded"),
        &limit,
    );
    // A prompt longer than the context: refused before it reaches the engine.
    let long = "apple ".repeat(CONTEXT + 100);
    let body = json!({"messages": [{"role": "user", "content": long}], "max_tokens": 8});
    let r = post(&state, "/v1/chat/completions", &body).await;
    let m = assert_openai_error(
        &r,
        400,
        Some("messages"),
        Some("context_length_exceeded"),
        &limit,
    );
    assert!(m.contains("no room for a reply"), "{m}");
    let r = post(&state, "/v1/completions", &json!({"prompt": long})).await;
    let body = r.json();
    assert_eq!(r.status.as_u16(), 400, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    let m = body["error"]["message"].as_str().unwrap();
    assert!(
        m.contains(&limit) && m.contains("no room for a reply"),
        "{m}"
    );
    let r = post(
        &state,
        "/v1/messages",
        &json!({"max_tokens": 8,
        "messages": [{"role": "user", "content": long}]}),
    )
    .await;
    assert_anthropic_error(&r, 400, "invalid_request_error", &limit);
}

#[tokio::test]
async fn reply_may_fill_the_context_exactly() {
    // SmolLM2 135M with a short context. The engine reserves KV slots for a draft window past
    // the reply's end, so its pool is larger than the context.
    let context = 256;
    let state = AppState::new(ServerConfig::new(MODEL_ID));
    state.set_backend(smollm().backend_with_context(context + 128, context));
    let body = |max: usize| {
        let long = "apple ".repeat(context - 40);
        json!({"messages": [{"role": "user", "content": long}], "max_tokens": max,
            "temperature": 0, "ignore_eos": true})
    };
    let prompt = post(&state, "/tokenize", &body(1)).await.json()["count"]
        .as_u64()
        .unwrap() as usize;
    assert!(prompt < context && prompt > context - 100, "{prompt}");
    let room = context - prompt;
    let r = post(&state, "/v1/chat/completions", &body(room + 1)).await;
    let m = assert_openai_error(
        &r,
        400,
        Some("max_tokens"),
        Some("context_length_exceeded"),
        &format!("(at most {room})"),
    );
    assert!(
        m.contains(&format!(
            "{prompt} in the prompt, {} for the reply",
            room + 1
        )),
        "{m}"
    );
    let r = post(&state, "/v1/chat/completions", &body(room)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let usage = &r.json()["usage"];
    assert_eq!(usage["prompt_tokens"], prompt);
    assert_eq!(
        usage["total_tokens"], context,
        "the reply fills the context: {usage}"
    );
    assert_eq!(r.json()["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn oversized_body_is_413() {
    let state = shared_state();
    // Valid JSON just over the 32 MiB limit.
    let body = format!("{{\"prompt\": \"{}\"}}", "a".repeat((32 << 20) + 16));
    let r = send(&state, Method::POST, "/v1/completions", &[], body.clone()).await;
    assert_openai_error(&r, 413, None, None, "limit of 32 MiB");
    let r = send(&state, Method::POST, "/v1/messages", &[], body).await;
    assert_anthropic_error(&r, 413, "request_too_large", "32 MiB");
}

/// A body declared over the limit is refused from its header alone, before any of it is read.
#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_at_once() {
    let state = shared_state();
    let small = r#"{"prompt": "Hi", "max_tokens": 1}"#;
    let huge = [("content-length", "1000000000000")];
    let r = send(&state, Method::POST, "/v1/completions", &huge, small).await;
    assert_openai_error(&r, 413, None, None, "limit of 32 MiB");
    let r = send(&state, Method::POST, "/v1/messages", &huge, small).await;
    assert_anthropic_error(&r, 413, "request_too_large", "32 MiB");
}

/// Tokenizing a large request runs off the async workers: on a runtime with one thread, a
/// health check sent after a large `/tokenize` has started is answered before the tokenize
/// finishes (inline, the tokenize would hold the only thread until done).
#[tokio::test(flavor = "current_thread")]
async fn tokenizing_does_not_hold_the_async_workers() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let state = shared_state();
    let order = Arc::new(AtomicUsize::new(0));
    let big = json!({"content": "the quick brown fox jumps over the lazy dog ".repeat(50_000)});
    let (s, o) = (state.clone(), order.clone());
    let tokenize = tokio::spawn(async move {
        let r = post(&s, "/tokenize", &big).await;
        (r.status.as_u16(), o.fetch_add(1, Ordering::SeqCst))
    });
    // Let the tokenize start.
    tokio::task::yield_now().await;
    let health = send(&state, Method::GET, "/health", &[], "").await;
    let health_done = order.fetch_add(1, Ordering::SeqCst);
    let (status, tokenize_done) = tokenize.await.unwrap();
    assert_eq!((health.status.as_u16(), status), (200, 200));
    assert!(
        health_done < tokenize_done,
        "the health check waited for the tokenize to finish"
    );
}

/// A prompt whose bytes alone prove it cannot fit is refused before it is tokenized.
#[tokio::test]
async fn a_prompt_too_long_to_fit_is_refused_before_tokenizing() {
    let state = shared_state();
    let huge = "a".repeat(CONTEXT * 1024);
    for (uri, body) in [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": huge}], "max_tokens": 4}),
        ),
        (
            "/v1/messages",
            json!({"messages": [{"role": "user", "content": huge}], "max_tokens": 4}),
        ),
    ] {
        let r = post(&state, uri, &body).await;
        assert_eq!(r.status.as_u16(), 400, "{uri}");
        let m = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            m.contains("prompt is too long: at least") && m.contains("before tokenizing"),
            "{m}"
        );
    }
}
