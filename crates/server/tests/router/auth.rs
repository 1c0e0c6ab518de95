//! API keys, readiness (`/health` and 503 while the model loads), and model names (id and
//! aliases). Each test builds its own state, with its own engine over the shared model.

use axum::body::Body;
use axum::http::Method;
use serde_json::json;
use tf_server::{AppState, ServerConfig};

use crate::common::{chat_body, qwen, smollm, CONTEXT, MODEL_ID};
use crate::{assert_anthropic_error, assert_openai_error, get, post, send};

fn anthropic_body() -> serde_json::Value {
    json!({"model": MODEL_ID, "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "user", "content": "Hi"}]})
}

#[tokio::test]
async fn api_key_is_required_except_for_health() {
    let mut config = ServerConfig::new(MODEL_ID);
    config.api_key = Some("secret".into());
    let state = qwen().state(config, 512);
    let chat = chat_body("Say hi.", 4).to_string();
    let json_ct = ("content-type", "application/json");

    let r = send(
        &state,
        Method::POST,
        "/v1/chat/completions",
        &[json_ct],
        chat.clone(),
    )
    .await;
    assert_openai_error(&r, 401, None, Some("invalid_api_key"), "Missing API key");
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    assert_eq!(r.json()["error"]["type"], "authentication_error");

    for wrong in [
        ("authorization", "Bearer secreT"),
        ("authorization", "Bearer secret2"),
        ("authorization", "Bearer "),
        ("x-api-key", "nope"),
    ] {
        let r = send(
            &state,
            Method::POST,
            "/v1/chat/completions",
            &[json_ct, wrong],
            chat.clone(),
        )
        .await;
        assert_openai_error(&r, 401, None, Some("invalid_api_key"), "Incorrect API key");
        assert_eq!(r.headers["www-authenticate"], "Bearer", "{wrong:?}");
    }

    for right in [("authorization", "Bearer secret"), ("x-api-key", "secret")] {
        let r = send(
            &state,
            Method::POST,
            "/v1/chat/completions",
            &[json_ct, right],
            chat.clone(),
        )
        .await;
        assert_eq!(r.status, 200, "{right:?}: {}", r.text());
        assert!(r.json()["choices"][0]["message"]["content"].is_string());
        let r = send(&state, Method::GET, "/v1/models", &[right], Body::empty()).await;
        assert_eq!(r.status, 200, "{right:?}");
    }

    // Every other endpoint is closed too; /health stays open for load balancers.
    for uri in ["/v1/models", "/metrics", "/v1/responses/resp_x", "/nowhere"] {
        let r = get(&state, uri).await;
        assert_openai_error(&r, 401, None, Some("invalid_api_key"), "Missing API key");
    }
    let r = get(&state, "/health").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"status": "ok"}));

    // The Anthropic routes answer in Anthropic's envelope.
    let body = anthropic_body().to_string();
    let r = send(
        &state,
        Method::POST,
        "/v1/messages",
        &[json_ct],
        body.clone(),
    )
    .await;
    assert_anthropic_error(&r, 401, "authentication_error", "Missing API key");
    assert_eq!(r.headers["www-authenticate"], "Bearer");
    let r = send(
        &state,
        Method::POST,
        "/v1/messages/count_tokens",
        &[("x-api-key", "no")],
        body.clone(),
    )
    .await;
    assert_anthropic_error(&r, 401, "authentication_error", "Incorrect API key");
    let r = send(
        &state,
        Method::POST,
        "/v1/messages",
        &[json_ct, ("x-api-key", "secret")],
        body,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["type"], "message");
}

#[tokio::test]
async fn not_ready_until_the_backend_is_set() {
    let mut config = ServerConfig::new(MODEL_ID);
    config.aliases = vec!["alias-a".into(), "alias-b".into()];
    let state = AppState::new(config);

    let r = get(&state, "/health").await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json(), json!({"status": "loading"}));
    let r = post(&state, "/v1/chat/completions", &chat_body("Hi", 4)).await;
    assert_openai_error(&r, 503, None, None, "still loading");
    assert_eq!(r.json()["error"]["type"], "server_error");
    assert_eq!(r.headers["retry-after"], "1");
    let r = post(&state, "/v1/messages", &anthropic_body()).await;
    assert_anthropic_error(&r, 503, "overloaded_error", "still loading");
    assert_eq!(r.headers["retry-after"], "1");
    for uri in ["/v1/completions", "/v1/responses", "/tokenize"] {
        let body = json!({"prompt": "x", "input": "x", "content": "x", "max_tokens": 4});
        let r = post(&state, uri, &body).await;
        assert_openai_error(&r, 503, None, None, "still loading");
        assert_eq!(r.headers["retry-after"], "1", "{uri}");
    }
    // Requests are still checked while loading.
    let r = post(&state, "/v1/chat/completions", &json!({"messages": []})).await;
    assert_eq!(r.status, 400);
    // Listing works; the context is not known yet.
    let r = get(&state, "/v1/models").await;
    assert_eq!(r.status, 200);
    assert!(
        r.json()["data"][0].get("max_model_len").is_none(),
        "{}",
        r.json()
    );
    let r = get(&state, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("tensorfold:kv_total_blocks 0\n"),
        "{}",
        r.text()
    );

    state.set_backend(smollm().backend(1024));
    let r = get(&state, "/health").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), json!({"status": "ok"}));
    // An alias is as good as the id; replies name the id.
    let mut body = chat_body("Hi", 4);
    body["model"] = json!("alias-b");
    let r = post(&state, "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], MODEL_ID);
    assert!(r.json()["choices"][0]["message"]["content"].is_string());

    let r = get(&state, "/v1/models").await;
    assert_eq!(r.status, 200);
    let list = r.json();
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [MODEL_ID, "alias-a", "alias-b"]);
    for m in list["data"].as_array().unwrap() {
        assert_eq!(m["object"], "model");
        assert_eq!(m["owned_by"], "tensorfold");
        assert_eq!(m["max_model_len"], CONTEXT);
    }
    let r = get(&state, "/v1/models/alias-a").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["id"], "alias-a");
    let r = get(&state, &format!("/v1/models/{MODEL_ID}")).await;
    assert_eq!(r.json()["id"], MODEL_ID);
    let r = get(&state, "/v1/models/gpt-9").await;
    let m = assert_openai_error(&r, 404, Some("model"), Some("model_not_found"), "'gpt-9'");
    assert!(m.contains("alias-a") && m.contains("alias-b"), "{m}");
}
