"""POST /v1/messages (and /v1/messages/count_tokens) through the anthropic client."""

from __future__ import annotations

import json

import anthropic
import pytest

from support import WEATHER_PROMPT, WEATHER_RESULT, WEATHER_TOOL, pick_stop

SEA = [{"role": "user", "content": "Write two sentences about the sea."}]
# anthropic 2.14 has no `temperature` keyword on messages.create/stream (0.x had); extra_body works on
# every version.
GREEDY = {"temperature": 0}
PARAMS = dict(max_tokens=32, extra_body=GREEDY)
TOOL = {
    "name": "get_weather",
    "description": WEATHER_TOOL["function"]["description"],
    "input_schema": WEATHER_TOOL["function"]["parameters"],
}


@pytest.fixture(scope="module")
def plain(claude, model_id):
    return claude.messages.create(model=model_id, messages=SEA, **PARAMS)


def test_messages_plain(plain, model_id):
    assert plain.type == "message"
    assert plain.role == "assistant"
    assert plain.id
    assert plain.model == model_id
    assert [b.type for b in plain.content] == ["text"]
    assert plain.content[0].text.strip()
    assert plain.stop_reason in ("end_turn", "max_tokens")
    assert plain.stop_sequence is None
    assert plain.usage.input_tokens > 0
    assert 0 < plain.usage.output_tokens <= PARAMS["max_tokens"]
    # The end-of-turn token counts as an output token, so a reply that ends exactly at the
    # limit can be end_turn; max_tokens always means the limit was reached.
    if plain.stop_reason == "max_tokens":
        assert plain.usage.output_tokens == PARAMS["max_tokens"]


def prompt_total(usage):
    """The whole prompt: Anthropic's input_tokens leave out what the prompt cache supplied."""
    return usage.input_tokens + (usage.cache_read_input_tokens or 0)


def test_messages_system(claude, model_id, plain):
    pirate = "You are a pirate. Every reply you give must sound like a pirate, matey."
    a = claude.messages.create(model=model_id, system=pirate, messages=SEA, **PARAMS)
    assert a.content[0].text.strip()
    assert prompt_total(a.usage) != prompt_total(plain.usage), "the system prompt changed nothing"
    # The block form of `system` is the same prompt.
    b = claude.messages.create(
        model=model_id, system=[{"type": "text", "text": pirate}], messages=SEA, max_tokens=1, extra_body=GREEDY
    )
    assert prompt_total(b.usage) == prompt_total(a.usage)


def test_messages_stream_matches(claude, model_id, plain):
    with claude.messages.stream(model=model_id, messages=SEA, **PARAMS) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == plain.content[0].text
    assert final.content[0].text == text
    assert final.stop_reason == plain.stop_reason
    assert final.usage.output_tokens == plain.usage.output_tokens
    assert prompt_total(final.usage) == prompt_total(plain.usage)


def test_messages_raw_stream_event_order(claude, model_id):
    events = list(claude.messages.create(model=model_id, messages=SEA, max_tokens=4, extra_body=GREEDY, stream=True))
    types = [e.type for e in events]
    assert types[0] == "message_start"
    assert types[-1] == "message_stop"
    assert types[-2] == "message_delta"
    assert types[1] == "content_block_start"
    assert "content_block_stop" in types
    assert events[-2].delta.stop_reason == "max_tokens"
    assert events[-2].usage.output_tokens == 4


@pytest.fixture(scope="module")
def tool_use(claude, model_id):
    return claude.messages.create(
        model=model_id,
        messages=[{"role": "user", "content": WEATHER_PROMPT}],
        tools=[TOOL],
        tool_choice={"type": "any"},
        max_tokens=48,
        extra_body=GREEDY,
    )


def test_messages_tool_use(tool_use):
    assert tool_use.stop_reason == "tool_use"
    uses = [b for b in tool_use.content if b.type == "tool_use"]
    assert len(uses) == 1, tool_use.content
    assert uses[0].name == "get_weather"
    assert uses[0].id
    assert isinstance(uses[0].input, dict)
    assert "paris" in uses[0].input["city"].lower(), uses[0].input


def test_messages_tool_result_round_trip(claude, model_id, tool_use):
    use = next(b for b in tool_use.content if b.type == "tool_use")
    r = claude.messages.create(
        model=model_id,
        messages=[
            {"role": "user", "content": WEATHER_PROMPT},
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in tool_use.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": WEATHER_RESULT}]},
        ],
        tools=[TOOL],
        tool_choice={"type": "none"},
        max_tokens=48,
        extra_body=GREEDY,
    )
    assert r.stop_reason in ("end_turn", "max_tokens"), r
    texts = [b.text for b in r.content if b.type == "text"]
    assert texts and texts[0].strip()
    assert "18" in texts[0] or "sunny" in texts[0].lower(), texts[0]


def test_messages_tool_use_streamed(claude, model_id, tool_use):
    with claude.messages.stream(
        model=model_id,
        messages=[{"role": "user", "content": WEATHER_PROMPT}],
        tools=[TOOL],
        tool_choice={"type": "any"},
        max_tokens=48,
        extra_body=GREEDY,
    ) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    uses = [b for b in final.content if b.type == "tool_use"]
    ref = next(b for b in tool_use.content if b.type == "tool_use")
    assert len(uses) == 1
    assert uses[0].name == "get_weather"
    assert uses[0].input == ref.input  # rebuilt from input_json_delta pieces


def test_messages_stop_sequence(claude, model_id, plain):
    full = plain.content[0].text
    stop = pick_stop(full)
    r = claude.messages.create(model=model_id, messages=SEA, stop_sequences=[stop], **PARAMS)
    assert r.stop_reason == "stop_sequence"
    assert r.stop_sequence == stop
    assert r.content[0].text == full[: full.index(stop)]


def test_messages_count_tokens(claude, model_id, plain):
    n = claude.messages.count_tokens(model=model_id, messages=SEA)
    assert n.input_tokens == prompt_total(plain.usage)


def test_messages_error_envelope(server, model_id):
    # `messages` missing.
    status, _, body = server.request("POST", "/v1/messages", {"model": model_id, "max_tokens": 4})
    assert status == 400
    data = json.loads(body)
    assert data["type"] == "error", data
    assert data["error"]["type"] == "invalid_request_error", data
    assert isinstance(data["error"]["message"], str) and data["error"]["message"]


def test_messages_errors_through_client(claude, model_id):
    with pytest.raises(anthropic.NotFoundError) as e:
        claude.messages.create(model="no-such-model", messages=SEA, max_tokens=4)
    assert e.value.status_code == 404
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=model_id, messages=SEA, max_tokens=4, extra_body={"temperature": 5})
    assert e.value.body["error"]["type"] == "invalid_request_error"
