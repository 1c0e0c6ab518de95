"""POST /v1/responses through the openai client: plain, instructions, SSE stream (raw events and
the client's strict `responses.stream()` helper), previous_response_id, retrieve/delete, store,
function tools and text.format."""

from __future__ import annotations

import json

import openai
import pytest

from support import WEATHER_PROMPT, WEATHER_RESULT, WEATHER_TOOL

SHORT = "Name the three primary colors, comma-separated, nothing else."
TOOL = {"type": "function", **WEATHER_TOOL["function"]}  # Responses tools are flat


def check_terminal(r, limit):
    assert r.object == "response"
    assert r.id
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
        assert r.usage.output_tokens == limit
    else:
        assert r.status == "completed", r.status
        assert r.usage.output_tokens <= limit
    assert r.usage.input_tokens > 0
    assert r.usage.output_tokens > 0
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


@pytest.fixture(scope="module")
def plain(oai, model_id):
    return oai.responses.create(model=model_id, input="Say hello in one short sentence.", max_output_tokens=24, temperature=0)


def test_responses_plain(plain, model_id):
    check_terminal(plain, 24)
    assert plain.model == model_id
    assert plain.output_text.strip()
    msgs = [o for o in plain.output if o.type == "message"]
    assert len(msgs) == 1 and msgs[0].role == "assistant"
    assert msgs[0].id
    assert [p.type for p in msgs[0].content] == ["output_text"]
    assert plain.usage.input_tokens_details.cached_tokens >= 0
    assert plain.usage.output_tokens_details.reasoning_tokens == 0


def test_responses_instructions(oai, model_id, plain):
    r = oai.responses.create(
        model=model_id,
        input="Say hello in one short sentence.",
        instructions="You are a pirate. Every reply you give must sound like a pirate, matey.",
        max_output_tokens=24,
        temperature=0,
    )
    check_terminal(r, 24)
    assert r.output_text.strip()
    assert r.instructions.startswith("You are a pirate")
    assert r.usage.input_tokens != plain.usage.input_tokens, "instructions changed nothing"


@pytest.fixture(scope="module")
def short(oai, model_id):
    return oai.responses.create(model=model_id, input=SHORT, max_output_tokens=32, temperature=0)


def test_responses_stream_events(oai, model_id, short):
    assert short.status == "completed", "the reference reply should end by itself"
    events = list(oai.responses.create(model=model_id, input=SHORT, max_output_tokens=32, temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created", types
    assert types[-1] == "response.completed", types
    assert types.count("response.completed") == 1
    seqs = [e.sequence_number for e in events]
    assert seqs[0] == 0, seqs
    assert all(b > a for a, b in zip(seqs, seqs[1:])), seqs
    # Event order within the message item.
    for t in ("response.output_item.added", "response.content_part.added", "response.output_text.done",
              "response.content_part.done", "response.output_item.done"):
        assert t in types, f"{t} missing: {types}"
    first_delta = types.index("response.output_text.delta")
    assert types.index("response.output_item.added") < types.index("response.content_part.added") < first_delta
    assert first_delta < types.index("response.output_text.done") < types.index("response.output_item.done")
    assert events[0].response.status == "in_progress"
    ids = {e.response.id for e in events if e.type.startswith("response.") and hasattr(e, "response") and e.response}
    assert len(ids) == 1, ids

    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = [e for e in events if e.type == "response.output_text.done"]
    final = events[-1].response
    assert text == done[0].text == final.output_text
    assert text == short.output_text, "stream and non-stream differ"
    assert final.usage.output_tokens == short.usage.output_tokens


def test_responses_stream_helper(oai, model_id, short):
    # The client's helper checks ordering and identities strictly and rebuilds the response.
    deltas = []
    with oai.responses.stream(model=model_id, input=SHORT, max_output_tokens=32, temperature=0) as s:
        for e in s:
            if e.type == "response.output_text.delta":
                deltas.append(e.delta)
        final = s.get_final_response()
    assert "".join(deltas) == final.output_text == short.output_text


def test_responses_previous_response_id(oai, model_id):
    first = oai.responses.create(
        model=model_id, input="My name is Ada. Reply with just: OK.", max_output_tokens=8, temperature=0
    )
    check_terminal(first, 8)
    second = oai.responses.create(
        model=model_id,
        input="What is my name? Answer with the name only.",
        previous_response_id=first.id,
        max_output_tokens=8,
        temperature=0,
    )
    check_terminal(second, 8)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert "Ada" in second.output_text, second.output_text


def test_responses_previous_response_id_unknown(oai, model_id):
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model=model_id, input="hi", previous_response_id="resp_doesnotexist", max_output_tokens=4)


def test_responses_retrieve_and_delete(oai, model_id, plain):
    got = oai.responses.retrieve(plain.id)
    assert got.id == plain.id
    assert got.status == plain.status
    assert got.output_text == plain.output_text
    assert got.usage.output_tokens == plain.usage.output_tokens

    oai.responses.delete(plain.id)
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.retrieve(plain.id)
    assert e.value.status_code == 404
    with pytest.raises(openai.NotFoundError):
        oai.responses.delete(plain.id)


def test_responses_store_false(oai, model_id):
    r = oai.responses.create(model=model_id, input="Say hi.", max_output_tokens=4, temperature=0, store=False)
    assert r.output_text
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model=model_id, input="again", previous_response_id=r.id, max_output_tokens=4)


def test_responses_function_tool_round_trip(oai, model_id):
    user = {"role": "user", "content": WEATHER_PROMPT}
    r = oai.responses.create(
        model=model_id, input=[user], tools=[TOOL], tool_choice="required", max_output_tokens=48, temperature=0
    )
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1, r.output
    call = calls[0]
    assert call.name == "get_weather"
    assert call.call_id
    args = json.loads(call.arguments)
    assert "paris" in args["city"].lower(), args

    # Stateless continuation: replay the call item and add its output.
    r2 = oai.responses.create(
        model=model_id,
        input=[
            user,
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": WEATHER_RESULT},
        ],
        tools=[TOOL],
        tool_choice="none",
        max_output_tokens=48,
        temperature=0,
    )
    assert not [o for o in r2.output if o.type == "function_call"], r2.output
    text = r2.output_text
    assert text.strip()
    assert "18" in text or "sunny" in text.lower(), text


def test_responses_text_format_json_object(oai, model_id):
    r = oai.responses.create(
        model=model_id,
        input='Return a JSON object with the key "a" set to 1.',
        text={"format": {"type": "json_object"}},
        max_output_tokens=24,
        temperature=0,
    )
    assert r.output_text.strip()
    assert r.text.format.type == "json_object"


def test_responses_errors(oai, model_id):
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model="no-such-model", input="hi", max_output_tokens=4)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model=model_id, input="hi", max_output_tokens=4, temperature=5)
    assert e.value.param == "temperature"
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve("resp_doesnotexist")
