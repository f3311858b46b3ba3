"""What qwen's Web Shell (0.24.4) reads of a tool call and of a cancel, on the real HTTP daemon (loopback, port 0).

From the shell's bundle:

- a tool card is labelled by the call's tool name: the update's ``toolName`` or ``name``, else its
  ``_meta.toolName`` or ``_meta.name`` (qwen serve stamps ``_meta.toolName`` on every ``tool_call`` and
  ``tool_call_update`` it sends); without one the card reads ``unknown``. A later update without it keeps the
  name the card has.
- a ``turn_complete`` with ``stopReason: "cancelled"`` shows "You cancelled this request after N seconds" from its
  ``promptCancelled {cancelledAt, elapsedMs}`` (numbers, ``elapsedMs`` not negative; qwen serve's shape); without
  it, nothing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jsonschema
import trio
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from actors import load_script
from actors.wire import event_data
from actors.wire.schema import REF_PREFIX, schemas_of
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect, frames
from tests.transport.test_webshell_routes import wait_turn

DEFS = schemas_of(*event_data.EVENT_DATA.values())
REGISTRY = Registry().with_resource("urn:wire", DRAFT202012.create_resource({"components": {"schemas": DEFS}}))


def conforms(kind: str, data: dict[str, Any]) -> None:
    """``data`` is what the event's class in actors/wire/event_data.py (the OpenAPI document's schema) says."""
    schema = {"$ref": "urn:wire#" + REF_PREFIX[1:] + event_data.EVENT_DATA[kind].__name__}
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(data)


def prompt(text: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": text}], "eventDetailMode": "summary",
            "_meta": {"qwen.submittedPrompt": text}}


def shell_create(cwd: Path, mode: str = "default") -> dict[str, Any]:
    return {"cwd": str(cwd), "sessionScope": "thread", "approvalMode": mode, "sourceType": "default"}


def shells_tool_name(update: dict[str, Any]) -> str | None:
    """The tool name the shell reads from a ``tool_call``/``tool_call_update`` (its bundle's order)."""
    meta = update.get("_meta") if isinstance(update.get("_meta"), dict) else {}
    for value in (update.get("toolName"), update.get("name"), meta.get("toolName"), meta.get("name")):
        if isinstance(value, str) and value:
            return value
    return None


def tool_updates(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f["data"]["update"] for f in got if f["type"] == "session_update"
            and f["data"]["update"]["sessionUpdate"] in ("tool_call", "tool_call_update")]


def shells_cancel_line(data: dict[str, Any], envelope_prompt: str) -> dict[str, Any] | None:
    """What the shell makes of a cancelled ``turn_complete``: its prompt.cancelled block, or ``None``."""
    if data.get("stopReason") != "cancelled":
        return None
    cancelled = data.get("promptCancelled")
    if not isinstance(cancelled, dict):
        return None
    elapsed, at = cancelled.get("elapsedMs"), cancelled.get("cancelledAt")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (elapsed, at))
    if not numbers or elapsed < 0:
        return None
    return {"promptId": cancelled.get("promptId") or envelope_prompt, "elapsedMs": elapsed, "serverTimestamp": at}


# ----------------------------------------------------------------- the tool's name on its cards


async def test_every_tool_call_and_its_updates_name_the_tool_in_meta_tool_name(tmp_path):
    (tmp_path / "notes.txt").write_text("one line\n")
    model = load_script([[{"tool_call": {"id": "c_read", "name": "read_file", "arguments": {"path": "notes.txt"}}},
                          {"tool_call": {"id": "c_nope", "name": "no_such_tool", "arguments": {}}}],
                         [{"text": "read it"}]])
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            r = await client.post(f"/session/{sid}/prompt", json=prompt("read the notes"))
            assert r.status_code == 202, r.text
            got = await collect(client, sid, headers={"Last-Event-ID": "0"})
    updates = tool_updates(got)
    by_call = {(u["toolCallId"], u["sessionUpdate"], u["status"]): u for u in updates}
    assert set(by_call) == {("c_read", "tool_call", "in_progress"), ("c_read", "tool_call_update", "completed"),
                            ("c_nope", "tool_call", "failed")}, sorted(by_call)
    assert by_call["c_read", "tool_call", "in_progress"]["_meta"] == {"toolName": "read_file"}
    assert by_call["c_read", "tool_call_update", "completed"]["_meta"] == {"toolName": "read_file"}
    assert by_call["c_nope", "tool_call", "failed"]["_meta"] == {"toolName": "no_such_tool"}  # refused at once
    for update in updates:
        assert shells_tool_name(update) == {"c_read": "read_file", "c_nope": "no_such_tool"}[update["toolCallId"]]
    for frame in got:
        if frame["type"] == "session_update":
            conforms("session_update", frame["data"])  # ToolCallMeta: the documented wire form


async def test_a_refusing_rule_keeps_its_rule_beside_the_tool_name(tmp_path):
    model = load_script([[{"tool_call": {"id": "c_sh", "name": "shell", "arguments": {"command": "rm -rf x"}}}],
                         [{"text": "refused"}]])
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            r = await client.post(f"/session/{sid}/permissions", json={"effect": "deny", "rule": "Bash(rm:*)"})
            assert r.status_code in (200, 201), r.text
            r = await client.post(f"/session/{sid}/prompt", json=prompt("clean up"))
            got = await collect(client, sid, headers={"Last-Event-ID": "0"})
    [update] = tool_updates(got)
    assert update["status"] == "failed"
    assert update["_meta"]["toolName"] == "shell" and set(update["_meta"]) == {"toolName", "rule"}
    assert "rm" in update["_meta"]["rule"]  # the deny rule that refused it, as before
    conforms("session_update", {"sessionId": sid, "update": update})


async def test_a_call_the_cancel_ends_while_it_waits_for_a_vote_keeps_its_name_and_the_turn_says_when(tmp_path):
    """The call's last update (``failed``, "cancelled") names the tool; the ``turn_complete`` carries
    ``promptCancelled`` with the wall-clock moment of the cancel and how long the turn had run by then."""
    model = load_script([[{"tool_call": {"id": "c_sh", "name": "shell", "arguments": {"command": "echo hi"}}}],
                         [{"text": "never"}]])
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            async with client.stream("GET", f"/session/{sid}/events", params={"maxQueued": "1024"}) as stream:
                seen: list[dict[str, Any]] = []
                read = frames(stream).__aiter__()
                sent = int(time.time() * 1000)
                r = await client.post(f"/session/{sid}/prompt", json=prompt("say hi"))
                pid = r.json()["promptId"]
                async for frame in read:
                    seen.append(frame)
                    if frame["type"] == "permission_request":
                        break
                await trio.sleep(0.3)  # the turn has run a while when the cancel comes
                before = int(time.time() * 1000)
                assert (await client.post(f"/session/{sid}/cancel")).status_code in (200, 202, 204)
                after = int(time.time() * 1000)
                async for frame in read:
                    seen.append(frame)
                    if frame["type"] == "turn_complete":
                        break
            assert (await wait_turn(client, sid, pid))["state"] == "cancelled"
    last = tool_updates(seen)[-1]
    assert (last["sessionUpdate"], last["status"], last["_meta"]) == ("tool_call_update", "failed",
                                                                      {"toolName": "shell"})
    done = seen[-1]
    assert done["data"]["stopReason"] == "cancelled"
    cancelled = done["data"]["promptCancelled"]
    assert set(cancelled) == {"cancelledAt", "elapsedMs"}
    assert before <= cancelled["cancelledAt"] <= after
    assert 300 <= cancelled["elapsedMs"] <= after - sent  # from the turn's start to the cancel
    assert shells_cancel_line(done["data"], done["promptId"]) == {
        "promptId": pid, "elapsedMs": cancelled["elapsedMs"], "serverTimestamp": cancelled["cancelledAt"]}
    conforms("turn_complete", done["data"])


async def test_a_streaming_turn_cancelled_says_when_and_a_completed_or_taken_back_one_does_not(tmp_path):
    model = load_script([[{"text": "working on it"}, {"sleep": 60}, {"text": "never shown"}],
                         [{"text": "done"}]])
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            first = (await client.post(f"/session/{sid}/prompt", json=prompt("work slowly"))).json()["promptId"]
            queued = (await client.post(f"/session/{sid}/prompt", json=prompt("then this"))).json()["promptId"]
            while (await client.get(f"/session/{sid}/status")).json()["state"] == "idle":
                await trio.sleep(0.01)
            # The queued prompt taken back never started: its turn_complete says nothing of a cancel's timing.
            r = await client.delete(f"/session/{sid}/pending-prompts/{queued}")
            assert r.status_code in (200, 204), r.text
            await trio.sleep(0.2)
            assert (await client.post(f"/session/{sid}/cancel")).status_code in (200, 202, 204)
            assert (await wait_turn(client, sid, first))["state"] == "cancelled"
            again = (await client.post(f"/session/{sid}/prompt", json=prompt("once more"))).json()["promptId"]
            assert (await wait_turn(client, sid, again))["state"] == "completed"
            got = await _all_frames(client, sid)
    ends = {f["promptId"]: f["data"] for f in got if f["type"] == "turn_complete"}
    assert ends[first]["stopReason"] == "cancelled" and ends[first]["promptCancelled"]["elapsedMs"] >= 150
    assert ends[queued]["stopReason"] == "cancelled" and "promptCancelled" not in ends[queued]
    assert ends[again]["stopReason"] == "end_turn" and "promptCancelled" not in ends[again]
    for data in ends.values():
        conforms("turn_complete", data)


async def _all_frames(client: Any, sid: str) -> list[dict[str, Any]]:
    """Every frame of the session's ring, read from the start up to ``replay_complete``."""
    return await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
