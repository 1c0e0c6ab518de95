"""Responses over WebSocket through `client.responses.connect()` (ws://HOST/v1/responses): one
`{"type": "response.create", ...params}` text frame per response, the same events as the SSE
stream back, the socket staying open for the next response."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

SHORT = "Name the three primary colors, comma-separated, nothing else."
PARAMS = dict(input=SHORT, max_output_tokens=32, temperature=0)
WS_TIMEOUT_S = 180


@contextmanager
def connect(client):
    """`responses.connect()` with a watchdog: iteration has no timeout of its own, so a hung server
    gets the socket closed under it and the test fails instead of hanging."""
    with client.responses.connect(websocket_connection_options={"open_timeout": 30, "close_timeout": 5}) as conn:
        fired = threading.Event()

        def expire():
            fired.set()
            conn.close()

        timer = threading.Timer(WS_TIMEOUT_S, expire)
        timer.start()
        try:
            yield conn
        finally:
            timer.cancel()
        assert not fired.is_set(), f"no terminal event within {WS_TIMEOUT_S} s"


def until_done(conn):
    """Events of one response, through its terminal event (or an `error` event)."""
    events = []
    for ev in conn:
        events.append(ev)
        if ev.type in ("response.completed", "response.failed", "response.incomplete", "error"):
            return events
    pytest.fail(f"the socket closed before a terminal event; got {[e.type for e in events]}")


def error_of(event) -> dict:
    """The error of an `error` event: nested under "error" (openai 3.x's ResponseWsError, the
    WebSocket shape) or flat (2.x parses it as the SSE ResponseErrorEvent)."""
    d = event.to_dict()
    return d["error"] if isinstance(d.get("error"), dict) else d


def text_of(events):
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


@pytest.fixture(scope="module")
def sse_text(oai, model_id):
    events = list(oai.responses.create(model=model_id, stream=True, **PARAMS))
    assert events[-1].type == "response.completed"
    return text_of(events)


def test_ws_matches_sse(oai, model_id, sse_text):
    with connect(oai) as conn:
        conn.response.create(model=model_id, **PARAMS)
        events = until_done(conn)
    types = [e.type for e in events]
    assert types[0] == "response.created", types
    assert types[-1] == "response.completed", types
    seqs = [e.sequence_number for e in events]
    assert seqs[0] == 0 and all(b > a for a, b in zip(seqs, seqs[1:])), seqs
    text = text_of(events)
    assert text == sse_text
    assert events[-1].response.output_text == text


def test_ws_two_responses_on_one_socket(oai, model_id, sse_text):
    with connect(oai) as conn:
        conn.response.create(model=model_id, input="My name is Ada. Reply with just: OK.", max_output_tokens=8, temperature=0)
        first = until_done(conn)
        assert first[-1].type in ("response.completed", "response.incomplete"), [e.type for e in first]
        first_id = first[-1].response.id
        conn.response.create(
            model=model_id,
            input="What is my name? Answer with the name only.",
            previous_response_id=first_id,
            max_output_tokens=8,
            temperature=0,
        )
        second = until_done(conn)
    assert second[-1].type == "response.completed", [e.type for e in second]
    r2 = second[-1].response
    assert r2.id != first_id
    assert second[0].sequence_number == 0, "sequence numbers restart with each response"
    assert "Ada" in r2.output_text, r2.output_text


def test_ws_error_event_keeps_socket(oai, model_id, sse_text):
    with connect(oai) as conn:
        conn.response.create(model="no-such-model", input="hi", max_output_tokens=4)
        bad = until_done(conn)
        assert bad[-1].type == "error", [e.type for e in bad]
        err = error_of(bad[-1])
        assert err.get("message")
        assert err.get("code") == "model_not_found", err
        # The socket stays usable after an error.
        conn.response.create(model=model_id, **PARAMS)
        good = until_done(conn)
    assert good[-1].type == "response.completed"
    assert text_of(good) == sse_text
