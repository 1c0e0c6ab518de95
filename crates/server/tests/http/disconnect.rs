//! A client that goes away cancels its request: the engine frees its KV blocks, the metrics
//! count the disconnection, and the server keeps serving. Streamed and non-streamed, each on a
//! server of its own (the gauges are engine-wide); and a WebSocket closed mid-response.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tf_server::ServerConfig;

use crate::common::{chat_body, qwen, MODEL_ID};
use crate::websocket::Ws;
use crate::{sample, start, Server};

/// A long reply: it cannot finish within the test's patience.
fn long_body(stream: bool) -> Value {
    json!({"model": MODEL_ID, "max_tokens": 400, "ignore_eos": true, "temperature": 0,
        "stream": stream,
        "messages": [{"role": "user", "content": "Count from one to one thousand in words."}]})
}

/// Sends a POST by hand and leaves the connection open.
fn raw_post(s: &Server, path: &str, body: &Value) -> TcpStream {
    let mut stream = TcpStream::connect(s.addr).expect("connecting");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        s.addr,
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    stream
}

struct Gauges {
    running: f64,
    free: f64,
    total: f64,
    disconnects: f64,
}

fn gauges(s: &Server) -> Gauges {
    let (status, text) = s.get("/metrics");
    assert_eq!(status, 200);
    Gauges {
        running: sample(&text, "tensorfold:num_requests_running"),
        free: sample(&text, "tensorfold:kv_free_blocks"),
        total: sample(&text, "tensorfold:kv_total_blocks"),
        disconnects: sample(&text, "tensorfold:client_disconnects_total"),
    }
}

/// Polls `/metrics` (at most 10 s) until `done` holds; the last gauges either way.
fn wait_for(s: &Server, what: &str, done: impl Fn(&Gauges) -> bool) -> Gauges {
    let start = Instant::now();
    loop {
        let g = gauges(s);
        if done(&g) {
            return g;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: running {} free {} of {} disconnects {}",
            g.running,
            g.free,
            g.total,
            g.disconnects
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// After the client left: one more disconnection, nothing running, every block free; and the
/// server still answers.
fn check_released(s: &Server, before: f64) {
    let g = wait_for(s, "the request is cancelled and freed", |g| {
        g.disconnects == before + 1.0 && g.running == 0.0 && g.free == g.total
    });
    assert!(g.total > 0.0);
    let reply = s.post_ok("/v1/chat/completions", &chat_body("Hi", 4));
    assert!(reply["choices"][0]["message"]["content"].is_string());
    // The finished request is not a disconnection.
    assert_eq!(gauges(s).disconnects, before + 1.0);
}

#[test]
fn dropped_stream_cancels_the_request() {
    let s = start(qwen().state(ServerConfig::new(MODEL_ID), 2048));
    let before = gauges(&s);
    assert_eq!(before.free, before.total, "an idle engine");
    let stream = raw_post(&s, "/v1/chat/completions", &long_body(true));
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    // Two data chunks: the role, then the first text.
    let mut data = 0;
    let mut line = String::new();
    while data < 2 {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the stream ended early"
        );
        if line.starts_with("data: ") {
            data += 1;
        }
    }
    // While the client reads, the request holds blocks.
    let g = gauges(&s);
    assert_eq!(g.running, 1.0);
    assert!(g.free < g.total);
    assert_eq!(g.disconnects, before.disconnects);
    drop(reader);
    check_released(&s, before.disconnects);
}

#[test]
fn dropped_connection_cancels_a_json_request() {
    let s = start(qwen().state(ServerConfig::new(MODEL_ID), 2048));
    let before = gauges(&s);
    let stream = raw_post(&s, "/v1/chat/completions", &long_body(false));
    wait_for(&s, "the request runs", |g| g.running == 1.0);
    drop(stream);
    check_released(&s, before.disconnects);
}

#[test]
fn closed_websocket_cancels_the_response() {
    let s = start(qwen().state(ServerConfig::new(MODEL_ID), 2048));
    let before = gauges(&s);
    let mut ws = Ws::connect(s.addr);
    ws.send(
        &json!({"type": "response.create", "model": MODEL_ID, "temperature": 0,
        "input": "Count from one to one thousand in words.", "max_output_tokens": 400,
        "ignore_eos": true}),
    );
    while ws.recv_json()["type"] != "response.output_text.delta" {}
    assert_eq!(gauges(&s).running, 1.0);
    ws.send_frame(0x8, &[0x03, 0xe8]);
    // Events already in flight, then the reply to the close.
    let mut late = 0;
    while let Some(text) = ws.recv() {
        assert!(!text.contains("response.completed"), "{text}");
        late += 1;
        assert!(late < 100, "the server keeps sending after the close");
    }
    check_released(&s, before.disconnects);
}
