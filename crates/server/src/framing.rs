//! Malformed HTTP framing answered with the API's JSON error body.
//!
//! When a request head cannot be parsed (a bad request line or header, a URI or header block over
//! the limits), hyper answers by itself, before any route runs: a bare `400`, `414` or `431` with
//! an empty body, then it closes the connection. [`JsonParseErrors`] sits between hyper and the
//! socket and replaces exactly those automatic answers (a 400/414/431 head with
//! `content-length: 0`, no `content-type` and nothing after it, which no route of ours writes:
//! every error of ours carries a JSON body) with the same status and the JSON error envelope
//! every other error has. Everything else passes through untouched.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::ApiError;

/// A connection whose automatic parse-error answers get a JSON body.
pub struct JsonParseErrors<S> {
    inner: S,
    /// A replacement answer not yet written, and how much of it went out.
    pending: Vec<u8>,
    sent: usize,
}

impl<S> JsonParseErrors<S> {
    pub fn new(inner: S) -> Self {
        JsonParseErrors {
            inner,
            pending: Vec::new(),
            sent: 0,
        }
    }
}

/// The JSON answer for hyper's automatic answer `head`, if it is one.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let rest = text.strip_prefix("HTTP/1.1 ")?;
    let (status, message) = match rest.get(..3)? {
        "400" => (
            "400 Bad Request",
            "the request could not be parsed as HTTP/1.1 (malformed request line or header)",
        ),
        "414" => ("414 URI Too Long", "the request URI is too long"),
        "431" => (
            "431 Request Header Fields Too Large",
            "the request's header fields are too large",
        ),
        _ => return None,
    };
    // The whole write is one head, with no body and no content type.
    let end = text.find("\r\n\r\n")?;
    let lower = text.to_ascii_lowercase();
    if end + 4 != text.len()
        || !lower.contains("\r\ncontent-length: 0\r\n")
        || lower.contains("\r\ncontent-type:")
    {
        return None;
    }
    let body = ApiError::bad_request(message).body().to_string();
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<S: AsyncWrite + Unpin> JsonParseErrors<S> {
    /// Writes what is left of a replacement answer.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.sent < self.pending.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.sent..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.sent += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonParseErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonParseErrors<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.drain(cx))?;
        if let Some(answer) = replacement(buf) {
            this.pending = answer;
            this.sent = 0;
            // hyper's bytes are taken: the replacement goes out now or at the next flush.
            if let Poll::Ready(Err(e)) = this.drain(cx) {
                return Poll::Ready(Err(e));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Plain writes only: hyper then writes each answer's head as one buffer, which is what
    // `replacement` looks at.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::replacement;

    #[test]
    fn only_hypers_bare_answers_are_replaced() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let got = String::from_utf8(replacement(bare).unwrap()).unwrap();
        assert!(got.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{got}");
        assert!(got.contains("content-type: application/json"), "{got}");
        let body = got.split_once("\r\n\r\n").unwrap().1;
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let big = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert!(replacement(big).is_some());
        // Our own answers (a JSON body, a content type) and other statuses pass through.
        for own in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nextra",
        ] {
            assert!(replacement(own).is_none(), "{}", String::from_utf8_lossy(own));
        }
    }
}
