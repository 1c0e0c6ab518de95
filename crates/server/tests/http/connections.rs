//! Connection limits over a real socket: a header that never finishes, a body that never
//! arrives and one connection too many each end promptly with a clear answer instead of
//! holding the server's resources (no model needed: these are refused before any reaches one).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tf_server::{AppState, ServerConfig};

use crate::{start, Server};

fn server(cap: usize) -> Server {
    let mut config = ServerConfig::new("m");
    config.header_timeout = Duration::from_millis(800);
    config.body_timeout = Duration::from_millis(800);
    config.max_connections = cap;
    start(AppState::new(config))
}

/// Everything the server sends until it closes the connection (or 10 s pass).
fn read_to_close(s: &mut TcpStream) -> (String, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
}

#[test]
fn a_header_that_never_ends_is_closed() {
    let srv = server(8);
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    let (_, waited) = read_to_close(&mut s);
    assert!(waited < Duration::from_secs(5), "closed after {waited:?}");
}

#[test]
fn a_body_that_never_arrives_gets_a_408() {
    let srv = server(8);
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          content-length: 100\r\n\r\n{\"model\":",
    )
    .unwrap();
    let (reply, waited) = read_to_close_or_reply(&mut s);
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("did not arrive"), "{reply}");
    assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
}

/// The reply's head and body (read until the declared body is whole or the connection ends).
fn read_to_close_or_reply(s: &mut TcpStream) -> (String, Duration) {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&out);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok());
            if len.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
    }
    (String::from_utf8_lossy(&out).into_owned(), t.elapsed())
}

#[test]
fn one_connection_over_the_cap_gets_a_503() {
    let srv = server(2);
    let _held: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(srv.addr).unwrap())
        .collect();
    // The two held connections are accepted before the third.
    std::thread::sleep(Duration::from_millis(200));
    let mut third = TcpStream::connect(srv.addr).unwrap();
    let (reply, _) = read_to_close(&mut third);
    assert!(reply.starts_with("HTTP/1.1 503"), "{reply}");
    let body: serde_json::Value =
        serde_json::from_str(reply.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert!(
        body["error"]["message"].as_str().unwrap().contains("limit"),
        "{body}"
    );
    // Once a held connection closes (here: its header times out), a new one is served.
    drop(_held);
    std::thread::sleep(Duration::from_millis(300));
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let (reply, _) = read_to_close(&mut s);
    assert!(!reply.starts_with("HTTP/1.1 503"), "{reply}");
}

/// Framing hyper cannot parse gets the API's JSON error body (not a bare status), and the
/// connection closes; a well-formed request before it on the same connection is answered as usual.
#[test]
fn malformed_framing_gets_the_json_error_body() {
    let srv = server(8);
    let big_header = format!("x-big: {}\r\n", "a".repeat(600 * 1024));
    let cases: [(&str, String); 3] = [
        (
            "400",
            "GET /v1/models HTTP/1.1\r\nhost: x\r\nbad header line\r\n\r\n".into(),
        ),
        ("400", "G(T /v1/models HTTP/1.1\r\nhost: x\r\n\r\n".into()),
        (
            "431",
            format!("GET /v1/models HTTP/1.1\r\nhost: x\r\n{big_header}\r\n"),
        ),
    ];
    for (status, request) in cases {
        let mut s = TcpStream::connect(srv.addr).unwrap();
        let _ = s.write_all(request.as_bytes());
        let (reply, waited) = read_to_close(&mut s);
        assert!(reply.starts_with(&format!("HTTP/1.1 {status}")), "{reply}");
        assert!(reply.contains("content-type: application/json"), "{reply}");
        let body: serde_json::Value =
            serde_json::from_str(reply.split_once("\r\n\r\n").unwrap().1).unwrap();
        assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
        assert!(waited < Duration::from_secs(5), "answered after {waited:?}");
    }
    // Keep-alive: a good request, then a malformed one, on one connection.
    let mut s = TcpStream::connect(srv.addr).unwrap();
    s.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let (first, _) = read_to_close_or_reply(&mut s);
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    s.write_all(b"GET /v1/models HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n")
        .unwrap();
    let (second, _) = read_to_close(&mut s);
    assert!(second.starts_with("HTTP/1.1 400"), "{second}");
    assert!(second.contains("\"error\""), "{second}");
}
