//! The one reply driver: it runs a [`Generation`] and hands each step to an API's
//! [`ReplyFormat`], which says what that API writes at the start, for each piece of text and at
//! the end, and what its whole (non-streamed) reply is. The same driver feeds an SSE stream of
//! `data:` chunks (chat, completions), one of named events (Responses, Messages), a Responses
//! WebSocket, or a JSON body.

use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};
use crate::generate::{Generation, Outcome, Step};

/// What one API writes for a reply.
pub trait ReplyFormat: Send + 'static {
    /// The events that open a stream.
    fn start(&mut self) -> Vec<Value> {
        Vec::new()
    }
    /// The events for the next piece of text (`generation` is still running: the
    /// log-probabilities of the tokens behind the text are there to take).
    fn text(&mut self, text: String, generation: &mut Generation) -> Vec<Value>;
    /// The events that close the stream: the last pieces, the finish, usage, the receipt (or
    /// the error the request ended with).
    fn end(&mut self, outcome: Outcome) -> Vec<Value>;
    /// The whole reply once ended (the non-streamed answer), or the error it failed with.
    fn body(&mut self) -> ApiResult<Value>;
}

/// [`ReplyFormat::body`] for a format that keeps its finished reply, or the message of the
/// error its request ended with, as `result`.
pub fn ended(result: Option<Result<Value, String>>) -> ApiResult<Value> {
    match result {
        Some(Ok(body)) => Ok(body),
        Some(Err(message)) => Err(ApiError::internal(message)),
        None => Err(ApiError::internal("the request ended without a reply")),
    }
}

/// A generation and the format its reply is written in.
pub struct Driver<F> {
    generation: Option<Generation>,
    pub format: F,
    started: bool,
}

impl<F: ReplyFormat> Driver<F> {
    pub fn new(generation: Generation, format: F) -> Driver<F> {
        Driver {
            generation: Some(generation),
            format,
            started: false,
        }
    }

    /// The next events; `None` once the reply is over (dropping the driver before then
    /// cancels the request).
    pub async fn next(&mut self) -> Option<Vec<Value>> {
        if !self.started {
            self.started = true;
            let events = self.format.start();
            if !events.is_empty() {
                return Some(events);
            }
        }
        let generation = self.generation.as_mut()?;
        match generation.next().await? {
            Step::Text(t) => Some(self.format.text(t, generation)),
            Step::Done(outcome) => {
                self.generation = None;
                Some(self.format.end(*outcome))
            }
        }
    }

    /// Runs to the end: the whole reply.
    pub async fn body(mut self) -> ApiResult<Value> {
        while self.next().await.is_some() {}
        self.format.body()
    }

    /// OpenAI's chat and completions stream: each event a `data:` chunk, then `[DONE]`;
    /// SSE comments keep an idle stream (a long prefill) alive.
    pub fn data_sse(self) -> Response {
        let events = stream::unfold(Some(self), |driver| async move {
            let mut driver = driver?;
            match driver.next().await {
                Some(events) => {
                    let frames: Vec<Event> = events.iter().map(data).collect();
                    Some((frames, Some(driver)))
                }
                None => Some((vec![Event::default().data("[DONE]")], None)),
            }
        })
        .flat_map(|frames| stream::iter(frames.into_iter().map(Ok::<Event, Infallible>)));
        Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response()
    }

    /// A stream of named events (Responses, Messages; each event's `type` names it).
    pub fn named_sse(self, idle: Idle) -> Response {
        let events = stream::unfold(self, |mut driver| async move {
            let events = driver.next().await?;
            Some((events, driver))
        })
        .flat_map(|events| {
            stream::iter(events.into_iter().map(|e| {
                let kind = e["type"].as_str().unwrap_or("message").to_string();
                Ok::<Event, Infallible>(named(&kind, &e))
            }))
        });
        let keep_alive = match idle {
            Idle::Comment => KeepAlive::default(),
            Idle::Ping => KeepAlive::default().event(named("ping", &json!({"type": "ping"}))),
        };
        Sse::new(events).keep_alive(keep_alive).into_response()
    }
}

/// An SSE `data:` event with a JSON payload.
fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
}

/// A named SSE event.
fn named(name: &str, value: &Value) -> Event {
    Event::default().event(name).data(value.to_string())
}

/// How an idle stream (a long prompt prefilling before the first token) tells the client it is
/// alive, every 15 s.
#[derive(Clone, Copy)]
pub enum Idle {
    /// An SSE comment (OpenAI's APIs).
    Comment,
    /// Anthropic's `ping` event: its clients watch for events, not comments.
    Ping,
}
