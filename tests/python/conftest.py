"""Client tests of `tensorfold serve`: the real binary, the real default model, the official
`openai` and `anthropic` Python clients.

The session starts one server (`tensorfold serve --host 127.0.0.1 --port 0`), reads the port from
its `listening on http://127.0.0.1:PORT` line on stderr, waits for GET /health to answer 200 and
kills it at the end. Environment:

    TENSORFOLD_BIN          the binary (default target/release/tensorfold, from the repo root)
    TENSORFOLD_CACHE        model cache root, passed as --cache-dir
    TENSORFOLD_SERVE_ARGS   extra `serve` arguments (shell words), e.g. a model or --threads
    TENSORFOLD_STARTUP_S    how long to wait for the server to become ready (default 600)
"""

from __future__ import annotations

import json

import pytest

from support import REQUEST_TIMEOUT_S, Server, start_server

_servers_started: list = []


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> Server:
    srv = start_server(tmp_path_factory.mktemp("server"))
    _servers_started.append(srv)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def model_id(server) -> str:
    status, _, body = server.request("GET", "/v1/models")
    assert status == 200, body
    data = json.loads(body)
    assert data.get("object") == "list", data
    assert data["data"], "GET /v1/models lists no model"
    return data["data"][0]["id"]


@pytest.fixture(scope="session")
def oai(server):
    import openai

    return openai.OpenAI(
        base_url=server.openai_base,
        # openai 2.x builds the responses.connect() URL as wss:// whatever base_url's scheme is;
        # naming ws:// here works on every version that has connect() (2.22+).
        websocket_base_url=server.openai_base.replace("http://", "ws://", 1),
        api_key="unused",
        max_retries=0,
        timeout=REQUEST_TIMEOUT_S,
    )


@pytest.fixture(scope="session")
def claude(server):
    import anthropic

    return anthropic.Anthropic(
        base_url=server.root, api_key="unused", max_retries=0, timeout=REQUEST_TIMEOUT_S
    )


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for srv in _servers_started:
        terminalreporter.write_line(f"tensorfold server log: {srv.log_path}")
    if exitstatus not in (0, 5):
        for srv in _servers_started:
            terminalreporter.write_sep("-", f"server log tail ({srv.log_path})")
            terminalreporter.write(srv.log_tail(60))
