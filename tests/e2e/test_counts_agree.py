"""Every count a client shows agrees with ``GET /session/:id/status``.

One state, built against a real daemon (``python -m transport`` on loopback
port 0, the scripted model): a running prompt that made two model calls (with
their token usage) and now waits on a permission request, and two prompts
queued behind it. Then each place that shows a count of that state is read —
the session list (``GET /session``), the pending-prompt FIFO
(``GET /session/:id/pending-prompts``), the running turn's record, the events
a client sums the usage from, ``trellis sessions`` (table and ``--json``),
``trellis status ID``, and ``trellis attach``'s session picker, status line,
``/status``, ``/pending`` and ``/drop 1`` — and each number is compared with the status route's: queued,
pending (queued + running), running, permissions waiting, model calls, tokens.
The browser UI's counts are in tests/browser/test_counts_agree.py.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest
import trio

from tests.e2e.sse_client import collect
from tests.sync_daemon import Daemon
from tests.trellis.helpers import daemon_args, scripted_daemon, trellis

CALL_1 = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
CALL_2 = {"prompt_tokens": 200, "completion_tokens": 30, "total_tokens": 230}
TODOS = {"todos": [{"id": "t1", "content": "count the prompts", "status": "in_progress"}]}
# The first prompt: two model calls, each with its usage, the second asking to run a shell command (a permission
# request in the default approval mode: the turn waits on it for as long as the test likes). The queued prompts'
# answers, should they ever run.
SCRIPT = [
    [{"text": "planning "}, {"usage": CALL_1}, {"tool_call": {"name": "todo_write", "arguments": TODOS}}],
    [{"text": "now a command "}, {"usage": CALL_2},
     {"tool_call": {"name": "shell", "arguments": {"command": "echo counted"}}}],
    [{"text": "second ran"}],
    [{"text": "third ran"}],
]
QUEUED = ["second", "third"]
WAIT = 20.0  # seconds for the state to be built


def text(body: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": body}]}


async def build_state(client: httpx.AsyncClient, cwd: str) -> tuple[str, dict[str, Any]]:
    """The session described in the module doc; its id and its status once all of it holds."""
    sid = (await client.post("/session", json={"cwd": cwd})).json()["sessionId"]
    first = await client.post(f"/session/{sid}/prompt", json=text("first"))
    assert first.status_code in (200, 202), first.text
    with trio.fail_after(WAIT):
        while not (await client.get(f"/session/{sid}/status")).json()["pendingPermissions"]:
            await trio.sleep(0.02)
        for body in QUEUED:
            queued = await client.post(f"/session/{sid}/prompt", json=text(body))
            assert queued.status_code in (200, 202), queued.text
        while True:
            status = (await client.get(f"/session/{sid}/status")).json()
            if status["queuedCount"] == len(QUEUED) and status["usage"]["calls"] == 2:
                return sid, status
            await trio.sleep(0.02)


async def watch(client: httpx.AsyncClient, sid: str) -> None:
    """Stay subscribed to ``sid``'s events until cancelled (however long nothing comes)."""
    async with client.stream("GET", f"/session/{sid}/events", timeout=None) as events:
        async for _ in events.aiter_raw():
            pass


def table_rows(stdout: str) -> dict[str, list[str]]:
    """``trellis sessions``' table: session id -> its cells (columns are at least two spaces apart)."""
    header, *rows = stdout.splitlines()
    assert header.split() == ["SESSION", "STATE", "QUEUED", "UPDATED", "CWD", "TITLE"], header
    return {row.split()[0]: re.split(r"\s{2,}", row) for row in rows}


def fields(stdout: str) -> dict[str, str]:
    """``trellis status``' two-column table: field -> value."""
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in stdout.splitlines())


async def test_every_count_agrees_with_the_status_route(tmp_path):
    with trio.fail_after(90):
        async with scripted_daemon(tmp_path, *SCRIPT) as daemon:
            args = daemon_args(daemon)
            async with daemon.client(daemon.token()) as client, trio.open_nursery() as watching:
                sid, status = await build_state(client, str(tmp_path))
                # A client watches the session throughout, as one does while a permission waits: with none, the
                # request is cancelled once limits.clientGraceSeconds (10 s) pass, and the turn moves on while
                # the CLI commands below start (a fresh clone compiles them first).
                watching.start_soon(watch, client, sid)
                listed = (await client.get("/session")).json()["sessions"]
                pending = (await client.get(f"/session/{sid}/pending-prompts")).json()["pendingPrompts"]
                current = (await client.get(f"/session/{sid}/turns/current")).json()
                frames = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
                table = await trellis("sessions", *args, cwd=tmp_path)
                as_json = await trellis("sessions", *args, "--json", cwd=tmp_path)
                shown = await trellis("status", *args, sid, cwd=tmp_path)
                again = (await client.get(f"/session/{sid}/status")).json()  # nothing moved meanwhile
                await client.post(f"/session/{sid}/cancel")
                watching.cancel_scope.cancel()

    # The state is the one built: a running prompt, two queued, two calls, one permission waiting.
    assert status["state"] == "running" and status["hasActivePrompt"] is True
    assert (status["queuedCount"], status["pendingCount"], status["midTurnQueued"]) == (2, 3, 0)
    assert len(status["pendingPermissions"]) == 1
    usage = status["usage"]
    assert (usage["calls"], usage["inputTokens"], usage["outputTokens"], usage["totalTokens"]) == (2, 300, 50, 350)
    counts = ("state", "queuedCount", "pendingCount", "midTurnQueued", "pendingPermissions", "usage",
              "currentPromptId")
    assert {k: again[k] for k in counts} == {k: status[k] for k in counts}

    # GET /session: the list's entry.
    entry = next(s for s in listed if s["sessionId"] == sid)
    assert {k: entry[k] for k in ("state", "queuedCount", "pendingCount", "midTurnQueued")} == \
           {k: status[k] for k in ("state", "queuedCount", "pendingCount", "midTurnQueued")}

    # GET /session/:id/pending-prompts: the running prompt and the queued ones, in FIFO order.
    running = [p for p in pending if p["state"] == "running"]
    queued = [p for p in pending if p["state"] == "queued"]
    assert len(pending) == status["pendingCount"]
    assert len(queued) == status["queuedCount"] and [p["text"] for p in queued] == QUEUED
    assert [p["promptId"] for p in running] == [status["currentPromptId"]]

    # The running turn's record: its usage is live, and it is the session's (the only turn that called the model).
    assert current["promptId"] == status["currentPromptId"] and current["state"] == "running"
    assert {k: current["usage"][k] for k in ("calls", "inputTokens", "outputTokens", "totalTokens")} == \
           {k: usage[k] for k in ("calls", "inputTokens", "outputTokens", "totalTokens")}

    # The events: a usage chunk per model call (what the UI's header and attach's status line add up), the
    # pending-prompt events (what their queues are built from) and the permission request still open.
    chunks = [f["data"]["update"]["_meta"]["usage"] for f in frames if f.get("type") == "session_update"
              and f["data"]["update"].get("sessionUpdate") == "agent_message_chunk"
              and isinstance((f["data"]["update"].get("_meta") or {}).get("usage"), dict)]
    assert len(chunks) == usage["calls"]
    assert sum(c["totalTokens"] for c in chunks) == usage["totalTokens"]
    assert sum(c["inputTokens"] for c in chunks) == usage["inputTokens"]
    assert sum(c["outputTokens"] for c in chunks) == usage["outputTokens"]
    added = [f["data"]["promptId"] for f in frames if f.get("type") == "pending_prompt_added"]
    gone = {f["data"]["promptId"] for f in frames
            if f.get("type") in ("pending_prompt_started", "pending_prompt_completed")}
    assert [p for p in added if p not in gone] == [p["promptId"] for p in queued]
    asked = {f["data"]["requestId"] for f in frames if f.get("type") == "permission_request"}
    answered = {f["data"].get("requestId") for f in frames if f.get("type") == "permission_resolved"}
    assert sorted(asked - answered) == sorted(status["pendingPermissions"])

    # trellis sessions: the table's state and queued column, and --json is the list itself.
    assert table.code == 0, table.stderr
    row = table_rows(table.stdout)[sid]
    assert row[1:3] == [status["state"], str(status["queuedCount"])]
    assert as_json.code == 0, as_json.stderr
    json_entry = next(s for s in json.loads(as_json.stdout)["sessions"] if s["sessionId"] == sid)
    assert {k: json_entry[k] for k in ("state", "queuedCount", "pendingCount", "midTurnQueued")} == \
           {k: status[k] for k in ("state", "queuedCount", "pendingCount", "midTurnQueued")}

    # trellis status ID: queued prompts, the permissions waiting, the usage.
    assert shown.code == 0, shown.stderr
    rows = fields(shown.stdout)
    assert rows["queued prompts"] == str(status["queuedCount"])
    assert rows["state"] == f"running (prompt {status['currentPromptId']})"
    assert rows["pending permissions"] == ", ".join(status["pendingPermissions"])
    assert rows["usage"] == f"{usage['calls']} calls, {usage['inputTokens']} in / {usage['outputTokens']} out tokens"
    assert rows["background tasks"] == str(len(status["backgroundTasks"]))


def build_state_sync(daemon: Daemon, cwd: str) -> tuple[str, dict[str, Any]]:
    """:func:`build_state` for the tests that are not Trio (pexpect, Playwright)."""
    with daemon.client() as client:
        sid = client.post("/session", json={"cwd": cwd}).json()["sessionId"]
        client.post(f"/session/{sid}/prompt", json=text("first"))
        deadline = time.monotonic() + WAIT
        while not client.get(f"/session/{sid}/status").json()["pendingPermissions"]:
            assert time.monotonic() < deadline, "no permission request"
            time.sleep(0.02)
        for body in QUEUED:
            client.post(f"/session/{sid}/prompt", json=text(body))
        status = client.get(f"/session/{sid}/status").json()
    assert (status["state"], status["queuedCount"], len(status["pendingPermissions"])) == ("running", 2, 1), status
    assert (status["usage"]["calls"], status["usage"]["totalTokens"]) == (2, 350), status
    return sid, status


def attach(tmp_path: Any, daemon: Daemon, *extra: str) -> Any:
    """``trellis attach`` under a pseudo-terminal (tests.trellis.terminal), or a skip where there is none."""
    pytest.importorskip("pexpect", reason="pexpect drives trellis attach under a pseudo-terminal")
    from tests.trellis.terminal import PTY_PROBLEM, Attached

    if PTY_PROBLEM:
        pytest.skip(PTY_PROBLEM)
    return Attached(tmp_path, daemon.url, daemon.state, *extra)


def status_line(screen: Any, wanted: str) -> str:
    """The last status line drawn (``⠋ turn running …``) once one has ``wanted`` in it."""
    deadline = time.monotonic() + WAIT
    while True:
        found = [f for f in re.findall(r"turn running[^\n]*", screen.screen()) if wanted in f]
        if found:
            return found[-1]
        assert time.monotonic() < deadline, screen.screen()
        screen.settle(0.1)


def test_attach_counts_agree_with_the_status_route_and_drop_takes_what_pending_numbers(tmp_path):
    """``trellis attach`` on the same state: the picker's queued prompts, the status line's pending prompts and
    turn tokens, ``/status``, ``/pending``'s numbering, and ``/drop 1`` removing the prompt ``/pending`` numbered
    1 (and the status route agreeing)."""
    daemon = Daemon(tmp_path).start(SCRIPT)
    screen = None
    try:
        sid, status = build_state_sync(daemon, str(tmp_path))
        # The picker (this directory's sessions): the session's state and queued prompts.
        screen = attach(tmp_path, daemon)
        screen.expect("0. new session")
        screen.expect("1. first  (")
        screen.expect(")")
        label = screen.screen().split("1. first  (", 1)[1].split(")", 1)[0]
        assert label.startswith(f"{status['state']}, ") and f", {status['queuedCount']} queued, " in label, label
        screen.line("1")
        assert screen.session_id() == sid
        # The status line: the queued prompts (not the running one) and the running turn's tokens so far.
        line = status_line(screen, f"· {status['usage']['totalTokens']:,} tokens")  # once the replay is in
        assert f"⋯ {status['queuedCount']} pending" in line, line
        screen.expect("? permission: execute: echo counted")  # the one request waiting
        # /status: the status route's figures, as the command prints them.
        screen.line("/status")
        screen.expect(f"background task(s), {status['queuedCount']} queued")
        screen.expect(f"usage: {status['usage']['calls']} calls, {status['usage']['totalTokens']} tokens")
        screen.line("/pending")
        screen.expect("▶ running: first")
        screen.expect("⋯ 1. second")
        screen.expect("⋯ 2. third")
        screen.line("/drop 1")  # what /pending numbered 1
        screen.expect("⋯ 1 pending: 1. “third”")
        with daemon.client() as client:
            after = client.get(f"/session/{sid}/status").json()
            listed = client.get(f"/session/{sid}/pending-prompts").json()["pendingPrompts"]
            client.post(f"/session/{sid}/cancel")
        assert [(p["text"], p["state"]) for p in listed] == [("first", "running"), ("third", "queued")]
        assert (after["queuedCount"], after["pendingCount"]) == (1, 2)
    finally:
        if screen is not None:
            screen.close()
        daemon.stop()


def test_attach_without_history_shows_the_waiting_permission_and_the_turns_tokens(tmp_path):
    daemon = Daemon(tmp_path).start(SCRIPT)
    screen = None
    try:
        sid, status = build_state_sync(daemon, str(tmp_path))
        screen = attach(tmp_path, daemon, "--session", sid, "--no-history")
        screen.session_id()
        line = status_line(screen, "pending")
        assert f"⋯ {status['queuedCount']} pending" in line, line
        screen.settle(1.0)
        waiting = "permission: execute: echo counted" in screen.screen()
        line = status_line(screen, "pending")
        with daemon.client() as client:
            client.post(f"/session/{sid}/cancel")
        assert waiting, screen.screen()
        assert f"· {status['usage']['totalTokens']:,} tokens" in line, line
    finally:
        if screen is not None:
            screen.close()
        daemon.stop()
