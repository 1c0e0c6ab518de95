"""Codex CLI and Claude Code, the coding agents, as clients of `tensorfold serve`: installing them
from npm at pinned versions, pointing them at a local server, running them non-interactively and
reading what they and the server print. Used by test_agents.py and scripts/agent-sessions, so
nothing in here needs pytest: problems are raised as AgentError.

The server side is read from its stderr: `serve --access-log` prints `http METHOD PATH -> STATUS in
SECSs` when a response starts and `ws response.create -> ok` (or `-> error CODE`) per Responses
WebSocket request; every finished generation prints `request N: FINISH, prompt P (cached C), reply
R tokens, ttft Xs, ...`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Pinned: the newest of each on npm when this was written. Raise them together with a run of
# `scripts/test-python -k agents`; the install directory is keyed by both, so a bump reinstalls.
CODEX_VERSION = "0.171.0"  # @openai/codex (a Node wrapper + @openai/codex-<platform> native binary)
CLAUDE_CODE_VERSION = "2.1.332"  # @anthropic-ai/claude-code (native binary copied in by postinstall)

API_KEY = "unused"  # the server runs without --api-key; the clients insist on having one


class AgentError(RuntimeError):
    """Installing or running an agent failed; the message says why."""


# ---- installing -----------------------------------------------------------------------------------


def target_dir() -> Path:
    raw = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
    return raw if raw.is_absolute() else ROOT / raw


def missing_node() -> str | None:
    """Why the agents cannot be installed here (no node or npm on PATH), or None."""
    missing = [exe for exe in ("node", "npm") if shutil.which(exe) is None]
    return f"{' and '.join(missing)} not found on PATH" if missing else None


@dataclass
class Agents:
    """The installed command lines: `codex` (the npm wrapper) and `claude` (the native binary)."""

    prefix: Path
    codex: Path
    claude: Path


def _version_ok(exe: Path, want: str, scratch: Path) -> bool:
    if not exe.exists():
        return False
    # A scratch HOME: `codex` creates ~/.codex even for --version.
    env = {**os.environ, "HOME": str(scratch), "CODEX_HOME": str(scratch / ".codex")}
    try:
        out = subprocess.run(
            [str(exe), "--version"], capture_output=True, text=True, timeout=60, env=env
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and want in out.stdout


def _check(prefix: Path, scratch: Path) -> Agents | None:
    bin_dir = prefix / "node_modules" / ".bin"
    agents = Agents(prefix, bin_dir / "codex", bin_dir / "claude")
    if _version_ok(agents.codex, CODEX_VERSION, scratch) and _version_ok(
        agents.claude, CLAUDE_CODE_VERSION, scratch
    ):
        return agents
    return None


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    return True


def _npm_install(partial: Path, prefix: Path, scratch: Path, log) -> None:
    packages = [f"@openai/codex@{CODEX_VERSION}", f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"]
    cmd = ["npm", "install", "--prefix", str(partial), *packages, "--no-audit", "--no-fund"]
    log(f"installing {' '.join(packages)} into {prefix}")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise AgentError(f"`{' '.join(cmd)}` failed ({out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    # Claude Code's postinstall copies the platform's native binary over bin/claude.exe; an npm
    # that skips install scripts leaves the placeholder, so run it here in that case.
    if not _version_ok(partial / "node_modules" / ".bin" / "claude", CLAUDE_CODE_VERSION, scratch):
        pkg = partial / "node_modules" / "@anthropic-ai" / "claude-code"
        subprocess.run(["node", "install.cjs"], cwd=pkg, capture_output=True, text=True, timeout=300)
    if _check(partial, scratch) is None:
        raise AgentError(
            f"after `{' '.join(cmd)}`, codex --version / claude --version do not report "
            f"{CODEX_VERSION} / {CLAUDE_CODE_VERSION} (the native @openai/codex-<platform> or "
            f"@anthropic-ai/claude-code-<platform> package may be missing for this platform)\n"
            + (out.stdout + out.stderr)[-2000:]
        )


def install(log=print) -> Agents:
    """Both agents at the pinned versions under target/npm-agents/, installed once per version
    pair (the directory is filled beside its final name and renamed into place, so an interrupted
    install is never reused)."""
    why = missing_node()
    if why:
        raise AgentError(why)
    root = target_dir() / "npm-agents"
    prefix = root / f"codex-{CODEX_VERSION}_claude-code-{CLAUDE_CODE_VERSION}"
    with tempfile.TemporaryDirectory(prefix="agents-home-") as scratch:
        scratch = Path(scratch)
        found = _check(prefix, scratch)
        if found:
            return found
        for stale in root.glob(f"{prefix.name}.partial-*"):
            if not _alive(stale.name.rsplit("-", 1)[-1]):
                shutil.rmtree(stale, ignore_errors=True)
        partial = root / f"{prefix.name}.partial-{os.getpid()}"
        partial.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            _npm_install(partial, prefix, scratch, log)
            shutil.rmtree(prefix, ignore_errors=True)
            try:
                partial.rename(prefix)
            except OSError:
                pass  # a concurrent install got there first: used below if it works
        except subprocess.TimeoutExpired as e:
            raise AgentError(f"`{' '.join(e.cmd)}` ran past {e.timeout:.0f} s") from None
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        log(f"installed in {time.monotonic() - started:.0f} s")
        agents = _check(prefix, scratch)
        if agents is None:
            raise AgentError(f"{prefix} was installed but its agents do not run")
        return agents


# ---- environments and configuration --------------------------------------------------------------


def base_env(home: Path) -> dict:
    """A clean environment: PATH and a private HOME, none of the caller's API keys, proxies or
    config."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
    }
    return env


def claude_env(home: Path, root_url: str, model: str, max_output_tokens: int | None) -> dict:
    """Claude Code on `root_url` (ANTHROPIC_BASE_URL takes the root; it adds /v1/messages), every
    model alias mapped to `model`, and no traffic but the API's."""
    env = base_env(home)
    env.update(
        ANTHROPIC_BASE_URL=root_url,
        ANTHROPIC_API_KEY=API_KEY,
        ANTHROPIC_MODEL=model,
        ANTHROPIC_SMALL_FAST_MODEL=model,
        ANTHROPIC_DEFAULT_HAIKU_MODEL=model,
        ANTHROPIC_DEFAULT_SONNET_MODEL=model,
        ANTHROPIC_DEFAULT_OPUS_MODEL=model,
        DISABLE_TELEMETRY="1",
        DISABLE_ERROR_REPORTING="1",
        DISABLE_AUTOUPDATER="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
    )
    if max_output_tokens is not None:
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(max_output_tokens)
    return env


def claude_cmd(agents: Agents, prompt: str, model: str, *extra: str) -> list:
    """`claude -p` with the stream-json transcript on stdout (one JSON event a line)."""
    return [
        str(agents.claude), "-p", prompt, "--model", model,
        "--output-format", "stream-json", "--verbose", *extra,
    ]


def _toml(value) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value).lower()


def codex_home(home: Path, openai_base: str, model: str, *, websocket: bool,
               context_window: int | None = None, instructions: str | None = None,
               lean: bool = False, retries: int | None = None) -> Path:
    """A CODEX_HOME whose config.toml points Codex at `openai_base` (…/v1) as provider
    `tensorfold` (Responses API; over the Responses WebSocket when `websocket`), never asks for
    approval and runs commands in the workspace-write sandbox. `instructions` replaces Codex's
    base instructions; `lean` turns off the tools a small local model has no use for (sub-agents,
    goals, images, apps, plugins, web search), so the prompt is a fraction of its usual size;
    `retries` sets the provider's request and stream retries (0 makes any failure show)."""
    cdir = home / ".codex"
    cdir.mkdir(parents=True, exist_ok=True)
    top = {
        "model": model,
        "model_provider": "tensorfold",
        "approval_policy": "never",
        "sandbox_mode": "workspace-write",
        "check_for_update_on_startup": False,
    }
    if context_window:
        top["model_context_window"] = context_window
    if instructions is not None:
        (cdir / "instructions.md").write_text(instructions + "\n")
        top["model_instructions_file"] = str(cdir / "instructions.md")
    if lean:
        top["web_search"] = "disabled"
    provider = {
        "name": "TensorFold",
        "base_url": openai_base,
        "wire_api": "responses",
        "env_key": "TENSORFOLD_API_KEY",
        "supports_websockets": websocket,
    }
    if retries is not None:
        provider["request_max_retries"] = retries
        provider["stream_max_retries"] = retries
    lines = [f"{k} = {_toml(v)}" for k, v in top.items()]
    lines += ["", "[analytics]", "enabled = false"]
    if lean:
        off = ["goals", "view_image", "apps", "plugins", "remote_plugin", "memories",
               "image_generation", "tool_suggest", "skill_search", "sleep_tool", "browser_use",
               "computer_use"]
        lines += ["", "[features]", *(f"{name} = false" for name in off)]
        lines += ["", "[agents]", "enabled = false"]
    lines += ["", "[model_providers.tensorfold]", *(f"{k} = {_toml(v)}" for k, v in provider.items())]
    (cdir / "config.toml").write_text("\n".join(lines) + "\n")
    return cdir


def codex_env(home: Path, cdir: Path) -> dict:
    env = base_env(home)
    env.update(CODEX_HOME=str(cdir), TENSORFOLD_API_KEY=API_KEY)
    return env


def codex_cmd(agents: Agents, prompt: str, *extra: str) -> list:
    """`codex exec` with its JSONL events on stdout, in a directory that need not be a git repo."""
    return [str(agents.codex), "exec", "--json", "--skip-git-repo-check", *extra, prompt]


# ---- running --------------------------------------------------------------------------------------


@dataclass
class Run:
    """One finished agent process."""

    cmd: list
    returncode: int | None  # None: killed at the time limit
    wall_s: float
    stdout_path: Path
    stderr_path: Path

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def events(self) -> list:
        """The JSON lines of stdout (other lines skipped)."""
        out = []
        for line in self.stdout_path.read_text(errors="replace").splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def stderr_tail(self, n: int = 4000) -> str:
        return self.stderr_path.read_text(errors="replace")[-n:]


def run(cmd: list, cwd: Path, env: dict, timeout_s: float, out_dir: Path, name: str) -> Run:
    """Runs `cmd` in its own process group with stdin closed, stdout/stderr into files under
    `out_dir`; past `timeout_s` the group is killed (an agent leaves children: shells, sandboxes)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stdout_path, stderr_path = out_dir / f"{name}.stdout", out_dir / f"{name}.stderr"
    started = time.monotonic()
    with open(stdout_path, "wb") as so, open(stderr_path, "wb") as se:
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=so, stderr=se,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
    return Run(cmd, rc, time.monotonic() - started, stdout_path, stderr_path)


def wait_quiet(lines: list, quiet_s: float = 1.0, max_s: float = 15.0) -> None:
    """Waits until `lines` (a server's growing stderr) has stopped growing for `quiet_s`: the last
    request's lines come a moment after the client has exited."""
    deadline = time.monotonic() + max_s
    seen, since = len(lines), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        if len(lines) != seen:
            seen, since = len(lines), time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return


# ---- the server's log -----------------------------------------------------------------------------

HTTP_LINE = re.compile(r"(?:^|\s)http ([A-Z]+) (\S+) -> (\d{3}) in ([0-9.]+)s")
WS_LINE = re.compile(r"(?:^|\s)ws response\.create -> (ok|error(?: (\d+))?)")
GEN_LINE = re.compile(
    r"(?:^|\s)request (\d+): (.+?), prompt (\d+) \(cached (\d+)\), reply (\d+) tokens, "
    r"ttft ([0-9.]+)s, .*?([0-9.]+)s total, token_sha (\w+)"
)
GONE_LINE = re.compile(r"(?:^|\s)request (\d+): client went away after (\d+) tokens")


@dataclass
class LogEvent:
    kind: str  # "http", "ws", "gen" or "gone"
    line: str
    method: str = ""
    path: str = ""
    status: int = 0  # http: the status; ws: 0 for ok, else the error code (-1 if none given)
    secs: float = 0.0  # http: time to the response's start
    id: int = 0
    finish: str = ""
    prompt: int = 0
    cached: int = 0
    reply: int = 0
    ttft: float = 0.0
    total: float = 0.0

    @property
    def ok(self) -> bool:
        if self.kind == "http":
            return 200 <= self.status < 300 or (self.status == 101 and self.method == "GET")
        if self.kind == "ws":
            return self.status == 0
        if self.kind == "gen":
            return not self.finish.startswith("error")
        return False  # "gone": the client hung up on a generation


def parse_log(lines) -> list:
    """The access-log and generation lines among `lines`, in order."""
    out = []
    for raw in lines:
        line = raw.rstrip("\n")
        if m := HTTP_LINE.search(line):
            out.append(LogEvent("http", line.strip(), method=m[1], path=m[2], status=int(m[3]), secs=float(m[4])))
        elif m := WS_LINE.search(line):
            status = 0 if m[1] == "ok" else int(m[2] or -1)
            out.append(LogEvent("ws", line.strip(), method="WS", path="response.create", status=status))
        elif m := GEN_LINE.search(line):
            out.append(LogEvent(
                "gen", line.strip(), id=int(m[1]), finish=m[2], prompt=int(m[3]), cached=int(m[4]),
                reply=int(m[5]), ttft=float(m[6]), total=float(m[7]),
            ))
        elif m := GONE_LINE.search(line):
            out.append(LogEvent("gone", line.strip(), id=int(m[1]), reply=int(m[2])))
    return out


GENERATING = {("POST", "/v1/messages"), ("POST", "/v1/responses"), ("POST", "/v1/chat/completions"),
              ("POST", "/v1/completions"), ("WS", "response.create")}


def pair_generations(events: list) -> list:
    """Each generation line with the request that asked for it: [(request event or None, gen)].

    A request's access line comes when its response starts, its generation line when it ends. For
    one client at a time, a generation belongs to the latest accepted generating request not yet
    paired; older unpaired ones generated nothing (a 4xx has no generation; neither has Codex's
    `generate: false` WebSocket prewarm)."""
    pending, out = [], []
    for ev in events:
        if ev.kind in ("http", "ws") and (ev.method, ev.path) in GENERATING and ev.ok and ev.status != 101:
            pending.append(ev)
        elif ev.kind == "gen":
            out.append((pending[-1] if pending else None, ev))
            pending.clear()
    return out
