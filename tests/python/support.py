"""Shared pieces of the client tests: starting a server, plain HTTP, metrics, small helpers."""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
# Every request a test makes is small (tens of tokens on a 1.5B model); a generous bound that
# still keeps a hung server from hanging the suite.
REQUEST_TIMEOUT_S = 180.0


def _binary() -> Path:
    raw = os.environ.get("TENSORFOLD_BIN", "target/release/tensorfold")
    path = Path(raw)
    return path if path.is_absolute() else ROOT / path


@dataclass
class Server:
    """One running `tensorfold serve`."""

    proc: subprocess.Popen
    port: int
    log_path: Path
    log_lines: list = field(default_factory=list)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base(self) -> str:
        return f"{self.root}/v1"

    def log_tail(self, n: int = 40) -> str:
        return "".join(self.log_lines[-n:])

    def request(self, method, path, body=None, headers=None, timeout=REQUEST_TIMEOUT_S):
        return http_request(self.port, method, path, body, headers, timeout)

    def metrics(self) -> dict:
        status, _, data = self.request("GET", "/metrics")
        assert status == 200, f"GET /metrics answered {status}: {data[:300]!r}"
        return parse_prometheus(data.decode())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


def http_request(port, method, path, body=None, headers=None, timeout=REQUEST_TIMEOUT_S):
    """One plain HTTP/1.1 request to 127.0.0.1:port -> (status, {lowercase header: value}, bytes).

    `body` may be bytes/str (sent as is) or any other value (sent as JSON)."""
    headers = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        headers.setdefault("Content-Type", "application/json")
    if isinstance(body, str):
        body = body.encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def parse_prometheus(text: str) -> dict:
    """`name{labels} value` lines -> {"name{labels}": float}; comments skipped."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        out[name.strip()] = float(value)
    return out


def start_server(tmp_dir: Path, extra_args=(), ready_headers=None) -> Server:
    binary = _binary()
    if not binary.is_file() or not os.access(binary, os.X_OK):
        pytest.fail(
            f"{binary} is not an executable: build it (cargo build --release -p tensorfold) "
            "or set TENSORFOLD_BIN",
            pytrace=False,
        )
    cmd = [str(binary)]
    if os.environ.get("TENSORFOLD_CACHE"):
        cmd += ["--cache-dir", os.environ["TENSORFOLD_CACHE"]]
    cmd += ["serve", "--host", "127.0.0.1", "--port", "0"]
    cmd += shlex.split(os.environ.get("TENSORFOLD_SERVE_ARGS", ""))
    cmd += list(extra_args)

    log_path = tmp_dir / "server.log"
    log_file = open(log_path, "w", encoding="utf-8", errors="replace")
    log_file.write("$ " + shlex.join(cmd) + "\n")
    log_file.flush()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    lines: list = []
    port_box: list = []
    listening = threading.Event()

    def pump() -> None:
        for line in proc.stderr:
            lines.append(line)
            log_file.write(line)
            log_file.flush()
            m = LISTENING.search(line)
            if m and not port_box:
                port_box.append(int(m.group(1)))
                listening.set()
        listening.set()  # stderr closed: the process is gone

    threading.Thread(target=pump, daemon=True, name="tensorfold-stderr").start()
    deadline = time.monotonic() + float(os.environ.get("TENSORFOLD_STARTUP_S", "600"))

    def fail(why: str) -> None:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)
        pytest.fail(
            f"{why}\ncommand: {shlex.join(cmd)}\nlog: {log_path}\n--- stderr tail ---\n"
            + "".join(lines[-40:]),
            pytrace=False,
        )

    while not listening.wait(timeout=0.5):
        if time.monotonic() > deadline:
            fail("the server printed no 'listening on http://127.0.0.1:PORT' line in time")
    if not port_box:
        fail(f"the server exited (status {proc.wait(timeout=20)}) before listening")
    server = Server(proc=proc, port=port_box[0], log_path=log_path, log_lines=lines)

    # Ready = GET /health answers 200 (503 while the model loads).
    last = None
    while True:
        if proc.poll() is not None:
            fail(f"the server exited (status {proc.returncode}) while loading")
        try:
            status, _, body = server.request("GET", "/health", headers=ready_headers, timeout=10)
            last = (status, body[:200])
            if status == 200:
                break
            assert status == 503, f"GET /health while loading answered {status}: {body[:200]!r}"
        except (ConnectionError, OSError, http.client.HTTPException) as e:
            last = repr(e)
        if time.monotonic() > deadline:
            fail(f"GET /health never answered 200 (last: {last})")
        time.sleep(0.25)
    return server


# ---- small helpers for the test modules ---------------------------------------------------------

HEX12 = re.compile(r"^[0-9a-f]{12}$")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}
WEATHER_PROMPT = "What is the weather like in Paris right now? Use the get_weather tool."
WEATHER_RESULT = json.dumps({"city": "Paris", "temperature_c": 18, "condition": "sunny"})


def tensorfold_ext(resp) -> dict:
    """The `tensorfold` extension object of a chat/completions reply."""
    d = resp.to_dict()
    assert "tensorfold" in d, f"no 'tensorfold' object in the reply: {sorted(d)}"
    ext = d["tensorfold"]
    assert isinstance(ext, dict), ext
    return ext


def pick_stop(text: str) -> str:
    """A word from the middle of `text` whose first occurrence is not at the start, to use as a stop
    string: generation must end right before that occurrence."""
    words = re.findall(r"[A-Za-z]{4,}", text)
    for w in words[len(words) // 2 :] + words[: len(words) // 2]:
        if text.find(w) > 0:
            return w
    pytest.fail(f"no usable stop word in {text!r}")


def parse_sse(data: bytes) -> list:
    """Raw SSE bytes -> [(event name or None, data string)]."""
    events = []
    for block in re.split(r"\r?\n\r?\n", data.decode()):
        if not block.strip():
            continue
        name, datas = None, []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                datas.append(line[5:].lstrip(" "))
        events.append((name, "\n".join(datas)))
    return events
