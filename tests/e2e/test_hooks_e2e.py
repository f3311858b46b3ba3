"""Claude Code hook contract end to end (issue 15): ``python -m transport --model openai`` against the
loopback fake OpenAI server, with hook scripts as real executables (Python and shell). Each test
asserts what the model's next request contains (the fake's request log) or what the client receives."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import trio

from tests.conftest import daemon_process
from tests.e2e.sse_client import collect
from tests.e2e.test_openai_daemon import prompt, wait_turn
from transport.fake_openai import FakeOpenAI

ENV = {"OPENAI_API_KEY": "sk-fake", "OPENAI_MODEL": "fake"}


def script(path: Path, body: str, *, python: bool = True) -> str:
    """An executable hook script; returns the command that runs it."""
    head = f"#!{sys.executable}\nimport json, sys\n" if python else "#!/bin/sh\n"
    path.write_text(head + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def hooks(event: str, command: str, matcher: str | None = None) -> dict:
    group: dict = {"hooks": [{"type": "command", "command": command, "timeout": 20}]}
    if matcher is not None:
        group["matcher"] = matcher
    return {event: [group]}


def shell_call(command: str, call_id: str = "call_1") -> dict:
    return {"tool_call": {"id": call_id, "name": "shell", "arguments": {"command": command}}}


async def session_run(nursery, tmp_path: Path, responses: list, hook_settings: dict, *, mode: str = "yolo",
                      text: str = "go", on_permission=None, extra: dict | None = None,
                      delete: bool = False) -> tuple[FakeOpenAI, list[dict], dict, str]:
    """One prompt on a fresh daemon: (the fake, every frame the client saw, the turn record with the
    session's status after it under ``sessionStatus``, the daemon's stderr); ``delete``: then delete it."""
    fake = FakeOpenAI(responses)
    url = await nursery.start(fake.serve)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"hooks": hook_settings, "approvalMode": mode,
                                    "ui": {"enableFollowupSuggestions": False}, **(extra or {})}))
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    args = ("--model", "openai", "--openai-base-url", url, "--settings", str(settings))
    with trio.fail_after(60):
        async with daemon_process(*args, state_dir=tmp_path / "state", env=ENV) as daemon:
            async with daemon.client(daemon.token()) as client:
                sid = (await client.post("/session", json={"cwd": str(work)})).json()["sessionId"]
                pid = (await client.post(f"/session/{sid}/prompt", json=prompt(text))).json()["promptId"]
                if on_permission is not None:
                    got = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="permission_request")
                    await on_permission(client, sid, got[-1]["data"])
                record = await wait_turn(client, sid, pid)
                frames = await collect(client, sid, headers={"Last-Event-ID": "0"})
                record["sessionStatus"] = (await client.get(f"/session/{sid}/status")).json()
                if delete:
                    assert (await client.delete(f"/session/{sid}")).status_code in (200, 204)
        stderr = daemon.stderr.decode() if hasattr(daemon, "stderr") else ""
    return fake, frames, record, stderr


def messages(fake: FakeOpenAI, n: int) -> list[dict]:
    return fake.requests[n].body["messages"]


def tool_message(fake: FakeOpenAI, n: int) -> str:
    return [m for m in messages(fake, n) if m["role"] == "tool"][-1]["content"]


def of_type(frames: list[dict], kind: str) -> list[dict]:
    return [f["data"] for f in frames if f["type"] == kind]


# ----------------------------------------------------------------- 1. PostToolUse


async def test_post_tool_use_block_reason_and_context_reach_the_model_with_the_full_input(nursery, tmp_path):
    log = tmp_path / "input.json"
    command = script(tmp_path / "post.py", f"""
data = json.load(sys.stdin)
open({str(log)!r}, "w").write(json.dumps(data))
print(json.dumps({{"decision": "block", "reason": "tests are failing, fix them",
                  "hookSpecificOutput": {{"hookEventName": "PostToolUse", "additionalContext": "lint: 3 warnings"}}}}))
""")
    fake, _, record, _ = await session_run(nursery, tmp_path, [[shell_call("echo hi")], [{"text": "ok"}]],
                                           hooks("PostToolUse", command, "Bash"))
    assert record["state"] == "completed"
    seen = tool_message(fake, 1)
    assert "hi" in seen and "tests are failing, fix them" in seen and "lint: 3 warnings" in seen
    data = json.loads(log.read_text())
    assert data["tool_use_id"] == "call_1" and data["hook_event_name"] == "PostToolUse"
    assert data["tool_name"] == "shell" and data["tool_input"] == {"command": "echo hi"}
    assert data["permission_mode"] == "yolo" and data["cwd"] == str(tmp_path / "work")
    assert data["transcript_path"] and Path(data["transcript_path"]).exists()


async def test_post_tool_use_exit_2_gives_the_model_its_stderr(nursery, tmp_path):
    command = script(tmp_path / "post.sh", "cat >/dev/null\necho 'do not touch prod' >&2\nexit 2\n", python=False)
    fake, _, _, _ = await session_run(nursery, tmp_path, [[shell_call("echo hi")], [{"text": "ok"}]],
                                      hooks("PostToolUse", command, "shell"))
    assert "do not touch prod" in tool_message(fake, 1)


async def test_post_tool_use_continue_false_ends_the_turn_with_its_stop_reason(nursery, tmp_path):
    command = script(tmp_path / "post.py", """
json.load(sys.stdin)
print(json.dumps({"continue": False, "stopReason": "build broke; stopping"}))
""")
    fake, frames, record, _ = await session_run(nursery, tmp_path, [[shell_call("echo hi")], [{"text": "never"}]],
                                                hooks("PostToolUse", command, "*"))
    assert len(fake.requests) == 1  # no follow-up request
    done = of_type(frames, "turn_complete")[-1]
    assert done["stopReason"] == "end_turn" and done["hookStopReason"] == "build broke; stopping"
    assert [h.get("stopReason") for h in of_type(frames, "hook_result")] == ["build broke; stopping"]


async def test_post_tool_use_continue_false_suspends_the_guard_chain_and_reports_its_stop_reason(nursery, tmp_path):
    todos = {"todos": [{"id": "t1", "content": "a", "status": "in_progress"},
                       {"id": "t2", "content": "b", "status": "pending"}]}
    command = script(tmp_path / "post.py", """
json.load(sys.stdin)
print(json.dumps({"continue": False, "stopReason": "plan needs review"}))
""")
    fake, frames, record, _ = await session_run(
        nursery, tmp_path, [[{"tool_call": {"id": "c1", "name": "todo_write", "arguments": todos}}],
                            [{"text": "never"}], [{"text": "never"}]],
        hooks("PostToolUse", command, "TodoWrite"), extra={"experimental": {"todoStopGuard": True}})
    assert len(fake.requests) == 1
    assert of_type(frames, "turn_complete")[-1]["hookStopReason"] == "plan needs review"
    guard = record["sessionStatus"]["todoStopGuard"]
    # Observed before the hook (armed, two open items), then hard-suspended by it.
    assert guard["armed"] and guard["unfinishedCount"] == 2 and guard["suspended"]


# ----------------------------------------------------------------- 2. matchers


async def test_matchers_are_regexes_over_our_names_and_claude_aliases(nursery, tmp_path):
    counter = tmp_path / "fired"
    def counting(name: str) -> str:
        return script(tmp_path / f"{name}.sh", f"cat >/dev/null\necho {name} >> {counter}\n", python=False)
    groups = {"PostToolUse": [
        {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": counting("claude_edit")}]},
        {"matcher": "sh.*", "hooks": [{"type": "command", "command": counting("regex")}]},
        {"matcher": "", "hooks": [{"type": "command", "command": counting("empty")}]},
        {"matcher": "TodoWrite", "hooks": [{"type": "command", "command": counting("todo")}]},
        {"matcher": "Task", "hooks": [{"type": "command", "command": counting("task")}]},
    ]}
    write = {"tool_call": {"id": "call_2", "name": "write_file",
                           "arguments": {"path": "notes.txt", "content": "x\n"}}}
    await session_run(nursery, tmp_path, [[shell_call("echo hi")], [write], [{"text": "ok"}]], groups)
    # Claude's names match one to one: Write|Edit fires for write_file, never for shell (Claude's hook
    # scripts read tool_input.file_path, which a shell call has not).
    assert counter.read_text().split() == ["regex", "empty", "claude_edit", "empty"]


# ----------------------------------------------------------------- 3. PreToolUse


def pre(decision: str, reason: str = "", extra: str = "") -> str:
    return f"""
data = json.load(sys.stdin)
out = {{"hookEventName": "PreToolUse", "permissionDecision": {decision!r},
       "permissionDecisionReason": {reason!r}}}
{extra}
print(json.dumps({{"hookSpecificOutput": out}}))
"""


async def test_pre_tool_use_deny_refuses_the_call_with_the_reason_as_its_result(nursery, tmp_path):
    command = script(tmp_path / "pre.py", pre("deny", "rm is not allowed here"))
    fake, _, _, _ = await session_run(nursery, tmp_path, [[shell_call("touch made")], [{"text": "ok"}]],
                                      hooks("PreToolUse", command, "Bash"))
    assert "rm is not allowed here" in tool_message(fake, 1)
    assert not (tmp_path / "work" / "made").exists()


async def test_pre_tool_use_exit_2_denies_with_stderr(nursery, tmp_path):
    command = script(tmp_path / "pre.sh", "cat >/dev/null\necho 'blocked by policy' >&2\nexit 2\n", python=False)
    fake, _, _, _ = await session_run(nursery, tmp_path, [[shell_call("touch made")], [{"text": "ok"}]],
                                      hooks("PreToolUse", command))
    assert "blocked by policy" in tool_message(fake, 1)
    assert not (tmp_path / "work" / "made").exists()


async def test_pre_tool_use_updated_input_replaces_the_arguments(nursery, tmp_path):
    command = script(tmp_path / "pre.py", pre("allow", extra='out["updatedInput"] = {"command": "echo rewritten"}'))
    fake, _, _, _ = await session_run(nursery, tmp_path, [[shell_call("echo original")], [{"text": "ok"}]],
                                      hooks("PreToolUse", command, "shell"))
    assert "rewritten" in tool_message(fake, 1) and "original" not in tool_message(fake, 1)


async def test_pre_tool_use_context_reaches_the_model_with_the_result(nursery, tmp_path):
    command = script(tmp_path / "pre.py", pre("allow", extra='out["additionalContext"] = "ran under policy P7"'))
    fake, _, _, _ = await session_run(nursery, tmp_path, [[shell_call("echo hello")], [{"text": "ok"}]],
                                      hooks("PreToolUse", command, "shell"))
    content = tool_message(fake, 1)
    assert "hello" in content and "ran under policy P7" in content


async def test_pre_tool_use_ask_prompts_even_in_yolo(nursery, tmp_path):
    command = script(tmp_path / "pre.py", pre("ask", "check this one"))
    asked: list = []

    async def reject(client, sid, request) -> None:
        asked.append(request)
        vote = {"outcome": {"outcome": "selected", "optionId": "cancel"}}
        assert (await client.post(f"/session/{sid}/permission/{request['requestId']}", json=vote)).status_code == 200

    fake, _, _, _ = await session_run(nursery, tmp_path, [[shell_call("touch made")], [{"text": "ok"}]],
                                      hooks("PreToolUse", command), mode="yolo", on_permission=reject)
    assert asked and asked[0]["toolCall"]["title"] == "touch made"
    assert "denied" in tool_message(fake, 1)
    assert not (tmp_path / "work" / "made").exists()


async def test_pre_tool_use_ask_prompts_for_a_tool_that_never_asks_by_itself(nursery, tmp_path):
    command = script(tmp_path / "pre.py", pre("ask", "a plan needs a human"))
    asked: list = []

    async def reject(client, sid, request) -> None:
        asked.append(request)
        vote = {"outcome": {"outcome": "selected", "optionId": "cancel"}}
        assert (await client.post(f"/session/{sid}/permission/{request['requestId']}", json=vote)).status_code == 200

    todos = {"todos": [{"id": "t1", "content": "one", "status": "in_progress"}]}
    call = {"tool_call": {"id": "call_1", "name": "todo_write", "arguments": todos}}
    fake, frames, _, _ = await session_run(nursery, tmp_path, [[call], [{"text": "ok"}]],
                                           hooks("PreToolUse", command, "TodoWrite"), mode="yolo",
                                           on_permission=reject)
    assert asked and asked[0]["toolCall"]["title"] == "todo_write"
    assert "denied" in tool_message(fake, 1)
    assert not of_type(frames, "session_update") or not any(
        f["update"].get("sessionUpdate") == "plan" for f in of_type(frames, "session_update"))  # it never ran


async def test_pre_tool_use_allow_skips_the_prompt_in_default_mode(nursery, tmp_path):
    command = script(tmp_path / "pre.py", pre("allow"))
    fake, frames, _, _ = await session_run(nursery, tmp_path, [[shell_call("touch made")], [{"text": "ok"}]],
                                           hooks("PreToolUse", command), mode="default")
    assert not of_type(frames, "permission_request")
    assert (tmp_path / "work" / "made").exists()
    assert "[exit code 0]" in tool_message(fake, 1)


# ----------------------------------------------------------------- 4. UserPromptSubmit


async def test_user_prompt_submit_block_rejects_the_prompt_and_says_why(nursery, tmp_path):
    command = script(tmp_path / "ups.py", """
data = json.load(sys.stdin)
assert data["prompt"] == "deploy to prod" and data["hook_event_name"] == "UserPromptSubmit"
print(json.dumps({"decision": "block", "reason": "no deploys on Fridays"}))
""")
    fake, frames, record, _ = await session_run(nursery, tmp_path, [[{"text": "never"}]],
                                                hooks("UserPromptSubmit", command), text="deploy to prod")
    assert fake.requests == []  # the prompt never reached the model
    assert of_type(frames, "turn_complete")[-1]["hookStopReason"] == "no deploys on Fridays"
    notices = [u["update"]["content"]["text"] for u in of_type(frames, "session_update")
               if u["update"].get("sessionUpdate") == "agent_message_chunk"]
    assert any("no deploys on Fridays" in n for n in notices)


async def test_user_prompt_submit_context_is_added_to_the_request(nursery, tmp_path):
    json_hook = script(tmp_path / "ups.py", """
json.load(sys.stdin)
print(json.dumps({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "branch: main"}}))
""")
    plain_hook = script(tmp_path / "ups.sh", "cat >/dev/null\necho 'today is Tuesday'\n", python=False)
    groups = {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": json_hook},
                                              {"type": "command", "command": plain_hook}]}]}
    fake, _, _, _ = await session_run(nursery, tmp_path, [[{"text": "ok"}]], groups, text="what now")
    user = [m for m in messages(fake, 0) if m["role"] == "user"][-1]["content"]
    text = user if isinstance(user, str) else json.dumps(user)
    assert "what now" in text and "branch: main" in text and "today is Tuesday" in text


# ----------------------------------------------------------------- 5. SessionStart / SessionEnd


async def test_session_start_context_reaches_the_first_request_and_session_end_runs(nursery, tmp_path):
    ends = tmp_path / "ends.json"
    start = script(tmp_path / "start.py", """
data = json.load(sys.stdin)
assert data["hook_event_name"] == "SessionStart"
print(json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart",
                                         "additionalContext": "source=" + data["source"]}}))
""")
    end = script(tmp_path / "end.py", f"""
data = json.load(sys.stdin)
open({str(ends)!r}, "w").write(json.dumps(data))
""")
    groups = {**hooks("SessionStart", start, "startup"), **hooks("SessionEnd", end)}
    fake, _, _, _ = await session_run(nursery, tmp_path, [[{"text": "ok"}]], groups, text="hello", delete=True)
    user = [m for m in messages(fake, 0) if m["role"] == "user"][-1]["content"]
    text = user if isinstance(user, str) else json.dumps(user)
    assert "hello" in text and "source=startup" in text
    data = json.loads(ends.read_text())
    assert data["hook_event_name"] == "SessionEnd" and data["reason"] == "closed"


async def test_a_session_restored_from_disk_starts_with_source_resume(nursery, tmp_path):
    seen = tmp_path / "sources.txt"
    start = script(tmp_path / "start.py", f"""
data = json.load(sys.stdin)
open({str(seen)!r}, "a").write(data["source"] + "\\n")
""")
    fake = FakeOpenAI([[{"text": "first"}], [{"text": "second"}]])
    url = await nursery.start(fake.serve)
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"hooks": hooks("SessionStart", start), "ui": {"enableFollowupSuggestions": False}}))
    args = ("--model", "openai", "--openai-base-url", url, "--settings", str(settings))
    with trio.fail_after(60):
        async with daemon_process(*args, state_dir=tmp_path / "state", env=ENV) as daemon:
            async with daemon.client(daemon.token()) as client:
                sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
                pid = (await client.post(f"/session/{sid}/prompt", json=prompt("remember"))).json()["promptId"]
                await wait_turn(client, sid, pid)
        async with daemon_process(*args, state_dir=tmp_path / "state", env=ENV) as daemon:
            async with daemon.client(daemon.token()) as client:
                assert (await client.post(f"/session/{sid}/load", json={})).status_code == 200
                pid = (await client.post(f"/session/{sid}/prompt", json=prompt("and now"))).json()["promptId"]
                await wait_turn(client, sid, pid)
    assert seen.read_text().split() == ["startup", "resume"]


# ----------------------------------------------------------------- settings


async def test_unknown_hook_events_warn_at_start_and_are_ignored(nursery, tmp_path):
    command = script(tmp_path / "x.sh", "cat >/dev/null\nexit 0\n", python=False)
    _, _, record, stderr = await session_run(nursery, tmp_path, [[{"text": "ok"}]],
                                             {**hooks("Notification", command), **hooks("PreCompact", command)})
    assert record["state"] == "completed"
    assert "unknown key 'hooks.Notification' ignored" in stderr and "unknown key 'hooks.PreCompact'" in stderr
