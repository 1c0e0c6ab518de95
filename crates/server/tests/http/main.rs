//! The HTTP API over a real socket on 127.0.0.1: `tf_server::serve` on a bound listener, driven
//! by a blocking client (`ureq`, and raw `TcpStream`s where the test must control the
//! connection: WebSocket frames, disconnections). The model is the real Qwen2.5-Coder 0.5B from
//! the model cache.

#[path = "../common/mod.rs"]
mod common;

mod cache;
mod connections;
mod disconnect;
mod exactness;
mod streams;
mod tools;
mod websocket;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use tf_server::SharedState;

/// The runtime every test server runs on (the tests themselves are blocking clients).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// A server listening on 127.0.0.1.
pub struct Server {
    pub addr: SocketAddr,
    pub state: SharedState,
    agent: ureq::Agent,
}

/// One server-sent event: its `event:` name (if any) and its `data:`.
#[derive(Debug, Clone)]
pub struct Sse {
    pub event: Option<String>,
    pub data: String,
}

impl Sse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", self.data))
    }
}

/// Serves `state` on a fresh port.
pub fn start(state: SharedState) -> Server {
    let rt = runtime();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("binding 127.0.0.1:0");
    let addr = listener.local_addr().expect("the bound address");
    rt.spawn(tf_server::serve(listener, state.clone()));
    // A guard against a hung request, not a speed check: on the 2-core CI machine, with other
    // real-model tests running beside it, one turn of the agent conversation test took over
    // 120 s (the test ran 904 s and passed, then 909 s and failed on this timeout).
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(300)))
        .http_status_as_error(false)
        .build()
        .into();
    Server { addr, state, agent }
}

/// The server most tests share (over [`common::shared_state`]).
pub fn shared() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| start(common::shared_state()))
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `POST path` with a JSON body: the status and the JSON reply.
    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let url = self.url(path);
        let mut response = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(body.to_string())
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .read_to_string()
            .unwrap_or_else(|e| panic!("POST {url}: reading the reply: {e}"));
        let value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("POST {url}: {status} reply is not JSON ({e}): {text}"));
        (status, value)
    }

    /// `POST path` and a 200 reply's JSON.
    #[track_caller]
    pub fn post_ok(&self, path: &str, body: &Value) -> Value {
        let (status, value) = self.post(path, body);
        assert_eq!(status, 200, "POST {path} {body}: {value}");
        value
    }

    /// `POST path` expecting a 200 event stream; every event, in order.
    #[track_caller]
    pub fn post_sse(&self, path: &str, body: &Value) -> Vec<Sse> {
        let url = self.url(path);
        let response = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .send(body.to_string())
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        assert_eq!(response.status().as_u16(), 200, "POST {path} {body}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        let mut events = Vec::new();
        let (mut event, mut data) = (None, Vec::<String>::new());
        for line in BufReader::new(response.into_body().into_reader()).lines() {
            let line = line.unwrap_or_else(|e| panic!("POST {url}: reading the stream: {e}"));
            if line.is_empty() {
                if !data.is_empty() {
                    events.push(Sse {
                        event: event.take(),
                        data: data.join("\n"),
                    });
                    data.clear();
                }
                event = None;
            } else if let Some(d) = line.strip_prefix("data:") {
                data.push(d.strip_prefix(' ').unwrap_or(d).to_string());
            } else if let Some(e) = line.strip_prefix("event:") {
                event = Some(e.trim().to_string());
            } else {
                // Comments (keep-alives) only.
                assert!(line.starts_with(':'), "unexpected SSE line {line:?}");
            }
        }
        assert!(data.is_empty(), "the stream ended inside an event");
        events
    }

    /// `GET path`: the status and the body text.
    pub fn get(&self, path: &str) -> (u16, String) {
        let url = self.url(path);
        let mut response = self
            .agent
            .get(&url)
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().expect("a text body");
        (status, text)
    }

    /// One sample of `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let (status, text) = self.get("/metrics");
        assert_eq!(status, 200);
        sample(&text, name)
    }
}

/// The value of the sample `name` in a Prometheus text page.
pub fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"))
        .parse()
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Chat chunks of an SSE stream: every `data:` before `[DONE]`, which must end it.
#[track_caller]
pub fn chunks(events: &[Sse]) -> Vec<Value> {
    let (last, rest) = events.split_last().expect("a non-empty stream");
    assert_eq!(last.data, "[DONE]", "the stream ends with [DONE]");
    assert!(events.iter().all(|e| e.event.is_none()), "unnamed events");
    rest.iter().map(Sse::json).collect()
}

/// The joined `delta.content` of chat chunks.
pub fn chat_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

/// The one chunk with a `finish_reason`.
#[track_caller]
pub fn finish_chunk(chunks: &[Value]) -> &Value {
    let finished: Vec<&Value> = chunks
        .iter()
        .filter(|c| !c["choices"][0]["finish_reason"].is_null())
        .collect();
    assert_eq!(
        finished.len(),
        1,
        "one chunk has a finish_reason: {chunks:?}"
    );
    finished[0]
}

/// The same body with `key` set.
pub fn with(mut body: Value, key: &str, value: Value) -> Value {
    body[key] = value;
    body
}
