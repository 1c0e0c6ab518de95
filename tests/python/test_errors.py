"""Errors: through the openai client (status -> exception class, code, param) and on the wire (the
OpenAI envelope for malformed JSON and unknown paths)."""

from __future__ import annotations

import json

import openai
import pytest

HI = [{"role": "user", "content": "hi"}]


def envelope(body: bytes) -> dict:
    data = json.loads(body)
    assert set(data) == {"error"}, data
    err = data["error"]
    assert set(err) >= {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    return err


def test_n_greater_than_one(oai, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model_id, messages=HI, max_tokens=4, n=2)
    assert e.value.status_code == 400
    assert e.value.param == "n"


def test_unknown_model(oai):
    with pytest.raises(openai.NotFoundError) as e:
        oai.chat.completions.create(model="no-such-model", messages=HI, max_tokens=4)
    assert e.value.status_code == 404
    assert e.value.code == "model_not_found"
    assert e.value.param == "model"


def test_temperature_out_of_range(oai, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model_id, messages=HI, max_tokens=4, temperature=5)
    assert e.value.status_code == 400
    assert e.value.param == "temperature"
    assert e.value.type == "invalid_request_error"


def test_max_tokens_beyond_context(oai, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model_id, messages=HI, max_tokens=10_000_000)
    assert e.value.status_code == 400
    assert e.value.code == "context_length_exceeded"


def test_completions_max_tokens_beyond_context(oai, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        oai.completions.create(model=model_id, prompt="x", max_tokens=10_000_000)
    assert e.value.code == "context_length_exceeded"


def test_empty_messages(oai, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model_id, messages=[], max_tokens=4)
    assert e.value.param == "messages"


def test_malformed_json(server):
    status, headers, body = server.request(
        "POST", "/v1/chat/completions", b'{"model": "x", "messages": [', {"Content-Type": "application/json"}
    )
    assert status == 400
    assert headers.get("content-type", "").startswith("application/json")
    err = envelope(body)
    assert err["type"] == "invalid_request_error"


def test_body_not_an_object(server):
    status, _, body = server.request("POST", "/v1/chat/completions", b"[1, 2]", {"Content-Type": "application/json"})
    assert status == 400
    envelope(body)


def test_wrong_field_type_names_the_field(server, model_id):
    status, _, body = server.request(
        "POST", "/v1/chat/completions", {"model": model_id, "messages": HI, "max_tokens": "four"}
    )
    assert status == 400
    assert envelope(body)["param"] == "max_tokens"


def test_unknown_path(server):
    status, headers, body = server.request("GET", "/v1/no-such-endpoint")
    assert status == 404
    assert headers.get("content-type", "").startswith("application/json")
    envelope(body)


def test_models_endpoint(server, model_id):
    status, _, body = server.request("GET", "/v1/models")
    assert status == 200
    data = json.loads(body)
    ids = [m["id"] for m in data["data"]]
    assert model_id in ids
    for m in data["data"]:
        assert m["object"] == "model", m
    status, _, body = server.request("GET", f"/v1/models/{model_id}")
    assert status == 200, body
    assert json.loads(body)["id"] == model_id
    status, _, body = server.request("GET", "/v1/models/no-such-model")
    assert status == 404
    envelope(body)
