"""Structured output through the official clients: a JSON schema on each API (chat's
`response_format`, completions' extension fields, Responses' `text.format`, Anthropic's
`output_config.format`), a required tool, and the regex and choice extensions. Each reply parses
and validates; a drafted reply equals its serial twin (`token_sha`); a schema the grammar cannot
enforce is a 400 naming the field."""

from __future__ import annotations

import json
import re

import pytest

from support import tensorfold_ext

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "languages": {"type": "array", "items": {"enum": ["python", "rust", "go"]}, "maxItems": 3},
    },
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Invent a programmer. Reply with JSON: name, age, languages."}]
SAMPLED = dict(max_tokens=80, temperature=0.9, seed=11)


def check_person(text: str) -> dict:
    """The reply is one JSON document valid under PERSON (checked by hand: no validator needed)."""
    doc = json.loads(text)
    assert set(doc) == {"name", "age", "languages"}, doc
    assert isinstance(doc["name"], str)
    assert isinstance(doc["age"], int) and not isinstance(doc["age"], bool) and 0 <= doc["age"] <= 150
    assert isinstance(doc["languages"], list) and len(doc["languages"]) <= 3
    assert all(x in ("python", "rust", "go") for x in doc["languages"]), doc
    return doc


def chat_schema(oai, model_id, **extra):
    return oai.chat.completions.create(
        model=model_id,
        messages=ASK,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "strict": True, "schema": PERSON},
        },
        **SAMPLED,
        **extra,
    )


def test_chat_json_schema_validates_and_drafted_equals_serial(oai, model_id):
    drafted = chat_schema(oai, model_id)
    serial = chat_schema(oai, model_id, extra_body={"draft": False})
    check_person(drafted.choices[0].message.content)
    assert drafted.choices[0].finish_reason == "stop"
    assert tensorfold_ext(drafted)["token_sha"] == tensorfold_ext(serial)["token_sha"]
    assert drafted.choices[0].message.content == serial.choices[0].message.content
    assert tensorfold_ext(serial)["drafted"] == 0


def test_chat_json_schema_streamed_equals_whole(oai, model_id):
    whole = chat_schema(oai, model_id)
    chunks = chat_schema(oai, model_id, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content


def test_json_object_is_an_object(oai, model_id):
    r = oai.chat.completions.create(
        model=model_id, messages=ASK, response_format={"type": "json_object"}, **SAMPLED
    )
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_responses_text_format(oai, model_id):
    fmt = {"type": "json_schema", "name": "person", "strict": True, "schema": PERSON}
    kw = dict(model=model_id, input=ASK[0]["content"], max_output_tokens=80, temperature=0.9)
    drafted = oai.responses.create(text={"format": fmt}, extra_body={"seed": 11}, **kw)
    serial = oai.responses.create(text={"format": fmt}, extra_body={"seed": 11, "draft": False}, **kw)
    check_person(drafted.output_text)
    assert drafted.output_text == serial.output_text
    assert drafted.to_dict()["tensorfold"]["token_sha"] == serial.to_dict()["tensorfold"]["token_sha"]
    assert drafted.text.format.type == "json_schema"


def test_anthropic_output_config_format(claude, model_id):
    kw = dict(model=model_id, messages=ASK, max_tokens=80)
    body = {"output_config": {"format": {"type": "json_schema", "schema": PERSON}}, "temperature": 0.9, "seed": 11}
    drafted = claude.messages.create(extra_body=body, **kw)
    serial = claude.messages.create(extra_body={**body, "draft": False}, **kw)
    text = "".join(b.text for b in drafted.content if b.type == "text")
    check_person(text)
    assert drafted.stop_reason == "end_turn"
    assert text == "".join(b.text for b in serial.content if b.type == "text")
    assert drafted.to_dict()["tensorfold"]["token_sha"] == serial.to_dict()["tensorfold"]["token_sha"]


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}], ids=["required", "named"])
def test_a_required_tool_call_has_valid_arguments(oai, model_id, choice):
    kw = dict(
        model=model_id,
        messages=[{"role": "user", "content": "Tell me a joke about the weather in Oslo."}],
        tools=[WEATHER],
        tool_choice=choice,
        parallel_tool_calls=False,
        **SAMPLED,
    )
    drafted = oai.chat.completions.create(**kw)
    serial = oai.chat.completions.create(extra_body={"draft": False}, **kw)
    calls = drafted.choices[0].message.tool_calls
    assert calls and len(calls) == 1, drafted.choices[0].message
    assert calls[0].function.name == "get_weather"
    args = json.loads(calls[0].function.arguments)
    assert set(args) == {"city", "unit"} and args["unit"] in ("c", "f"), args
    assert drafted.choices[0].finish_reason == "tool_calls"
    assert tensorfold_ext(drafted)["token_sha"] == tensorfold_ext(serial)["token_sha"]


def test_regex_and_choice_extensions(oai, model_id):
    r = oai.completions.create(
        model=model_id, prompt="A phone number: ", max_tokens=12, temperature=0.9, seed=3,
        extra_body={"regex": r"\d{3}-\d{4}"},
    )
    assert re.fullmatch(r"\d{3}-\d{4}", r.choices[0].text), r.choices[0].text
    r = oai.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Is the sea wet?"}], max_tokens=8,
        extra_body={"guided_choice": ["yes", "no", "maybe"]}, temperature=0,
    )
    assert r.choices[0].message.content in ("yes", "no", "maybe")


def test_a_schema_that_cannot_be_enforced_is_a_400(oai, claude, model_id):
    import anthropic
    import openai

    bad = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {"type": "nonsense"}}}
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model_id, messages=ASK, max_tokens=4, response_format=bad)
    assert e.value.body["param"] == "response_format.json_schema.schema"
    with pytest.raises(openai.BadRequestError) as e:
        oai.completions.create(model=model_id, prompt="x", max_tokens=4, extra_body={"regex": "(open"})
    assert "regex" in e.value.body["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(
            model=model_id, messages=ASK, max_tokens=4,
            extra_body={"output_config": {"format": {"type": "json_schema", "schema": {"type": "nonsense"}}}},
        )
    assert e.value.body["type"] == "error"
    assert "output_config.format.schema" in e.value.body["error"]["message"]
