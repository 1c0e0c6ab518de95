//! The HTTP side of `bench --url`: a minimal OpenAI-compatible client (`GET /v1/models`, streamed
//! `POST`s) that times the server-sent events as they arrive.
//!
//! A chunk may carry several tokens (a drafted round emits them at once), so the reply's length is
//! the final `usage.completion_tokens`; the first and last token times are those of the first and
//! last chunk with text.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use ureq::http::Response;
use ureq::{Body, RequestBuilder};

use crate::cells::Stopwatch;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A server silent for this long (the prefill of a long prompt on a slow machine included) is
/// stuck rather than slow.
const STALL_TIMEOUT: Duration = Duration::from_secs(600);

/// An OpenAI-compatible server.
pub struct Server {
    agent: ureq::Agent,
    /// The URL without a trailing `/` or `/v1`.
    base: String,
    api_key: Option<String>,
}

/// One streamed reply, timed as a client sees it.
pub struct Reply {
    /// `usage.completion_tokens` of the final chunk.
    pub tokens: usize,
    /// (tokens − 1) / (time from the first to the last chunk with text).
    pub decode_tps: f64,
    /// Seconds from sending the request to the first chunk with text.
    pub ttft: f64,
    /// `tensorfold.token_sha` of the final chunk: only TensorFold servers send it.
    pub token_sha: Option<Value>,
}

impl Server {
    /// `url` is `http(s)://HOST:PORT`, optionally followed by `/v1`.
    pub fn new(url: &str, api_key: Option<String>) -> Result<Server> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("--url {url}: expected http://HOST:PORT or https://HOST:PORT");
        }
        let trimmed = url.trim_end_matches('/');
        let base = trimmed.strip_suffix("/v1").unwrap_or(trimmed).to_string();
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(STALL_TIMEOUT))
            .timeout_per_read(Some(STALL_TIMEOUT))
            .http_status_as_error(false)
            .user_agent(concat!("tensorfold-bench/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        Ok(Server {
            agent,
            base,
            api_key,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The first id of `GET /v1/models`.
    pub fn first_model(&self) -> Result<String> {
        let url = format!("{}/v1/models", self.base);
        let sent = self.authorize(self.agent.get(&url)).call();
        let mut response = checked("GET", &url, sent)?;
        let text = response
            .body_mut()
            .read_to_string()
            .with_context(|| format!("GET {url}: reading the reply"))?;
        let list: Value = serde_json::from_str(&text)
            .with_context(|| format!("GET {url}: the reply is not JSON"))?;
        list["data"][0]["id"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| {
                anyhow!("GET {url}: no model listed (data[0].id); name one with --model")
            })
    }

    /// `POST {base}{path}` with `body` (which asks for a stream), read to the end and timed.
    pub fn stream(&self, path: &str, body: &Value) -> Result<Reply> {
        let url = format!("{}{path}", self.base);
        let mut clock = Stopwatch::start();
        let sent = self
            .authorize(self.agent.post(&url))
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .send(body.to_string());
        let response = checked("POST", &url, sent)?;
        let mut reply = Chunks::default();
        for line in BufReader::new(response.into_body().into_reader()).lines() {
            let line = line.with_context(|| format!("POST {url}: reading the stream"))?;
            match reply.line(&line).with_context(|| format!("POST {url}"))? {
                Line::Text => clock.mark(),
                Line::Done => break,
                Line::Other => {}
            }
        }
        let tokens = reply.tokens.ok_or_else(|| {
            anyhow!("POST {url}: the stream ended without usage.completion_tokens (the server must honour stream_options.include_usage)")
        })?;
        Ok(Reply {
            tokens,
            decode_tps: clock.decode_tps(tokens),
            ttft: clock.ttft(),
            token_sha: reply.token_sha,
        })
    }

    fn authorize<B>(&self, request: RequestBuilder<B>) -> RequestBuilder<B> {
        match &self.api_key {
            Some(key) => request.header("authorization", format!("Bearer {key}")),
            None => request,
        }
    }
}

/// The response of a request, or an error naming the URL: unreachable, or a status other than
/// 2xx with the server's own message.
fn checked(
    method: &str,
    url: &str,
    sent: Result<Response<Body>, ureq::Error>,
) -> Result<Response<Body>> {
    let mut response = sent.map_err(|e| match e {
        ureq::Error::Io(_) | ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => {
            anyhow!("cannot reach {url}: {e}")
        }
        e => anyhow!("{method} {url}: {e}"),
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let text = response.body_mut().read_to_string().unwrap_or_default();
    let message = match serde_json::from_str::<Value>(&text) {
        Ok(v) => error_message(v.get("error").unwrap_or(&v)),
        Err(_) => text.trim().chars().take(500).collect(),
    };
    bail!("{method} {url}: HTTP {status}: {message}")
}

/// The `message` of an OpenAI error object, else the value itself.
fn error_message(error: &Value) -> String {
    match (error["message"].as_str(), error.as_str()) {
        (Some(m), _) | (None, Some(m)) => m.to_string(),
        _ => error.to_string(),
    }
}

/// What one line of the event stream was.
#[derive(Debug, PartialEq)]
enum Line {
    /// A chunk with text (one token or more).
    Text,
    /// `data: [DONE]`.
    Done,
    /// Anything else: a chunk without text, a comment, an empty line, an `event:` field.
    Other,
}

/// What the stream has told so far.
#[derive(Default)]
struct Chunks {
    tokens: Option<usize>,
    token_sha: Option<Value>,
}

impl Chunks {
    fn line(&mut self, line: &str) -> Result<Line> {
        let Some(data) = line.strip_prefix("data:") else {
            return Ok(Line::Other);
        };
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(Line::Done);
        }
        let chunk: Value = serde_json::from_str(data)
            .with_context(|| format!("an event that is not JSON: {data}"))?;
        if let Some(error) = chunk.get("error") {
            bail!("the server reported an error: {}", error_message(error));
        }
        if let Some(n) = chunk["usage"]["completion_tokens"].as_u64() {
            self.tokens = Some(n as usize);
        }
        let sha = &chunk["tensorfold"]["token_sha"];
        if !sha.is_null() {
            self.token_sha = Some(sha.clone());
        }
        let text = chunk["choices"].as_array().is_some_and(|choices| {
            choices.iter().any(|c| {
                [
                    &c["text"],
                    &c["delta"]["content"],
                    &c["delta"]["reasoning_content"],
                    &c["delta"]["reasoning"],
                ]
                .iter()
                .any(|t| t.as_str().is_some_and(|s| !s.is_empty()))
            })
        });
        Ok(if text { Line::Text } else { Line::Other })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_a_tensorfold_chat_stream() {
        let mut c = Chunks::default();
        let lines = [
            r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            "",
            r#"data: {"choices":[{"index":0,"delta":{"content":"Hello, wor"}}]}"#,
            ": keep-alive",
            r#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"tensorfold":{"token_sha":"ab12"}}"#,
            r#"data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}"#,
            "data: [DONE]",
        ];
        let kinds: Vec<Line> = lines.iter().map(|l| c.line(l).unwrap()).collect();
        use Line::*;
        assert_eq!(kinds, [Other, Other, Text, Other, Other, Other, Done]);
        assert_eq!(c.tokens, Some(4));
        assert_eq!(c.token_sha, Some(Value::from("ab12")));
    }

    #[test]
    fn completion_text_and_errors() {
        let mut c = Chunks::default();
        assert_eq!(
            c.line(r#"data:{"choices":[{"text":"def"}]}"#).unwrap(),
            Line::Text
        );
        assert_eq!(c.token_sha, None);
        let e = c
            .line(r#"data: {"error":{"message":"context full"}}"#)
            .unwrap_err();
        assert!(e.to_string().contains("context full"), "{e}");
        assert!(c.line("data: {oops").is_err());
    }
}
