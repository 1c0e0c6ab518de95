"""`serve --api-key`: a second server, started only for this module."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from support import REQUEST_TIMEOUT_S, start_server

KEY = "secret"


@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    srv = start_server(
        tmp_path_factory.mktemp("server-auth"),
        ["--api-key", KEY],
        ready_headers={"Authorization": f"Bearer {KEY}"},
    )
    yield srv
    srv.stop()


def check_401(status, headers, body):
    assert status == 401
    assert headers.get("www-authenticate", "").startswith("Bearer"), headers
    err = json.loads(body)["error"]
    assert err["type"] == "authentication_error", err
    assert err["message"]


def test_no_key(locked):
    check_401(*locked.request("GET", "/v1/models"))
    check_401(*locked.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}))


def test_wrong_key(locked):
    check_401(*locked.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"}))
    check_401(*locked.request("GET", "/v1/models", headers={"Authorization": f"Basic {KEY}"}))


def test_right_key(locked):
    status, _, body = locked.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200, body
    assert json.loads(body)["data"]


def test_openai_client_key(locked):
    good = openai.OpenAI(base_url=locked.openai_base, api_key=KEY, max_retries=0, timeout=REQUEST_TIMEOUT_S)
    model = good.models.list().data[0].id
    r = good.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0
    )
    assert r.choices[0].message.content
    bad = openai.OpenAI(base_url=locked.openai_base, api_key="wrong", max_retries=0, timeout=REQUEST_TIMEOUT_S)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_anthropic_key(locked):
    # The anthropic client sends `Authorization: Bearer`; older clients and curl users send `x-api-key`.
    model = json.loads(locked.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})[2])["data"][0]["id"]
    good = anthropic.Anthropic(base_url=locked.root, api_key=KEY, max_retries=0, timeout=REQUEST_TIMEOUT_S)
    assert good.messages.count_tokens(model=model, messages=[{"role": "user", "content": "hi"}]).input_tokens > 0
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    status, _, data = locked.request("POST", "/v1/messages/count_tokens", body, {"x-api-key": KEY})
    assert status == 200, data
    status, _, data = locked.request("POST", "/v1/messages/count_tokens", body, {"x-api-key": "wrong"})
    assert status == 401
    assert json.loads(data)["type"] == "error"
    bad = anthropic.Anthropic(base_url=locked.root, api_key="wrong", max_retries=0, timeout=REQUEST_TIMEOUT_S)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.count_tokens(model=model, messages=[{"role": "user", "content": "hi"}])


def test_health_needs_no_key(locked):
    status, _, _ = locked.request("GET", "/health")
    assert status == 200
