"""Issue 37: real agent CLIs from npm as the ``command`` runner of a subagent run.

A parent starts a run through the daemon's ``/mcp`` ``start`` tool (the official ``mcp`` client, as in
tests/e2e/test_subagents_command.py). The runner is the documented template for the CLI, read from
docs/how-to/subagent-clis.md itself (*The command runner*), so what the documentation shows is what runs here. The CLI talks to a
loopback fake of its model's API, whose scripted model calls ``goal_reached`` the way the CLI offers
it; the call goes over the signal URL in the run's own MCP config file, and the run ends
``goal_reached``:

- Claude Code (``@anthropic-ai/claude-code``) against transport/fake_anthropic.py, through
  ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` (the config's ``type``/``url``);
- qwen-code (``@qwen-code/qwen-code``) against transport/fake_openai.py, through ``OPENAI_BASE_URL``,
  ``OPENAI_MODEL`` and the key renamed by the template's ``sh`` (the config's ``httpUrl``).

Each runs with the sandbox off, under the default sandbox, and under it with ``"network": "off"``, which a
command runner is exempt from (the last two skipped without a working bubblewrap).
The CLIs are installed once per test session, outside /tmp (tests/e2e/agent_clis.py), and a test is
skipped, saying why, when npm's registry cannot be reached. ``-s`` shows install and run times.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from actors.settings_file import settings_from_dict
from tests.e2e.agent_clis import CLAUDE_CODE, QWEN_CODE, Installed, install, session_dir
from tests.transport.mcp.harness import await_end, mcp_daemon, mcp_session, start, status
from transport.fake_anthropic import FakeAnthropic
from transport.fake_openai import FakeOpenAI

pytest.importorskip("mcp")

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "subagent-clis.md"
RUN_TIMEOUT = 120  # seconds for a run: about 1 s for Claude Code and 5 s for qwen-code here
GOAL_TOOL = "mcp__trellis__goal_reached"  # how both CLIs name the trellis server's tool
SUMMARY = "the needle was in the haystack"
# Starts with "-" (an option, were it read as one) and carries shell syntax (were a shell to read it).
BRIEF = "- find the needle; touch pwned $(touch pwned2)"
ACK = "Recorded goal_reached"  # the start of the signal route's answer, as the model gets it back


def _bwrap_works() -> bool:
    bwrap = shutil.which("bwrap")
    return bwrap is not None and subprocess.run([bwrap, "--ro-bind", "/", "/", "true"],
                                                capture_output=True).returncode == 0


_NEEDS_BWRAP = pytest.mark.skipif(not _bwrap_works(), reason=(
    "needs a working bubblewrap (CI installs it): without one the default sandbox is off"))
# What each variant adds to the documented settings. With "sandbox.network": "off" a command runner keeps the
# network (its CLI must reach its model's API and its signal URL); shells and monitors would lose it.
SANDBOX_SETTINGS: dict[str, dict[str, Any]] = {
    "off": {"sandbox": "off"}, "default": {}, "network-off": {"sandbox": {"network": "off"}}}
SANDBOXES = [pytest.param("off", id="sandbox-off"),
             pytest.param("default", id="sandbox-default", marks=_NEEDS_BWRAP),
             pytest.param("network-off", id="sandbox-network-off", marks=_NEEDS_BWRAP)]


# ----------------------------------------------------------------- the documented templates


def readme_templates() -> dict[str, dict[str, Any]]:
    """The settings blocks of the guide's *The command runner* section, by the CLI their template starts."""
    text = GUIDE.read_text()
    section = text[text.index("\n## The command runner: real agent CLIs\n"):]
    section = section[:section.index("\n## ", 1)]
    found: dict[str, dict[str, Any]] = {}
    for block in re.findall(r"```json\n(.*?)```", section, re.DOTALL):
        settings = json.loads(block)
        template = settings["subagents"]["runners"]["command"]["template"]
        cli = "qwen" if " exec qwen " in template else template.split()[0]
        found[cli] = settings
    return found


def test_the_readme_templates_are_settings_the_daemon_takes():
    """No registry needed: both templates parse, and their env names nothing the daemon withholds."""
    templates = readme_templates()
    assert set(templates) == {"claude", "qwen"}
    for settings in templates.values():
        parsed = settings_from_dict(settings)
        assert parsed.subagents == settings["subagents"]


def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        out.append((fields["event"], json.loads(fields["data"])))
    return out


async def test_the_fake_anthropic_api_plays_its_script_on_the_messages_wire():
    """No registry needed: the fake Claude Code runs against, on the wire a Messages API client reads."""
    fake = FakeAnthropic([
        {"when": {"tool_result": True}, "steps": [{"text": "done"}]},
        {"when": {"tools": GOAL_TOOL}, "steps": [
            {"thinking": "hmm"}, {"text": "Report", "split": 3}, {"text": "ing"},
            {"tool_use": {"name": GOAL_TOOL, "input": {"summary": "s"}, "split": 4}}, {"usage": {"input_tokens": 7}}]},
        {"when": {"model": "haiku"}, "status": 529},
    ])
    with pytest.raises(ValueError, match=r"responses\[0\]\.steps\[0\]"):
        FakeAnthropic([{"steps": [{"bogus": 1}]}])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
            user = {"role": "user", "content": "hi"}
            streamed = await client.post("/v1/messages?beta=true", json={
                "model": "claude-x", "stream": True, "messages": [user], "tools": [{"name": GOAL_TOOL}]})
            overloaded = await client.post("/v1/messages", json={"model": "claude-haiku", "messages": [user]})
            result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_fake_01"}]}
            whole = await client.post("/v1/messages", json={"model": "claude-x", "messages": [user, result]})
            fallback = await client.post("/v1/messages", json={"model": "claude-x", "messages": [user]})
            counted = await client.post("/v1/messages/count_tokens", json={"messages": [user]})
        nursery.cancel_scope.cancel()
    assert streamed.headers["content-type"] == "text/event-stream"
    events = sse_events(streamed.text)
    assert [name for name, _ in events][:2] == ["message_start", "ping"]
    assert [name for name, _ in events][-2:] == ["message_delta", "message_stop"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 7
    blocks: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "content_block_start":
            blocks[data["index"]] = {**data["content_block"], "deltas": []}
        elif name == "content_block_delta":
            blocks[data["index"]]["deltas"].append(data["delta"])
    assert [b["type"] for b in blocks.values()] == ["thinking", "text", "tool_use"]
    assert "".join(d["text"] for d in blocks[1]["deltas"]) == "Reporting"  # text steps in a row: one block
    assert len(blocks[2]["deltas"]) == 4 and blocks[2]["name"] == GOAL_TOOL
    assert json.loads("".join(d["partial_json"] for d in blocks[2]["deltas"])) == {"summary": "s"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert overloaded.status_code == 529 and overloaded.json()["type"] == "error"
    assert whole.json()["content"] == [{"type": "text", "text": "done"}]
    assert whole.json()["stop_reason"] == "end_turn"
    assert fallback.json()["content"] == [{"type": "text", "text": "ok"}]
    assert counted.json()["input_tokens"] > 0
    assert [r.body["model"] for r in fake.requests] == ["claude-x", "claude-haiku", "claude-x", "claude-x"]


# ----------------------------------------------------------------- the CLIs, once per session


@pytest.fixture(scope="session")
def agent_cli_dir(pytestconfig: Any) -> Iterator[Path]:
    yield from session_dir(pytestconfig)


@pytest.fixture(scope="session")
def claude_code(agent_cli_dir: Path) -> Installed:
    return install(CLAUDE_CODE, agent_cli_dir / "claude-code")


@pytest.fixture(scope="session")
def qwen_code(agent_cli_dir: Path) -> Installed:
    return install(QWEN_CODE, agent_cli_dir / "qwen-code")


# ----------------------------------------------------------------- a run, as a parent starts it


async def run_to_the_end(cli: Installed, template: dict[str, Any], sandbox: str, env: dict[str, str],
                         tmp_path: Path, monkeypatch: Any) -> dict[str, Any]:
    """Start a run of ``cli`` with the documented ``template`` through ``/mcp``; what its end looked like."""
    home = tmp_path / "home"  # the daemon's HOME: with the sandbox off the CLI's state lands here, not in yours
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{cli.bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    monkeypatch.setenv("TRELLIS_TOKEN", "the-daemons-own-bearer")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = settings_from_dict({**template, **SANDBOX_SETTINGS[sandbox]})
    async with mcp_daemon(settings=settings, workspace=str(work)) as (daemon, base):
        assert daemon.runtime.sandbox.active is (sandbox != "off")
        assert daemon.runtime.sandbox.network is (sandbox != "network-off")  # shells would have no network
        async with mcp_session(f"{base}/mcp") as mcp:
            started = time.monotonic()
            await start(mcp, name="real-cli", brief=BRIEF, goal="the needle is found", runner="command")
            ended = await await_end(mcp, "real-cli", timeout=RUN_TIMEOUT)
            seconds = time.monotonic() - started
            answer, text = await status(mcp, "real-cli")
        tokens_left = len(daemon.subagents.tokens)
    print(f"\n{cli.package}@{cli.version}, sandbox {sandbox}: ended {answer.get('endReason')} "
          f"in {seconds:.1f} s")  # shown with -s
    return {"ended": ended, "answer": answer, "text": text, "tokens_left": tokens_left, "home": home,
            "work": work}


def assert_goal_reached(run: dict[str, Any], sandbox: str, state: str) -> None:
    answer = run["answer"]
    assert run["ended"]["outcome"] == "ended", answer.get("outputTail")
    assert answer["endReason"] == "goal_reached", answer.get("outputTail")
    assert answer["turn"] == 1 and answer["goalReachedSelfReported"] is True
    assert f"Summary: {SUMMARY}" in answer["done"] and "self-reported" in run["text"]
    assert run["tokens_left"] == 0  # the run's signal token was revoked when it ended
    # The brief reached the CLI as one argument: no shell ran it, no option swallowed it.
    assert not (run["work"] / "pwned").exists() and not (run["work"] / "pwned2").exists()
    # With the sandbox off the CLI keeps its state in the home it was given (here the test's); under the
    # sandbox in a home of the run's own, deleted with the run: nothing reaches the daemon user's home.
    if sandbox == "off":
        assert (run["home"] / state).exists(), sorted(p.name for p in run["home"].iterdir())
    else:
        assert list(run["home"].iterdir()) == []


def request_text(body: Any) -> str:
    return json.dumps(body, ensure_ascii=False)


# ----------------------------------------------------------------- Claude Code


def claude_script() -> list[Any]:
    """The model's side of one turn, for either way Claude Code offers MCP tools.

    Claude Code 2.1.197 declares ``mcp__trellis__goal_reached`` up front; 2.1.332 lists it as deferred,
    to be loaded with ``ToolSearch`` (``select:``) first. ``when`` picks the response each request gets.
    """
    goal = {"tool_use": {"name": GOAL_TOOL, "input": {"summary": SUMMARY}}}
    return [
        {"when": {"tools": GOAL_TOOL, "tool_result": False}, "steps": [{"text": "Reporting. "}, goal]},
        {"when": {"tools": "ToolSearch", "tool_result": False},
         "steps": [{"tool_use": {"name": "ToolSearch", "input": {"query": f"select:{GOAL_TOOL}"}}}]},
        {"when": {"text": ACK}, "steps": [{"text": "Reported the goal as reached."}]},
        {"when": {"tool_result": True}, "steps": [goal]},
    ]


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_claude_code_ends_its_run_goal_reached(claude_code, sandbox, tmp_path, monkeypatch):
    key = "sk-ant-test-not-a-real-key"
    fake = FakeAnthropic(claude_script())
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        run = await run_to_the_end(
            claude_code, readme_templates()["claude"], sandbox,
            {"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": url, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
            tmp_path, monkeypatch)
        nursery.cancel_scope.cancel()
    assert_goal_reached(run, sandbox, ".claude.json")
    assert fake.requests, run["answer"].get("outputTail")
    assert all(r.headers.get("x-api-key") == key for r in fake.requests)  # the key its settings pass
    assert BRIEF in request_text(fake.requests[0].body)
    # The model's goal_reached went over the signal URL, and the daemon's answer came back as its result.
    answered = [r for r in fake.requests if ACK in request_text(r.body.get("messages"))]
    assert answered, [request_text(r.body.get("messages"))[-300:] for r in fake.requests]
    assert any(GOAL_TOOL in request_text(m) for m in answered[0].body["messages"][-2:])


# ----------------------------------------------------------------- qwen-code


def qwen_script() -> list[Any]:
    """The model's side of one turn: qwen-code 0.24 offers MCP tools through ``tool_search`` and ``tool_call``.

    Requests are answered in order; a side request qwen makes after the turn (its memory extraction)
    gets the fallback ``ok``.
    """
    return [
        [{"tool_call": {"name": "tool_search", "arguments": {"query": f"select:{GOAL_TOOL}"}}}],
        [{"tool_call": {"name": "tool_call", "arguments": {"name": GOAL_TOOL, "arguments": {"summary": SUMMARY}}}}],
        [{"text": "Reported the goal as reached."}],
    ]


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_qwen_code_ends_its_run_goal_reached(qwen_code, sandbox, tmp_path, monkeypatch):
    key = "sk-test-not-a-real-key"
    fake = FakeOpenAI(qwen_script())
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        run = await run_to_the_end(
            qwen_code, readme_templates()["qwen"], sandbox,
            {"QWEN_OPENAI_API_KEY": key, "OPENAI_BASE_URL": url, "OPENAI_MODEL": "fake-qwen"},
            tmp_path, monkeypatch)
        nursery.cancel_scope.cancel()
    assert_goal_reached(run, sandbox, ".qwen")
    assert fake.requests, run["answer"].get("outputTail")
    assert all(r.headers.get("authorization") == f"Bearer {key}" for r in fake.requests)  # renamed by sh
    assert {r.body["model"] for r in fake.requests} == {"fake-qwen"}
    assert BRIEF in request_text(fake.requests[0].body)
    # The server connected (through httpUrl): its tools were announced, and the call came back answered.
    assert GOAL_TOOL in request_text(fake.requests[0].body["messages"])
    answered = [r for r in fake.requests if ACK in request_text(r.body["messages"])]
    assert answered, [request_text(r.body["messages"])[-300:] for r in fake.requests]
