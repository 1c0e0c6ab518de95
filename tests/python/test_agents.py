"""The coding agents as clients: Codex CLI (`codex exec`, Responses API over HTTP and over the
Responses WebSocket) and Claude Code (`claude -p`, Anthropic messages), installed from npm at the
versions pinned in agents.py, each given a scripted task in an empty directory against a server
started for this module with `--access-log`.

What is checked is the protocol, not the model's skill: every HTTP request a client sent got a
2xx (101 for a WebSocket upgrade) and every WebSocket `response.create` was accepted; no
generation ended in an error or was cut off by the client; the client exited 0 without reporting
an error; at least one tool call reached the client, and a later request brought its result back
(a generation after it, on a longer prompt). Whether the file the task asks for was written is
logged, not asserted. The requests of each run (the server's access-log and generation lines) are
written to the terminal, so they stay in the CI log.

Needs node and npm (CI has node 20): without them the module fails, unless
TENSORFOLD_SKIP_AGENTS=1, which skips it. The agents are installed once per version pair under
target/npm-agents/ (about 800 MB: both ship native binaries).
"""

from __future__ import annotations

import json
import os

import pytest

import agents
from support import start_server

if os.environ.get("TENSORFOLD_SKIP_AGENTS") == "1":
    pytest.skip("TENSORFOLD_SKIP_AGENTS=1", allow_module_level=True)

# Per agent run. A run here takes about a minute on 2 CPU cores (Claude Code's prompt, with one
# tool, is ~2,500 tokens; Codex's lean one ~2,000); the limit leaves room for a slower machine.
RUN_TIMEOUT_S = 300
# Replies are short; a cap keeps a rambling model from running into the time limit. Codex sends
# no max_output_tokens, so the server's --max-tokens applies; Claude Code sends its own.
MAX_TOKENS = 1024

CLAUDE_TASK = "Use the Write tool to create the file hello.py in the current directory, containing: print('hello')"
CODEX_TASK = "Use the exec_command tool to run this shell command: echo 'print(\"hello\")' > hello.py"
CODEX_INSTRUCTIONS = (
    "You are a coding agent working in the current directory. Use the exec_command tool to run "
    "shell commands. When the task is done, reply with one short sentence."
)
# Codex's JSONL items that are the model's tool calls, run by the client.
CODEX_TOOL_ITEMS = {"command_execution", "file_change", "mcp_tool_call", "web_search"}


@pytest.fixture(scope="module")
def installed() -> agents.Agents:
    why = agents.missing_node()
    if why:
        pytest.fail(
            f"{why}: the agent tests install Codex CLI and Claude Code with npm "
            "(apt-get install nodejs npm), or set TENSORFOLD_SKIP_AGENTS=1 to skip them",
            pytrace=False,
        )
    try:
        return agents.install(log=lambda msg: print(f"agents: {msg}"))
    except (agents.AgentError, OSError) as e:
        pytest.fail(f"installing the agents: {e}", pytrace=False)


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory):
    """A server of its own: --access-log for the request lines, and greedy decoding for requests
    that name no temperature (neither agent does), so the small model's tool calls repeat."""
    srv = start_server(
        tmp_path_factory.mktemp("server-agents"),
        ["--access-log", "--temperature", "0", "--max-tokens", str(MAX_TOKENS)],
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def served_model(agent_server) -> dict:
    status, _, body = agent_server.request("GET", "/v1/models")
    assert status == 200, body
    return json.loads(body)["data"][0]


def report(capsys, title: str, lines) -> None:
    """Writes a block to the terminal even while pytest captures output."""
    with capsys.disabled():
        print(f"\n--- {title}")
        for line in lines:
            print(f"    {line}")


def run_agent(server, cmd, cwd, env, out_dir, name, version, capsys):
    """Runs one agent against `server` and returns (run, the server's log events of that run),
    having written the run and its requests to the terminal."""
    start = len(server.log_lines)
    run = agents.run(cmd, cwd, env, RUN_TIMEOUT_S, out_dir, name)
    agents.wait_quiet(server.log_lines)
    events = agents.parse_log(server.log_lines[start:])
    (out_dir / f"{name}.server.log").write_text("".join(server.log_lines[start:]))
    outcome = f"killed after {RUN_TIMEOUT_S} s" if run.timed_out else f"exit {run.returncode}"
    hello = cwd / "hello.py"
    written = f"hello.py: {hello.read_text()!r}" if hello.is_file() else "hello.py not written"
    report(
        capsys,
        f"{name} {version}: {outcome} in {run.wall_s:.1f} s; {written}; transcript in {out_dir}",
        [ev.line for ev in events],
    )
    return run, events


def check_protocol(run, events) -> list:
    """The assertions both agents share; returns the generations of the run."""
    assert not run.timed_out, f"the agent ran past {RUN_TIMEOUT_S} s\n{run.stderr_tail()}"
    http = [ev for ev in events if ev.kind == "http"]
    assert http, (
        "no access-log line during the run: the server needs --access-log, or the agent never "
        f"reached it\n{run.stderr_tail()}"
    )
    bad = [ev.line for ev in events if not ev.ok]
    assert not bad, "requests that failed or were cut off:\n" + "\n".join(bad)
    assert run.returncode == 0, f"the agent exited {run.returncode}\n{run.stderr_tail()}"
    gens = [ev for ev in events if ev.kind == "gen"]
    # The tool call comes from one generation; its result goes back in a later request, whose
    # prompt holds the call and the result.
    assert len(gens) >= 2, f"{len(gens)} generation(s): no request came after the tool call"
    assert max(g.prompt for g in gens[1:]) > gens[0].prompt, [g.line for g in gens]
    return gens


def test_claude_code(installed, agent_server, served_model, tmp_path, capsys):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    model = served_model["id"]
    # CLAUDE_CODE_MAX_OUTPUT_TOKENS: Claude Code asks for max_tokens 32000 by default, which with
    # the prompt exceeds a 32k context; the server refuses that with Anthropic's 400 and Claude
    # Code retries with less. Asking for less up front keeps every request a 200.
    env = agents.claude_env(home, agent_server.root, model, max_output_tokens=MAX_TOKENS)
    cmd = agents.claude_cmd(
        installed, CLAUDE_TASK, model,
        "--tools", "Write", "--allowedTools", "Write", "--permission-mode", "acceptEdits",
    )
    run, events = run_agent(
        agent_server, cmd, work, env, tmp_path, "claude-code", agents.CLAUDE_CODE_VERSION, capsys
    )
    check_protocol(run, events)

    posts = [ev for ev in events if ev.kind == "http" and ev.path == "/v1/messages"]
    assert len(posts) >= 2, [ev.line for ev in events]
    stream = run.events()
    result = [e for e in stream if e.get("type") == "result"]
    assert result, f"no result event in the stream-json transcript\n{run.stderr_tail()}"
    assert not result[-1].get("is_error") and result[-1].get("subtype") == "success", result[-1]

    # A tool_use block from the model, and Claude Code's tool_result for it (check_protocol saw
    # the later request that carried it).
    uses, results = {}, set()
    for e in stream:
        content = (e.get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if e["type"] == "assistant" and block.get("type") == "tool_use":
                uses[block["id"]] = block.get("name")
            elif e["type"] == "user" and block.get("type") == "tool_result":
                results.add(block.get("tool_use_id"))
    assert uses, f"the model made no tool call: {[e.get('message') for e in stream if e.get('type') == 'assistant']}"
    assert set(uses) & results, f"tool calls {uses} got no tool_result back"


@pytest.fixture(scope="module")
def codex_user(tmp_path_factory):
    """One HOME for both Codex runs: its path is in Codex's prompt (where the skills live), so the
    second run's prompt starts as the first's did and comes mostly from the prompt cache."""
    return tmp_path_factory.mktemp("codex-user")


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_codex(installed, agent_server, served_model, codex_user, tmp_path, capsys, transport):
    work, home = tmp_path / "work", codex_user
    work.mkdir()
    cdir = agents.codex_home(
        home, agent_server.openai_base, served_model["id"],
        websocket=transport == "websocket",
        context_window=served_model.get("max_model_len"),
        instructions=CODEX_INSTRUCTIONS, lean=True, retries=0,
    )
    cmd = agents.codex_cmd(installed, CODEX_TASK, "--ephemeral")
    env = agents.codex_env(home, cdir)
    run, events = run_agent(
        agent_server, cmd, work, env, tmp_path, f"codex-{transport}", agents.CODEX_VERSION, capsys
    )
    check_protocol(run, events)

    upgrades = [ev for ev in events if ev.kind == "http" and ev.status == 101]
    creates = [ev for ev in events if ev.kind == "ws"]
    posts = [ev for ev in events if ev.kind == "http" and (ev.method, ev.path) == ("POST", "/v1/responses")]
    if transport == "websocket":
        assert upgrades and len(creates) >= 2, f"Codex did not use the WebSocket: {[ev.line for ev in events]}"
    else:
        assert not upgrades and len(posts) >= 2, [ev.line for ev in events]

    stream = run.events()
    failures = [e for e in stream if e.get("type") in ("error", "turn.failed")]
    assert not failures, failures
    assert any(e.get("type") == "turn.completed" for e in stream), f"no turn.completed\n{run.stderr_tail()}"
    # Items of type "error" are Codex's warnings (e.g. no metadata for an unknown model): logged.
    completed = [e["item"] for e in stream if e.get("type") == "item.completed" and isinstance(e.get("item"), dict)]
    warnings = [i.get("message") for i in completed if i.get("type") == "error"]
    if warnings:
        report(capsys, f"codex-{transport} warnings", warnings)
    tools = [i for i in completed if i.get("type") in CODEX_TOOL_ITEMS]
    assert tools, f"the model made no tool call: {completed}"
    report(capsys, f"codex-{transport} tool calls", [json.dumps(i)[:300] for i in tools])
