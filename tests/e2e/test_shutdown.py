"""Graceful shutdown: SIGTERM/SIGINT end a real daemon in order, within ``limits.shutdownSeconds``.

Each test runs ``python -m transport`` as a subprocess on loopback port 0 and
signals it. Graceful: the running turn ends ``turn_complete`` ``cancelled`` in
the event stream a subscriber is reading, then ``session_closed``, then the
stream ends; the transcript on disk is a valid conversation; every background
shell is gone; the process exits 0. A second signal, or the bound running out,
forces: remaining process groups are killed and the process exits 1.

A slow shutdown is made with a foreground shell whose timeout has just fired
while it traps SIGTERM: the daemon then waits (shielded) up to its kill grace
of 2 s before SIGKILL, and the session's close waits for that.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from actors import CountingIds, Settings, load_script, open_daemon
from tests.conftest import DaemonProcess, daemon_process, live_daemon
from tests.e2e.sse_client import frames
from tests.processes import marker, pids_with
from transport.fake_openai import FakeOpenAI

BOUND = 10.0  # limits.shutdownSeconds unless a test says otherwise


def shell_call(command: str, *, background: bool = False, timeout: float | None = None,
               call_id: str | None = None) -> dict[str, Any]:
    arguments: dict[str, Any] = {"command": command}
    if background:
        arguments["run_in_background"] = True
    if timeout is not None:
        arguments["timeout"] = timeout
    call: dict[str, Any] = {"name": "shell", "arguments": arguments}
    if call_id is not None:
        call["id"] = call_id
    return {"tool_call": call}


def prompt(text: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": text}]}


async def wait_until(predicate: Any, timeout: float = 20, what: str = "") -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


class Stream:
    """A subscriber reading ``/session/:id/events`` until the daemon ends the stream."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.ended = trio.Event()
        self.error: BaseException | None = None

    def types(self) -> list[str]:
        return [f["type"] for f in self.frames]

    def said(self, text: str) -> bool:
        """An ``agent_message_chunk`` with exactly this text arrived."""
        for f in self.frames:
            update = f["data"].get("update") or {}
            content = update.get("content")
            if update.get("sessionUpdate") == "agent_message_chunk" and isinstance(content, dict) \
                    and content.get("text") == text:
                return True
        return False

    def has(self, kind: str, **data: Any) -> bool:
        return any(f["type"] == kind and all(f["data"].get(k) == v for k, v in data.items()) for f in self.frames)

    async def read(self, client: httpx.AsyncClient, sid: str, *, task_status: Any) -> None:
        try:
            async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"},
                                     timeout=httpx.Timeout(10, read=60)) as r:
                assert r.status_code == 200
                task_status.started()
                async for frame in frames(r):
                    self.frames.append(frame)
        except httpx.HTTPError as exc:  # the stream must end cleanly, not break
            self.error = exc
        finally:
            self.ended.set()


async def exit_code(running: DaemonProcess, timeout: float) -> tuple[int, float]:
    """Wait for the daemon to exit; its exit code and how long that took."""
    start = trio.current_time()
    with trio.fail_after(timeout):
        code = await running.process.wait()
    return code, trio.current_time() - start


async def read_stderr_until(running: DaemonProcess, text: str, timeout: float = 10) -> None:
    """Read the daemon's stderr (kept in ``running.stderr``) until it contains ``text``."""
    with trio.fail_after(timeout):
        while text.encode() not in running.stderr:
            chunk = await running.process.stderr.receive_some()
            assert chunk, f"stderr ended before {text!r}: {running.stderr.decode()}"
            running.stderr += chunk


async def drain_stderr(running: DaemonProcess) -> None:
    """Everything left on the stderr of a daemon that exited."""
    with trio.fail_after(5):
        while chunk := await running.process.stderr.receive_some():
            running.stderr += chunk


def transcript_of(state: Path, sid: str) -> list[dict[str, Any]]:
    path = state / "sessions" / f"{sid}.jsonl"
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def assert_consistent(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every line parses and every tool call the model made has exactly one answer after it."""
    messages = [r["message"] for r in records if r.get("type") == "message"]
    asked: list[str] = []
    for m in messages:
        if m["role"] == "assistant":
            asked += [c["id"] for c in m.get("tool_calls", [])]
        if m["role"] == "tool":
            assert m["tool_call_id"] in asked, m
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(answered) == sorted(asked)
    return messages


def kill_leftovers(word: str) -> None:
    for pid in pids_with(word):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@asynccontextmanager
async def daemon(tmp_path: Path, responses: list[Any], settings: dict[str, Any] | None = None,
                 *args: str) -> AsyncIterator[tuple[DaemonProcess, httpx.AsyncClient]]:
    """The daemon as a subprocess on the scripted model playing ``responses``; yields it and a client."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": responses}))
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps({"approvalMode": "yolo", **(settings or {})}))
    async with daemon_process("--script", str(script), "--settings", str(settings_file), "--workspace", str(work),
                              *args, state_dir=tmp_path / "state") as running:
        async with running.client(running.token()) as client:
            yield running, client


async def open_session(client: httpx.AsyncClient) -> str:
    r = await client.post("/session", json={})
    assert r.status_code == 200, r.text
    return r.json()["sessionId"]


async def send_prompt(client: httpx.AsyncClient, sid: str, text: str = "go") -> str:
    r = await client.post(f"/session/{sid}/prompt", json=prompt(text))
    assert r.status_code == 202, r.text
    return r.json()["promptId"]


# ----------------------------------------------------------------- graceful


@pytest.mark.parametrize("sandbox", ["auto", "off"])
async def test_sigterm_mid_turn_ends_the_turn_cancelled_closes_streams_and_leaves_no_shell(tmp_path, sandbox):
    plain, detached = marker(), marker()
    responses = [
        [shell_call(f"sleep {plain}", background=True, call_id="call_plain"),
         shell_call(f"setsid sleep {detached}", background=True, call_id="call_setsid")],
        [{"text": "working "}, {"sleep": 3600}, {"text": "never said"}],
    ]
    try:
        async with daemon(tmp_path, responses, {"sandbox": sandbox}) as (running, client):
            sid = await open_session(client)
            stream = Stream()
            async with trio.open_nursery() as nursery:
                await nursery.start(stream.read, client, sid)
                pid = await send_prompt(client, sid)
                await wait_until(lambda: stream.said("working "))
                await wait_until(lambda: pids_with(plain) and pids_with(detached))

                running.process.send_signal(signal.SIGTERM)
                code, took = await exit_code(running, BOUND + 5)
                with trio.fail_after(5):
                    await stream.ended.wait()
            await drain_stderr(running)
            assert code == 0, running.stderr.decode()
            assert took < BOUND

            # The subscriber saw the turn end cancelled, then session_closed, then the end of its stream.
            assert stream.error is None
            ends = [f for f in stream.frames if f["type"] in ("turn_complete", "turn_error")]
            assert [(f["data"]["promptId"], f["data"].get("stopReason")) for f in ends] == [(pid, "cancelled")]
            assert stream.frames[-1]["type"] == "session_closed"
            assert stream.frames[-1]["data"]["reason"] == "daemon_shutdown"
            assert stream.types().index("turn_complete") < len(stream.frames) - 1

            # The stages, one line each, on stderr.
            err = running.stderr.decode()
            assert "shutting down (SIGTERM)" in err and "\nstopped" in err and "forced" not in err
            assert "Traceback" not in err, err

            # Nothing the turn started is left.
            # With the sandbox its PID namespace takes the setsid one; without, the task markers do.
            with trio.fail_after(5):
                while pids_with(plain) or pids_with(detached):
                    await trio.sleep(0.05)

        # The transcript on disk is a whole conversation: the prompt, the calls and their answers; the
        # text of the cancelled stream was never committed.
        messages = assert_consistent(transcript_of(tmp_path / "state", sid))
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
        assert "working" not in json.dumps(messages)

        # A daemon restarted on the same state directory reads the same, and the turn's record says cancelled.
        async with daemon(tmp_path, [], {"sandbox": sandbox}) as (again, client):
            r = await client.get(f"/session/{sid}/transcript")
            assert r.status_code == 200
            assert [e["message"] for e in r.json()["entries"] if e.get("type") == "message"] == messages
            assert (await client.post(f"/session/{sid}/load", json={})).status_code == 200
            turn = (await client.get(f"/session/{sid}/turns/{pid}")).json()
            assert turn["state"] == "cancelled" and turn["stopReason"] == "cancelled"
    finally:
        kill_leftovers(plain)
        kill_leftovers(detached)


async def test_sigterm_while_the_openai_model_stalls_mid_stream(tmp_path):
    """The real model client: a stream stalled forever is cut, the turn ends cancelled, exit 0."""
    fake = FakeOpenAI([[{"text": "partial "}, {"stall": None}]])
    state = tmp_path / "state"
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        async with daemon_process("--model", "openai", "--openai-base-url", url, "--openai-model", "fake",
                                  state_dir=state, env={"OPENAI_API_KEY": "unused"}) as running:
            async with running.client(running.token()) as client:
                sid = await open_session(client)
                stream = Stream()
                async with trio.open_nursery() as readers:
                    await readers.start(stream.read, client, sid)
                    pid = await send_prompt(client, sid)
                    await wait_until(lambda: stream.said("partial "))
                    running.process.send_signal(signal.SIGTERM)
                    code, took = await exit_code(running, BOUND + 5)
                    with trio.fail_after(5):
                        await stream.ended.wait()
        assert code == 0 and took < BOUND
        assert stream.has("turn_complete", promptId=pid, stopReason="cancelled")
        assert stream.frames[-1]["type"] == "session_closed"
        assert [m["role"] for m in assert_consistent(transcript_of(state, sid))] == ["user"]
        nursery.cancel_scope.cancel()


# ----------------------------------------------------------------- a slow shutdown


def slow_turn(workdir: Path, word: str) -> list[Any]:
    """A foreground shell that traps SIGTERM and outlives its 0.2 s timeout: once ``term`` exists, the
    daemon is in its shielded kill grace (2 s) and closing the session waits for it."""
    script = (f": {word}; trap 'touch {workdir}/term' TERM; touch {workdir}/started; "
              f"while :; do sleep 0.05; done")
    return [[shell_call(script, timeout=0.2)], [{"text": "after the shell"}]]


async def start_slow_shutdown(tmp_path: Path, client: httpx.AsyncClient, running: DaemonProcess,
                              signum: int) -> tuple[str, str]:
    sid = await open_session(client)
    pid = await send_prompt(client, sid)
    work = tmp_path / "work"
    await wait_until(lambda: (work / "term").exists())
    running.process.send_signal(signum)
    await read_stderr_until(running, f"shutting down ({signal.Signals(signum).name})")
    return sid, pid


async def test_work_is_refused_503_while_shutdown_runs_and_a_second_sigterm_forces(tmp_path):
    word = marker()
    try:
        async with daemon(tmp_path, slow_turn(tmp_path / "work", word), {"sandbox": "off"}) as (running, client):
            sid, pid = await start_slow_shutdown(tmp_path, client, running, signal.SIGTERM)

            r = await client.post(f"/session/{sid}/prompt", json=prompt("one more"))
            assert r.status_code == 503
            assert r.json() == {"error": r.json()["error"], "code": "shutting_down", "path": None}
            assert (await client.post("/session", json={})).json()["code"] == "shutting_down"
            # Reads keep answering (those a closing session's actors need are gone with it, as during a DELETE).
            assert (await client.get(f"/session/{sid}/transcript")).status_code == 200
            assert (await client.get("/capabilities")).status_code == 200
            assert (await client.get("/session")).status_code == 200

            running.process.send_signal(signal.SIGTERM)
            code, took = await exit_code(running, 5)
            await drain_stderr(running)
            assert code == 1, running.stderr.decode()
            assert took < 1.5  # at once: the shell's kill grace still had most of its 2 s to run
            err = running.stderr.decode()
            assert "forced (a second signal, SIGTERM)" in err and "\nstopped" not in err, err
            assert "Traceback" not in err, err
            with trio.fail_after(5):
                while pids_with(word):  # the forced path killed the shell's process group
                    await trio.sleep(0.05)
    finally:
        kill_leftovers(word)


async def test_sigint_shuts_down_like_sigterm_and_a_slow_turn_still_ends_within_the_bound(tmp_path):
    word = marker()
    try:
        async with daemon(tmp_path, slow_turn(tmp_path / "work", word), {"sandbox": "off"}) as (running, client):
            stream = Stream()
            sid = await open_session(client)
            async with trio.open_nursery() as nursery:
                await nursery.start(stream.read, client, sid)
                pid = await send_prompt(client, sid)
                await wait_until(lambda: (tmp_path / "work" / "term").exists())
                running.process.send_signal(signal.SIGINT)
                code, took = await exit_code(running, BOUND + 5)
                with trio.fail_after(5):
                    await stream.ended.wait()
            await drain_stderr(running)
            err = running.stderr.decode()
            assert code == 0, err
            assert took < BOUND
            assert "shutting down (SIGINT)" in err and "\nstopped" in err and "forced" not in err
            assert "Traceback" not in err, err
            assert stream.has("turn_complete", promptId=pid, stopReason="cancelled")
            assert stream.frames[-1]["type"] == "session_closed"
            assert pids_with(word) == []
        messages = assert_consistent(transcript_of(tmp_path / "state", sid))
        assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    finally:
        kill_leftovers(word)


async def test_a_shutdown_past_its_bound_is_forced_with_exit_1(tmp_path):
    word = marker()
    try:
        settings = {"sandbox": "off", "limits": {"shutdownSeconds": 0.3}}
        async with daemon(tmp_path, slow_turn(tmp_path / "work", word), settings) as (running, client):
            await start_slow_shutdown(tmp_path, client, running, signal.SIGTERM)
            code, took = await exit_code(running, 5)
            await drain_stderr(running)
            err = running.stderr.decode()
            assert code == 1, err
            assert "forced (not stopped within 0.3 s)" in err and "stopped\n" not in err
            with trio.fail_after(5):
                while pids_with(word):
                    await trio.sleep(0.05)
    finally:
        kill_leftovers(word)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
async def test_an_idle_daemon_stops_at_once(tmp_path, signum):
    async with daemon(tmp_path, []) as (running, client):
        await open_session(client)
        running.process.send_signal(signum)  # SIGHUP: the terminal it was started from closed
        code, took = await exit_code(running, 10)
        await drain_stderr(running)
    assert code == 0 and took < 3
    err = running.stderr.decode()
    assert f"shutting down ({signal.Signals(signum).name})" in err and err.rstrip().endswith("stopped")
    assert not (tmp_path / "state" / "daemon.json").exists()


async def test_a_daemon_started_with_sighup_ignored_outlives_its_terminal(tmp_path):
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts it: inherited across exec
    try:
        async with daemon(tmp_path, []) as (running, client):
            signal.signal(signal.SIGHUP, previous)
            await open_session(client)
            running.process.send_signal(signal.SIGHUP)
            assert (await client.get("/health")).status_code == 200  # still serving
            with trio.move_on_after(0.5):
                await running.process.wait()
            assert running.process.returncode is None
            running.process.send_signal(signal.SIGTERM)
            code, _ = await exit_code(running, 10)
            await drain_stderr(running)
        assert code == 0 and "shutting down (SIGTERM)" in running.stderr.decode()
    finally:
        signal.signal(signal.SIGHUP, previous)


# ----------------------------------------------------------------- in process


async def test_refused_work_while_shutting_down_is_503_and_reads_answer(tmp_path):
    """Every route that would start work answers 503 shutting_down; the rest keep answering."""
    model = load_script({"responses": [[{"text": "hi"}]], "then": "demo"})
    with trio.fail_after(20):
        async with live_daemon(model=model, state_dir=tmp_path / "state") as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            daemon._shutting_down = True  # as shutdown_gracefully sets it first thing
            try:
                refused = [
                    await client.post("/session", json={}),
                    await client.post(f"/session/{sid}/prompt", json=prompt("x")),
                    await client.post(f"/session/{sid}/mid-turn-message", json={"message": "x"}),
                    await client.post(f"/session/{sid}/load", json={}),
                    await client.post(f"/session/{sid}/resume", json={}),
                    await client.post(f"/session/{sid}/fork", json={}),
                    await client.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                                    "params": {"name": "start", "arguments": {}}}),
                    await client.post("/acp", json={"jsonrpc": "2.0", "id": 2, "method": "session/new",
                                                    "params": {"cwd": str(tmp_path), "mcpServers": []}}),
                ]
                for r in refused:
                    assert r.status_code == 503, (r.request.url, r.text)
                    body = r.json()
                    assert body["code"] == "shutting_down" and body["path"] is None and body["error"], body
                assert (await client.post("/session", content=b"not json")).status_code == 503
                assert (await client.get(f"/session/{sid}/status")).status_code == 200
                assert (await client.get(f"/session/{sid}/transcript")).status_code == 200
                assert (await client.get("/capabilities")).status_code == 200
                assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
                listed = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                           headers={"Accept": "application/json, text/event-stream"})
                assert listed.status_code != 503
                unauthorized = await client.post("/session", json={}, headers={"Authorization": "Bearer wrong"})
                assert unauthorized.status_code == 401  # authentication is still checked first
            finally:
                daemon._shutting_down = False


async def test_cancelling_the_embedding_nursery_ends_the_running_turn_cancelled(tmp_path):
    """``async with open_daemon()`` cancelled from outside: the running turn ends cancelled (event,
    journal, transcript) and no process of it is left."""
    word = marker()
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir()
    model = load_script([
        [{"tool_call": {"name": "shell", "id": "call_bg",
                        "arguments": {"command": f"sleep {word}", "run_in_background": True}}}],
        [{"text": "working "}, {"sleep": 3600}, {"text": "never said"}],
    ])
    settings = Settings(approval_mode="yolo", sandbox="off")
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as outer:
                async def embed(*, task_status: Any) -> None:
                    async with open_daemon(settings, model=model, state_dir=state, workspace=str(work),
                                           ids=CountingIds()) as d:
                        handle, _ = await d.create_session()
                        subscription = handle.subscribe()
                        admitted = await handle.prompt("go")
                        task_status.started((handle, subscription, admitted.prompt_id))
                        await trio.sleep_forever()

                handle, subscription, pid = await outer.start(embed)
                await wait_until(lambda: len(model.calls) == 2 and pids_with(word))
                await trio.sleep(0.05)  # the second stream is in its sleep
                outer.cancel_scope.cancel()
            events = [e async for e in subscription]
        assert pids_with(word) == []
        ends = [e for e in events if e.type in ("turn_complete", "turn_error")]
        assert [(e.data["promptId"], e.data["stopReason"]) for e in ends] == [(pid, "cancelled")]
        assert events[-1].type == "session_closed" and events[-1].data["reason"] == "daemon_shutdown"
        messages = assert_consistent(transcript_of(state, handle.session_id))
        assert [m["role"] for m in messages] == ["user", "assistant", "tool"]

        # A fresh daemon on the same state directory: the turn's record says cancelled, nothing re-runs.
        with trio.fail_after(20):
            async with open_daemon(settings, model=load_script([]), state_dir=state, workspace=str(work),
                                   ids=CountingIds()) as again:
                restored = await again.load_session(handle.session_id)
                turn = await restored.turn(pid)
                assert turn is not None and turn["state"] == "cancelled", turn
                assert (await restored.status())["pendingCount"] == 0
    finally:
        kill_leftovers(word)


async def test_shutdown_gracefully_in_process_closes_sessions_and_stops_serving(tmp_path):
    model = load_script([[{"text": "a "}, {"sleep": 3600}]])
    with trio.fail_after(20):
        async with live_daemon(model=model, state_dir=tmp_path / "state") as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            handle = daemon.get(sid)
            subscription = handle.subscribe()
            pid = (await client.post(f"/session/{sid}/prompt", json=prompt("x"))).json()["promptId"]
            await wait_until(lambda: len(model.calls) == 1)
            assert not daemon.shutting_down
            assert await daemon.shutdown_gracefully(5) is True
            assert daemon.shutting_down and daemon.stopped.is_set() and daemon.session_count == 0
            assert await daemon.shutdown_gracefully(5) is True  # again: the same, finished shutdown
            events = [e async for e in subscription]
            assert [e.type for e in events][-1] == "session_closed"
            assert any(e.type == "turn_complete" and e.data["promptId"] == pid
                       and e.data["stopReason"] == "cancelled" for e in events)


# ----------------------------------------------------------------- the ACP agent on stdio


async def test_the_acp_stdio_agent_shuts_down_gracefully_on_sigterm(tmp_path):
    """``python -m transport acp``: SIGTERM mid-prompt answers the prompt ``cancelled`` and exits 0."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"responses": [[{"text": "working "}, {"sleep": 3600}, {"text": "never"}]]}))
    environ = {k: v for k, v in os.environ.items() if k not in ("TRELLIS_TOKEN", "OPENAI_API_KEY")}
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "transport", "acp", "--script", str(script), "--state-dir", str(tmp_path / "state")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environ,
        cwd=str(Path(__file__).resolve().parents[2]))
    received: list[dict[str, Any]] = []
    buffer = b""

    async def send(message: dict[str, Any]) -> None:
        await process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def until(predicate: Any) -> dict[str, Any]:
        nonlocal buffer
        with trio.fail_after(20):
            while True:
                found = next((m for m in received if predicate(m)), None)
                if found is not None:
                    return found
                chunk = await process.stdout.receive_some()
                assert chunk, "the agent closed stdout"
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                received.extend(json.loads(line) for line in lines if line.strip())

    try:
        await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}})
        await until(lambda m: m.get("id") == 1)
        await send({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                    "params": {"cwd": str(tmp_path), "mcpServers": []}})
        sid = (await until(lambda m: m.get("id") == 2))["result"]["sessionId"]
        await send({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                    "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}})
        await until(lambda m: m.get("method") == "session/update"
                    and (m["params"]["update"].get("content") or {}).get("text") == "working ")
        process.send_signal(signal.SIGTERM)
        answer = await until(lambda m: m.get("id") == 3)  # the prompt is answered before the agent exits
        with trio.fail_after(BOUND + 5):
            code = await process.wait()
        err = b""
        while chunk := await process.stderr.receive_some():
            err += chunk
        assert code == 0, err.decode()
        assert answer["result"]["stopReason"] == "cancelled", answer
        assert b"shutting down (SIGTERM)" in err and b"\nstopped" in err and b"Traceback" not in err
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_limits_shutdown_seconds_is_a_positive_number_of_seconds():
    from actors import SettingsError
    from actors.settings_file import settings_from_dict

    assert Settings().limits.shutdown_seconds == 10.0
    assert settings_from_dict({"limits": {"shutdownSeconds": 2.5}}).limits.shutdown_seconds == 2.5
    assert settings_from_dict({"limits": {"shutdownSeconds": 3}}).limits.shutdown_seconds == 3
    for bad in (0, -1, "10", True):
        with pytest.raises(SettingsError, match="limits.shutdownSeconds"):
            settings_from_dict({"limits": {"shutdownSeconds": bad}})
