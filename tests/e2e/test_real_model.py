"""Opt-in: the CLI daemon against a real OpenAI-compatible server (llama-server, Ollama, vLLM, OpenAI).

Skipped unless ``TRELLIS_REAL_MODEL_URL`` names the server's ``/v1`` base URL::

    TRELLIS_REAL_MODEL_URL=http://127.0.0.1:8080/v1 TRELLIS_REAL_MODEL_NAME=qwen2.5-coder \\
    TRELLIS_REAL_TEXT_TOOL_CALLS=json .venv/bin/python -m pytest tests/e2e/test_real_model.py -v

Optional: ``TRELLIS_REAL_MODEL_NAME`` (default ``local``), ``TRELLIS_REAL_TEXT_TOOL_CALLS``
(``off``, ``hermes`` or ``json``: the ``model.textToolCalls`` setting, for a server that passes
tool calls through as text), ``TRELLIS_REAL_MODEL_KEY`` (an API key, if the server wants one),
``TRELLIS_REAL_CONTEXT_WINDOW`` (the ``model.contextWindow`` setting),
``TRELLIS_REAL_MODEL_TIMEOUT`` (seconds per turn, default 600: CPU servers are slow) and
``TRELLIS_REAL_OVERFLOW_CHARS`` (the size of the prompt meant to overflow, default 400,000) and
``TRELLIS_REAL_RECORDINGS`` (a directory: each test's recordings are copied there, to be kept as
examples in ``scenarios/recordings/``).

Each test runs its own ``python -m transport --model openai --record DIR`` with the Todo Stop Guard
on and ``yolo`` approvals, and prints what the model did (``-s`` shows it), so a run can be quoted.
Once the daemon has stopped, every session it recorded is replayed offline with
``python -m actors.replay --recording FILE`` (no network, virtual time), which must exit 0: the
replayed session published exactly the events the real one did.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from tests.conftest import daemon_process
from tests.e2e.sse_client import collect

URL = os.environ.get("TRELLIS_REAL_MODEL_URL")
NAME = os.environ.get("TRELLIS_REAL_MODEL_NAME", "local")
TEXT_TOOL_CALLS = os.environ.get("TRELLIS_REAL_TEXT_TOOL_CALLS", "off")
TURN_SECONDS = float(os.environ.get("TRELLIS_REAL_MODEL_TIMEOUT", "600"))
OVERFLOW_CHARS = int(os.environ.get("TRELLIS_REAL_OVERFLOW_CHARS", "400000"))

pytestmark = pytest.mark.skipif(not URL, reason="set TRELLIS_REAL_MODEL_URL to a real OpenAI-compatible /v1 URL")


@asynccontextmanager
async def real_daemon(tmp_path: Any) -> AsyncIterator[Any]:
    """The CLI daemon on the real server; yields an httpx client for it."""
    model: dict[str, Any] = {"textToolCalls": TEXT_TOOL_CALLS, "readTimeout": TURN_SECONDS}
    if os.environ.get("TRELLIS_REAL_CONTEXT_WINDOW"):
        model["contextWindow"] = int(os.environ["TRELLIS_REAL_CONTEXT_WINDOW"])
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"experimental": {"todoStopGuard": True}, "approvalMode": "yolo",
                                    "model": model}))
    env = {"OPENAI_BASE_URL": URL or "", "OPENAI_MODEL": NAME,
           "OPENAI_API_KEY": os.environ.get("TRELLIS_REAL_MODEL_KEY", "unused")}
    workspace = tmp_path / "work"
    workspace.mkdir()
    recordings = tmp_path / "recordings"
    async with daemon_process("--model", "openai", "--settings", str(settings), "--workspace", str(workspace),
                              "--record", str(recordings), state_dir=tmp_path / "state", env=env) as daemon:
        async with daemon.client(daemon.token()) as client:
            yield client
    await replays_identically(recordings)


async def replays_identically(recordings: Any) -> None:
    """Every recording the daemon wrote replays offline to the same events (the CLI exits 0)."""
    files = sorted(recordings.glob("*.jsonl"))
    assert files, f"the daemon wrote no recording in {recordings}"
    keep = os.environ.get("TRELLIS_REAL_RECORDINGS")
    for path in files:
        with trio.fail_after(300):
            done = await trio.run_process([sys.executable, "-m", "actors.replay", "--recording", str(path)],
                                          capture_stdout=True, capture_stderr=True, check=False)
        out = (done.stdout + done.stderr).decode(errors="replace")
        print(f"[{NAME}] replay of {path.name}: exit {done.returncode}: {out.strip()[-300:]}")
        assert done.returncode == 0, out
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(path, os.path.join(keep, f"real_{NAME}_{path.name}"))


async def new_session(client: Any) -> str:
    return (await client.post("/session", json={})).json()["sessionId"]


async def admit(client: Any, sid: str, text: str) -> str:
    r = await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": text}]})
    assert r.status_code == 202, r.text
    return r.json()["promptId"]


async def settled(client: Any, sid: str, pid: str) -> dict[str, Any]:
    """The turn record once the turn has ended."""
    with trio.fail_after(TURN_SECONDS):
        while True:
            r = await client.get(f"/session/{sid}/turns/{pid}")
            if r.status_code == 200 and r.json()["state"] in ("completed", "error", "cancelled"):
                return r.json()
            await trio.sleep(0.2)


async def events_of(client: Any, sid: str, pid: str) -> list[dict[str, Any]]:
    frames = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
    return [f for f in frames if f.get("promptId") == pid]


def updates(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f["data"]["update"] for f in events
            if f["type"] == "session_update" and f["data"]["update"].get("sessionUpdate") == kind]


def said(events: list[dict[str, Any]]) -> str:
    return "".join(u["content"]["text"] for u in updates(events, "agent_message_chunk"))


async def turn(client: Any, sid: str, text: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    pid = await admit(client, sid, text)
    record = await settled(client, sid, pid)
    events = await events_of(client, sid, pid)
    print(f"\n[{NAME}] {text[:60]!r} -> {record['state']} {record.get('stopReason') or record.get('errorCode')}: "
          f"{said(events)[:300]!r}")
    return record, events


async def test_a_plain_answer(tmp_path):
    async with real_daemon(tmp_path) as client:
        sid = await new_session(client)
        record, events = await turn(client, sid, "What is the capital of France? Answer with one word.")
    assert record["state"] == "completed" and record["stopReason"] == "end_turn"
    assert "paris" in said(events).lower()


async def test_a_tool_call_runs(tmp_path):
    marker = f"trellis-{secrets.token_hex(4)}"
    async with real_daemon(tmp_path) as client:
        sid = await new_session(client)
        record, events = await turn(client, sid, f"Use the shell tool to run `echo {marker}`, then tell me what "
                                                 "it printed.")
        transcript = (await client.get(f"/session/{sid}/transcript")).json()["entries"]
    calls = updates(events, "tool_call")
    print(f"[{NAME}] tool calls: {[(c.get('title'), c.get('rawInput')) for c in calls]}")
    assert record["state"] == "completed"
    assert any(marker in str(c.get("rawInput") or "") for c in calls), "no shell call came back as a tool call " \
        "(try TRELLIS_REAL_TEXT_TOOL_CALLS=json or hermes)"
    # It ran: the call finished (its output is the result, or, run in the background as a small model
    # may choose, a task the model can read), and the result is in the conversation.
    ours = {c.get("toolCallId") for c in calls if marker in str(c.get("rawInput") or "")}
    finished = [u for u in updates(events, "tool_call_update")
                if u.get("toolCallId") in ours and u.get("status") == "completed"]
    assert finished, "the shell call never completed"
    messages = [e["message"] for e in transcript if e.get("type") == "message"]
    answered = [m.get("tool_call_id") for m in messages if m.get("role") == "tool"]
    assert ours & set(answered), (ours, answered)


async def test_a_todo_list_arms_the_guard(tmp_path):
    async with real_daemon(tmp_path) as client:
        sid = await new_session(client)
        record, events = await turn(client, sid, (
            "Plan this with the todo_write tool first, three items: create notes.txt, write the word hello "
            "into it, then show its contents with cat. Then do the items one by one with the shell tool, "
            "updating the todo list as you go."))
        status = (await client.get(f"/session/{sid}/status")).json()
    plans = updates(events, "plan")
    guard = [u for u in updates(events, "agent_message_chunk")
             if (u.get("_meta") or {}).get("source") == "todo_stop_guard"]
    print(f"[{NAME}] plans: {[[e['status'] for e in p['entries']] for p in plans]}; guard chunks: {len(guard)}; "
          f"guard status: {status['todoStopGuard']}")
    assert record["state"] in ("completed", "error")
    assert plans, "the model never called todo_write as a tool"
    # A successful todo_write with unfinished items is what arms the guard (spec 000).
    assert any(e["status"] != "completed" for e in plans[0]["entries"])
    assert status["todoStopGuard"]["enabled"] is True
    assert guard or status["todoStopGuard"]["armed"] or all(e["status"] == "completed" for e in plans[-1]["entries"])


async def test_a_cancel_ends_the_turn_and_the_session_goes_on(tmp_path):
    async with real_daemon(tmp_path) as client:
        sid = await new_session(client)
        pid = await admit(client, sid, "Write a 3000-word essay on the history of bridges.")
        with trio.fail_after(TURN_SECONDS):
            while not said(await events_of(client, sid, pid)):
                await trio.sleep(0.5)  # it is streaming
        assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
        record = await settled(client, sid, pid)
        after, _ = await turn(client, sid, "Say ok.")
    assert (record["state"], record["stopReason"]) == ("cancelled", "cancelled")
    assert after["state"] == "completed"


async def test_an_overflow_leaves_the_session_usable(tmp_path):
    blob = secrets.token_hex(OVERFLOW_CHARS // 2)  # hex: about a token per two or three characters
    async with real_daemon(tmp_path) as client:
        sid = await new_session(client)
        pid = await admit(client, sid, f"Count the characters of this text:\n{blob}")
        record = await settled(client, sid, pid)
        errors = [f for f in await events_of(client, sid, pid) if f["type"] == "turn_error"]
        print(f"[{NAME}] overflow -> {record['state']} {record.get('stopReason')} "
              f"{[(e['data'].get('code'), e['data'].get('message')) for e in errors]}")
        after, _ = await turn(client, sid, "Say ok.")
    if errors:
        assert errors[-1]["data"]["code"] == "context_overflow"
    else:
        assert record["state"] == "completed"
    assert after["state"] == "completed" and after["stopReason"] == "end_turn"
