//! Tool calls with the real Qwen 0.5B: `tool_choice` required makes it call the one tool, in
//! chat (JSON and streamed), the Responses API and Anthropic Messages; the tool's result goes
//! back in and the model answers in text.

use serde_json::{json, Value};

use crate::common::MODEL_ID;
use crate::{chunks, finish_chunk, shared, with};

fn weather_function() -> Value {
    json!({"name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}})
}

const QUESTION: &str = "What is the weather in Paris right now?";

/// Arguments as a JSON object.
#[track_caller]
fn arguments_object(arguments: &Value) -> serde_json::Map<String, Value> {
    let text = arguments.as_str().expect("arguments are a JSON text");
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => map,
        other => panic!("arguments {text:?} are not a JSON object: {other:?}"),
    }
}

#[test]
fn chat_tool_call_stream_and_round_trip() {
    let s = shared();
    let body = json!({"model": MODEL_ID, "max_tokens": 40, "temperature": 0,
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [{"type": "function", "function": weather_function()}],
        "tool_choice": "required"});
    let reply = s.post_ok("/v1/chat/completions", &body);
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{reply}");
    assert!(choice["message"]["content"].is_null(), "{reply}");
    let calls = choice["message"]["tool_calls"]
        .as_array()
        .expect("tool_calls");
    assert_eq!(calls.len(), 1, "{reply}");
    let call = &calls[0];
    assert_eq!(call["type"], "function");
    assert!(call["id"].as_str().unwrap().starts_with("call_"), "{call}");
    assert_eq!(call["function"]["name"], "get_weather");
    let args = arguments_object(&call["function"]["arguments"]);
    assert!(args.values().all(Value::is_string), "{args:?}");

    // Streamed: one tool_calls delta with the same call.
    let chunks = chunks(&s.post_sse(
        "/v1/chat/completions",
        &with(body.clone(), "stream", json!(true)),
    ));
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
        .collect();
    assert_eq!(deltas.len(), 1, "{chunks:?}");
    let streamed = &deltas[0][0];
    assert_eq!(streamed["index"], 0);
    assert_eq!(streamed["function"]["name"], "get_weather");
    assert_eq!(
        streamed["function"]["arguments"],
        call["function"]["arguments"]
    );
    assert!(
        chunks.iter().all(|c| c["choices"][0]["delta"]["content"]
            .as_str()
            .is_none_or(str::is_empty)),
        "no text beside the call: {chunks:?}"
    );
    let last = finish_chunk(&chunks);
    assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        last["tensorfold"]["token_sha"],
        reply["tensorfold"]["token_sha"]
    );

    // The round trip: the call and its result go back; the model answers in text.
    let mut messages = body["messages"].as_array().unwrap().clone();
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
    messages.push(json!({"role": "tool", "tool_call_id": call["id"],
        "content": "{\"temperature_c\": 22, \"sky\": \"sunny\"}"}));
    let round = with(
        with(body, "messages", json!(messages)),
        "tool_choice",
        json!("auto"),
    );
    let answer = s.post_ok("/v1/chat/completions", &round);
    let message = &answer["choices"][0]["message"];
    let text = message["content"]
        .as_str()
        .unwrap_or_else(|| panic!("text: {answer}"));
    assert!(!text.trim().is_empty(), "{answer}");
    assert!(message.get("tool_calls").is_none(), "{answer}");
    assert!(
        answer["usage"]["prompt_tokens"].as_u64() > reply["usage"]["prompt_tokens"].as_u64(),
        "the call and its result are in the prompt"
    );
}

#[test]
fn responses_function_call_item() {
    let s = shared();
    let mut function = weather_function();
    function["type"] = json!("function");
    let body = json!({"model": MODEL_ID, "input": QUESTION, "max_output_tokens": 40,
        "temperature": 0, "tools": [function], "tool_choice": "required"});
    let reply = s.post_ok("/v1/responses", &body);
    assert_eq!(reply["status"], "completed", "{reply}");
    let item = &reply["output"][0];
    assert_eq!(item["type"], "function_call", "{reply}");
    assert_eq!(item["name"], "get_weather");
    assert!(
        item["call_id"].as_str().unwrap().starts_with("call_"),
        "{item}"
    );
    arguments_object(&item["arguments"]);

    // The function's output continues the stored response.
    let next = json!({"model": MODEL_ID, "previous_response_id": reply["id"],
        "max_output_tokens": 24, "temperature": 0, "tools": body["tools"],
        "input": [{"type": "function_call_output", "call_id": item["call_id"],
            "output": "{\"temperature_c\": 22, \"sky\": \"sunny\"}"}]});
    let answer = s.post_ok("/v1/responses", &next);
    assert_eq!(answer["output"][0]["type"], "message", "{answer}");
    assert!(
        answer["usage"]["input_tokens"].as_u64() > reply["usage"]["input_tokens"].as_u64(),
        "{answer}"
    );
}

#[test]
fn anthropic_tool_use_block() {
    let s = shared();
    let mut tool = weather_function();
    let schema = tool.as_object_mut().unwrap().remove("parameters").unwrap();
    tool["input_schema"] = schema;
    let body = json!({"model": MODEL_ID, "max_tokens": 40, "temperature": 0,
        "messages": [{"role": "user", "content": QUESTION}],
        "tools": [tool], "tool_choice": {"type": "any"}});
    let reply = s.post_ok("/v1/messages", &body);
    assert_eq!(reply["stop_reason"], "tool_use", "{reply}");
    let block = reply["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("a tool_use block: {reply}"));
    assert_eq!(block["name"], "get_weather");
    assert!(
        block["id"].as_str().unwrap().starts_with("toolu_"),
        "{block}"
    );
    assert!(block["input"].is_object(), "{block}");
}

/// What Codex sends: a `namespace` tool (its functions are shown to the model, and a call of one
/// comes back with its name and namespace), and hosted tools the server cannot run (left out of
/// the prompt, not refused).
#[test]
fn responses_namespace_and_hosted_tools() {
    let s = shared();
    let mut function = weather_function();
    function["type"] = json!("function");
    let namespace = json!({"type": "namespace", "name": "forecast",
        "description": "Weather services.", "tools": [function]});
    let hosted = [
        json!({"type": "web_search"}),
        json!({"type": "image_generation"}),
    ];
    let tools = json!([hosted[0], namespace, hosted[1]]);
    let body = json!({"model": MODEL_ID, "input": QUESTION, "max_output_tokens": 40,
        "temperature": 0, "tools": tools, "tool_choice": "required"});
    let reply = s.post_ok("/v1/responses", &body);
    assert_eq!(reply["status"], "completed", "{reply}");
    let item = &reply["output"][0];
    assert_eq!(item["type"], "function_call", "{reply}");
    assert_eq!(item["name"], "get_weather", "{item}");
    assert_eq!(item["namespace"], "forecast", "{item}");
    arguments_object(&item["arguments"]);
    // The same call as a plain function tool: the same bytes (only the tools list differs in
    // the request, not in the prompt).
    let plain = json!({"model": MODEL_ID, "input": QUESTION, "max_output_tokens": 40,
        "temperature": 0, "tools": [function], "tool_choice": "required"});
    let same = s.post_ok("/v1/responses", &plain);
    assert_eq!(
        same["tensorfold"]["token_sha"], reply["tensorfold"]["token_sha"],
        "hosted tools and the namespace change nothing in the prompt"
    );
    // The call goes back in the next request's input with its namespace.
    let next = json!({"model": MODEL_ID, "max_output_tokens": 8, "temperature": 0,
        "tools": tools, "input": [
            {"role": "user", "content": QUESTION},
            {"type": "function_call", "call_id": item["call_id"], "name": "get_weather",
                "namespace": "forecast", "arguments": item["arguments"]},
            {"type": "function_call_output", "call_id": item["call_id"], "output": "22 C"}]});
    let answer = s.post_ok("/v1/responses", &next);
    assert!(
        ["completed", "incomplete"].contains(&answer["status"].as_str().unwrap()),
        "{answer}"
    );
    assert!(
        answer["usage"]["input_tokens"].as_u64() > reply["usage"]["input_tokens"].as_u64(),
        "the call and its output are in the prompt: {answer}"
    );
}
