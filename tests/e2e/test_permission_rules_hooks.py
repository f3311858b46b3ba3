"""Permission rules beside PreToolUse hooks, end to end: a real daemon, the fake OpenAI server and real hook
scripts. A deny rule outranks a hook's allow, an ask rule outranks it too, and a hook's ask outranks an
allow rule (docs/how-to/permission-rules.md)."""

from __future__ import annotations

import trio

from tests.e2e.test_hooks_e2e import hooks, of_type, script, session_run, shell_call, tool_message


def pre_tool_use(tmp_path, decision: str) -> dict:
    command = script(tmp_path / f"pre_{decision}.py", f"""
json.load(sys.stdin)
print(json.dumps({{"hookSpecificOutput": {{"hookEventName": "PreToolUse", "permissionDecision": {decision!r},
                                          "permissionDecisionReason": "the hook says so"}}}}))
""")
    return hooks("PreToolUse", command, "Bash")


async def allow_once(client, sid, request) -> None:
    vote = {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
    assert (await client.post(f"/session/{sid}/permission/{request['requestId']}", json=vote)).status_code == 200


async def test_a_deny_rule_refuses_what_a_hook_allows(nursery, tmp_path):
    fake, frames, record, _ = await session_run(
        nursery, tmp_path, [[shell_call("rm -rf x")], [{"text": "ok"}]], pre_tool_use(tmp_path, "allow"),
        mode="default", extra={"permissions": {"deny": ["Bash(rm:*)"]}})
    assert record["state"] == "completed"
    assert of_type(frames, "permission_request") == []
    assert "Bash(rm:*)" in tool_message(fake, 1)


async def test_an_ask_rule_asks_where_a_hook_allows_even_in_yolo(nursery, tmp_path):
    asked = []

    async def answer(client, sid, request):
        asked.append(request["toolCall"])
        await allow_once(client, sid, request)

    fake, frames, record, _ = await session_run(
        nursery, tmp_path, [[shell_call("git push")], [{"text": "ok"}]], pre_tool_use(tmp_path, "allow"),
        mode="yolo", on_permission=answer, extra={"permissions": {"ask": ["Bash(git push:*)"]}})
    assert record["state"] == "completed"
    assert [a["_meta"] for a in asked] == [{"rule": "Bash(git push:*)"}]


async def test_a_hooks_ask_asks_where_an_allow_rule_would_let_it_run(nursery, tmp_path):
    asked = []

    async def answer(client, sid, request):
        asked.append(request["toolCall"])
        await allow_once(client, sid, request)

    with trio.fail_after(60):
        fake, frames, record, _ = await session_run(
            nursery, tmp_path, [[shell_call("echo hi")], [{"text": "ok"}]], pre_tool_use(tmp_path, "ask"),
            mode="default", on_permission=answer, extra={"permissions": {"allow": ["Bash(echo:*)"]}})
    assert record["state"] == "completed"
    assert len(asked) == 1 and "_meta" not in asked[0]  # the hook asked, not a rule
    assert "hi" in tool_message(fake, 1)
