"""Red team round 3 and a new user's report: what the approval mode, a session's rules and hook vouching let
through, each as the safe behaviour, on the real daemon (``python -m transport`` against the loopback fake
OpenAI server, :func:`tests.e2e.isolation_harness.hostile_daemon`).

- a session's own rules (an "always reject" becomes one) bind the child session its ``agent`` tool starts;
- ``auto-edit`` runs file edits unasked and asks before a command, as qwen-code's auto-edit does;
- a hook that writes a file its command names keeps running, and a Stop hook the daemon refuses to run ends
  the turn with a failure instead of re-prompting the model up to the block cap.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from tests.e2e.isolation_harness import Running, hostile_daemon
from tests.e2e.sse_client import collect
from tests.security.test_red_team_round2 import DONE, call, rejecting, shell, write


async def _session(d: Running, **body: Any) -> str:
    r = await d.client.post("/session", json=body)
    assert r.status_code == 200, r.text
    return r.json()["sessionId"]


async def _events(d: Running, sid: str) -> list[dict[str, Any]]:
    with trio.fail_after(10):
        return await collect(d.client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")


# ------------------------------------------------------------------ the agent tool and the session's rules


async def test_a_child_session_is_bound_by_its_parents_own_deny_rule(tmp_path):
    """The session's own ``deny Bash(rm:*)`` (what an "always reject" of ``rm`` makes): the parent's ``rm`` is
    refused, and so is the same ``rm`` in the child session its ``agent`` tool starts (yolo, so no question
    stands between the child and its command)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "precious.txt").write_text("keep me\n")

    def rm(n: int) -> list[dict[str, Any]]:
        # A stall, so the child's first request comes while the parent waits on its own: whichever session
        # is served it, the file goes only if a session without the rule runs it.
        return [{"stall": 0.5}, *shell("rm -f precious.txt; echo rm-ran", n)]

    responses = [shell("rm -f precious.txt; echo parent-rm-ran", 0), call("agent", 1, name="helper", brief="tidy"),
                 rm(2), rm(3), rm(4), DONE, DONE, DONE]
    async with hostile_daemon(tmp_path, responses) as d:
        with trio.fail_after(30):
            sid = await _session(d)
            r = await d.client.post(f"/session/{sid}/permissions", json={"effect": "deny", "rule": "Bash(rm:*)"})
            assert r.status_code == 200, r.text
            await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=25)
            while len(d.fake.requests) < 5:  # the child's turns, which end after the parent's
                await trio.sleep(0.05)
            with trio.move_on_after(2):  # a child's rm would come within its stall
                while (work / "precious.txt").exists():
                    await trio.sleep(0.05)
        results = {(m.get("tool_call_id"), m["content"]) for request in d.fake.requests
                   for m in request.body["messages"] if m.get("role") == "tool"}
    assert (work / "precious.txt").exists(), results
    assert not any("rm-ran" in content for _, content in results), results
    refused = {call_id for call_id, content in results if "deny rule Bash(rm:*) matches" in content}
    assert "call_0" in refused and refused & {"call_2", "call_3", "call_4"}, results  # the parent's; the child's


# ------------------------------------------------------------------ auto-edit


async def test_auto_edit_writes_files_unasked_and_asks_before_a_command(tmp_path):
    """qwen-code's auto-edit: edits are approved, shell commands still ask (here: rejected, so not run)."""
    work = tmp_path / "work"
    responses = [write("edited.txt", "x\n", 0), shell("touch ran-in-auto-edit", 1), DONE]
    async with hostile_daemon(tmp_path, responses, settings={"approvalMode": "auto-edit"}) as d:
        with trio.fail_after(30):
            sid = await _session(d)
            async with rejecting(d, sid) as asked:
                record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=25)
            explained = (await d.client.get(f"/session/{sid}/permissions/explain", params={
                "tool": "shell", "input": json.dumps({"command": "ls"})})).json()
            explained_edit = (await d.client.get(f"/session/{sid}/permissions/explain", params={
                "tool": "write_file", "input": json.dumps({"path": "a.txt", "content": ""})})).json()
    assert record["state"] == "completed", record
    assert (work / "edited.txt").exists()
    assert not (work / "ran-in-auto-edit").exists()
    assert asked == ["touch ran-in-auto-edit"], asked
    assert (explained["outcome"], explained["decidedBy"]) == ("ask", "mode"), explained
    assert (explained_edit["outcome"], explained_edit["decidedBy"]) == ("allow", "mode"), explained_edit


async def test_auto_edit_asks_before_starting_a_subagent(tmp_path):
    responses = [call("agent", 0, name="helper", brief="anything"), DONE]
    async with hostile_daemon(tmp_path, responses, settings={"approvalMode": "auto-edit"}) as d:
        with trio.fail_after(30):
            sid = await _session(d)
            async with rejecting(d, sid) as asked:
                await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=25)
    assert len(asked) == 1 and asked[0].startswith("agent helper: start"), asked
    assert any("no run was started" in r for r in d.tool_results()), d.tool_results()


# ------------------------------------------------------------------ hooks: vouching and Stop


def _stop_hook(command: str) -> dict[str, Any]:
    return {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": command, "timeout": 20}]}]}}


async def test_a_stop_hook_that_appends_to_a_file_it_names_runs_at_every_stop(tmp_path):
    """``echo stop >> <log>``: the log is written by the hook, not run by it, so its change does not stop
    the hook (which then, refused, made every turn loop to the block cap)."""
    log = tmp_path / "stops.log"
    async with hostile_daemon(tmp_path, [DONE, DONE, DONE, DONE],
                              settings=_stop_hook(f"echo stop >> {log}")) as d:
        with trio.fail_after(30):
            sid = await _session(d)
            for _ in range(2):
                record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=25)
                assert record["state"] == "completed", record
            events = await _events(d, sid)
    assert log.read_text() == "stop\nstop\n"
    assert len(d.fake.requests) == 2  # one model call a turn: nothing blocked
    assert not [e for e in events if e["type"] == "hook_result"], events


async def test_a_stop_hook_refused_for_a_changed_script_fails_open_without_re_prompting(tmp_path):
    """The Stop hook's script changes after the session vouched for it (the sandbox keeps the model's commands
    from writing it, so here it is written from outside): the hook is not run, and the turn ends with a
    ``hook_result`` failure saying so, not with up to 8 more model calls."""
    work = tmp_path / "work"
    work.mkdir()
    script = work / "check.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o755)
    marker = tmp_path / "hook-ran-the-changed-script"
    async with hostile_daemon(tmp_path, [DONE, DONE, DONE], settings=_stop_hook("./check.sh")) as d:
        with trio.fail_after(30):
            sid = await _session(d)  # vouches for check.sh as it is
            script.write_text(f"#!/bin/sh\ntouch {marker}\n")
            record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=25)
            events = await _events(d, sid)
    assert record["state"] == "completed", record
    assert not marker.exists()
    assert len(d.fake.requests) == 1, [r.body["messages"][-1] for r in d.fake.requests]
    failures = [f for e in events if e["type"] == "hook_result" for f in e["data"].get("failures", [])]
    assert any("not run" in f and "check.sh changed since the session vouched" in f for f in failures), events
    notices = json.dumps(events)
    assert "Stop hook blocked continuation" not in notices
