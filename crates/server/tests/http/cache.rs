//! The prompt cache through the API: an agent conversation resumed from the cache equals the
//! same conversation served fresh by a server without a prompt cache, turn by turn; a shared
//! system prompt is reused across conversations; requests beyond the KV room wait instead of
//! failing, and only a full queue answers 503.

use std::sync::{Arc, Barrier};

use serde_json::{json, Value};
use tf_server::{AppState, ServerConfig};

use crate::common::{qwen, CONTEXT, KV_POSITIONS, MODEL_ID};
use crate::{start, Server};

fn server(cache_blocks: Option<usize>, kv_positions: usize, max_queue: usize) -> Server {
    server_with_context(cache_blocks, kv_positions, max_queue, CONTEXT)
}

fn server_with_context(
    cache_blocks: Option<usize>,
    kv_positions: usize,
    max_queue: usize,
    context: usize,
) -> Server {
    let state = AppState::new(ServerConfig::new(MODEL_ID));
    state.set_backend(qwen().backend_with(kv_positions, context, cache_blocks, max_queue));
    start(state)
}

const SYSTEM: &str = "You are a coding agent working in a Python repository. You can list \
    files and read them with the tools you are given. Think about which file to open, call one \
    tool at a time, and answer briefly once you know enough. Never invent file contents.";

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "list_files", "description": "List the files of a directory",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
        {"type": "function", "function": {"name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    ])
}

/// A long tool output: a listing or a file, different per turn.
fn tool_output(turn: usize) -> String {
    if turn.is_multiple_of(2) {
        (0..10)
            .map(|i| format!("src/module_{turn}_{i}.py  {} bytes", 100 + 37 * i))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        (0..6)
            .map(|i| format!("def helper_{turn}_{i}(x):\n    return x * {i} + {turn}\n"))
            .collect::<String>()
    }
}

fn chat(s: &Server, messages: &[Value], turn: usize) -> Value {
    s.post_ok(
        "/v1/chat/completions",
        &json!({"model": MODEL_ID, "messages": messages, "tools": tools(), "max_tokens": 16,
            "temperature": 0.6, "seed": 100 + turn}),
    )
}

#[test]
fn agent_conversation_resumed_from_the_cache_equals_a_fresh_server() {
    // The conversation outgrows the usual test context.
    let cached = server_with_context(None, 8192, 256, 6144);
    let fresh = server_with_context(Some(0), 8192, 256, 6144);
    let mut messages = vec![
        json!({"role": "system", "content": SYSTEM}),
        json!({"role": "user", "content": "Find where the helper functions are defined."}),
    ];
    let mut tool_turns = 0;
    for turn in 0..12 {
        let a = chat(&cached, &messages, turn);
        let b = chat(&fresh, &messages, turn);
        let what = format!("turn {turn}: cached {a}\nfresh {b}");
        assert_eq!(
            a["tensorfold"]["token_sha"], b["tensorfold"]["token_sha"],
            "{what}"
        );
        // Same text and calls (tool call ids are fresh per reply).
        let (ma, mb) = (&a["choices"][0]["message"], &b["choices"][0]["message"]);
        assert_eq!(ma["content"], mb["content"], "{what}");
        let calls = |m: &Value| -> Vec<Value> {
            m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["function"].clone())
                .collect()
        };
        assert_eq!(calls(ma), calls(mb), "{what}");
        let hit = a["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap();
        assert_eq!(
            b["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
            "{what}"
        );
        if turn > 0 {
            assert!(hit > 0, "{what}: no cached tokens on a resumed turn");
        }
        // The agent's next move: run the tool it called, or hand it a tool result anyway.
        let message = &a["choices"][0]["message"];
        let call_id = format!("call_{turn}");
        let name = if turn.is_multiple_of(2) {
            "list_files"
        } else {
            "read_file"
        };
        let (call_id, name, arguments) = match message["tool_calls"].get(0) {
            Some(call) => {
                tool_turns += 1;
                (
                    call["id"].as_str().unwrap().to_string(),
                    call["function"]["name"].as_str().unwrap().to_string(),
                    call["function"]["arguments"].as_str().unwrap().to_string(),
                )
            }
            None => (
                call_id,
                name.to_string(),
                json!({"path": "src"}).to_string(),
            ),
        };
        if let Some(text) = message["content"].as_str().filter(|t| !t.is_empty()) {
            messages.push(json!({"role": "assistant", "content": text}));
            messages.push(json!({"role": "user", "content": "Go on: use a tool."}));
        }
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}));
        messages
            .push(json!({"role": "tool", "tool_call_id": call_id, "content": tool_output(turn)}));
    }
    let prompt = chat(&fresh, &messages, 99)["usage"]["prompt_tokens"]
        .as_u64()
        .unwrap();
    assert!(prompt > 800, "the conversation grew to {prompt} tokens");
    eprintln!("agent conversation: 12 turns, {tool_turns} tool calls by the model, {prompt} prompt tokens at the end");
}

#[test]
fn a_shared_system_prompt_is_reused_across_conversations() {
    let s = server(None, KV_POSITIONS, 256);
    let long_system = format!(
        "{SYSTEM} {}",
        "Follow the repository's style guide. ".repeat(20)
    );
    let mut hits = Vec::new();
    for question in [
        "What does module 3 do?",
        "List the tests.",
        "Where is main?",
    ] {
        let r = s.post_ok(
            "/v1/chat/completions",
            &json!({"model": MODEL_ID, "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "system", "content": long_system},
                             {"role": "user", "content": question}]}),
        );
        hits.push(
            r["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap(),
        );
    }
    assert_eq!(hits[0], 0, "{hits:?}");
    assert!(
        hits[1] >= 128 && hits[2] >= 128,
        "the system prompt was not reused: {hits:?}"
    );
}

/// Six requests of ~110 positions each on a pool of 240: at most two run at once, the others
/// wait for room, and each still equals its run on a large server.
#[test]
fn requests_beyond_the_kv_room_wait_and_equal_their_solo_runs() {
    let small = Arc::new(server(Some(0), 240, 256));
    let big = server(Some(0), KV_POSITIONS, 256);
    let bodies: Vec<Value> = (0..6)
        .map(|i| {
            json!({"model": MODEL_ID, "max_tokens": 64, "ignore_eos": true, "temperature": 0.7,
                "seed": i, "messages": [{"role": "user", "content": format!("Count to {}.", 10 + i)}]})
        })
        .collect();
    let barrier = Arc::new(Barrier::new(bodies.len()));
    let threads: Vec<_> = bodies
        .iter()
        .cloned()
        .map(|body| {
            let (s, barrier) = (small.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                s.post_ok("/v1/chat/completions", &body)
            })
        })
        .collect();
    let together: Vec<Value> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (i, (body, r)) in bodies.iter().zip(&together).enumerate() {
        let solo = big.post_ok("/v1/chat/completions", body);
        assert_eq!(
            r["tensorfold"]["token_sha"], solo["tensorfold"]["token_sha"],
            "request {i}"
        );
    }
}

#[test]
fn a_full_queue_answers_503_with_retry_after() {
    // Room for one request at a time, and one waiting.
    let s = Arc::new(server(Some(0), 240, 1));
    let body = json!({"model": MODEL_ID, "max_tokens": 150, "ignore_eos": true, "temperature": 0,
        "messages": [{"role": "user", "content": "Count."}]});
    let barrier = Arc::new(Barrier::new(6));
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let (s, barrier, body) = (s.clone(), barrier.clone(), body.clone());
            std::thread::spawn(move || {
                barrier.wait();
                let mut response = s
                    .agent
                    .post(&s.url("/v1/chat/completions"))
                    .send(body.to_string())
                    .expect("a reply");
                let status = response.status().as_u16();
                let retry = response
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().to_string());
                let text = response.body_mut().read_to_string().unwrap();
                (status, retry, text)
            })
        })
        .collect();
    let replies: Vec<(u16, Option<String>, String)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    let ok = replies.iter().filter(|r| r.0 == 200).count();
    let busy: Vec<_> = replies.iter().filter(|r| r.0 == 503).collect();
    assert!(ok >= 2, "{replies:?}");
    assert!(!busy.is_empty(), "nobody was turned away: {replies:?}");
    assert_eq!(ok + busy.len(), 6, "{replies:?}");
    for (_, retry, text) in busy {
        assert!(retry.is_some(), "503 without Retry-After");
        let v: Value = serde_json::from_str(text).unwrap();
        assert!(
            v["error"]["message"].as_str().unwrap().contains("busy"),
            "{v}"
        );
    }
}
