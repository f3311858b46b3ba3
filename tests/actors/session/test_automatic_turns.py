"""Automatic turns: notifications, wakeups and cron fires wait for foreground work, then run."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import trio

from actors import CountingIds, Settings, load_script, open_daemon

YOLO = Settings(approval_mode="yolo")
BASE = datetime(2026, 11, 30, 12, 0, 30, tzinfo=timezone.utc)


def virtual_now() -> datetime:
    return BASE + timedelta(seconds=trio.current_time())


def call(name: str, **arguments) -> dict:
    return {"tool_call": {"name": name, "arguments": arguments}}


async def collect_until(sub, predicate) -> list:
    got = []
    async for event in sub:
        got.append(event)
        if predicate(event):
            return got
    raise AssertionError("stream ended")


def is_end(event) -> bool:
    return event.type in ("turn_complete", "turn_error")


async def _notification_waits_for(foreground_end: dict, expected_end: str, tmp_path) -> None:
    model = load_script({"responses": [
        [call("shell", command="sleep 0.2; echo finished-output", run_in_background=True)],
        [{"sleep": 1.0}, foreground_end],
        [{"text": "noted the notification"}],
    ]})
    with trio.fail_after(20):
        async with open_daemon(YOLO, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            foreground = (await session.prompt("start a shell")).prompt_id
            first = await collect_until(sub, is_end)
            assert first[-1].type == expected_end and first[-1].prompt_id == foreground
            finished = [i for i, e in enumerate(first)
                        if e.type == "background_task" and e.data["status"] == "finished"]
            assert finished, "the shell finished while the prompt was still running"
            # No automatic turn started inside the foreground turn.
            assert not [e for e in first if e.update and (e.update.get("_meta") or {}).get("source")]
            second = await collect_until(sub, is_end)
    # Clients are shown the result as qwen serve shows it (a notice about the shell, not a user message) ...
    assert not [e for e in second if e.update and e.update["sessionUpdate"] == "user_message_chunk"]
    shown = next(e for e in second if e.update and e.update["sessionUpdate"] == "agent_message_chunk")
    assert shown.prompt_id == second[-1].prompt_id and shown.update["_meta"] == {
        "source": "background_notification", "qwenDiscreteMessage": True,
        "backgroundTask": {"taskId": "shell-1", "kind": "shell", "status": "completed",
                           "commandLabel": "sleep 0.2; echo finished-output"}}
    assert shown.update["content"]["text"].startswith("Background shell shell-1 (`sleep 0.2; echo finished-output`) "
                                                      "finished with exit code 0.")
    # ... and the model reads it wrapped, as before
    assert second[-1].type == "turn_complete" and second[-1].prompt_id.startswith("auto-")
    text = model.calls[2].messages[-1].content
    assert '<task-notification task_id="shell-1" kind="shell">' in text and "exit code 0" in text


async def test_a_notification_during_a_foreground_prompt_waits_then_runs(tmp_path):
    await _notification_waits_for({"text": "foreground done"}, "turn_complete", tmp_path)


async def test_a_notification_waits_and_runs_also_when_the_prompt_errors(tmp_path):
    await _notification_waits_for({"fail": {"code": "server_error"}}, "turn_error", tmp_path)


async def test_a_wakeup_fires_at_its_virtual_time_and_runs_as_an_automatic_turn(autojump_clock):
    model = load_script({"responses": [
        [call("schedule_wakeup", delay=90, note="check the build")],
        [{"text": "scheduled"}],
        [{"text": "checked"}],
    ]})
    with trio.fail_after(300):
        async with open_daemon(YOLO, model=model, ids=CountingIds(), now=virtual_now) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            await session.prompt("remind me")
            await collect_until(sub, is_end)
            started = trio.current_time()
            got = await collect_until(sub, is_end)
            echo = next(e for e in got if e.update and e.update["sessionUpdate"] == "user_message_chunk")
            assert echo.update["_meta"]["source"] == "wakeup"
            assert model.calls[2].messages[-1].content == "@wakeup: check the build"
            assert 89 <= trio.current_time() <= 91 and started < 1


async def test_25_cron_fires_while_busy_leave_one_queued_item(autojump_clock):
    model = load_script({"responses": [
        [call("cron_create", schedule="* * * * *", prompt="poll the queue", recurring=True)],
        [{"sleep": 25 * 60}, {"text": "long work done"}],
        [{"text": "polled"}],
    ]})
    with trio.fail_after(10_000):
        async with open_daemon(YOLO, model=model, ids=CountingIds(), now=virtual_now) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            await session.prompt("start polling")
            await trio.sleep(25 * 60 - 1)
            status = await session.status()
            assert status["state"] == "running" and status["automaticQueue"] == 1
            fires = [e for e in sub._live if e.type == "background_task" and e.data.get("text") == "fired"]
            assert len(fires) == 25
            await collect_until(sub, is_end)  # the foreground prompt
            got = await collect_until(sub, is_end)  # the one automatic turn
            echo = next(e for e in got if e.update and e.update["sessionUpdate"] == "user_message_chunk")
            assert echo.update["_meta"]["source"] == "cron"
            assert "fired 25 times" in model.calls[2].messages[-1].content


async def test_a_restored_session_keeps_its_cron_job_and_its_task_id(autojump_clock, tmp_path):
    model = load_script({"responses": [
        [call("cron_create", schedule="*/10 * * * *", prompt="poll the queue", recurring=True)],
        [{"text": "scheduled"}],
        [{"text": "polled after the restart"}],
    ]})
    with trio.fail_after(10_000):
        async with open_daemon(YOLO, model=model, ids=CountingIds(), now=virtual_now, state_dir=tmp_path) as first:
            session, _ = await first.create_session()
            sub = session.subscribe()
            await session.prompt("poll every ten minutes")
            await collect_until(sub, is_end)
            sid = session.session_id
        async with open_daemon(YOLO, model=model, ids=CountingIds(), now=virtual_now, state_dir=tmp_path) as again:
            restored = await again.load_session(sid)
            sub = restored.subscribe()
            status = await restored.status()
            assert [t["taskId"] for t in status["backgroundTasks"] if t["kind"] == "cron"] == ["cron-1"]
            got = await collect_until(sub, is_end)  # 12:10: its automatic turn, after the restart
            echo = next(e for e in got if e.update and e.update["sessionUpdate"] == "user_message_chunk")
            assert echo.update["_meta"]["source"] == "cron" and echo.update["_meta"]["taskId"] == "cron-1"
            assert 9 * 60 <= trio.current_time() <= 10 * 60
