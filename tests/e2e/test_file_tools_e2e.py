"""The file, search and fetch tools over the real daemon: a scripted model calls each one, and the
SSE stream carries ACP tool calls with kind, locations and (for edits) a diff; writes follow the
approval mode (asked in default, refused in plan, run in yolo); web_fetch exists only when enabled."""

from __future__ import annotations

from typing import Any

import trio

from actors import Settings, load_script
from tests.actors.tools.test_fetch import Server
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect
from tests.e2e.test_permissions import next_permission_request, wait_turn


def call(name: str, **arguments: Any) -> dict:
    return {"tool_call": {"name": name, "arguments": arguments}}


async def open_session(client, cwd, mode: str | None = None) -> str:
    sid = (await client.post("/session", json={"cwd": str(cwd)})).json()["sessionId"]
    if mode is not None:
        assert (await client.post(f"/session/{sid}/approval-mode", json={"mode": mode})).json() == {"mode": mode}
    return sid


async def prompt(client, sid, text: str = "go") -> str:
    r = await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": text}]})
    return r.json()["promptId"]


async def events(client, sid) -> list[dict]:
    return await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")


def tool_calls(frames: list[dict]) -> dict[str, list[dict]]:
    """Each tool call's updates in order, by the tool's name (its first ``tool_call`` has the title)."""
    by_id: dict[str, list[dict]] = {}
    for frame in frames:
        update = frame["data"].get("update") if frame["type"] == "session_update" else None
        if update and update["sessionUpdate"] in ("tool_call", "tool_call_update"):
            by_id.setdefault(update["toolCallId"], []).append(update)
    return {updates[0]["title"]: updates for updates in by_id.values()}


def text_of(update: dict) -> str:
    return update["content"][0]["content"]["text"]


async def test_each_tool_runs_in_yolo_and_its_events_carry_kind_locations_and_diffs(tmp_path):
    app = tmp_path / "src" / "app.py"
    app.parent.mkdir()
    app.write_text("def main():\n    return 1\n")
    (tmp_path / ".gitignore").write_text("build/\n")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen.py").write_text("return 0\n")
    model = load_script({"responses": [
        [call("read_file", path="src/app.py")],
        [call("glob", pattern="**/*.py")],
        [call("grep", pattern=r"return \d")],
        [call("edit", path="src/app.py", old_string="return 1", new_string="return 2")],
        [call("write_file", path="docs/notes.md", content="# Notes\n")],
        [{"text": "done"}],
    ]})
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = await open_session(client, tmp_path, "yolo")
            assert (await wait_turn(client, sid, await prompt(client, sid)))["stopReason"] == "end_turn"
            frames = await events(client, sid)
    assert not [f for f in frames if f["type"] == "permission_request"]
    calls = tool_calls(frames)
    read, glob, grep, edit, write = (calls[n] for n in ("read_file", "glob", "grep", "edit", "write_file"))

    assert read[0]["kind"] == "read" and read[0]["locations"] == [{"path": str(app)}]
    assert read[-1]["status"] == "completed" and text_of(read[-1]) == "def main():\n    return 1\n"
    assert read[-1]["locations"] == [{"path": str(app), "line": 1}]

    assert glob[0]["kind"] == "search" and text_of(glob[-1]) == "src/app.py"  # build/ is gitignored
    assert grep[0]["kind"] == "search" and text_of(grep[-1]) == "src/app.py:2:    return 1"
    assert grep[-1]["locations"] == [{"path": str(app), "line": 2}]

    assert edit[0]["kind"] == "edit" and edit[0]["locations"] == [{"path": str(app)}]
    assert edit[-1]["status"] == "completed" and edit[-1]["locations"] == [{"path": str(app), "line": 2}]
    assert edit[-1]["content"][1] == {"type": "diff", "path": str(app), "oldText": "def main():\n    return 1\n",
                                      "newText": "def main():\n    return 2\n"}
    assert app.read_text() == "def main():\n    return 2\n"

    notes = tmp_path / "docs" / "notes.md"
    assert write[0]["kind"] == "edit"
    assert write[-1]["content"][1] == {"type": "diff", "path": str(notes), "oldText": None, "newText": "# Notes\n"}
    assert notes.read_text() == "# Notes\n"
    # The model read each result, and its system prompt named the tools.
    assert model.calls[1].messages[-1].content == "def main():\n    return 1\n"
    system = model.calls[0].messages[0].content
    assert "- read_file " in system and "- edit " in system and "web_fetch" not in system


async def test_a_write_asks_in_default_mode_showing_the_diff_and_runs_once_allowed(tmp_path):
    target = tmp_path / "out.txt"
    model = load_script({"responses": [[call("write_file", path="out.txt", content="approved\n")],
                                       [{"text": "written"}]]})
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = await open_session(client, tmp_path)
            pid = await prompt(client, sid)
            request = await next_permission_request(client, sid)
            tool_call = request["toolCall"]
            assert tool_call["kind"] == "edit" and tool_call["title"] == "write_file out.txt"
            assert tool_call["content"] == [{"type": "diff", "path": str(target), "oldText": None,
                                             "newText": "approved\n"}]
            assert tool_call["locations"] == [{"path": str(target), "line": 1}]
            await trio.sleep(0.2)
            assert not target.exists()  # nothing is written before the vote
            vote = {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
            assert (await client.post(f"/session/{sid}/permission/{request['requestId']}", json=vote)).status_code == 200
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
            write = tool_calls(await events(client, sid))["write_file"]
    assert target.read_text() == "approved\n"
    assert write[-1]["status"] == "completed" and write[-1]["content"][1]["type"] == "diff"


async def test_plan_mode_refuses_writes_and_edits_but_reads_and_searches_run(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    model = load_script({"responses": [
        [call("read_file", path="a.txt"), call("grep", pattern="alpha"),
         call("edit", path="a.txt", old_string="alpha", new_string="beta"),
         call("write_file", path="b.txt", content="new\n")],
        [{"text": "here is the plan"}],
    ]})
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = await open_session(client, tmp_path, "plan")
            assert (await wait_turn(client, sid, await prompt(client, sid)))["stopReason"] == "end_turn"
            frames = await events(client, sid)
    assert not [f for f in frames if f["type"] == "permission_request"]
    calls = tool_calls(frames)
    assert calls["read_file"][-1]["status"] == "completed" and calls["grep"][-1]["status"] == "completed"
    for name in ("edit", "write_file"):
        assert calls[name][-1]["status"] == "failed" and text_of(calls[name][-1]).startswith("Error: plan mode")
    assert (tmp_path / "a.txt").read_text() == "alpha\n" and not (tmp_path / "b.txt").exists()


async def test_web_fetch_is_not_offered_by_default(tmp_path):
    model = load_script({"responses": [[call("web_fetch", url="http://127.0.0.1:9/")], [{"text": "ok"}]]})
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = await open_session(client, tmp_path, "yolo")
            await wait_turn(client, sid, await prompt(client, sid))
            fetch = tool_calls(await events(client, sid))["web_fetch"]
    assert fetch[-1]["status"] == "failed" and text_of(fetch[-1]) == "unknown tool 'web_fetch'"
    assert "web_fetch" not in [spec.name for spec in model.calls[0].tools]


async def test_web_fetch_enabled_in_the_settings_fetches_with_kind_fetch(tmp_path, nursery):
    server = Server()
    base = await server.start(nursery)
    model = load_script({"responses": [[call("web_fetch", url=f"{base}/html")], [{"text": "read it"}]]})
    with trio.fail_after(30):
        # The server is on loopback, which web_fetch reaches only when the settings allow private addresses.
        settings = Settings(web_fetch=True, web_fetch_private_addresses=True)
        async with live_daemon(model=model, settings=settings) as (_, client):
            sid = await open_session(client, tmp_path)
            pid = await prompt(client, sid)
            request = await next_permission_request(client, sid)
            assert request["toolCall"]["kind"] == "fetch"
            vote = {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
            await client.post(f"/session/{sid}/permission/{request['requestId']}", json=vote)
            assert (await wait_turn(client, sid, pid))["stopReason"] == "end_turn"
            fetch = tool_calls(await events(client, sid))["web_fetch"]
    assert fetch[0]["kind"] == "fetch" and fetch[-1]["status"] == "completed"
    assert "# The Page" in text_of(fetch[-1]) and server.seen == ["/html"]
    assert "web_fetch" in [spec.name for spec in model.calls[0].tools]


async def test_a_hostile_model_cannot_reach_the_state_directory_under_its_cwd(tmp_path):
    """The default layout: the state directory ``./.trellis`` lies in the session's cwd."""
    state = tmp_path / ".trellis"
    model = load_script({"responses": [
        [call("glob", pattern=".trellis/**"), call("grep", pattern="marker-7f3a"),
         call("read_file", path=".trellis/sessions"), call("write_file", path=".trellis/token", content="mine")],
        [{"text": "done"}],
    ]})
    with trio.fail_after(30):
        async with live_daemon(model=model, state_dir=state) as (_, client):
            sid = await open_session(client, tmp_path, "yolo")
            await wait_turn(client, sid, await prompt(client, sid, "marker-7f3a"))
            calls = tool_calls(await events(client, sid))
    assert list(state.glob("sessions/*"))  # the journal and transcript are there to be found
    assert text_of(calls["glob"][-1]) == "No files match '.trellis/**' under .."
    assert text_of(calls["grep"][-1]) == "No matches for 'marker-7f3a' under .."
    for name in ("read_file", "write_file"):
        assert "the daemon's own state; file tools never touch it" in text_of(calls[name][-1])
    assert not (state / "token").exists()
