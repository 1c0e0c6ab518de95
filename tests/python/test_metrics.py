"""GET /metrics (Prometheus text, `tensorfold:` prefix) and what a client disconnect does to it."""

from __future__ import annotations

import http.client
import json
import socket
import time

NAMES = [
    "num_requests_running",
    "num_requests_waiting",
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
    "prompt_tokens_cached_total",
    "client_disconnects_total",
    "kv_free_blocks",
    "kv_total_blocks",
]
HISTOGRAMS = ["time_to_first_token_seconds", "e2e_request_latency_seconds"]


def m(metrics: dict, name: str) -> float:
    key = f"tensorfold:{name}"
    assert key in metrics, f"{key} missing from /metrics"
    return metrics[key]


def test_metrics_names_and_types(server):
    status, headers, body = server.request("GET", "/metrics")
    assert status == 200
    assert headers.get("content-type", "").startswith("text/plain")
    text = body.decode()
    metrics = server.metrics()
    for name in NAMES:
        m(metrics, name)
    for name in HISTOGRAMS:
        assert f"# TYPE tensorfold:{name} histogram" in text
        assert f'tensorfold:{name}_bucket{{le="+Inf"}}' in metrics
        m(metrics, f"{name}_count")
        m(metrics, f"{name}_sum")
    assert m(metrics, "kv_total_blocks") > 0
    assert 0 <= m(metrics, "kv_free_blocks") <= m(metrics, "kv_total_blocks")


def test_metrics_count_a_request(server, oai, model_id):
    before = server.metrics()
    r = oai.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Count to five."}], max_tokens=16, temperature=0
    )
    after = server.metrics()
    assert m(after, "request_success_total") == m(before, "request_success_total") + 1
    assert m(after, "prompt_tokens_total") == m(before, "prompt_tokens_total") + r.usage.prompt_tokens
    assert m(after, "generation_tokens_total") == m(before, "generation_tokens_total") + r.usage.completion_tokens
    assert m(after, "e2e_request_latency_seconds_count") == m(before, "e2e_request_latency_seconds_count") + 1
    assert m(after, "time_to_first_token_seconds_count") == m(before, "time_to_first_token_seconds_count") + 1
    assert m(after, "spec_decode_num_accepted_tokens_total") <= m(after, "spec_decode_num_draft_tokens_total")
    assert m(after, "num_requests_running") == 0


def wait_for(server, pred, timeout=60.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = server.metrics()
        if pred(last):
            return last
        time.sleep(0.2)
    return last


def test_client_disconnect_cancels(server, oai, model_id):
    before = server.metrics()
    body = json.dumps(
        {
            "model": model_id,
            "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
            "max_tokens": 400,
            "temperature": 0,
            "stream": True,
        }
    )
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("content-type", "").startswith("text/event-stream")
    chunks = 0
    while chunks < 3:
        line = resp.readline()
        assert line, "the stream ended before three chunks"
        if line.startswith(b"data: {"):
            chunks += 1
    running = server.metrics()
    assert m(running, "num_requests_running") == 1, "the streamed request should be running"
    assert m(running, "kv_free_blocks") < m(running, "kv_total_blocks")
    # Go away mid-stream.
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.sock.close()
    resp.close()
    conn.close()

    target = m(before, "client_disconnects_total") + 1
    after = wait_for(
        server,
        lambda x: m(x, "client_disconnects_total") >= target
        and m(x, "num_requests_running") == 0
        and m(x, "kv_free_blocks") == m(x, "kv_total_blocks"),
    )
    assert m(after, "client_disconnects_total") == target
    assert m(after, "num_requests_running") == 0
    assert m(after, "num_requests_waiting") == 0
    assert m(after, "kv_free_blocks") == m(after, "kv_total_blocks")
    # Cancelled well before its 400 tokens.
    assert m(after, "generation_tokens_total") - m(before, "generation_tokens_total") < 400
    assert m(after, "request_success_total") == m(before, "request_success_total")

    # The server still answers.
    r = oai.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0
    )
    assert r.choices[0].message.content


def test_health(server):
    status, _, body = server.request("GET", "/health")
    assert status == 200
