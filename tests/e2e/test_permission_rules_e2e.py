"""Permission rules over REST/SSE, as a settings file gives them: the acceptance of the rules in default mode."""

from __future__ import annotations

import json

import trio

from actors import load_script
from actors.settings_file import load_settings
from tests.conftest import live_daemon
from tests.e2e.sse_client import frames

RULES = {"permissions": {"allow": ["Bash(echo:*)"], "deny": ["Bash(rm:*)"]}}


def call(name: str, **arguments) -> dict:
    return {"tool_call": {"name": name, "arguments": arguments}}


async def run_commands(tmp_path, *commands: str, settings: dict = RULES):
    """Each command in a turn of its own; the events of them all (stopping at a permission request) and the
    model's calls."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(settings))
    responses = []
    for command in commands:
        responses += [[call("shell", command=command)], [{"text": f"done with {command}"}]]
    model = load_script({"responses": responses})
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    (work / "x").write_text("keep me")
    with trio.fail_after(30):
        async with live_daemon(model=model, settings=load_settings(path)) as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(work)})).json()["sessionId"]
            for command in commands:
                pid = (await client.post(f"/session/{sid}/prompt",
                                         json={"prompt": [{"type": "text", "text": command}]})).json()["promptId"]
                got = await until_asked_or_done(client, sid, pid)
                if got[-1]["type"] == "permission_request":
                    return got, model, work
            return got, model, work


async def until_asked_or_done(client, sid: str, pid: str) -> list[dict]:
    out: list[dict] = []
    async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
        async for frame in frames(r):
            out.append(frame)
            if frame["type"] == "permission_request" or (
                    frame["type"] == "turn_complete" and frame["data"].get("promptId") == pid):
                return out
    raise AssertionError("the event stream ended first")


def tool_results(model) -> list[str]:
    """What each shell call came to, as the model was told (each turn: a call, then one after its result)."""
    return [c.messages[-1].content for c in model.calls[1::2]]


async def test_an_allowed_command_runs_without_asking(tmp_path):
    events, model, work = await run_commands(tmp_path, "echo hi")
    assert not [f for f in events if f["type"] == "permission_request"]
    assert "hi" in tool_results(model)[0] and "[exit code 0]" in tool_results(model)[0]


async def test_a_denied_command_is_refused_without_asking_and_the_model_is_told_the_rule(tmp_path):
    events, model, work = await run_commands(tmp_path, "rm -rf x", "echo hi && rm x")
    assert not [f for f in events if f["type"] == "permission_request"]
    first, second = tool_results(model)[:2]
    assert "Bash(rm:*)" in first and "refused" in first
    assert "Bash(rm:*)" in second and "rm x" in second
    assert (work / "x").read_text() == "keep me"
    refusals = [f["data"]["update"] for f in events if f["type"] == "session_update"
                and f["data"]["update"].get("status") == "failed"]
    assert [r["_meta"] for r in refusals] == [{"rule": "Bash(rm:*)", "toolName": "shell"}] * 2


async def test_a_command_no_rule_matches_asks(tmp_path):
    events, model, work = await run_commands(tmp_path, "ls")
    assert events[-1]["type"] == "permission_request"
    assert events[-1]["data"]["toolCall"]["title"] == "ls"


async def test_an_ask_rule_asks_in_yolo_mode_and_names_itself(tmp_path):
    settings = {"approvalMode": "yolo", "permissions": {"allow": ["Bash"], "ask": ["Bash(git push:*)"]}}
    events, model, work = await run_commands(tmp_path, "echo fine", "git push --force", settings=settings)
    requests = [f["data"] for f in events if f["type"] == "permission_request"]
    assert len(requests) == 1 and requests[0]["toolCall"]["title"] == "git push --force"
    assert requests[0]["toolCall"]["_meta"] == {"rule": "Bash(git push:*)"}


async def test_an_always_allow_answer_becomes_a_session_rule_for_that_command_name(tmp_path):
    model = load_script({"responses": [
        [call("shell", command="git status")], [call("shell", command="git status --short")],
        [call("shell", command="git log -1")], [{"text": "done"}]]})
    with trio.fail_after(30):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            pid = (await client.post(f"/session/{sid}/prompt",
                                     json={"prompt": [{"type": "text", "text": "go"}]})).json()["promptId"]
            asked = []
            async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
                async for frame in frames(r):
                    if frame["type"] == "permission_request":
                        asked.append(frame["data"]["toolCall"]["title"])
                        option = "proceed_always_session" if len(asked) == 1 else "proceed_once"
                        await client.post(f"/permission/{frame['data']['requestId']}",
                                          json={"outcome": {"outcome": "selected", "optionId": option}})
                    if frame["type"] == "turn_complete" and frame["data"].get("promptId") == pid:
                        break
            assert asked == ["git status", "git log -1"]  # git status --short ran unasked; git log asked
            rules = await daemon.get(sid).permission_rules()
            assert rules["session"] == {"allow": ["Bash(git status:*)"], "ask": [], "deny": []}
            assert rules["settings"] == {"allow": [], "ask": [], "deny": []}


async def test_a_sessions_own_rules_are_kept_across_a_restart_and_can_be_removed(tmp_path):
    from actors import open_daemon
    from actors.permission_rules import RuleError, RuleLists

    state = tmp_path / "state"
    with trio.fail_after(30):
        async with open_daemon(state_dir=state) as first:
            handle, _ = await first.create_session(str(tmp_path), permissions=RuleLists(deny=("Read(*.env)",)))
            sid = handle.session_id
            assert await handle.add_permission_rule("allow", "Bash(npm test:*)") is True
            assert await handle.add_permission_rule("allow", "Bash(npm test:*)") is False  # there already
            for effect, bad in (("allow", "Bahs(x)"), ("permit", "Bash")):
                try:
                    await handle.add_permission_rule(effect, bad)
                except (RuleError, ValueError) as exc:
                    assert ("Bahs" in str(exc)) or ("permit" in str(exc))
                else:
                    raise AssertionError(f"{effect} {bad} was taken")
            explained = await handle.explain_permission("shell", {"command": "npm test && rm -rf /"})
            assert explained["outcome"] == "ask" and explained["decidedBy"] == "mode"
            assert (await handle.explain_permission("shell", {"command": "npm test -- -x"}))["rule"] == \
                "Bash(npm test:*)"
            assert (await handle.explain_permission("read_file", {"path": "a/.env"}))["outcome"] == "deny"
            assert (await handle.explain_permission("read_file", {"path": "a.txt"}))["decidedBy"] == "tool"
        async with open_daemon(state_dir=state) as again:
            restored, attached = await again.create_session(session_id=sid)
            assert not attached
            rules = (await restored.permission_rules())["session"]
            assert rules == {"allow": ["Bash(npm test:*)"], "ask": [], "deny": ["Read(*.env)"]}
            assert await restored.remove_permission_rule("allow", "Bash(npm test:*)") is True
            assert await restored.remove_permission_rule("allow", "Bash(npm test:*)") is False
            assert (await restored.permission_rules())["session"]["allow"] == []


async def test_rules_over_rest_given_at_start_listed_added_persisted_removed_and_explained(tmp_path):
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps({"limits": {"maxSessions": 8}, "permissions": {"deny": ["Bash(rm:*)"]}}))
    settings_file.chmod(0o644)
    with trio.fail_after(30):
        async with live_daemon(settings=load_settings(settings_file)) as (daemon, client):
            refused = await client.post("/session", json={"cwd": str(tmp_path),
                                                          "permissions": {"allow": ["Bash(ls:*)", "Bahs(x)"]}})
            assert refused.status_code == 400, refused.text
            assert refused.json()["code"] == "invalid_rule" and refused.json()["path"] == "$.permissions.allow[1]"
            assert "unknown tool 'Bahs'" in refused.json()["error"]
            assert (await client.get("/session")).json()["sessions"] == []  # nothing started
            created = await client.post("/session", json={"cwd": str(tmp_path),
                                                          "permissions": {"allow": ["Bash(ls:*)"]}})
            sid = created.json()["sessionId"]
            listed = (await client.get(f"/session/{sid}/permissions")).json()
            assert listed == {"settings": {"allow": [], "ask": [], "deny": ["Bash(rm:*)"]},
                              "session": {"allow": ["Bash(ls:*)"], "ask": [], "deny": []}}

            bad = await client.post(f"/session/{sid}/permissions", json={"effect": "allow", "rule": "Bash(a:*b:*)"})
            assert bad.status_code == 400 and bad.json()["code"] == "invalid_rule" and bad.json()["path"] == "$.rule"
            added = await client.post(f"/session/{sid}/permissions",
                                      json={"effect": "ask", "rule": "Bash(git push:*)", "persist": "settings"})
            assert added.status_code == 200, added.text
            assert added.json()["changed"] is True and added.json()["settingsFile"] == str(settings_file)
            assert added.json()["rules"]["session"]["ask"] == ["Bash(git push:*)"]
            written = json.loads(settings_file.read_text())
            assert written == {"limits": {"maxSessions": 8},
                               "permissions": {"deny": ["Bash(rm:*)"], "ask": ["Bash(git push:*)"]}}
            assert settings_file.stat().st_mode & 0o777 == 0o644  # the user's file keeps its mode

            explain = await client.get(f"/session/{sid}/permissions/explain",
                                       params={"tool": "shell", "input": json.dumps({"command": "ls -la && rm x"})})
            assert explain.json() | {"reason": ""} == {"outcome": "deny", "decidedBy": "rule", "decision": "deny",
                                                      "rule": "Bash(rm:*)", "reason": "", "approvalMode": "default"}
            asked = await client.get(f"/session/{sid}/permissions/explain",
                                     params={"tool": "shell", "input": json.dumps({"command": "git push origin"})})
            assert asked.json()["outcome"] == "ask" and asked.json()["rule"] == "Bash(git push:*)"
            for params, path in (({"input": "{}"}, "query.tool"), ({"tool": "shell", "input": "[1]"}, "query.input"),
                                 ({"tool": "shell", "input": "{"}, "query.input"), ({"tool": "nope"}, "query.tool")):
                wrong = await client.get(f"/session/{sid}/permissions/explain", params=params)
                assert wrong.status_code == 400 and wrong.json()["path"] == path, (params, wrong.text)

            removed = await client.delete(f"/session/{sid}/permissions/allow", params={"rule": "Bash(ls:*)"})
            assert removed.json()["changed"] is True and removed.json()["rules"]["session"]["allow"] == []
            again = await client.delete(f"/session/{sid}/permissions/allow", params={"rule": "Bash(ls:*)"})
            assert again.json()["changed"] is False
            settings_rule = await client.delete(f"/session/{sid}/permissions/deny", params={"rule": "Bash(rm:*)"})
            assert settings_rule.json()["changed"] is False  # the settings file's rules are the file's to change
            wrong = await client.delete(f"/session/{sid}/permissions/permit", params={"rule": "Bash"})
            assert wrong.status_code == 400 and wrong.json()["path"] == "url.effect"
