"""Red team, fourth round: cron schedules, ``edit``'s ``replace_all`` and subagent runs against a hostile model.

Where a session is needed, each test drives the real daemon (``python -m transport`` against the loopback fake
OpenAI server, :func:`tests.e2e.isolation_harness.hostile_daemon`) with a scripted hostile model and checks from
the host what its tool calls achieved.

* ``cron_create {"schedule": "0 0 31 2 *"}`` (February 31st: valid syntax, a date that never comes) was
  accepted and journalled; the timer's first next time raised croniter's ``CroniterBadDateError`` out of its
  actor, which took the session down: the prompt never got a terminal event, and since the timer was in the
  journal, the session crashed again at every load after a restart. ``cron_create`` now refuses a schedule
  that never fires, naming it; a timer whose next time cannot be computed ends (announced and journalled, as a
  kill ends it) and its session goes on; and a journal an older daemon wrote with such a timer restores.
* ``edit`` with ``replace_all`` multiplied a file without bound: an 8 MiB file of ``a`` and a 200-character
  ``new_string`` cost the daemon 3 GiB and wrote a 1.6 GB file, 160 times the file tools' own 10 MiB limit,
  and the text was built before the user was asked. The result's size is now computed from the counts and
  refused over the limit before anything is built or asked; no file tool writes a text over the limit.
* One session's model took all 64 of the daemon's subagent runs (children that sleep), and another session's
  ``agent`` call was refused while they lived. A session's live runs, its subagents' own runs included, are now
  bounded by a share of the daemon's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import trio

from actors.background.manager import BackgroundManager
from actors.ids import CountingIds
from actors.storage import replay
from actors.storage.local import LocalStore
from actors.subagents.registry import MAX_LIVE_RUNS_PER_SESSION
from actors.session.tools import ToolContext
from actors.tools.access import LOCAL
from actors.tools.common import MAX_FILE_BYTES
from actors.tools.write import Refused, approve_and_write
from tests.actors.tools.harness import Services
from tests.e2e.isolation_harness import Running, hostile_daemon
from tests.e2e.sse_client import collect


def call(tool: str, n: int | str, /, **arguments: Any) -> list[dict[str, Any]]:
    return [{"tool_call": {"id": f"call_{n}", "name": tool, "arguments": arguments}}]


DONE = [{"text": "done"}]
HANG = {"steps": [{"text": "never sent"}], "delay": None}  # the model server never answers this request
NEVER = ["0 0 31 2 *", "0 0 30 2 *", "0 0 31 4 *", "* * 31 2 *"]  # valid cron syntax, dates that never come


async def open_session(d: Running, **body: Any) -> str:
    r = await d.client.post("/session", json=body)
    assert r.status_code == 200, r.text
    return r.json()["sessionId"]


async def events_of(d: Running, sid: str) -> list[dict[str, Any]]:
    with trio.fail_after(10):
        return await collect(d.client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")


def tool_messages(d: Running) -> dict[str, str]:
    """What the model was told each tool call returned, by call id (every request, every session)."""
    out: dict[str, str] = {}
    for request in d.fake.requests:
        for message in request.body.get("messages", []):
            if message.get("role") == "tool":
                out[message["tool_call_id"]] = message["content"]
    return out


# ------------------------------------------------------------------ cron schedules that never fire


async def test_cron_create_refuses_a_schedule_that_never_fires_and_the_session_goes_on(tmp_path):
    calls = [step for i, schedule in enumerate(NEVER) for step in call("cron_create", i, schedule=schedule,
                                                                        prompt="never comes")]
    async with hostile_daemon(tmp_path, [calls, DONE, DONE]) as d:
        sid = await open_session(d)
        record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=20)
        assert record["state"] == "completed", record
        said = tool_messages(d)
        for i, schedule in enumerate(NEVER):
            assert said[f"call_{i}"] == (f"Error: schedule {schedule!r} never fires: no date matches it "
                                         f"(failed to find next date)"), said
        record = await d.wait_turn(sid, await d.prompt(sid, "again"), timeout=20)
        assert record["state"] == "completed", record
        status = (await d.client.get(f"/session/{sid}/status")).json()
        assert [t for t in status["backgroundTasks"] if t["kind"] == "cron"] == []


async def test_a_journal_holding_a_timer_that_never_fires_restores_and_the_session_works(tmp_path):
    async with hostile_daemon(tmp_path, [DONE]) as d:
        sid = await open_session(d)
        record = await d.wait_turn(sid, await d.prompt(sid, "hi"), timeout=20)
        assert record["state"] == "completed", record
    # What a daemon before the fix journalled for cron_create "0 0 31 2 *" (it took the call, then crashed).
    store = LocalStore(tmp_path / "state")
    store.journal_append(sid, {"op": "timer", "taskId": "cron-1", "kind": "cron", "text": "never comes",
                               "schedule": "0 0 31 2 *", "recurring": True,
                               "createdAt": datetime.now(timezone.utc).isoformat()})
    async with hostile_daemon(tmp_path, [DONE]) as d:
        r = await d.client.post(f"/session/{sid}/load", json={})
        assert r.status_code == 200, r.text
        record = await d.wait_turn(sid, await d.prompt(sid, "still there?"), timeout=20)
        assert record["state"] == "completed", record
        status = await d.client.get(f"/session/{sid}/status")
        assert status.status_code == 200 and status.json()["backgroundTasks"] == [], status.text
    records = store.journal_read(sid)
    assert {"op": "timer_ended", "taskId": "cron-1"} in records  # the next load does not try it again
    assert replay(records).timers == []


class Clock:
    """Wall-clock time under virtual time: a minute and a half before the end of year 9999."""

    def now(self) -> datetime:
        return datetime(9999, 12, 31, 23, 58, 30, tzinfo=timezone.utc) + timedelta(seconds=trio.current_time())


@asynccontextmanager
async def running(manager: BackgroundManager) -> AsyncIterator[BackgroundManager]:
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager
        nursery.cancel_scope.cancel()


async def test_a_timer_whose_next_time_cannot_be_computed_ends_and_its_session_goes_on(autojump_clock):
    # "59 23 31 12 *" fires at 9999-12-31 23:59; the time after that is past datetime's range, and croniter
    # raises (OverflowError) in the timer's actor, where a schedule that never fires raised too.
    records: list[dict[str, Any]] = []
    published: list[dict[str, Any]] = []
    manager = BackgroundManager("sess-1", CountingIds(), publish=lambda _type, data: published.append(data),
                                wake=lambda: None, now=Clock().now, journal=records.append)
    with trio.fail_after(10_000):
        async with running(manager):
            item = await manager.create_cron("59 23 31 12 *", "last minute", recurring=True)
            await trio.sleep(60)
            assert item.state == "failed"
            assert [r["op"] for r in records if r.get("taskId") == item.task_id] == \
                ["timer", "timer_fired", "timer_ended"]
            assert {"taskId": item.task_id, "status": "finished", "state": "failed"}.items() <= published[-1].items()
            # The session's background work goes on.
            wakeup = await manager.schedule_wakeup(delay=10, at=None, note="later")
            await trio.sleep(11)
            assert wakeup.state == "fired"
    assert replay(records).timers == []


# ------------------------------------------------------------------ edit replace_all


async def test_edit_replace_all_past_the_file_limit_is_refused_before_it_is_built_or_asked(tmp_path):
    n, k = 1024 * 1024, 20  # 1 MiB of "a", each becoming 20 characters: 20 MiB, over the 10 MiB limit
    edit = call("edit", "e", path="big.txt", old_string="a", new_string="b" * k, replace_all=True)
    async with hostile_daemon(tmp_path, [edit, DONE, edit, DONE]) as d:
        big = d.work / "big.txt"
        big.write_text("a" * n)
        expected = (f"Error: replacing {n:,} occurrences would make big.txt {n * k:,} bytes; the file tools handle "
                    f"files up to {MAX_FILE_BYTES:,} bytes; nothing was written")
        for mode in ("yolo", "default"):  # yolo writes what is built; default asks the user about it first
            sid = await open_session(d, approvalMode=mode)
            record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=30)
            assert record["state"] == "completed", record
            assert tool_messages(d)["call_e"] == expected
            assert [e for e in await events_of(d, sid) if e["type"] == "permission_request"] == []
            assert big.stat().st_size == n


async def test_the_common_write_path_refuses_a_text_over_the_file_limit_without_asking(tmp_path):
    services = Services()
    context = ToolContext("sess-1", str(tmp_path), "prompt-1", "call-1", services)
    target = tmp_path / "f.txt"
    try:
        await approve_and_write(context, LOCAL, path=str(target), shown="f.txt", old=None,
                                new="\u00e9" * (MAX_FILE_BYTES // 2 + 1), line=1, raw_input={}, title="write_file")
    except Refused as exc:
        assert str(exc) == (f"the new text of f.txt would be {MAX_FILE_BYTES + 2:,} bytes; the file tools handle "
                            f"files up to {MAX_FILE_BYTES:,} bytes; nothing was written")
    else:
        raise AssertionError("a text over the limit was written")
    assert services.asked == [] and not target.exists()


# ------------------------------------------------------------------ subagent runs per session


async def test_a_session_holds_at_most_its_share_of_subagent_runs_its_subagents_runs_included(tmp_path):
    share = MAX_LIVE_RUNS_PER_SESSION
    # Session A starts run "p"; then A and p's child session (whichever asks first gets either response) each
    # start `share` more. Every later request of theirs (and of the runs' child sessions) is never answered,
    # so the runs stay live.
    many = [[step for i in range(share) for step in call("agent", f"{side}{i}", name=f"{side}{i}", brief="wait")]
            for side in ("x", "y")]
    hanging = 2 + share - 1  # A's and p's next requests, and one for each further run's child session
    script = [call("agent", "p", name="p", brief="start more"), *many, *[HANG] * hanging]
    requests = 1 + 2 + hanging
    async with hostile_daemon(tmp_path, script) as d:
        a = await open_session(d)
        await d.prompt(a, "go")
        with trio.fail_after(60):
            while len(d.fake.requests) < requests or len(tool_messages(d)) < 1 + 2 * share:
                await trio.sleep(0.05)
        said = tool_messages(d)
        started = [i for i, text in said.items() if " started in the background as task " in text]
        refused = [i for i, text in said.items() if text == (
            f"Error: at most {share} live subagent runs per session (the runs its subagents start count too), and "
            f"this session has {share}; stop one with kill_task or wait for one to end")]
        assert "call_p" in started and len(started) == share, said
        assert len(refused) == 1 + 2 * share - share, said
        # Another session's run starts meanwhile.
        d.fake.add(call("agent", "b", name="mine", brief="review my change"), DONE)
        b = await open_session(d)
        record = await d.wait_turn(b, await d.prompt(b, "start a reviewer"), timeout=30)
        assert record["state"] == "completed", record
        assert "Subagent run 'mine' started in the background" in tool_messages(d)["call_b"]
