"""What qwen serve (0.24.4) publishes about mid-turn input and background results, on the real HTTP daemon on a
loopback port with a scripted model, so that qwen's Web Shell shows them as it does against qwen serve:

- a background item's result, when its automatic turn starts, is an ``agent_message_chunk`` with
  ``_meta.source: "background_notification"`` (and the item in ``_meta.backgroundTask``): the shell shows a
  notice, not a user bubble with the model's raw ``<task-notification>`` text (which the model still reads);
- waiting mid-turn input is a pending prompt under its message id: ``pending_prompt_added`` when posted and
  ``pending_prompt_completed`` (``removed``) when taken back, to every client (``originatorClientId``: the
  sender), so another tab's queue follows;
- input no tool boundary took runs as a prompt of its own under its message id;
- ``mid_turn_message_injected`` carries the ``promptId`` of the turn that took the input.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import trio

from actors import load_script
from tests.conftest import live_daemon
from tests.e2e.sse_client import frames
from transport.acp import mapping


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": arguments}}


def create(cwd: Path) -> dict[str, Any]:
    return {"cwd": str(cwd), "sessionScope": "thread", "approvalMode": "yolo", "sourceType": "default"}


def prompt(text: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": text}], "eventDetailMode": "summary"}


def update_of(frame: dict[str, Any]) -> dict[str, Any]:
    return frame["data"].get("update") or {} if frame["type"] == "session_update" else {}


class Stream:
    """One client's event stream of a session, read up to what a test waits for."""

    def __init__(self, it: AsyncIterator[dict[str, Any]]) -> None:
        self._it = it
        self.seen: list[dict[str, Any]] = []

    async def until(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        with trio.fail_after(20):
            async for frame in self._it:
                self.seen.append(frame)
                if wanted(frame):
                    return frame
        raise AssertionError("the stream ended first")


async def test_a_background_result_is_shown_as_a_notice_and_the_model_still_reads_the_notification(tmp_path):
    model = load_script([
        [call("shell", command="echo background-done", run_in_background=True)],
        [{"text": "started it"}],
        [{"text": "noted the result"}],
    ])
    with trio.fail_after(60):
        async with live_daemon(model=model) as (_, client):
            sid = (await client.post("/session", json=create(tmp_path))).json()["sessionId"]
            assert (await client.post(f"/session/{sid}/prompt", json=prompt("run it in the background"))).status_code \
                == 202
            async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
                stream = Stream(frames(r))
                end = await stream.until(lambda f: f["type"] == "turn_complete"
                                         and str(f.get("promptId")).startswith("auto-"))
            automatic = [f for f in stream.seen if f.get("promptId") == end["promptId"]]
            # No user bubble for it: the shell would show the raw <task-notification> text as the user's
            assert not [f for f in automatic if update_of(f).get("sessionUpdate") == "user_message_chunk"]
            assert "task-notification" not in repr(stream.seen)
            [shown] = [f for f in automatic if (update_of(f).get("_meta") or {}).get("source")
                       == "background_notification"]
            update = update_of(shown)
            assert update["sessionUpdate"] == "agent_message_chunk"
            assert update["_meta"] == {"source": "background_notification", "qwenDiscreteMessage": True,
                                       "backgroundTask": {"taskId": "shell-1", "kind": "shell", "status": "completed",
                                                          "commandLabel": "echo background-done"}}
            assert update["content"]["text"].startswith("Background shell shell-1 (`echo background-done`) finished")
            assert automatic.index(shown) == 0  # the automatic turn's first event, before the model's answer
            # ACP clients get the same update, set apart from the model's text as every discrete message is
            acp = mapping.session_update(shown["data"])["update"]
            assert acp["_meta"] == update["_meta"] and acp["content"]["text"].startswith("\n\nBackground shell")
            # The model reads the notification as before
            last = model.calls[2].messages[-1]
            assert last.role == "user" and last.content.startswith('<task-notification task_id="shell-1" kind="shell">')


async def test_waiting_mid_turn_input_is_a_pending_prompt_to_every_client_until_a_turn_takes_it(tmp_path):
    gate = tmp_path / "go"
    model = load_script([
        [call("shell", command=f"while [ ! -e {gate} ]; do sleep 0.02; done; echo through")],
        [{"text": "took the message"}],
    ])
    with trio.fail_after(60):
        async with live_daemon(model=model) as (_, client):
            created = (await client.post("/session", json=create(tmp_path))).json()
            sid, mine = created["sessionId"], created["clientId"]
            r = await client.post(f"/session/{sid}/prompt", json=prompt("work"))
            prompt_id = r.json()["promptId"]
            async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
                other = Stream(frames(r))  # another tab: it sent none of it
                await other.until(lambda f: update_of(f).get("sessionUpdate") == "tool_call")
                for message_id, text in (("webui_1", "also this"), ("webui_2", "never mind")):
                    posted = await client.post(f"/session/{sid}/mid-turn-message", headers={"X-Qwen-Client-Id": mine},
                                               json={"message": text, "messageId": message_id})
                    assert posted.json() == {"accepted": True, "messageId": message_id}
                    added = await other.until(lambda f: f["type"] == "pending_prompt_added")
                    assert added["promptId"] == message_id and added["originatorClientId"] == mine
                    assert added["data"] == {"sessionId": sid, "promptId": message_id, "text": text,
                                             "queuedAt": added["data"]["queuedAt"]}
                # A retry of the same post adds no second copy, and no second event
                again = await client.post(f"/session/{sid}/mid-turn-message", headers={"X-Qwen-Client-Id": mine},
                                          json={"message": "also this", "messageId": "webui_1"})
                assert again.json() == {"accepted": True, "messageId": "webui_1"}
                assert (await client.delete(f"/session/{sid}/mid-turn-messages/webui_2")).json() == {"removed": True}
                removed = await other.until(lambda f: f["type"] == "pending_prompt_completed")
                assert removed["promptId"] == "webui_2" and removed["originatorClientId"] == mine
                assert removed["data"] == {"sessionId": sid, "promptId": "webui_2", "state": "removed"}

                gate.touch()  # the tool ends: its boundary takes the waiting input into the running turn
                injected = await other.until(lambda f: f["type"] == "mid_turn_message_injected")
                assert injected["promptId"] == prompt_id  # qwen serve's: the turn that took it
                assert injected["data"]["messageIds"] == ["webui_1"]
                await other.until(lambda f: f["type"] == "turn_complete")
            pending = [(f["type"], f["promptId"]) for f in other.seen if f["type"].startswith("pending_prompt")]
            assert pending == [("pending_prompt_added", "webui_1"), ("pending_prompt_added", "webui_2"),
                               ("pending_prompt_completed", "webui_2")]
            assert "[User message received during tool execution]: also this" in model.calls[1].messages[-1].content


async def test_input_no_tool_boundary_took_runs_under_its_message_id(tmp_path):
    model = load_script([[{"text": "working"}, {"sleep": 3600}], [{"text": "one"}], [{"text": "two"}]])
    with trio.fail_after(60):
        async with live_daemon(model=model) as (_, client):
            created = (await client.post("/session", json=create(tmp_path))).json()
            sid, mine = created["sessionId"], created["clientId"]
            await client.post(f"/session/{sid}/prompt", json=prompt("work"))
            async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
                stream = Stream(frames(r))
                await stream.until(lambda f: update_of(f).get("content", {}).get("text") == "working")
                for message_id, text in (("webui_1", "first"), ("webui_2", "second")):
                    posted = await client.post(f"/session/{sid}/mid-turn-message", headers={"X-Qwen-Client-Id": mine},
                                               json={"message": text, "messageId": message_id})
                    assert posted.json()["accepted"] is True
                assert (await client.post(f"/session/{sid}/cancel")).status_code == 204
                # Each runs as a prompt of its own under its message id, in the order sent (qwen serve's promotion)
                await stream.until(lambda f: f["type"] == "turn_complete" and f["promptId"] == "webui_2")
            ran = [(f["promptId"], update_of(f)["content"]["text"]) for f in stream.seen
                   if update_of(f).get("sessionUpdate") == "user_message_chunk"]
            assert ran[1:] == [("webui_1", "first"), ("webui_2", "second")]
            started = [f for f in stream.seen if f["type"] == "pending_prompt_started"]
            assert [(f["promptId"], f.get("originatorClientId")) for f in started] == [("webui_1", mine),
                                                                                        ("webui_2", mine)]
            listed = (await client.get(f"/session/{sid}/mid-turn-messages")).json()
            assert listed["promotedMessageIds"] == ["webui_1", "webui_2"]
            assert (await client.get(f"/session/{sid}/turns/webui_1")).json()["state"] == "completed"
            # The sender's retry of a post that became a prompt is the same message, not a third prompt
            again = await client.post(f"/session/{sid}/mid-turn-message", headers={"X-Qwen-Client-Id": mine},
                                      json={"message": "first", "messageId": "webui_1"})
            assert again.json() == {"accepted": True, "messageId": "webui_1"}
            assert (await client.get(f"/session/{sid}/pending-prompts")).json()["pendingPrompts"] == []
