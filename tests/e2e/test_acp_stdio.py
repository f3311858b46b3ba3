"""The official ACP Python SDK (asyncio) drives ``python -m transport.acp`` over stdio.

The SDK is asyncio-only, so these tests are plain functions running ``asyncio.run``;
the agent is a real subprocess with the scripted model.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

acp = pytest.importorskip("acp")
from acp import schema, spawn_agent_process, text_block  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": arguments}}


class RecordingClient:
    """An ACP client that grants permissions with a chosen option and records what it receives."""

    def __init__(self, grant: str = "allow_once") -> None:
        self.grant = grant
        self.updates: list[Any] = []
        self.permission_requests: list[dict[str, Any]] = []
        self.seen = asyncio.Event()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **kwargs: Any) -> schema.RequestPermissionResponse:
        self.permission_requests.append({"sessionId": session_id, "toolCall": tool_call, "options": options})
        chosen = next(o for o in options if o.kind == self.grant)
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)
        self.seen.set()

    async def wait_for(self, predicate: Any) -> Any:
        while True:
            found = next((u for u in self.updates if predicate(u)), None)
            if found is not None:
                return found
            self.seen.clear()
            await asyncio.wait_for(self.seen.wait(), TIMEOUT)


def agent_command(state_dir: Path, script: Path) -> tuple[str, ...]:
    return (sys.executable, "-m", "transport", "acp", "--script", str(script), "--state-dir", str(state_dir))


def spawn(client: Any, state_dir: Path, script: Path, observers: list[Any] | None = None) -> Any:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return spawn_agent_process(client, *agent_command(state_dir, script), env=env, cwd=str(ROOT),
                               observers=observers or [])


def write_script(path: Path, *responses: Any) -> Path:
    path.write_text(json.dumps({"responses": list(responses)}))
    return path


def kinds(updates: list[Any]) -> list[str]:
    return [u.session_update for u in updates]


def test_a_prompt_with_a_permission_a_plan_and_a_cancel(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    todos = [{"id": "t1", "content": "write the file", "status": "in_progress"},
             {"id": "t2", "content": "check it", "status": "pending"}]
    script = write_script(
        tmp_path / "script.json",
        [{"text": "Planning. "}, call("todo_write", todos=todos), call("shell", command="echo granted > out.txt")],
        [{"text": "All done."}],
        {"steps": [{"text": "Working on it"}, {"sleep": 60}, {"text": "never"}]},
    )

    async def scenario() -> None:
        client = RecordingClient()
        async with spawn(client, tmp_path / "state", script) as (conn, process):
            init = await conn.initialize(protocol_version=acp.PROTOCOL_VERSION)
            assert init.protocol_version == 1
            assert init.agent_capabilities.load_session is True
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            assert session.modes.current_mode_id == "default"
            assert {m.id for m in session.modes.available_modes} == {"default", "auto-edit", "yolo", "plan"}

            done = await asyncio.wait_for(
                conn.prompt(session_id=session.session_id, prompt=[text_block("write the file")]), TIMEOUT)
            assert done.stop_reason == "end_turn"
            assert (work / "out.txt").read_text() == "granted\n"

            # The permission round trip: the shell call asked, with all four option kinds.
            [asked] = client.permission_requests
            assert asked["toolCall"].title == "echo granted > out.txt"
            assert {o.kind for o in asked["options"]} == {"allow_once", "allow_always", "reject_once", "reject_always"}
            # Plan updates from todo_write, tool call updates, the model's text; in order.
            plan = next(u for u in client.updates if u.session_update == "plan")
            assert [(e.content, e.status) for e in plan.entries] == [("write the file", "in_progress"),
                                                                       ("check it", "pending")]
            seen = kinds(client.updates)
            # The slash commands are announced at session/new, before the prompt's updates; the title the
            # prompt gave the session at its admission comes before its turn's updates.
            assert seen[:3] == ["available_commands_update", "session_info_update", "user_message_chunk"]
            assert seen.index("plan") < seen.index("tool_call") < seen.index("tool_call_update")
            completed = next(u for u in client.updates if u.session_update == "tool_call_update")
            assert completed.status == "completed"
            texts = [u.content.text for u in client.updates if u.session_update == "agent_message_chunk"]
            assert texts == ["Planning. ", "All done."]

            # A cancelled prompt answers `cancelled`, never an error.
            running = asyncio.ensure_future(
                conn.prompt(session_id=session.session_id, prompt=[text_block("take your time")]))
            await client.wait_for(lambda u: u.session_update == "agent_message_chunk"
                                  and u.content.text == "Working on it")
            await conn.cancel(session_id=session.session_id)
            cancelled = await asyncio.wait_for(running, TIMEOUT)
            assert cancelled.stop_reason == "cancelled"

            # The mode round trip: set_mode is answered and echoed as a current_mode_update.
            await conn.set_session_mode(session_id=session.session_id, mode_id="yolo")
            mode = await client.wait_for(lambda u: u.session_update == "current_mode_update")
            assert mode.current_mode_id == "yolo"

    asyncio.run(scenario())


def test_session_load_in_a_second_process_replays_history_before_answering(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    script = write_script(tmp_path / "script.json", [{"text": "The answer is 42."}])

    async def first() -> str:
        client = RecordingClient()
        async with spawn(client, state, script) as (conn, _):
            await conn.initialize(protocol_version=1)
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            done = await asyncio.wait_for(
                conn.prompt(session_id=session.session_id, prompt=[text_block("What is the answer?")]), TIMEOUT)
            assert done.stop_reason == "end_turn"
            return session.session_id

    async def second(session_id: str) -> None:
        wire: list[dict[str, Any]] = []

        def observe(event: Any) -> None:
            if event.direction.value == "incoming":
                wire.append(event.message)

        client = RecordingClient()
        async with spawn(client, state, script, observers=[observe]) as (conn, _):
            await conn.initialize(protocol_version=1)
            loaded = await asyncio.wait_for(
                conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[]), TIMEOUT)
            assert loaded.modes.current_mode_id == "default"
        # On the wire, in order: the replayed history, then the answer to session/load.
        answer = next(i for i, m in enumerate(wire) if "result" in m and "modes" in (m["result"] or {}))
        # The history is the restored session's compacted replay: the earlier turn as it was sent.
        history = [m["params"]["update"] for m in wire[:answer] if m.get("method") == "session/update"]
        texts = [(u["sessionUpdate"], u["content"]["text"]) for u in history
                 if u["sessionUpdate"] not in ("available_commands_update", "session_info_update")
                 and u["content"]["text"]]
        assert texts == [("user_message_chunk", "What is the answer?"), ("agent_message_chunk", "The answer is 42.")]

    session_id = asyncio.run(first())
    asyncio.run(second(session_id))


def test_load_of_an_unknown_session_is_invalid_params(tmp_path: Path) -> None:
    script = write_script(tmp_path / "script.json")

    async def scenario() -> None:
        async with spawn(RecordingClient(), tmp_path / "state", script) as (conn, _):
            await conn.initialize(protocol_version=1)
            with pytest.raises(acp.RequestError) as caught:
                await conn.load_session(cwd=str(tmp_path), session_id="nope", mcp_servers=[])
            assert caught.value.code == -32602
            # The agent goes on serving.
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            assert session.session_id

    asyncio.run(scenario())


class SilentClient(RecordingClient):
    """An editor whose permission dialog is never answered."""

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any],
                                 **kwargs: Any) -> schema.RequestPermissionResponse:
        self.permission_requests.append({"sessionId": session_id, "toolCall": tool_call, "options": options})
        self.seen.set()
        await asyncio.sleep(3600)
        raise AssertionError("never answered")


def test_a_call_cancelled_while_it_waits_for_permission_ends_failed_before_the_answer_and_in_a_load(
        tmp_path: Path) -> None:
    """ACP: pending updates go out before ``cancelled``. The call's last word is ``failed`` (ACP has no
    cancelled status), live and in the history a second process loads; before, it stayed ``in_progress``."""
    work = tmp_path / "work"
    work.mkdir()
    state = tmp_path / "state"
    script = write_script(tmp_path / "script.json", [call("shell", command="echo hi")], [{"text": "next turn"}])

    def last_status(updates: list[Any], call_id: str) -> str | None:
        statuses = [u.status for u in updates if u.session_update in ("tool_call", "tool_call_update")
                    and u.tool_call_id == call_id and u.status is not None]
        return statuses[-1] if statuses else None

    async def first() -> tuple[str, str]:
        client = SilentClient()
        async with spawn(client, state, script) as (conn, _):
            await conn.initialize(protocol_version=1)
            session = await conn.new_session(cwd=str(work), mcp_servers=[])
            running = asyncio.ensure_future(conn.prompt(session_id=session.session_id, prompt=[text_block("go")]))
            started = await client.wait_for(lambda u: u.session_update == "tool_call")
            while not client.permission_requests:
                client.seen.clear()
                await asyncio.wait_for(client.seen.wait(), TIMEOUT)
            await conn.cancel(session_id=session.session_id)
            answered = await asyncio.wait_for(running, TIMEOUT)
            assert answered.stop_reason == "cancelled"
            # Already sent when the answer came: no waiting for it.
            assert last_status(client.updates, started.tool_call_id) == "failed"
            ended = [u for u in client.updates if u.session_update == "tool_call_update"
                     and u.tool_call_id == started.tool_call_id]
            assert ended[-1].content[0].content.text == "cancelled"
            return session.session_id, started.tool_call_id

    async def second(session_id: str, call_id: str) -> None:
        client = RecordingClient()
        async with spawn(client, state, script) as (conn, _):
            await conn.initialize(protocol_version=1)
            await asyncio.wait_for(conn.load_session(cwd=str(work), session_id=session_id, mcp_servers=[]), TIMEOUT)
        assert last_status(client.updates, call_id) == "failed"

    asyncio.run(second(*asyncio.run(first())))
