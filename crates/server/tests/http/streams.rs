//! Streamed replies equal the JSON ones: chat and completions chunks, the Responses API's
//! events (and `previous_response_id`), Anthropic's named events.

use serde_json::{json, Value};

use crate::common::{chat_body, is_hex, MODEL_ID};
use crate::{chat_text, chunks, finish_chunk, shared, with};

#[test]
fn chat_stream_equals_json_reply() {
    let s = shared();
    let body = chat_body("Write one sentence about the sea.", 24);
    let reply = s.post_ok("/v1/chat/completions", &body);
    let content = reply["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty(), "{reply}");
    let sha = reply["tensorfold"]["token_sha"].as_str().unwrap();
    assert!(is_hex(sha, 12), "{sha}");

    let streamed = with(body, "stream", json!(true));
    let streamed = with(streamed, "stream_options", json!({"include_usage": true}));
    let chunks = chunks(&s.post_sse("/v1/chat/completions", &streamed));
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"), "{id}");
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk", "{c}");
        assert_eq!(c["id"], id, "one id for the whole stream");
        assert_eq!(c["model"], MODEL_ID);
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    // Text arrives in more than one piece, and joins to the JSON reply's.
    let pieces = chunks[1..]
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].is_string())
        .count();
    assert!(pieces > 1, "{chunks:?}");
    assert_eq!(chat_text(&chunks), content);

    let last = finish_chunk(&chunks);
    assert_eq!(
        last["choices"][0]["finish_reason"],
        reply["choices"][0]["finish_reason"]
    );
    assert_eq!(last["choices"][0]["delta"], json!({}));
    assert_eq!(last["tensorfold"]["token_sha"], sha);

    // include_usage: a last chunk with no choices and the usage.
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]), "{usage}");
    for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage["usage"][key], reply["usage"][key], "{key}");
    }
    assert!(usage["usage"]["completion_tokens_details"]["reasoning_tokens"].is_u64());
    assert_eq!(
        chunks.iter().filter(|c| c.get("usage").is_some()).count(),
        1
    );
}

#[test]
fn completions_stream_equals_json_reply() {
    let s = shared();
    let body = json!({"model": MODEL_ID, "prompt": "def fibonacci(n):\n", "max_tokens": 24,
        "temperature": 0});
    let reply = s.post_ok("/v1/completions", &body);
    let text = reply["choices"][0]["text"].as_str().unwrap();
    assert!(!text.is_empty(), "{reply}");

    let chunks = chunks(&s.post_sse("/v1/completions", &with(body, "stream", json!(true))));
    assert!(chunks.len() > 2, "{chunks:?}");
    for c in &chunks {
        assert_eq!(c["object"], "text_completion", "{c}");
        assert_eq!(c["id"], chunks[0]["id"]);
        // Without include_usage, no chunk carries usage.
        assert!(c.get("usage").is_none(), "{c}");
    }
    let joined: String = chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(joined, text);
    let last = finish_chunk(&chunks);
    assert_eq!(last, chunks.last().unwrap(), "the finish chunk is the last");
    assert_eq!(
        last["choices"][0]["finish_reason"],
        reply["choices"][0]["finish_reason"]
    );
    assert_eq!(
        last["tensorfold"]["token_sha"],
        reply["tensorfold"]["token_sha"]
    );
}

/// The response object inside a terminal Responses event.
fn output_text(response: &Value) -> &str {
    let item = &response["output"][0];
    assert_eq!(item["type"], "message", "{response}");
    assert_eq!(item["content"][0]["type"], "output_text", "{response}");
    item["content"][0]["text"].as_str().unwrap()
}

/// Checks a Responses event sequence (SSE or WebSocket): `response.created` first, a terminal
/// `response.completed` last, sequence numbers 0, 1, 2, ..., the text deltas joining to the
/// completed response's text. Returns the completed response.
#[track_caller]
pub fn check_response_events(events: &[Value]) -> Value {
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[0], "response.created", "{kinds:?}");
    assert_eq!(kinds[1], "response.in_progress", "{kinds:?}");
    assert_eq!(*kinds.last().unwrap(), "response.completed", "{kinds:?}");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "event {i}: {e}");
    }
    for kind in [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ] {
        assert_eq!(
            kinds.iter().filter(|k| **k == kind).count(),
            1,
            "{kind}: {kinds:?}"
        );
    }
    assert_eq!(events[0]["response"]["status"], "in_progress");
    let completed = events.last().unwrap()["response"].clone();
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["id"], events[0]["response"]["id"]);
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(!deltas.is_empty());
    assert_eq!(deltas, output_text(&completed));
    let done = events
        .iter()
        .find(|e| e["type"] == "response.output_text.done")
        .unwrap();
    assert_eq!(done["text"], deltas);
    completed
}

/// A question the model answers well within the token budget.
pub const SHORT_QUESTION: &str = "Answer in one word: what color is the sky on a clear day?";

#[test]
fn responses_stream_and_continuation() {
    let s = shared();
    let body = json!({"model": MODEL_ID, "input": SHORT_QUESTION, "max_output_tokens": 24,
        "temperature": 0, "stream": true});
    let events = s.post_sse("/v1/responses", &body);
    for e in &events {
        // Named events, the name repeated as the data's type.
        assert_eq!(e.event.as_deref(), e.json()["type"].as_str(), "{e:?}");
    }
    let events: Vec<Value> = events.iter().map(|e| e.json()).collect();
    let first = check_response_events(&events);
    let id = first["id"].as_str().unwrap();

    // The same request without streaming: the same reply.
    let json_reply = s.post_ok("/v1/responses", &with(body.clone(), "stream", json!(false)));
    assert_eq!(output_text(&json_reply), output_text(&first));
    assert_eq!(
        json_reply["tensorfold"]["token_sha"],
        first["tensorfold"]["token_sha"]
    );

    // The stored response continues: its conversation comes before the new input.
    let (status, stored) = s.get(&format!("/v1/responses/{id}"));
    assert_eq!(status, 200);
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(stored["id"], id);
    let next = json!({"model": MODEL_ID, "input": "And at night?", "previous_response_id": id,
        "max_output_tokens": 8, "temperature": 0});
    let second = s.post_ok("/v1/responses", &next);
    assert_eq!(second["previous_response_id"], id);
    let first_in = first["usage"]["input_tokens"].as_u64().unwrap();
    let second_in = second["usage"]["input_tokens"].as_u64().unwrap();
    // Both turns of the first exchange, and the new question.
    let first_out = first["usage"]["output_tokens"].as_u64().unwrap();
    assert!(
        second_in > first_in + first_out,
        "{first_in} + {first_out} vs {second_in}"
    );
    let alone = s.post_ok(
        "/v1/responses",
        &with(next, "previous_response_id", Value::Null),
    );
    assert!(second_in > alone["usage"]["input_tokens"].as_u64().unwrap());
}

#[test]
fn anthropic_stream_equals_json_reply() {
    let s = shared();
    let body = json!({"model": MODEL_ID, "max_tokens": 24, "temperature": 0,
        "messages": [{"role": "user", "content": "Write one sentence about mountains."}]});
    let reply = s.post_ok("/v1/messages", &body);
    let text = reply["content"][0]["text"].as_str().unwrap();
    assert!(!text.is_empty(), "{reply}");

    let events = s.post_sse("/v1/messages", &with(body, "stream", json!(true)));
    let names: Vec<&str> = events
        .iter()
        .map(|e| e.event.as_deref().expect("named events"))
        .collect();
    for e in &events {
        assert_eq!(e.event.as_deref(), e.json()["type"].as_str(), "{e:?}");
    }
    let n = names.len();
    assert!(n >= 7, "{names:?}");
    assert_eq!(
        names[..3],
        ["message_start", "ping", "content_block_start"],
        "{names:?}"
    );
    assert_eq!(
        names[n - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{names:?}"
    );
    assert!(
        names[3..n - 3].iter().all(|k| *k == "content_block_delta"),
        "{names:?}"
    );

    let data: Vec<Value> = events.iter().map(|e| e.json()).collect();
    let start = &data[0]["message"];
    assert_eq!(
        start["id"].as_str().unwrap().len(),
        reply["id"].as_str().unwrap().len()
    );
    assert_eq!(start["content"], json!([]));
    // message_start counts the whole prompt (nothing is known to be cached yet); the reply
    // splits it into tokens read from the cache and the rest.
    let whole = |u: &Value| {
        u["input_tokens"].as_u64().unwrap() + u["cache_read_input_tokens"].as_u64().unwrap()
    };
    assert_eq!(
        start["usage"]["input_tokens"].as_u64(),
        Some(whole(&reply["usage"]))
    );
    assert_eq!(
        data[2]["content_block"],
        json!({"type": "text", "text": ""})
    );
    let joined: String = data[3..n - 3]
        .iter()
        .map(|d| {
            assert_eq!(d["index"], 0);
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(joined, text);
    let delta = &data[n - 2];
    assert_eq!(delta["delta"]["stop_reason"], reply["stop_reason"]);
    assert_eq!(
        delta["usage"]["output_tokens"],
        reply["usage"]["output_tokens"]
    );
    // The stream's receipt, on its last delta, is the JSON reply's.
    assert_eq!(
        delta["tensorfold"]["token_sha"], reply["tensorfold"]["token_sha"],
        "{delta}"
    );
}
