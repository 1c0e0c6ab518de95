//! Exactness through the API: a drafted reply equals its serial twin (`"draft": false`), with
//! and without stop strings, and concurrent requests equal their solo runs.

use std::sync::{Arc, Barrier};

use serde_json::{json, Value};
use tf_server::ServerConfig;

use crate::common::{chat_body, qwen, KV_POSITIONS, MODEL_ID, PYTHON};
use crate::{chat_text, chunks, finish_chunk, shared, start, with, Server};

/// The reply's text (chat or completions).
fn text(reply: &Value) -> &str {
    let choice = &reply["choices"][0];
    choice["message"]["content"]
        .as_str()
        .or(choice["text"].as_str())
        .unwrap_or_else(|| panic!("no text in {reply}"))
}

/// Runs `body` drafted and serially: both replies, after checking that they are the same
/// tokens and text.
#[track_caller]
fn drafted_and_serial(s: &Server, path: &str, body: &Value) -> (Value, Value) {
    let drafted = s.post_ok(path, &with(body.clone(), "draft", json!(true)));
    let serial = s.post_ok(path, &with(body.clone(), "draft", json!(false)));
    let (d, r) = (&drafted["tensorfold"], &serial["tensorfold"]);
    assert_eq!(
        d["token_sha"], r["token_sha"],
        "drafted {drafted}\nserial {serial}"
    );
    assert_eq!(text(&drafted), text(&serial));
    assert_eq!(
        drafted["choices"][0]["finish_reason"],
        serial["choices"][0]["finish_reason"]
    );
    assert_eq!(
        drafted["usage"]["completion_tokens"],
        serial["usage"]["completion_tokens"]
    );
    assert_eq!(r["drafted"], 0, "draft: false drafts nothing: {serial}");
    assert_eq!(r["accepted"], 0);
    assert_eq!(r["min_rows"], 1, "serial rounds verify one row: {serial}");
    (drafted, serial)
}

#[test]
fn drafted_equals_serial_chat_greedy() {
    let body = chat_body("Write a Python function that reverses a string.", 32);
    let (drafted, _) = drafted_and_serial(shared(), "/v1/chat/completions", &body);
    assert!(!text(&drafted).is_empty());
}

#[test]
fn drafted_equals_serial_chat_sampled() {
    let s = shared();
    let body = json!({"model": MODEL_ID, "max_tokens": 32, "temperature": 0.8, "seed": 7,
        "messages": [{"role": "user", "content": "Tell me a short story about a robot."}]});
    let (drafted, _) = drafted_and_serial(s, "/v1/chat/completions", &body);
    assert_eq!(drafted["tensorfold"]["seed"], 7);
    // Sampling is keyed by the seed: another seed draws another reply.
    let other = s.post_ok("/v1/chat/completions", &with(body, "seed", json!(8)));
    assert_eq!(other["tensorfold"]["seed"], 8);
    assert_ne!(
        other["tensorfold"]["token_sha"],
        drafted["tensorfold"]["token_sha"]
    );
}

#[test]
fn drafted_equals_serial_completions_code() {
    let body = json!({"model": MODEL_ID, "prompt": PYTHON, "max_tokens": 48, "temperature": 0,
        "ignore_eos": true});
    let (drafted, serial) = drafted_and_serial(shared(), "/v1/completions", &body);
    let d = &drafted["tensorfold"];
    // Repetitive code: context copies guess, and guesses are accepted.
    assert!(d["drafted"].as_u64().unwrap() > 0, "{drafted}");
    assert!(d["min_rows"].as_u64().unwrap() >= 1, "{drafted}");
    assert!(d["accepted"].as_u64().unwrap() > 0, "{drafted}");
    assert!(
        d["rounds"].as_u64().unwrap() < serial["tensorfold"]["rounds"].as_u64().unwrap(),
        "accepted guesses save rounds: {drafted}\n{serial}"
    );
    assert_eq!(drafted["usage"]["completion_tokens"], 48);
}

#[test]
fn stop_strings_cut_the_reply() {
    let s = shared();
    let body = chat_body("List six animals, separated by spaces, on one line.", 32);
    let full = s.post_ok("/v1/chat/completions", &body);
    let content = text(&full).to_string();
    let words: Vec<&str> = content.split_whitespace().collect();
    assert!(
        words.len() >= 3,
        "a reply of three words at least: {content:?}"
    );
    // The third word: the reply ends where it first occurs.
    let stop = words[2].to_string();
    let expected = &content[..content.find(&stop).unwrap()];
    let stopped_body = with(body, "stop", json!([stop, "never-in-the-reply"]));
    let (stopped, _) = drafted_and_serial(s, "/v1/chat/completions", &stopped_body);
    assert_eq!(text(&stopped), expected, "stop {stop:?}");
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    let full_tokens = full["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(stopped["usage"]["completion_tokens"].as_u64().unwrap() < full_tokens);

    // Streamed, the stop string is held back and cut the same way.
    let streamed = chunks(&s.post_sse(
        "/v1/chat/completions",
        &with(stopped_body, "stream", json!(true)),
    ));
    assert_eq!(chat_text(&streamed), expected);
    let last = finish_chunk(&streamed);
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        last["tensorfold"]["token_sha"],
        stopped["tensorfold"]["token_sha"]
    );
}

#[test]
fn concurrent_requests_equal_solo_runs() {
    // Its own engine, so that the solo runs really run alone.
    let s = start(qwen().state(ServerConfig::new(MODEL_ID), KV_POSITIONS));
    let bodies = [
        chat_body("What is a linked list?", 24),
        chat_body("Write a haiku about autumn.", 24),
        json!({"model": MODEL_ID, "max_tokens": 24, "temperature": 0.7, "seed": 3,
            "messages": [{"role": "user", "content": "Give me a name for a cat."}]}),
        chat_body("Write a Python function that adds two numbers.", 24),
    ];
    let solo: Vec<Value> = bodies
        .iter()
        .map(|b| s.post_ok("/v1/chat/completions", b))
        .collect();
    let s = Arc::new(s);
    let barrier = Arc::new(Barrier::new(bodies.len()));
    let threads: Vec<_> = bodies
        .iter()
        .cloned()
        .map(|body| {
            let (s, barrier) = (s.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                s.post_ok("/v1/chat/completions", &body)
            })
        })
        .collect();
    let together: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (i, (a, b)) in solo.iter().zip(&together).enumerate() {
        assert_eq!(
            a["tensorfold"]["token_sha"], b["tensorfold"]["token_sha"],
            "request {i}"
        );
        assert_eq!(text(a), text(b), "request {i}");
    }
    let shas: std::collections::HashSet<&str> = solo
        .iter()
        .map(|r| r["tensorfold"]["token_sha"].as_str().unwrap())
        .collect();
    assert_eq!(shas.len(), bodies.len(), "four different replies");
}
