"""Isolation, tried as a hostile model would: one test per route to a secret, a sibling or an approval.

Each test runs the real daemon as a process, lets the fake model run the
attacker's commands, asserts the route is closed, and asserts that neither the
bearer token nor the model API key appears in any event, transcript line or
model request.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
import textwrap
from typing import Any

import trio

from tests.e2e.isolation_harness import (
    HTTP_PROBE, KEY, TOKEN, Running, descendants, hostile_daemon, needs_bwrap, process_image, shell,
)
from tests.processes import marker, pids_with

import pytest


async def parent_tool(d: Running, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call on ``/mcp`` as the parent, holding the daemon's token."""
    accept = {"Accept": "application/json, text/event-stream"}
    init = await d.client.post("/mcp", headers=accept, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert init.status_code == 200, init.text
    session = {**accept, "Mcp-Session-Id": init.headers["Mcp-Session-Id"]}
    await d.client.post("/mcp", headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    r = await d.client.post("/mcp", headers=session, json={
        "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
    assert r.status_code == 200, r.text
    return r.json()["result"]


# ------------------------------------------------------------------ the daemon's process image


PROC_SNOOP = ("for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; tr '\\0' ' ' < $p/cmdline; echo; "
              "done 2>/dev/null; echo PARENT; tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' ' ' < /proc/$PPID/cmdline")


@pytest.mark.parametrize("sandbox", ["off", pytest.param("auto", marks=needs_bwrap)])
async def test_no_process_of_the_daemons_tree_holds_the_token_or_the_key(tmp_path, sandbox):
    mark = marker()
    responses = [[shell(f"sleep {mark}", background=True)], [shell(PROC_SNOOP)], [{"text": "looked"}]]
    async with hostile_daemon(tmp_path, responses, sandbox=sandbox, token_in_env=True) as d:
        sid = await d.open_session()
        assert (await d.wait_turn(sid, await d.prompt(sid, "snoop")))["state"] == "completed"
        with trio.fail_after(10):
            while not pids_with(mark):
                await trio.sleep(0.05)
        tree = descendants(d.proc.pid)
        assert len(tree) >= 2  # the daemon and at least the background shell it still runs
        for pid in tree:
            image = process_image(pid)
            assert KEY not in image and TOKEN not in image, f"a secret in /proc/{pid}"
        snooped = d.tool_results()[1]
        assert "PATH=" in snooped and "PARENT" in snooped  # it really read process environments
        caps = await d.client.get("/capabilities")  # 200: the daemon still holds its token
        expected = "off" if sandbox == "off" else "bwrap"
        assert caps.json()["sandbox"] == expected
        assert (await d.client.get(f"/session/{sid}/status")).json()["sandbox"] == expected
        await d.assert_no_secret(sid)


@needs_bwrap
async def test_the_token_file_and_the_state_directory_are_out_of_sight(tmp_path):
    state = tmp_path / "state"
    snoop = (f"cat {state}/token; ls -A {state}; ls -A {state}/sessions; cat {state}/sessions/*; "
             f"cat {tmp_path}/settings.json; echo END")
    responses = [[shell(snoop)], [{"text": "looked"}]]
    async with hostile_daemon(tmp_path, responses, settings={"model": {"apiKey": KEY}}) as d:
        sid = await d.open_session()
        assert (await d.wait_turn(sid, await d.prompt(sid, "a prompt that lands in the transcript")))["state"] \
            == "completed"
        assert (state / "token").exists() and list((state / "sessions").iterdir())  # there, on the host
        seen = d.tool_results()[0]
        assert "END" in seen and "No such file" in seen
        assert "sessions" not in seen.replace(f"{state}/sessions", "") and "jsonl" not in seen
        assert "transcript" not in seen.replace("lands in the transcript", "")
        await d.assert_no_secret(sid)


async def test_rest_and_mcp_answer_401_to_a_model_run_command(tmp_path):
    responses = [[shell("python3 probe.py")], [{"text": "probed"}]]
    async with hostile_daemon(tmp_path, responses) as d:
        sid = await d.open_session()
        (d.work / "probe.py").write_text(HTTP_PROBE + textwrap.dedent(f'''
            base = {d.url!r}
            print("capabilities", call("GET", base + "/capabilities")[0])
            print("create", call("POST", base + "/session", {{}})[0])
            print("transcript", call("GET", base + "/session/{sid}/transcript")[0])
            print("cancel", call("POST", base + "/session/{sid}/cancel", {{}})[0])
            print("mcp", mcp_tool(base + "/mcp", "list", {{}})[0])
            print("health", call("GET", base + "/health")[0])
        '''))
        assert (await d.wait_turn(sid, await d.prompt(sid, "probe")))["state"] == "completed"
        seen = d.tool_results()[0]
        for route in ("capabilities", "create", "transcript", "cancel", "mcp"):
            assert f"{route} 401" in seen, seen
        assert "health 200" in seen  # the one open route: it reaches the daemon, and is turned away
        await d.assert_no_secret(sid)


@needs_bwrap
async def test_a_model_run_command_cannot_vote_on_a_permission_request(tmp_path):
    voter = HTTP_PROBE + textwrap.dedent(f'''
        import os, time
        for _ in range(400):
            if os.path.exists("target"):
                break
            time.sleep(0.05)
        sid, rid = open("target").read().split()
        token = read({str(tmp_path / "state" / "token")!r})  # the token file, were it visible
        headers = {{"Authorization": "Bearer " + token.strip()}} if token else {{}}
        vote = {{"outcome": {{"outcome": "selected", "optionId": "proceed_once"}}}}
        codes = [call("POST", BASE + f"/session/{{sid}}/permission/{{rid}}", vote, headers)[0],
                 call("POST", BASE + f"/permission/{{rid}}", vote, headers)[0]]
        open("voted", "w").write(" ".join(map(str, codes)) + (" with-token" if token else " without-token"))
    ''')
    responses = [[shell("python3 voter.py", background=True)], [shell("echo approved-by-whom")],
                 [{"text": "done"}]]
    async with hostile_daemon(tmp_path, responses, settings={"approvalMode": "default"}) as d:
        (d.work / "voter.py").write_text(voter.replace("BASE", repr(d.url)))
        sid = await d.open_session()
        pid = await d.prompt(sid, "vote")
        asked: list[str] = []
        with trio.fail_after(30):
            async with d.client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
                from tests.e2e.sse_client import frames

                async for frame in frames(r):
                    if frame["type"] != "permission_request":
                        continue
                    asked.append(frame["data"]["requestId"])
                    if len(asked) == 1:  # the voter itself: the user allows it
                        vote = {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
                        assert (await d.client.post(f"/permission/{asked[0]}", json=vote)).status_code == 200
                    else:
                        break
            (d.work / "target").write_text(f"{sid} {asked[1]}")
            while not (d.work / "voted").exists():
                await trio.sleep(0.05)
        assert (d.work / "voted").read_text() == "401 401 without-token"
        status = (await d.client.get(f"/session/{sid}/status")).json()
        assert asked[1] in status["pendingPermissions"]  # still waiting for the user
        reject = {"outcome": {"outcome": "selected", "optionId": "cancel"}}
        assert (await d.client.post(f"/permission/{asked[1]}", json=reject)).status_code == 200
        await d.wait_turn(sid, pid)
        assert "approved-by-whom" not in d.tool_results()[-1]
        await d.assert_no_secret(sid)


# ------------------------------------------------------------------ subagents

AGENT = HTTP_PROBE + textwrap.dedent('''
    import glob, os, sys, time
    brief, config = sys.argv[1], sys.argv[2]
    own = json.loads(read(config))["mcpServers"]["trellis"]["url"]
    if "WAIT" in brief:
        time.sleep(60)
        sys.exit(0)
    base = own.split("/signal/")[0]
    found = {}
    for path in glob.glob(os.path.join(os.path.dirname(config), "*")) + glob.glob(STATE + "/**", recursive=True):
        text = read(path) if os.path.isfile(path) else None
        if text and path != config:
            found[path] = text
    stolen = [u for t in found.values() for u in [t] if "/signal/mcp/" in t]
    report = {
        "stop": mcp_tool(base + "/mcp", "stop", {"name": "sibling"})[0],
        "status": mcp_tool(base + "/mcp", "status", {"name": "sibling"})[0],
        "files": sorted(found),
        "stolen": len(stolen),
        "token": read(STATE + "/token"),
        "environ_token": os.environ.get("TRELLIS_TOKEN"),
    }
    if "REPORT" in brief:
        report["signal"] = mcp_tool(own, "goal_reached", {"summary": "done", "report_file": "../outside.txt"})
    open("attack.json", "w").write(json.dumps(report))
''')


def agent_settings(tmp_path) -> dict[str, Any]:
    # In the run's cwd: the sandbox's /tmp is its own, so a script elsewhere under /tmp is not there.
    (tmp_path / "work").mkdir(exist_ok=True)
    script = tmp_path / "work" / "agent.py"
    script.write_text(AGENT.replace("STATE", repr(str(tmp_path / "state"))))
    template = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} {{brief}} {{config}}"
    return {"subagents": {"runners": {"command": {"template": template}}, "defaultRunner": "command"}}


async def wait_file(path, timeout: float = 30) -> str:
    with trio.fail_after(timeout):
        while not path.exists() or not path.read_text():
            await trio.sleep(0.05)
    return path.read_text()


@needs_bwrap
async def test_a_subagent_can_neither_stop_nor_read_nor_impersonate_its_sibling(tmp_path):
    async with hostile_daemon(tmp_path, [], settings=agent_settings(tmp_path)) as d:
        started = await parent_tool(d, "start", {"name": "sibling", "brief": "WAIT", "goal": "g", "max_turns": 5})
        assert not started.get("isError"), started
        await parent_tool(d, "start", {"name": "attacker", "brief": "ATTACK", "goal": "g", "max_turns": 1})
        attack = json.loads(await wait_file(d.work / "attack.json"))
        assert (attack["stop"], attack["status"]) == (401, 401)
        assert attack["files"] == [] and attack["stolen"] == 0  # no sibling config, no state directory
        assert attack["token"] is None and attack["environ_token"] is None
        sibling = (await parent_tool(d, "status", {"name": "sibling"}))["structuredContent"]
        assert (sibling["state"], sibling["turn"], sibling["endReason"]) == ("running", 1, None)
        await parent_tool(d, "stop", {"name": "sibling"})


async def test_a_report_file_a_subagent_names_outside_its_cwd_is_not_written(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("# my shell startup\n")
    async with hostile_daemon(tmp_path, [], settings=agent_settings(tmp_path)) as d:
        await parent_tool(d, "start", {"name": "writer", "brief": "REPORT", "goal": "g", "max_turns": 1})
        attack = json.loads(await wait_file(d.work / "attack.json"))
        status, body = attack["signal"]
        assert status == 200
        answer = json.loads(body)["result"]["content"][0]["text"]
        assert "Recorded goal_reached" in answer and "nothing was written" in answer
        assert "report_file" in answer and "refused" in answer and "only under the working directory" in answer
        assert outside.read_text() == "# my shell startup\n"
        with trio.fail_after(20):
            while (state := (await parent_tool(d, "status", {"name": "writer"}))["structuredContent"])["state"] \
                    == "running":
                await trio.sleep(0.05)
        assert state["endReason"] == "goal_reached"


# ------------------------------------------------------------------ the daemon killed


@needs_bwrap
async def test_a_background_shell_dies_within_two_seconds_of_the_daemon_being_killed(tmp_path):
    mark = marker()
    command = f"sleep {mark} & setsid sleep {mark} & (sleep {mark} &) ; wait"
    async with hostile_daemon(tmp_path, [[shell(command, background=True)], [{"text": "started"}]]) as d:
        sid = await d.open_session()
        await d.wait_turn(sid, await d.prompt(sid, "leave something running"))
        with trio.fail_after(10):
            while len([p for p in pids_with(f"sleep {mark}") if "bwrap" not in process_image(p)]) < 3:
                await trio.sleep(0.05)
        await d.assert_no_secret(sid)
        d.proc.send_signal(signal.SIGKILL)
        with trio.fail_after(2):
            while pids_with(mark):
                await trio.sleep(0.02)
