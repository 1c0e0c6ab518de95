//! The Responses API over a WebSocket (`GET /v1/responses` upgraded), with a minimal client
//! written here: the HTTP upgrade, masked text frames out, unmasked frames in.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::MODEL_ID;
use crate::streams::{check_response_events, SHORT_QUESTION};
use crate::{shared, with};

/// RFC 6455's example key and the accept value a server must answer it with.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

pub struct Ws {
    stream: TcpStream,
    /// The code of the server's close frame, once one came.
    pub close_code: Option<u16>,
}

impl Ws {
    pub fn connect(addr: std::net::SocketAddr) -> Ws {
        let mut stream = TcpStream::connect(addr).expect("connecting");
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let request = format!(
            "GET /v1/responses HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).unwrap();
        // The reply head, a byte at a time (no frame comes before a request).
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8];
            stream
                .read_exact(&mut b)
                .expect("reading the upgrade reply");
            head.push(b[0]);
        }
        let head = String::from_utf8(head).unwrap();
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        let lower = head.to_ascii_lowercase();
        assert!(lower.contains("upgrade: websocket"), "{head}");
        assert!(head.contains(&format!(": {ACCEPT}\r\n")), "{head}");
        Ws {
            stream,
            close_code: None,
        }
    }

    /// Sends one masked frame.
    pub fn send_frame(&mut self, opcode: u8, payload: &[u8]) {
        let mut frame = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n <= 0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let mask = [0x12, 0x34, 0x56, 0x78];
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.stream.write_all(&frame).unwrap();
    }

    pub fn send(&mut self, v: &Value) {
        self.send_frame(0x1, v.to_string().as_bytes());
    }

    /// The next text message (pings answered, fragments joined); `None` on a close frame.
    pub fn recv(&mut self) -> Option<String> {
        let mut message = Vec::new();
        loop {
            let mut h = [0u8; 2];
            self.stream.read_exact(&mut h).expect("reading a frame");
            let (fin, opcode) = (h[0] & 0x80 != 0, h[0] & 0x0f);
            assert_eq!(h[1] & 0x80, 0, "server frames are not masked");
            let len = match h[1] & 0x7f {
                126 => {
                    let mut b = [0u8; 2];
                    self.stream.read_exact(&mut b).unwrap();
                    u16::from_be_bytes(b) as usize
                }
                127 => {
                    let mut b = [0u8; 8];
                    self.stream.read_exact(&mut b).unwrap();
                    u64::from_be_bytes(b) as usize
                }
                n => n as usize,
            };
            let mut payload = vec![0u8; len];
            self.stream.read_exact(&mut payload).unwrap();
            match opcode {
                0x8 => {
                    self.close_code = payload.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]));
                    return None;
                }
                0x9 => self.send_frame(0xA, &payload),
                0xA => {}
                0x0 | 0x1 => {
                    message.extend_from_slice(&payload);
                    if fin {
                        return Some(String::from_utf8(message).expect("UTF-8 text"));
                    }
                }
                other => panic!("unexpected opcode {other}"),
            }
        }
    }

    pub fn recv_json(&mut self) -> Value {
        let text = self.recv().expect("a message, not a close");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    }

    /// Events until a terminal one (`response.completed`, `.incomplete`, `.failed`).
    pub fn response_events(&mut self) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let e = self.recv_json();
            let kind = e["type"].as_str().unwrap_or("").to_string();
            assert_ne!(kind, "error", "{e}");
            events.push(e);
            if [
                "response.completed",
                "response.incomplete",
                "response.failed",
            ]
            .contains(&kind.as_str())
            {
                return events;
            }
        }
    }
}

fn create(input: &str) -> Value {
    json!({"type": "response.create", "model": MODEL_ID, "input": input,
        "max_output_tokens": 16, "temperature": 0})
}

#[test]
fn responses_over_websocket() {
    let s = shared();
    // The reference: the same request streamed over SSE.
    let mut sse_body = create(SHORT_QUESTION);
    sse_body.as_object_mut().unwrap().remove("type");
    let sse: Vec<Value> = s
        .post_sse("/v1/responses", &with(sse_body, "stream", json!(true)))
        .iter()
        .map(|e| e.json())
        .collect();
    let sse_done = check_response_events(&sse);

    let mut ws = Ws::connect(s.addr);
    ws.send(&with(create(SHORT_QUESTION), "stream_id", json!("s-1")));
    let events = ws.response_events();
    let first = check_response_events(&events);
    assert!(
        events.iter().all(|e| e["stream_id"] == "s-1"),
        "the stream id is echoed"
    );
    assert_eq!(
        first["output"][0]["content"][0]["text"],
        sse_done["output"][0]["content"][0]["text"]
    );
    assert_eq!(
        first["tensorfold"]["token_sha"],
        sse_done["tensorfold"]["token_sha"]
    );
    assert_ne!(first["id"], sse_done["id"]);

    // Bad events get an error event; the socket stays usable.
    ws.send_frame(0x1, b"this is not json");
    let e = ws.recv_json();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["status"], 400);
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{e}"
    );
    ws.send(&json!({"type": "response.cancel"}));
    let e = ws.recv_json();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["param"], "type");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'response.cancel'"),
        "{e}"
    );
    ws.send(&with(create("Hi"), "temperature", json!(9)));
    let e = ws.recv_json();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["param"], "temperature");
    assert_eq!(e["error"]["code"], "invalid_value");

    // A second response on the same socket, continuing the first.
    let mut next = create("And at night?");
    next["previous_response_id"] = first["id"].clone();
    next["max_output_tokens"] = json!(8);
    ws.send(&next);
    let events = ws.response_events();
    assert_eq!(events[0]["type"], "response.created");
    assert_eq!(
        events[0]["sequence_number"], 0,
        "each response counts from 0"
    );
    let last = events.last().unwrap();
    assert!(
        ["response.completed", "response.incomplete"].contains(&last["type"].as_str().unwrap()),
        "{last}"
    );
    let second = &last["response"];
    assert_eq!(second["previous_response_id"], first["id"]);
    assert!(
        second["usage"]["input_tokens"].as_u64().unwrap()
            > first["usage"]["input_tokens"].as_u64().unwrap(),
        "{second}"
    );
    assert!(events.iter().all(|e| e.get("stream_id").is_none()));

    // A close frame is answered with one.
    ws.send_frame(0x8, &[0x03, 0xe8]);
    assert_eq!(ws.recv(), None);
}

/// What Codex does on a WebSocket: a `"generate": false` prewarm is answered at once (created,
/// completed, no output) and its input stays on the connection; a follow-up with
/// `previous_response_id` and `store: false` continues the connection's earlier responses,
/// and equals the same conversation sent whole over HTTP.
#[test]
fn codex_prewarm_and_unstored_follow_ups() {
    let s = shared();
    let mut ws = Ws::connect(s.addr);
    let mut prewarm = create(SHORT_QUESTION);
    prewarm["generate"] = json!(false);
    prewarm["store"] = json!(false);
    ws.send(&prewarm);
    let created = ws.recv_json();
    assert_eq!(created["type"], "response.created", "{created}");
    let done = ws.recv_json();
    assert_eq!(done["type"], "response.completed", "{done}");
    assert_eq!(done["response"]["output"], json!([]), "{done}");
    let warm_id = done["response"]["id"].as_str().unwrap().to_string();

    // The first turn continues the prewarm (its input is already the question).
    let first = json!({"type": "response.create", "model": MODEL_ID, "input": [],
        "previous_response_id": warm_id, "store": false, "max_output_tokens": 12,
        "temperature": 0});
    ws.send(&first);
    let one = check_response_events(&ws.response_events());
    let second = json!({"type": "response.create", "model": MODEL_ID, "input": "And why?",
        "previous_response_id": one["id"], "store": false, "max_output_tokens": 12,
        "temperature": 0});
    ws.send(&second);
    let two = check_response_events(&ws.response_events());

    // Neither was stored: over HTTP the ids are unknown.
    let (status, _) = s.get(&format!("/v1/responses/{}", one["id"].as_str().unwrap()));
    assert_eq!(status, 404);
    // The same conversation sent whole over HTTP gives the same reply bytes.
    let whole = json!({"model": MODEL_ID, "max_output_tokens": 12, "temperature": 0,
        "input": [
            {"role": "user", "content": SHORT_QUESTION},
            {"role": "assistant", "content": one["output"][0]["content"][0]["text"]},
            {"role": "user", "content": "And why?"}]});
    let http = s.post_ok("/v1/responses", &whole);
    assert_eq!(
        http["tensorfold"]["token_sha"], two["tensorfold"]["token_sha"],
        "{http}"
    );
}

/// A message over the body limit is answered with an error event and a close with code 1009
/// (the frame's header is enough to refuse it); more `response.create` events than the queue
/// holds while a response runs get error events, and the queued ones still run.
#[test]
fn oversized_messages_and_a_full_queue() {
    let s = shared();
    let mut ws = Ws::connect(s.addr);
    // A text frame announcing 64 MiB (over the 32 MiB limit), with a few bytes of it.
    let mut frame = vec![0x81, 0x80 | 127];
    frame.extend_from_slice(&(64u64 << 20).to_be_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4]);
    frame.extend_from_slice(&[b'x'; 64]);
    ws.stream.write_all(&frame).unwrap();
    let e = ws.recv_json();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["status"], 413, "{e}");
    assert!(ws.recv().is_none(), "then the socket closes");
    assert_eq!(ws.close_code, Some(1009));

    let mut ws = Ws::connect(s.addr);
    let mut long = create(SHORT_QUESTION);
    long["max_output_tokens"] = json!(48);
    long["ignore_eos"] = json!(true);
    ws.send(&long);
    let mut short = create(SHORT_QUESTION);
    short["max_output_tokens"] = json!(1);
    for _ in 0..20 {
        ws.send(&short);
    }
    let (mut errors, mut done) = (0, 0);
    while done < 17 {
        let e = ws.recv_json();
        match e["type"].as_str().unwrap() {
            "error" => {
                assert_eq!(e["status"], 429, "{e}");
                errors += 1;
            }
            "response.completed" | "response.incomplete" => done += 1,
            _ => {}
        }
    }
    assert_eq!(
        (errors, done),
        (4, 17),
        "16 queued behind the first, 4 refused"
    );
}
