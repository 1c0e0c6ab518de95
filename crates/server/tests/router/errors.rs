//! Every client error: status, the OpenAI envelope (Anthropic's on `/v1/messages`), and the
//! message, `param` and `code` that name what was wrong.

use axum::body::Body;
use axum::http::Method;
use serde_json::{json, Value};

use crate::common::{chat_body, shared_state, MODEL_ID};
use crate::{assert_anthropic_error, assert_openai_error, post, send};

/// `base` with `key` set to `value`.
fn with(mut base: Value, key: &str, value: Value) -> Value {
    base[key] = value;
    base
}

#[tokio::test]
async fn malformed_empty_and_non_object_bodies() {
    let state = shared_state();
    for uri in ["/v1/chat/completions", "/v1/completions", "/v1/responses"] {
        let r = send(&state, Method::POST, uri, &[], "{\"messages\": [").await;
        assert_openai_error(&r, 400, None, Some("invalid_json"), "not valid JSON");
        let r = send(&state, Method::POST, uri, &[], Body::empty()).await;
        assert_openai_error(&r, 400, None, None, "body is empty");
        let r = post(&state, uri, &json!([1, 2])).await;
        assert_openai_error(&r, 400, None, None, "must be a JSON object, got an array");
        let r = post(&state, uri, &json!("text")).await;
        assert_openai_error(&r, 400, None, None, "got a string");
    }
}

#[tokio::test]
async fn wrong_types_name_the_field() {
    let state = shared_state();
    let base = chat_body("Hi", 8);
    let cases = [
        (
            "temperature",
            json!("hot"),
            "'temperature' must be a number, got a string",
        ),
        (
            "top_p",
            json!(true),
            "'top_p' must be a number, got a boolean",
        ),
        (
            "max_tokens",
            json!("8"),
            "'max_tokens' must be an integer, got a string",
        ),
        (
            "stream",
            json!(1),
            "'stream' must be a boolean, got a number",
        ),
        (
            "messages",
            json!({}),
            "'messages' must be an array, got an object",
        ),
        (
            "stop",
            json!([1]),
            "'stop' must be a string or a list of strings",
        ),
    ];
    for (key, value, message) in cases {
        let r = post(
            &state,
            "/v1/chat/completions",
            &with(base.clone(), key, value),
        )
        .await;
        assert_openai_error(&r, 400, Some(key), Some("invalid_type"), message);
    }
    // Nested fields are named with their path.
    let body = with(base, "stream_options", json!({"include_usage": "yes"}));
    let r = post(&state, "/v1/chat/completions", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("stream_options.include_usage"),
        Some("invalid_type"),
        "must be a boolean",
    );
}

#[tokio::test]
async fn out_of_range_values_are_refused_even_at_temperature_zero() {
    let state = shared_state();
    // chat_body is greedy (temperature 0): the ranges are checked whether or not they matter.
    let cases = [
        // The sampler's own ranges (`SamplingParams::validate`), named as the API names them.
        (
            "temperature",
            json!(5),
            "'temperature' must be in [0, 2], got 5",
        ),
        ("top_p", json!(0), "'top_p' must be in (0, 1], got 0"),
        ("top_p", json!(1.5), "in (0, 1], got 1.5"),
        ("min_p", json!(2), "in [0, 1], got 2"),
        ("presence_penalty", json!(3), "in [-2, 2], got 3"),
        ("frequency_penalty", json!(-3), "in [-2, 2], got -3"),
        ("repetition_penalty", json!(0), "a finite number > 0, got 0"),
        (
            "repetition_penalty",
            json!(1e300),
            "a finite number > 0, got inf",
        ),
        ("top_k", json!(-1), "non-negative integer, got -1"),
        ("max_tokens", json!(0), "at least 1, got 0"),
        ("max_tokens", json!(2.5), "non-negative integer, got 2.5"),
        ("seed", json!("x"), "'seed' must be an integer"),
        ("seed", json!(1.5), "'seed' must be an integer, got 1.5"),
        ("n", json!(2), "'n' must be 1"),
    ];
    for uri in ["/v1/chat/completions", "/v1/completions"] {
        let base = if uri == "/v1/completions" {
            json!({"model": MODEL_ID, "prompt": "def f():", "max_tokens": 8, "temperature": 0})
        } else {
            chat_body("Hi", 8)
        };
        for (key, value, message) in &cases {
            let r = post(&state, uri, &with(base.clone(), key, value.clone())).await;
            assert_openai_error(&r, 400, Some(key), Some("invalid_value"), message);
        }
    }
    // The Responses API's cap has its own name.
    let body = json!({"input": "Hi", "max_output_tokens": 0, "temperature": 0});
    let r = post(&state, "/v1/responses", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("max_output_tokens"),
        Some("invalid_value"),
        "at least 1",
    );
}

#[tokio::test]
async fn unknown_model_is_404() {
    let state = shared_state();
    let body = with(chat_body("Hi", 8), "model", json!("gpt-9"));
    for uri in [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/tokenize",
    ] {
        let r = post(&state, uri, &body).await;
        let m = assert_openai_error(&r, 404, Some("model"), Some("model_not_found"), "'gpt-9'");
        assert!(
            m.contains(MODEL_ID),
            "the message lists the served model: {m}"
        );
    }
    let r = post(&state, "/v1/messages", &body).await;
    assert_anthropic_error(&r, 404, "not_found_error", "'gpt-9'");
}

#[tokio::test]
async fn unknown_paths_and_wrong_methods() {
    let state = shared_state();
    let r = send(&state, Method::GET, "/v1/nothing", &[], Body::empty()).await;
    assert_openai_error(&r, 404, None, Some("unknown_url"), "/v1/nothing");
    let r = post(&state, "/v2/chat/completions", &chat_body("Hi", 8)).await;
    assert_openai_error(&r, 404, None, Some("unknown_url"), "/v2/chat/completions");
    let r = send(
        &state,
        Method::GET,
        "/v1/chat/completions",
        &[],
        Body::empty(),
    )
    .await;
    assert_openai_error(&r, 405, None, None, "does not accept GET");
    let r = send(&state, Method::DELETE, "/v1/models", &[], Body::empty()).await;
    assert_openai_error(&r, 405, None, None, "does not accept DELETE");
    let r = send(&state, Method::PUT, "/v1/responses", &[], Body::empty()).await;
    assert_openai_error(&r, 405, None, None, "does not accept PUT");
    // GET /v1/responses without an upgrade is not a listing.
    let r = send(&state, Method::GET, "/v1/responses", &[], Body::empty()).await;
    assert_openai_error(&r, 405, None, None, "WebSocket upgrade");
}

#[tokio::test]
async fn bad_messages() {
    let state = shared_state();
    let uri = "/v1/chat/completions";
    let r = post(&state, uri, &json!({"max_tokens": 8})).await;
    assert_openai_error(
        &r,
        400,
        Some("messages"),
        Some("invalid_value"),
        "'messages' is required",
    );
    let r = post(&state, uri, &json!({"messages": [], "max_tokens": 8})).await;
    assert_openai_error(
        &r,
        400,
        Some("messages"),
        Some("invalid_value"),
        "must not be empty",
    );
    let cases = [
        (
            json!([{"role": "wizard", "content": "Hi"}]),
            "messages[0].role",
            "unknown role 'wizard'",
        ),
        (
            json!([{"content": "Hi"}]),
            "messages[0].role",
            "needs a 'role'",
        ),
        (json!(["Hi"]), "messages[0]", "must be an object"),
        (
            json!([{"role": "user"}]),
            "messages[0].content",
            "needs 'content'",
        ),
        (
            json!([{"role": "user", "content": 5}]),
            "messages[0].content",
            "string or a list",
        ),
        (
            json!([{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]),
            "messages[0].content[1].type",
            "only text content is supported, got a part of type 'image_url'",
        ),
        (
            json!([{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text"}]}]),
            "messages[1].content[0].text",
            "needs a 'text' string",
        ),
        (
            json!([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null,
                "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "f", "arguments": "{not json"}}]}]),
            "messages[1].tool_calls[0].function.arguments",
            "must be a JSON text",
        ),
    ];
    for (messages, param, message) in cases {
        let r = post(&state, uri, &json!({"messages": messages, "max_tokens": 8})).await;
        assert_openai_error(&r, 400, Some(param), Some("invalid_value"), message);
    }
}

#[tokio::test]
async fn tool_choice_must_match_the_tools() {
    let state = shared_state();
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let cases = [
        (
            json!({"type": "function", "function": {"name": "get_time"}}),
            Some(tools.clone()),
            "names the function 'get_time', which is not in 'tools'",
        ),
        (json!("required"), None, "no tools were given"),
        (
            json!("sometimes"),
            Some(tools.clone()),
            "'tool_choice' must be",
        ),
    ];
    for (choice, tools, message) in cases {
        let mut body = chat_body("Weather in Paris?", 8);
        body["tool_choice"] = choice;
        if let Some(t) = tools {
            body["tools"] = t;
        }
        let r = post(&state, "/v1/chat/completions", &body).await;
        assert_openai_error(&r, 400, Some("tool_choice"), Some("invalid_value"), message);
    }
    let mut body = chat_body("Hi", 8);
    body["tools"] = json!([{"type": "function"}]);
    let r = post(&state, "/v1/chat/completions", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("tools[0].function"),
        Some("invalid_value"),
        "'function'",
    );
}

#[tokio::test]
async fn unsupported_options() {
    let state = shared_state();
    // Log-probabilities: at most 20 alternatives, and top_logprobs only with logprobs.
    let r = post(
        &state,
        "/v1/chat/completions",
        &with(chat_body("Hi", 8), "top_logprobs", json!(2)),
    )
    .await;
    assert_openai_error(
        &r,
        400,
        Some("top_logprobs"),
        Some("invalid_value"),
        "needs 'logprobs': true",
    );
    let body = with(chat_body("Hi", 8), "logprobs", json!(true));
    let r = post(
        &state,
        "/v1/chat/completions",
        &with(body, "top_logprobs", json!(21)),
    )
    .await;
    assert_openai_error(
        &r,
        400,
        Some("top_logprobs"),
        Some("invalid_value"),
        "at most 20",
    );
    let base = json!({"prompt": "def f():", "max_tokens": 8, "temperature": 0});
    // `max_tokens: 0` only scores an echoed prompt.
    let r = post(
        &state,
        "/v1/completions",
        &with(base.clone(), "max_tokens", json!(0)),
    )
    .await;
    assert_openai_error(
        &r,
        400,
        Some("max_tokens"),
        Some("invalid_value"),
        "at least 1",
    );
    let r = post(
        &state,
        "/v1/completions",
        &with(base.clone(), "echo", json!("yes")),
    )
    .await;
    assert_openai_error(
        &r,
        400,
        Some("echo"),
        Some("invalid_type"),
        "must be a boolean",
    );
    for (logprobs, code, message) in [
        (json!(true), "invalid_type", "must be an integer"),
        (json!(21), "invalid_value", "at most 20"),
        (json!(-1), "invalid_value", "non-negative integer"),
    ] {
        let r = post(
            &state,
            "/v1/completions",
            &with(base.clone(), "logprobs", logprobs),
        )
        .await;
        assert_openai_error(&r, 400, Some("logprobs"), Some(code), message);
    }
    let r = post(
        &state,
        "/v1/completions",
        &with(base.clone(), "best_of", json!(3)),
    )
    .await;
    assert_openai_error(&r, 400, Some("best_of"), Some("invalid_value"), "must be 1");
    let r = post(
        &state,
        "/v1/completions",
        &with(base, "prompt", json!(["a", "b"])),
    )
    .await;
    assert_openai_error(
        &r,
        400,
        Some("prompt"),
        Some("invalid_value"),
        "only one prompt",
    );
}

#[tokio::test]
async fn completion_prompts_are_checked() {
    let state = shared_state();
    let vocab = state.backend().unwrap().tokenizer.vocab_size();
    let cases = [
        (
            json!([1, 2, vocab]),
            format!("token id {vocab} is outside the vocabulary"),
        ),
        (json!([[vocab + 7]]), format!("(size {vocab})")),
        (
            json!([1, -2]),
            "must be a string, a list of token ids".to_string(),
        ),
        (json!(""), "the prompt is empty".to_string()),
        (json!([]), "the prompt is empty".to_string()),
        (
            json!({"text": "x"}),
            "must be a string, a list of token ids".to_string(),
        ),
    ];
    for (prompt, message) in cases {
        let body = json!({"prompt": prompt, "max_tokens": 8});
        let r = post(&state, "/v1/completions", &body).await;
        assert_openai_error(&r, 400, Some("prompt"), Some("invalid_value"), &message);
    }
    let r = post(&state, "/v1/completions", &json!({"max_tokens": 8})).await;
    assert_openai_error(
        &r,
        400,
        Some("prompt"),
        Some("invalid_value"),
        "'prompt' is required",
    );
}

#[tokio::test]
async fn responses_errors() {
    let state = shared_state();
    let body =
        json!({"input": "Hi", "previous_response_id": "resp_missing", "max_output_tokens": 8});
    let r = post(&state, "/v1/responses", &body).await;
    assert_openai_error(
        &r,
        404,
        Some("previous_response_id"),
        Some("not_found"),
        "'resp_missing' not found",
    );
    for method in [Method::GET, Method::DELETE] {
        let r = send(
            &state,
            method,
            "/v1/responses/resp_missing",
            &[],
            Body::empty(),
        )
        .await;
        assert_openai_error(&r, 404, None, Some("not_found"), "'resp_missing'");
    }
    let body = json!({"input": "Hi", "background": true});
    let r = post(&state, "/v1/responses", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("background"),
        Some("invalid_value"),
        "not supported",
    );
    let r = post(&state, "/v1/responses", &json!({"max_output_tokens": 8})).await;
    assert_openai_error(
        &r,
        400,
        Some("input"),
        Some("invalid_value"),
        "'input' is required",
    );
    let r = post(&state, "/v1/responses", &json!({"input": 7})).await;
    assert_openai_error(
        &r,
        400,
        Some("input"),
        Some("invalid_value"),
        "string or a list",
    );
    let body = json!({"input": [{"type": "message", "role": "user",
        "content": [{"type": "input_image", "image_url": "x"}]}]});
    let r = post(&state, "/v1/responses", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("input[0].content[0].type"),
        Some("invalid_value"),
        "'input_image'",
    );
    // Hosted tools are left out (tests/http/tools.rs); a function still needs a name, also
    // inside a namespace.
    let body = json!({"input": "Hi", "tools": [{"type": "web_search"},
        {"type": "namespace", "name": "crm", "tools": [{"type": "function"}]}]});
    let r = post(&state, "/v1/responses", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("tools[1].tools[0].name"),
        Some("invalid_value"),
        "needs a 'name'",
    );
}

#[tokio::test]
async fn anthropic_errors_use_anthropic_envelope() {
    let state = shared_state();
    let body = json!({"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}]});
    let r = post(&state, "/v1/messages", &body).await;
    assert_anthropic_error(&r, 400, "invalid_request_error", "'max_tokens' is required");
    let r = send(&state, Method::POST, "/v1/messages", &[], "{oops").await;
    assert_anthropic_error(&r, 400, "invalid_request_error", "not valid JSON");
    let r = send(
        &state,
        Method::POST,
        "/v1/messages/count_tokens",
        &[],
        Body::empty(),
    )
    .await;
    assert_anthropic_error(&r, 400, "invalid_request_error", "body is empty");
    // System turns are accepted (see anthropic.rs); other roles get Anthropic's words.
    let body = json!({"max_tokens": 8, "messages": [{"role": "tool", "content": "Hi"}]});
    let r = post(&state, "/v1/messages", &body).await;
    assert_anthropic_error(&r, 400, "invalid_request_error", "Unexpected role \"tool\"");
    let body = json!({"max_tokens": 8, "temperature": 3,
        "messages": [{"role": "user", "content": "Hi"}]});
    let r = post(&state, "/v1/messages", &body).await;
    assert_anthropic_error(&r, 400, "invalid_request_error", "'temperature'");
    let body = json!({"max_tokens": 8, "messages": [{"role": "user",
        "content": [{"type": "image", "source": {}}]}]});
    let r = post(&state, "/v1/messages", &body).await;
    assert_anthropic_error(&r, 400, "invalid_request_error", "'image'");
}

#[tokio::test]
async fn tokenizer_endpoints_check_their_input() {
    let state = shared_state();
    let vocab = state.backend().unwrap().tokenizer.vocab_size();
    let r = post(&state, "/detokenize", &json!({"tokens": [1, vocab]})).await;
    assert_openai_error(
        &r,
        400,
        Some("tokens"),
        Some("invalid_value"),
        &format!("below {vocab}, got {vocab}"),
    );
    let r = post(&state, "/detokenize", &json!({"tokens": [-1]})).await;
    assert_openai_error(&r, 400, Some("tokens"), Some("invalid_value"), "got -1");
    let r = post(&state, "/detokenize", &json!({})).await;
    assert_openai_error(
        &r,
        400,
        Some("tokens"),
        Some("invalid_value"),
        "'tokens' is required",
    );
    let r = post(&state, "/tokenize", &json!({})).await;
    assert_openai_error(&r, 400, Some("content"), Some("invalid_value"), "'content'");
}

/// A tool's parameters must be a JSON Schema object on every API (they reach the template).
#[tokio::test]
async fn tool_parameters_must_be_schema_objects() {
    let state = shared_state();
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]});
    let r = post(&state, "/v1/chat/completions", &chat).await;
    assert_openai_error(
        &r,
        400,
        Some("tools[0].function.parameters"),
        Some("invalid_value"),
        "must be a JSON Schema object, got a string",
    );
    let responses = json!({"input": "Hi", "tools": [{"type": "function", "name": "f",
        "parameters": [1]}]});
    let r = post(&state, "/v1/responses", &responses).await;
    assert_openai_error(
        &r,
        400,
        Some("tools[0].parameters"),
        Some("invalid_value"),
        "got an array",
    );
    let messages = json!({"max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}],
        "tools": [{"name": "f", "input_schema": 5}]});
    let r = post(&state, "/v1/messages", &messages).await;
    assert_anthropic_error(&r, 400, "invalid_request_error", "tools[0].input_schema");
    // Absent or null parameters still mean "no arguments".
    let ok = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": null}}]});
    assert_eq!(post(&state, "/v1/chat/completions", &ok).await.status, 200);
}

/// `logit_bias` is refused (not silently ignored) where it would change a reply; empty is fine.
#[tokio::test]
async fn logit_bias_is_refused_not_ignored() {
    let state = shared_state();
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
        "logit_bias": {"42": -100}});
    let r = post(&state, "/v1/chat/completions", &body).await;
    assert_openai_error(
        &r,
        400,
        Some("logit_bias"),
        Some("invalid_value"),
        "not supported",
    );
    let r = post(
        &state,
        "/v1/completions",
        &json!({"prompt": "Hi", "max_tokens": 2,
        "logit_bias": {"7": 5}}),
    )
    .await;
    assert_openai_error(
        &r,
        400,
        Some("logit_bias"),
        Some("invalid_value"),
        "not supported",
    );
    let empty = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
        "logit_bias": {}});
    assert_eq!(
        post(&state, "/v1/chat/completions", &empty).await.status,
        200
    );
}
