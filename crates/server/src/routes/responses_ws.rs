//! Responses over a WebSocket (`GET /v1/responses` with an upgrade), as the openai package's
//! `client.responses.connect()` speaks it: each text frame from the client is a
//! `{"type": "response.create", ...request fields}` event; the server answers with the same
//! events a streamed `POST /v1/responses` sends, one JSON object per frame. Responses on one
//! socket run one after another; closing the socket cancels the one in progress.

use std::collections::VecDeque;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::routes::responses::{parse_on, ResponseRun};
use crate::state::SharedState;

pub async fn websocket(
    State(state): State<SharedState>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    match ws {
        Ok(ws) => {
            // A message may be as large as an HTTP body, no larger.
            let limit = state.config.body_limit_bytes;
            ws.max_message_size(limit)
                .max_frame_size(limit)
                .on_upgrade(move |socket| session(state, socket))
        }
        Err(_) => ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            ..ApiError::bad_request(
                "GET /v1/responses takes a WebSocket upgrade; create responses with POST",
            )
        }
        .into_response(),
    }
}

/// The WebSocket error event (nested, unlike the SSE one).
fn error_event(e: &ApiError) -> Value {
    json!({
        "type": "error",
        "status": e.status.as_u16(),
        "error": {"type": e.kind, "code": e.code, "message": e.message, "param": e.param},
    })
}

async fn send(socket: &mut WebSocket, v: &Value) -> bool {
    socket
        .send(Message::Text(v.to_string().into()))
        .await
        .is_ok()
}

enum Incoming {
    Create(Value),
    Close,
    Ignore,
    /// A message over the size limit: answered with an error event and a 1009 close.
    TooBig,
}

/// `response.create` events waiting behind a running response, at most; more get an error
/// event (a queued event holds its whole JSON).
const MAX_QUEUED: usize = 16;

fn classify(msg: Option<Result<Message, axum::Error>>) -> Incoming {
    let text = match msg {
        // The WebSocket library's capacity error ("Space limit exceeded: Message too long").
        Some(Err(e)) if e.to_string().contains("too long") => return Incoming::TooBig,
        None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return Incoming::Close,
        Some(Ok(Message::Text(t))) => t.to_string(),
        Some(Ok(Message::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
        Some(Ok(_)) => return Incoming::Ignore,
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(v) => Incoming::Create(v),
        Err(e) => Incoming::Create(json!({"type": "invalid", "error": e.to_string()})),
    }
}

/// Answers an oversized message: an error event, then a close with code 1009 (message too
/// big).
async fn too_big(state: &SharedState, socket: &mut WebSocket) {
    let limit = state.config.body_limit_bytes;
    let e = ApiError::payload_too_large(limit);
    let _ = send(socket, &error_event(&e)).await;
    let frame = axum::extract::ws::CloseFrame {
        code: 1009,
        reason: format!("messages are limited to {limit} bytes").into(),
    };
    let _ = socket.send(Message::Close(Some(frame))).await;
}

async fn session(state: SharedState, mut socket: WebSocket) {
    serve_events(&state, &mut socket).await;
    // Completes the closing handshake: tungstenite queues the reply to a client's Close frame
    // but sends it only on a later read or flush (RFC 6455 5.5.1: the reply is a MUST).
    let _ = futures_util::SinkExt::close(&mut socket).await;
}

/// Responses of one connection that a later `previous_response_id` on it may continue whatever
/// their `store` said (the WebSocket mode's rule): the most recent few, by id.
struct Recent(VecDeque<(String, Vec<Value>)>);

impl Recent {
    const KEEP: usize = 4;

    fn get(&self, id: &str) -> Option<Vec<Value>> {
        self.0.iter().find(|(i, _)| i == id).map(|(_, c)| c.clone())
    }

    fn add(&mut self, id: String, conversation: Vec<Value>) {
        if self.0.len() == Self::KEEP {
            self.0.pop_front();
        }
        self.0.push_back((id, conversation));
    }
}

async fn serve_events(state: &SharedState, socket: &mut WebSocket) {
    let mut queue: VecDeque<Value> = VecDeque::new();
    let mut recent = Recent(VecDeque::new());
    loop {
        let event = match queue.pop_front() {
            Some(e) => e,
            None => match classify(socket.recv().await) {
                Incoming::Create(v) => v,
                Incoming::Close => return,
                Incoming::TooBig => return too_big(state, socket).await,
                Incoming::Ignore => continue,
            },
        };
        let started = start(state, event, &recent).await;
        crate::access::ws_create(state, started.as_ref().err().map(|e| e.status.as_u16()));
        let mut run = match started {
            Ok(Started::Run(run)) => run,
            Ok(Started::Answered(events, id, conversation)) => {
                recent.add(id, conversation);
                for e in &events {
                    if !send(socket, e).await {
                        return;
                    }
                }
                continue;
            }
            Err(e) => {
                if !send(socket, &error_event(&e)).await {
                    return;
                }
                continue;
            }
        };
        loop {
            tokio::select! {
                events = run.next() => {
                    let Some(events) = events else {
                        if let Some(conversation) = run.take_conversation() {
                            recent.add(run.id().to_string(), conversation);
                        }
                        break;
                    };
                    for e in &events {
                        if !send(socket, e).await {
                            return;
                        }
                    }
                }
                incoming = socket.recv() => match classify(incoming) {
                    // Dropping the run cancels its request.
                    Incoming::Close => return,
                    Incoming::TooBig => return too_big(state, socket).await,
                    Incoming::Create(_) if queue.len() >= MAX_QUEUED => {
                        let e = ApiError {
                            status: StatusCode::TOO_MANY_REQUESTS,
                            ..ApiError::bad_request(format!(
                                "{MAX_QUEUED} response.create events already wait on this \
                                 connection; send more when a response completes"
                            ))
                        };
                        if !send(socket, &error_event(&e)).await {
                            return;
                        }
                    }
                    Incoming::Create(v) => queue.push_back(v),
                    Incoming::Ignore => {}
                },
            }
        }
    }
}

/// What a `response.create` started: a generation, or (`"generate": false`) an answer at once
/// with the response's id and conversation.
enum Started {
    Run(Box<ResponseRun>),
    Answered(Vec<Value>, String, Vec<Value>),
}

async fn start(
    state: &SharedState,
    mut event: Value,
    recent: &Recent,
) -> Result<Started, ApiError> {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    if kind == "invalid" {
        let why = event["error"].as_str().unwrap_or("").to_string();
        return Err(ApiError::bad_request(format!(
            "the event is not valid JSON: {why}"
        )));
    }
    if kind != "response.create" {
        return Err(ApiError::invalid(
            "type",
            format!("unsupported event type '{kind}' (this server takes response.create)"),
        ));
    }
    let obj = event.as_object_mut().expect("events are objects");
    obj.remove("type");
    obj.remove("stream");
    let stream_id = obj.remove("stream_id");
    // Some clients nest the request under "response".
    if let Some(Value::Object(inner)) = obj.remove("response") {
        for (k, v) in inner {
            obj.entry(k).or_insert(v);
        }
    }
    let req = parse_on(state, &event, |id| recent.get(id))?;
    if !req.generates() {
        let (events, id, conversation) = req.without_generation(state, stream_id);
        return Ok(Started::Answered(events, id, conversation));
    }
    let run = ResponseRun::start(state, req, stream_id).await?;
    Ok(Started::Run(Box::new(run)))
}
