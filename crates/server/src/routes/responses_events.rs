//! The Responses API's output items and stream events, built as the reply streams: reasoning
//! items, one message item with an `output_text` part, function calls, each with its
//! `added`/`delta`/`done` events and a `sequence_number` that counts from 0.

use serde_json::{json, Value};

use crate::output::{Delta, ToolCall};
use crate::routes::common::new_id;

enum Open {
    Reasoning {
        index: usize,
        id: String,
        text: String,
    },
    Message {
        index: usize,
        id: String,
        text: String,
    },
}

pub struct EventBuilder {
    seq: u64,
    pub items: Vec<Value>,
    open: Option<Open>,
    /// Only the first function call is kept when parallel calls are off.
    parallel: bool,
    calls: usize,
    pub reasoning_text: String,
    /// The WebSocket `stream_id`, echoed on every event.
    stream_id: Option<Value>,
    /// Calls of a `namespace` tool's function come back with its name and namespace.
    namespaces: super::responses::Namespaces,
}

impl EventBuilder {
    pub fn new(
        parallel: bool,
        stream_id: Option<Value>,
        namespaces: super::responses::Namespaces,
    ) -> EventBuilder {
        EventBuilder {
            seq: 0,
            items: Vec::new(),
            open: None,
            parallel,
            calls: 0,
            reasoning_text: String::new(),
            stream_id,
            namespaces,
        }
    }

    pub fn event(&mut self, kind: &str, mut body: Value) -> Value {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.seq);
        if let Some(s) = &self.stream_id {
            body["stream_id"] = s.clone();
        }
        self.seq += 1;
        body
    }

    pub fn has_calls(&self) -> bool {
        self.calls > 0
    }

    /// Events for one piece of the reply.
    pub fn push(&mut self, delta: Delta) -> Vec<Value> {
        let mut out = Vec::new();
        match delta {
            Delta::Reasoning(t) => {
                if !matches!(self.open, Some(Open::Reasoning { .. })) {
                    self.close(&mut out);
                    let index = self.items.len();
                    let id = new_id("rs_");
                    self.items.push(Value::Null);
                    let item = json!({"id": id, "type": "reasoning", "status": "in_progress",
                        "summary": [], "content": []});
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    self.open = Some(Open::Reasoning {
                        index,
                        id,
                        text: String::new(),
                    });
                }
                self.reasoning_text.push_str(&t);
                if let Some(Open::Reasoning { index, id, text }) = &mut self.open {
                    text.push_str(&t);
                    let body = json!({"item_id": id, "output_index": index, "content_index": 0,
                        "delta": t});
                    out.push(self.event("response.reasoning_text.delta", body));
                }
            }
            Delta::Content(t) => {
                if !matches!(self.open, Some(Open::Message { .. })) {
                    self.close(&mut out);
                    let index = self.items.len();
                    let id = new_id("msg_");
                    self.items.push(Value::Null);
                    let item = json!({"id": id, "type": "message", "status": "in_progress",
                        "role": "assistant", "content": []});
                    out.push(self.event(
                        "response.output_item.added",
                        json!({"output_index": index, "item": item}),
                    ));
                    let part = json!({"type": "output_text", "text": "", "annotations": [],
                        "logprobs": []});
                    out.push(self.event(
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                            "part": part}),
                    ));
                    self.open = Some(Open::Message {
                        index,
                        id,
                        text: String::new(),
                    });
                }
                if let Some(Open::Message { index, id, text }) = &mut self.open {
                    text.push_str(&t);
                    let body = json!({"item_id": id, "output_index": index, "content_index": 0,
                        "delta": t, "logprobs": []});
                    out.push(self.event("response.output_text.delta", body));
                }
            }
            Delta::ToolCall(call) => {
                self.close(&mut out);
                if self.parallel || self.calls == 0 {
                    self.calls += 1;
                    self.function_call(call, &mut out);
                }
            }
        }
        out
    }

    fn function_call(&mut self, call: ToolCall, out: &mut Vec<Value>) {
        let index = self.items.len();
        let id = new_id("fc_");
        let (namespace, name) = match self.namespaces.get(&call.name) {
            Some((ns, name)) => (Some(ns.clone()), name.clone()),
            None => (None, call.name.clone()),
        };
        let mut item = json!({"id": id, "type": "function_call", "status": "in_progress",
            "call_id": call.id, "name": name, "arguments": ""});
        if let Some(ns) = &namespace {
            item["namespace"] = json!(ns);
        }
        out.push(self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        ));
        out.push(self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": call.arguments}),
        ));
        out.push(self.event(
            "response.function_call_arguments.done",
            json!({"item_id": id, "output_index": index, "arguments": call.arguments,
                "name": name}),
        ));
        item["status"] = json!("completed");
        item["arguments"] = json!(call.arguments);
        out.push(self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        ));
        self.items.push(item);
    }

    /// Closes the open reasoning or message item.
    pub fn close(&mut self, out: &mut Vec<Value>) {
        match self.open.take() {
            None => {}
            Some(Open::Reasoning { index, id, text }) => {
                out.push(self.event(
                    "response.reasoning_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "text": text}),
                ));
                let item = json!({"id": id, "type": "reasoning", "status": "completed",
                    "summary": [], "content": [{"type": "reasoning_text", "text": text}]});
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.items[index] = item;
            }
            Some(Open::Message { index, id, text }) => {
                out.push(self.event(
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "text": text, "logprobs": []}),
                ));
                let part = json!({"type": "output_text", "text": text, "annotations": [],
                    "logprobs": []});
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                        "part": part}),
                ));
                let item = json!({"id": id, "type": "message", "status": "completed",
                    "role": "assistant", "content": [part]});
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.items[index] = item;
            }
        }
    }
}
