"""A cancellation that comes out of a nursery, as an exception group of ``Cancelled``, is a cancellation.

A session closed while a foreground shell runs: the turn still ends
``cancelled``, published and written. The foreground shell reads its command's
output in a nursery, so the cancellation that closes the session comes out of
the tool as an exception group of ``Cancelled``. Both ways a session is closed are checked against a
real daemon (``python -m transport`` on loopback port 0, the scripted model),
with the sandbox required and off: SIGTERM to the daemon, and
``DELETE /session/:id``. The subscriber sees ``turn_complete`` ``cancelled``
before ``session_closed``; a daemon restarted on the same state directory reads
the turn's record as ``cancelled`` (not ``daemon_restarted``); no ``sleep`` is left.

A model provider whose stream runs a nursery, cancelled before the stream
exists: the mid-turn input it was to carry stays in the conversation.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from actors import load_script
from tests.conftest import live_daemon

from tests.e2e.test_shutdown import (
    BOUND, Stream, assert_consistent, daemon, drain_stderr, exit_code, kill_leftovers, open_session, send_prompt,
    shell_call, transcript_of, wait_until,
)
from tests.processes import marker, pids_with, sleeping


@pytest.mark.parametrize("sandbox", ["bwrap", "off"])
@pytest.mark.parametrize("close", ["sigterm", "delete"])
async def test_closing_a_session_mid_foreground_shell_ends_the_turn_cancelled(tmp_path, sandbox, close):
    word = marker()
    responses = [[shell_call(f"sleep {word}", call_id="call_fg")], [{"text": "never said"}]]
    try:
        async with daemon(tmp_path, responses, {"sandbox": sandbox}) as (running, client):
            sid = await open_session(client)
            stream = Stream()
            async with trio.open_nursery() as nursery:
                await nursery.start(stream.read, client, sid)
                pid = await send_prompt(client, sid)
                await wait_until(lambda: stream.has("session_update") and sleeping(word))
                await wait_until(lambda: any((f["data"].get("update") or {}).get("toolCallId") == "call_fg"
                                             for f in stream.frames))
                if close == "sigterm":
                    running.process.send_signal(signal.SIGTERM)
                    code, took = await exit_code(running, BOUND + 5)
                    assert code == 0
                    assert took < BOUND
                else:
                    with trio.fail_after(BOUND):
                        r = await client.delete(f"/session/{sid}")
                    assert r.status_code in (200, 204), r.text
                with trio.fail_after(5):
                    await stream.ended.wait()
            if close == "sigterm":
                await drain_stderr(running)
                assert "Traceback" not in running.stderr.decode(), running.stderr.decode()

            assert stream.error is None
            types = stream.types()
            ends = [f for f in stream.frames if f["type"] in ("turn_complete", "turn_error")]
            assert [(f["data"]["promptId"], f["type"], f["data"].get("stopReason")) for f in ends] \
                == [(pid, "turn_complete", "cancelled")], types
            assert types[-1] == "session_closed"
            assert stream.frames[-1]["data"]["reason"] == ("daemon_shutdown" if close == "sigterm" else "closed")
            assert types.index("turn_complete") < types.index("session_closed")
            with trio.fail_after(5):
                while pids_with(word):
                    await trio.sleep(0.05)

        messages = assert_consistent(transcript_of(tmp_path / "state", sid))
        assert [m["role"] for m in messages] == ["user", "assistant", "tool"]

        # Restarted on the same state directory: the turn was written cancelled, nothing re-runs.
        async with daemon(tmp_path, [], {"sandbox": sandbox}) as (again, client):
            assert (await client.post(f"/session/{sid}/load", json={})).status_code == 200
            turn = (await client.get(f"/session/{sid}/turns/{pid}")).json()
            assert turn["state"] == "cancelled" and turn["stopReason"] == "cancelled", turn
            assert (await client.get(f"/session/{sid}/status")).json()["pendingCount"] == 0
    finally:
        kill_leftovers(word)


class StreamInNursery:
    """A model provider (the public ``ModelProvider`` protocol) whose stream runs a helper task in a
    nursery around the scripted model's stream, as a provider reading its socket in a task would."""

    name = "in-nursery"

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @asynccontextmanager
    async def stream(self, request: Any) -> AsyncIterator[Any]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            async with self.inner.stream(request) as items:
                yield items
            nursery.cancel_scope.cancel()


async def test_a_cancel_before_a_nursery_stream_exists_keeps_the_mid_turn_input(tmp_path):
    todo = {"tool_call": {"name": "todo_write", "arguments": {"todos": [{"id": "1", "content": "x",
                                                                         "status": "pending"}]}}}
    inner = load_script({"responses": [[{"sleep": 0.5}, todo], {"delay": 3600, "steps": [{"text": "never"}]}]})
    with trio.fail_after(20):
        async with live_daemon(model=StreamInNursery(inner), state_dir=tmp_path / "state") as (_, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            r = await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "go"}]})
            pid = r.json()["promptId"]
            await wait_until(lambda: len(inner.calls) == 1)
            r = await client.post(f"/session/{sid}/mid-turn-message", json={"message": "keep me"})
            assert r.json()["accepted"] is True, r.text
            await wait_until(lambda: len(inner.calls) == 2)  # the second stream waits before it exists
            assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
            while (turn := (await client.get(f"/session/{sid}/turns/{pid}")).json())["state"] == "running":
                await trio.sleep(0.02)
            assert turn["state"] == "cancelled", turn
            entries = (await client.get(f"/session/{sid}/transcript")).json()["entries"]
            users = [e["message"]["content"] for e in entries
                     if e.get("type") == "message" and e["message"]["role"] == "user"]
            assert users == ["go", "[User message received during tool execution]: keep me"]
