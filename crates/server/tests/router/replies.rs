//! Successful JSON replies: the shape of each endpoint's answer, the tokenizer round trip and
//! the metrics page.

use serde_json::{json, Value};

use crate::common::{chat_body, is_hex, shared_state, CONTEXT, MODEL_ID};
use crate::{assert_openai_error, get, post, send};
use axum::http::Method;

const MAX: u64 = 12;

/// The receipt every generation reply carries.
#[track_caller]
fn assert_receipt(body: &Value) {
    let t = &body["tensorfold"];
    let sha = t["token_sha"]
        .as_str()
        .unwrap_or_else(|| panic!("token_sha: {body}"));
    assert!(is_hex(sha, 12), "token_sha {sha:?}");
    for key in ["min_rows", "rounds", "drafted", "accepted", "seed"] {
        assert!(t[key].is_u64(), "tensorfold.{key}: {body}");
    }
    assert!(t["accepted"].as_u64() <= t["drafted"].as_u64(), "{body}");
    assert!(t["sources"].is_object(), "{body}");
}

#[tokio::test]
async fn chat_reply() {
    let state = shared_state();
    let body = chat_body("Name three colors.", MAX);
    let r = post(&state, "/v1/chat/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let b = r.json();
    assert!(b["id"].as_str().unwrap().starts_with("chatcmpl-"), "{b}");
    assert_eq!(b["object"], "chat.completion");
    assert_eq!(b["model"], MODEL_ID);
    assert!(b["created"].as_u64().unwrap() > 1_600_000_000);
    let choice = &b["choices"][0];
    assert_eq!(b["choices"].as_array().unwrap().len(), 1);
    assert_eq!(choice["index"], 0);
    assert_eq!(choice["message"]["role"], "assistant");
    let content = choice["message"]["content"]
        .as_str()
        .expect("string content");
    assert!(!content.trim().is_empty(), "{b}");
    assert!(choice["message"].get("tool_calls").is_none(), "{b}");
    let u = &b["usage"];
    let (prompt, completion) = (
        u["prompt_tokens"].as_u64().unwrap(),
        u["completion_tokens"].as_u64().unwrap(),
    );
    assert!(prompt > 5 && (1..=MAX).contains(&completion), "{u}");
    assert_eq!(u["total_tokens"].as_u64().unwrap(), prompt + completion);
    // Prompt tokens served from the prefix cache (if any) are part of the prompt.
    assert!(
        u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            <= prompt,
        "{u}"
    );
    assert_eq!(u["completion_tokens_details"]["reasoning_tokens"], 0, "{u}");
    let finish = choice["finish_reason"].as_str().unwrap();
    assert!(finish == "stop" || finish == "length", "{finish}");
    if completion == MAX {
        assert_eq!(finish, "length");
    }
    assert_receipt(&b);

    // The prompt counted by /tokenize (same messages, same template) is the one that ran.
    let r = post(&state, "/tokenize", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["count"].as_u64().unwrap(), prompt);
    assert_eq!(r.json()["max_model_len"], CONTEXT);

    // Same greedy request, same tokens.
    let again = post(&state, "/v1/chat/completions", &body).await.json();
    assert_eq!(
        again["tensorfold"]["token_sha"],
        b["tensorfold"]["token_sha"]
    );
    assert_eq!(again["choices"][0]["message"]["content"], content);
    assert_ne!(again["id"], b["id"]);
}

#[tokio::test]
async fn completion_reply() {
    let state = shared_state();
    let body = json!({"model": MODEL_ID, "prompt": "def add(a, b):\n", "max_tokens": MAX,
        "temperature": 0});
    let r = post(&state, "/v1/completions", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let b = r.json();
    assert!(b["id"].as_str().unwrap().starts_with("cmpl-"), "{b}");
    assert_eq!(b["object"], "text_completion");
    assert_eq!(b["model"], MODEL_ID);
    let text = b["choices"][0]["text"].as_str().expect("string text");
    assert!(!text.is_empty(), "{b}");
    assert!(b["choices"][0]["finish_reason"].is_string());
    let u = &b["usage"];
    assert!(u["completion_tokens"].as_u64().unwrap() <= MAX);
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());
    assert_receipt(&b);

    // A prompt given as token ids is the same prompt.
    let ids = post(&state, "/tokenize", &json!({"content": "def add(a, b):\n"}))
        .await
        .json();
    let tokens = ids["tokens"].clone();
    assert_eq!(u["prompt_tokens"], ids["count"], "{ids}");
    for prompt in [tokens.clone(), json!([tokens])] {
        let mut by_ids = body.clone();
        by_ids["prompt"] = prompt;
        let r = post(&state, "/v1/completions", &by_ids).await.json();
        assert_eq!(r["choices"][0]["text"], text, "{r}");
        assert_eq!(r["tensorfold"]["token_sha"], b["tensorfold"]["token_sha"]);
    }
}

#[tokio::test]
async fn responses_reply_is_stored() {
    let state = shared_state();
    let body = json!({"model": MODEL_ID, "input": "Name a fruit.", "max_output_tokens": MAX,
        "temperature": 0, "instructions": "Answer in one word.", "metadata": {"k": "v"}});
    let r = post(&state, "/v1/responses", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let b = r.json();
    let id = b["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("resp_"), "{b}");
    assert_eq!(b["object"], "response");
    assert!(
        ["completed", "incomplete"].contains(&b["status"].as_str().unwrap()),
        "{b}"
    );
    assert_eq!(b["model"], MODEL_ID);
    assert_eq!(b["instructions"], "Answer in one word.");
    assert_eq!(b["metadata"], json!({"k": "v"}));
    assert_eq!(b["max_output_tokens"], MAX);
    let item = &b["output"][0];
    assert_eq!(item["type"], "message");
    assert_eq!(item["role"], "assistant");
    assert_eq!(item["content"][0]["type"], "output_text");
    assert!(
        !item["content"][0]["text"].as_str().unwrap().is_empty(),
        "{b}"
    );
    let u = &b["usage"];
    assert!(u["input_tokens"].as_u64().unwrap() > 5, "{u}");
    assert!(u["output_tokens"].as_u64().unwrap() <= MAX);
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap()
    );
    assert!(u["output_tokens_details"]["reasoning_tokens"].is_u64());
    assert_receipt(&b);

    let uri = format!("/v1/responses/{id}");
    let r = get(&state, &uri).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), b);
    let r = send(&state, Method::DELETE, &uri, &[], axum::body::Body::empty()).await;
    assert_eq!(
        r.json(),
        json!({"id": id, "object": "response.deleted", "deleted": true})
    );
    let r = get(&state, &uri).await;
    assert_openai_error(&r, 404, None, Some("not_found"), &id);

    // store: false keeps nothing.
    let mut body = body;
    body["store"] = json!(false);
    let b = post(&state, "/v1/responses", &body).await.json();
    let r = get(
        &state,
        &format!("/v1/responses/{}", b["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn anthropic_reply_and_count_tokens() {
    let state = shared_state();
    let body = json!({"model": MODEL_ID, "max_tokens": MAX, "temperature": 0,
        "system": "Be brief.", "messages": [{"role": "user", "content": "Name a color."}]});
    let r = post(&state, "/v1/messages", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let b = r.json();
    assert!(b["id"].as_str().unwrap().starts_with("msg_"), "{b}");
    assert_eq!(b["type"], "message");
    assert_eq!(b["role"], "assistant");
    assert_eq!(b["model"], MODEL_ID);
    assert_eq!(b["content"][0]["type"], "text");
    assert!(!b["content"][0]["text"].as_str().unwrap().is_empty(), "{b}");
    assert!(
        ["end_turn", "max_tokens"].contains(&b["stop_reason"].as_str().unwrap()),
        "{b}"
    );
    // Anthropic's input_tokens leave out what was read from the cache.
    let input = b["usage"]["input_tokens"].as_u64().unwrap()
        + b["usage"]["cache_read_input_tokens"].as_u64().unwrap();
    assert!(input > 5, "{b}");
    assert!(b["usage"]["output_tokens"].as_u64().unwrap() <= MAX);
    assert_receipt(&b);

    let r = post(&state, "/v1/messages/count_tokens", &body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"input_tokens": input}));
    // count_tokens needs no max_tokens.
    let mut no_max = body.clone();
    no_max.as_object_mut().unwrap().remove("max_tokens");
    let r = post(&state, "/v1/messages/count_tokens", &no_max).await;
    assert_eq!(r.json(), json!({"input_tokens": input}));

    // A stop sequence from the middle of the reply ends it at its first occurrence.
    let text = b["content"][0]["text"].as_str().unwrap().to_string();
    let chars: Vec<char> = text.chars().collect();
    let stop = chars[chars.len() / 2..]
        .iter()
        .find(|c| !c.is_whitespace())
        .unwrap_or_else(|| panic!("a reply with text in its second half: {text:?}"))
        .to_string();
    let mut stopped = body.clone();
    stopped["stop_sequences"] = json!([stop]);
    let s = post(&state, "/v1/messages", &stopped).await.json();
    assert_eq!(s["stop_reason"], "stop_sequence", "{s}");
    assert_eq!(s["stop_sequence"], stop);
    let cut = &text[..text.find(&stop).unwrap()];
    let got = s["content"]
        .as_array()
        .unwrap()
        .first()
        .map_or("", |c| c["text"].as_str().unwrap());
    assert_eq!(got, cut, "{s}");
}

#[tokio::test]
async fn tokenize_detokenize_round_trip() {
    let state = shared_state();
    let text = "fn main() { println!(\"héllo, wörld\"); } // 🦀";
    let r = post(&state, "/tokenize", &json!({"content": text})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let t = r.json();
    let tokens = t["tokens"].as_array().unwrap();
    assert_eq!(t["count"].as_u64().unwrap() as usize, tokens.len());
    assert!(tokens.len() > 5, "{t}");
    let r = post(&state, "/detokenize", &json!({"tokens": tokens})).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["content"], text);
    assert_eq!(r.json()["prompt"], text);
    // `prompt` is accepted for `content`.
    let r = post(&state, "/tokenize", &json!({"prompt": text})).await;
    assert_eq!(r.json()["tokens"], t["tokens"]);
    // Special tokens in the text are parsed.
    let r = post(&state, "/tokenize", &json!({"content": "<|im_start|>"})).await;
    assert_eq!(r.json()["count"], 1, "{}", r.text());
}

#[tokio::test]
async fn metrics_page() {
    let state = shared_state();
    // At least one finished request, so that the histograms have observations.
    let r = post(&state, "/v1/chat/completions", &chat_body("Hi", 4)).await;
    assert_eq!(r.status, 200);
    let r = get(&state, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let text = r.text();
    for name in [
        "tensorfold:num_requests_running",
        "tensorfold:num_requests_waiting",
        "tensorfold:client_disconnects_total",
        "tensorfold:kv_free_blocks",
        "tensorfold:kv_total_blocks",
        "tensorfold:request_success_total",
        "tensorfold:generation_tokens_total",
        "tensorfold:spec_decode_num_draft_tokens_total",
    ] {
        let line = text
            .lines()
            .find(|l| l.split(' ').next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} sample in\n{text}"));
        let value: f64 = line[name.len() + 1..].parse().expect("a number");
        assert!(value >= 0.0, "{line}");
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} has a TYPE line"
        );
    }
    for h in ["time_to_first_token_seconds", "e2e_request_latency_seconds"] {
        assert!(
            text.contains(&format!("# TYPE tensorfold:{h} histogram")),
            "{text}"
        );
        assert!(
            text.contains(&format!("tensorfold:{h}_bucket{{le=\"0.01\"}} ")),
            "{text}"
        );
        let inf = format!("tensorfold:{h}_bucket{{le=\"+Inf\"}} ");
        let line = text
            .lines()
            .find(|l| l.starts_with(&inf))
            .expect("+Inf bucket");
        assert!(line[inf.len()..].parse::<u64>().unwrap() >= 1, "{line}");
        assert!(text.contains(&format!("tensorfold:{h}_count ")), "{text}");
    }
    let total = sample(&text, "tensorfold:kv_total_blocks");
    assert!(total > 0.0 && sample(&text, "tensorfold:kv_free_blocks") <= total);
    assert!(sample(&text, "tensorfold:request_success_total") >= 1.0);
}

fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name}"))
        .parse()
        .unwrap()
}
