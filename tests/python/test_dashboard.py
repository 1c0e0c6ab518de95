"""`/dashboard` in a real headless Chromium (Debian's `chromium` package): the page loads, polls
`/stats`, and its numbers move while requests run and match `/metrics` when they end. A
screenshot of the page is kept next to the test's output (its path is printed)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

SEA = [{"role": "user", "content": "Write two sentences about the sea."}]


def chromium() -> str:
    exe = os.environ.get("TENSORFOLD_CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser"
    )
    if exe:
        return exe
    if os.environ.get("TENSORFOLD_REQUIRE_CHROMIUM") == "1":
        pytest.fail("no chromium found (apt-get install chromium, or set TENSORFOLD_CHROMIUM)")
    pytest.skip("no chromium found")


def browse(url: str, *extra: str) -> str:
    """Loads `url` headless, lets its scripts run about 3 s, returns the DOM (or what `extra`
    asks for)."""
    args = [
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--virtual-time-budget=3000", "--run-all-compositor-stages-before-draw",
        "--window-size=1280,1100", *extra, url,
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def field(dom: str, ident: str) -> str:
    m = re.search(rf'id="{ident}"[^>]*>([^<]*)<', dom)
    assert m, f"#{ident} not in the page"
    return m.group(1)


def number(dom: str, ident: str) -> float:
    return float(field(dom, ident).replace(",", ""))


def test_dashboard_follows_the_server(server, oai, model_id, tmp_path):
    url = f"{server.root}/dashboard"
    before = browse(url, "--dump-dom")
    assert int(re.search(r'data-updates="(\d+)"', before).group(1)) >= 1, "the page never polled"
    assert field(before, "model") == model_id
    assert field(before, "error") == ""
    gen0 = number(before, "gen-total")

    # A long reply running: the page shows it running and decoding.
    done = threading.Event()

    def long_reply():
        oai.chat.completions.create(
            # Serial and long enough (600 tokens, 15 s and more on any CPU) to still be running
            # when the page is read: drafted, on a fast machine, 160 tokens ended first.
            model=model_id,
            messages=SEA,
            max_tokens=600,
            temperature=0,
            extra_body={"ignore_eos": True, "draft": False},
        )
        done.set()

    t = threading.Thread(target=long_reply)
    t.start()
    time.sleep(4)
    during = browse(url, "--dump-dom")
    assert not done.is_set(), "the reply ended before the page was read"
    assert number(during, "running") >= 1
    assert number(during, "decode-tps") > 0
    t.join(timeout=600)
    assert done.is_set()

    # Idle again: the totals equal /metrics', and the last receipt is listed.
    time.sleep(1.5)
    after = browse(url, "--dump-dom")
    m = server.metrics()
    assert number(after, "gen-total") == m["tensorfold:generation_tokens_total"] > gen0
    assert number(after, "prompt-total") == m["tensorfold:prompt_tokens_total"]
    assert number(after, "requests-ok") == m["tensorfold:request_success_total"]
    assert number(after, "kv-total") == m["tensorfold:kv_total_blocks"]
    assert number(after, "running") == 0
    assert re.search(r"<td class=\"l\">[0-9a-f]{12}</td>", after), "no receipt listed"

    shot = tmp_path / "dashboard.png"
    browse(url, f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000
    kept = Path(os.environ.get("CARGO_TARGET_DIR", "target")) / "dashboard.png"
    shutil.copy(shot, kept)
    print(f"dashboard screenshot: {kept.resolve()}")
