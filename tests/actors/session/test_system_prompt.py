"""The system prompt in process: what every model request starts with, its layers, and what it never is."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import attrs
import trio

from actors import CountingIds, Settings, load_script, open_daemon
from actors.session.system_prompt import ORIGIN, PromptOverrides, default_prompt, os_name
from actors.session.todo import TodoWriteTool
from actors.session.tools import ToolRegistry

LIMIT = 30
NOW = datetime(2031, 5, 17, 9, 30, tzinfo=timezone.utc)
TODOS = {"todos": [{"id": "1", "content": "first", "status": "in_progress"},
                   {"id": "2", "content": "second", "status": "pending"}]}


def script(*responses):
    return load_script({"responses": list(responses), "then": "demo"})


async def run_prompt(handle, text: str = "go") -> None:
    admitted = await handle.prompt(text)
    async with handle.subscribe(last_event_id=admitted.last_event_id) as events:
        async for event in events:
            if event.type in ("turn_complete", "turn_error") and event.prompt_id == admitted.prompt_id:
                return


def system_of(request) -> str | None:
    first = request.messages[0]
    return first.content if first.role == "system" else None


async def test_every_request_starts_with_the_default_prompt_and_it_is_never_history(tmp_path):
    model = script([{"text": "hello"}])
    state = tmp_path / "state"
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=model, ids=CountingIds(), now=lambda: NOW, state_dir=state,
                               workspace=str(tmp_path)) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            await run_prompt(handle, "hi")
            status = await handle.status()
    prompt = system_of(model.calls[0])
    assert prompt is not None and model.calls[0].messages[0].origin == ORIGIN
    assert f"Working directory: {tmp_path}" in prompt
    assert f"Operating system: {os_name()}" in prompt and "Today's date: 2031-05-17" in prompt
    for tool in ("shell", "shell_output", "kill_task", "monitor", "schedule_wakeup", "cron_create", "agent"):
        assert f"- {tool} " in prompt
    assert "todo_write" in prompt and "exactly one item in_progress" in prompt
    assert "approval" in prompt and "do not ask for permission in text" in prompt
    assert 1500 < len(prompt) < 3500  # short: qwen serve sends 23k characters
    # Rendered per request, never kept: the history and the transcript hold the conversation only.
    assert status["historyLength"] == 2
    records = [json.loads(line) for line in (state / "sessions" / f"{handle.session_id}.jsonl").read_text().splitlines()]
    assert all(r.get("role") != "system" and ORIGIN not in json.dumps(r) for r in records)


async def test_only_offered_tools_are_described_and_cwd_and_plan_mode_show_at_once(tmp_path):
    model = script([{"text": "one"}], [{"text": "two"}])
    (tmp_path / "elsewhere").mkdir()
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=model, ids=CountingIds(), now=lambda: NOW,
                               tools=lambda: ToolRegistry([TodoWriteTool()]), workspace=str(tmp_path)) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            await run_prompt(handle)
            await handle.change_cwd(str(tmp_path / "elsewhere"))
            await handle.set_approval_mode("plan")
            await run_prompt(handle)
    first, second = (system_of(c) for c in model.calls)
    assert "- shell " not in first and "# Tools" not in first and "todo_write" in first
    assert "plan mode" not in first
    assert f"Working directory: {tmp_path / 'elsewhere'}" in second and "plan mode" in second


async def test_settings_replace_and_append_and_the_session_layers_go_on_top(tmp_path):
    model = script(*([{"text": "ok"}] for _ in range(4)))
    settings = Settings(system_prompt="BASE FROM SETTINGS", append_system_prompt="SETTINGS ADDITION")
    with trio.fail_after(LIMIT):
        async with open_daemon(settings, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            plain, _ = await daemon.create_session()
            await run_prompt(plain)
            own, _ = await daemon.create_session(system_prompt="SESSION BASE", append_system_prompt="SESSION ADDITION")
            await run_prompt(own)
            added, _ = await daemon.create_session(append_system_prompt="ONLY ADDED")
            await run_prompt(added)
            none, _ = await daemon.create_session(system_prompt="")
            await run_prompt(none)
    prompts = [system_of(c) for c in model.calls]
    assert prompts[0] == "BASE FROM SETTINGS\n\nSETTINGS ADDITION"
    assert prompts[1] == "SESSION BASE\n\nSETTINGS ADDITION\n\nSESSION ADDITION"
    assert prompts[2] == "BASE FROM SETTINGS\n\nSETTINGS ADDITION\n\nONLY ADDED"
    assert prompts[3] == "SETTINGS ADDITION"  # the session emptied the base; the operator's addition stays


async def test_an_empty_prompt_everywhere_sends_no_system_message(tmp_path):
    model = script([{"text": "ok"}])
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(system_prompt=""), model=model, ids=CountingIds()) as daemon:
            handle, _ = await daemon.create_session()
            await run_prompt(handle)
    assert [m.role for m in model.calls[0].messages] == ["user"]


async def test_guard_continuations_and_suggestions_carry_the_prompt_too(tmp_path):
    model = script([{"tool_call": {"name": "todo_write", "arguments": TODOS}}], [{"text": "stopping"}],
                   [{"text": "still stopping"}], [{"text": "giving up"}], [{"text": "a\nb"}])
    settings = Settings(todo_stop_guard=True, approval_mode="yolo", followup_suggestions=True,
                        append_system_prompt="MARK")
    with trio.fail_after(LIMIT):
        async with open_daemon(settings, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            handle, _ = await daemon.create_session()
            await run_prompt(handle)
            while not any(c.purpose == "suggestion" for c in model.calls):
                await trio.sleep(0.01)
    guard_sends = [c for c in model.calls if any(m.origin == "guard" for m in c.messages)]
    assert guard_sends, "the guard never continued"
    assert [c.purpose for c in model.calls].count("suggestion") == 1
    for call in model.calls:
        assert system_of(call) is not None and system_of(call).endswith("MARK"), call.purpose
        assert [m.role for m in call.messages].count("system") == 1


async def test_a_restored_session_keeps_its_own_layers(tmp_path):
    state = tmp_path / "state"
    first = script([{"text": "before"}])
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=first, ids=CountingIds(), state_dir=state) as daemon:
            handle, _ = await daemon.create_session(session_id="keeper", system_prompt="KEPT BASE",
                                                    append_system_prompt="KEPT ADDITION")
            await run_prompt(handle, "one")
        second = script([{"text": "after"}], [{"text": "again"}])
        async with open_daemon(Settings(), model=second, ids=CountingIds(), state_dir=state) as daemon:
            restored = await daemon.load_session("keeper")
            await run_prompt(restored, "two")
            await daemon.close_session("keeper")
            # Given anew at create, a layer replaces the recorded one; the other is kept.
            again, attached = await daemon.create_session(session_id="keeper", append_system_prompt="NEW ADDITION")
            await run_prompt(again, "three")
            kept_layers = PromptOverrides.from_record(await again.record())
    assert system_of(first.calls[0]) == "KEPT BASE\n\nKEPT ADDITION"
    resent = second.calls[0].messages
    assert system_of(second.calls[0]) == "KEPT BASE\n\nKEPT ADDITION"
    assert [m.content for m in resent[1:]] == ["one", "before", "two"]
    assert not attached and system_of(second.calls[1]) == "KEPT BASE\n\nNEW ADDITION"
    assert attrs.asdict(kept_layers) == {"system_prompt": "KEPT BASE",
                                                    "append_system_prompt": "NEW ADDITION"}


async def test_a_fork_inherits_the_source_layers(tmp_path):
    model = script([{"text": "source"}], [{"text": "fork"}])
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=model, ids=CountingIds()) as daemon:
            source, _ = await daemon.create_session(append_system_prompt="FAMILY RULE")
            await run_prompt(source)
            fork = await daemon.fork_session(source.session_id)
            await run_prompt(fork)
    assert all(system_of(c).endswith("FAMILY RULE") for c in model.calls)


def test_the_default_prompt_holds_only_what_it_is_given():
    text = default_prompt(cwd="/w", os="TestOS 1", today="2030-01-01", tools=["todo_write"], sandboxed=True)
    assert "/w" in text and "TestOS 1" in text and "2030-01-01" in text and "sandbox" in text
    unsandboxed = default_prompt(cwd="/w", os="TestOS 1", today="2030-01-01", tools=[], sandboxed=False)
    assert "sandbox" not in unsandboxed and "todo_write" not in unsandboxed


async def test_the_same_system_message_is_sent_while_its_text_holds_and_a_new_one_once_it_changes(tmp_path):
    # One object across requests: what was derived from it (its estimate, its encoded JSON) is reused.
    model = script([{"text": "one"}], [{"text": "two"}], [{"text": "three"}])
    (tmp_path / "elsewhere").mkdir()
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=model, ids=CountingIds(), now=lambda: NOW,
                               workspace=str(tmp_path)) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            await run_prompt(handle)
            await run_prompt(handle)
            await handle.change_cwd(str(tmp_path / "elsewhere"))
            await run_prompt(handle)
    first, second, third = (c.messages[0] for c in model.calls)
    assert first.role == "system" and second is first
    assert third is not first and f"Working directory: {tmp_path / 'elsewhere'}" in third.content
