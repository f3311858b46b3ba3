"""The goal loop of a :class:`SubagentRun`, driven by a fake runner (no HTTP, virtual time where it matters)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from actors._actor import open_mailbox, refuse_unhandled
from actors.subagents.run import RunSpec, Signal, SpawnFailed, Stop, SubagentRun

Action = Callable[[SubagentRun], Awaitable[str]] | str


def signal(kind: str, then: str | None = None, **arguments: Any) -> Action:
    """A turn in which the subagent signals (through the run's mailbox, as the HTTP route does)."""
    async def act(run: SubagentRun) -> str:
        assert run.ref is not None
        is_error, text = await run.ref.ask(lambda reply: Signal(kind, arguments, reply))
        assert not is_error, text
        if then == "hang":
            await trio.sleep_forever()
        return "stop reason end_turn"
    return act


async def hang(run: SubagentRun) -> str:
    await trio.sleep_forever()
    raise AssertionError


async def crash(run: SubagentRun) -> str:
    raise RuntimeError("the child vanished")


class FakeRunner:
    name = "fake"

    def __init__(self, *plan: Action, spawn_error: Exception | None = None) -> None:
        self.plan = list(plan)
        self.texts: list[str] = []
        self.spawn_error = spawn_error
        self.closed = False

    @asynccontextmanager
    async def open(self, run: SubagentRun) -> AsyncIterator[FakeRunner]:
        self.run = run
        try:
            yield self
        finally:
            self.closed = True

    async def turn(self, text: str, spawned: Callable[[], None]) -> str:
        if self.spawn_error is not None:
            raise self.spawn_error
        self.texts.append(text)
        spawned()
        action = self.plan[len(self.texts) - 1] if len(self.texts) <= len(self.plan) else "stop reason end_turn"
        return await action(self.run) if callable(action) else action


def make_run(tmp_path: Path, *, goal: str | None = "ship it", max_turns: int = 5, report: bool = True,
             grace: float = 60.0) -> SubagentRun:
    spec = RunSpec("r1", "do the thing", goal, max_turns if goal else 1,
                   tmp_path / "report.md" if report else None, str(tmp_path), "fake")
    return SubagentRun(spec, clock_ms=lambda: 1_700_000_000_000, grace=grace)


@asynccontextmanager
async def running(run: SubagentRun, runner: FakeRunner) -> AsyncIterator[Any]:
    cleaned: list[SubagentRun] = []
    run.cleanup = cleaned.append
    async with trio.open_nursery() as nursery:
        started = await nursery.start(run.run, runner)
        yield started, cleaned
        nursery.cancel_scope.cancel()


async def test_without_a_goal_a_run_is_one_turn(tmp_path):
    run, runner = make_run(tmp_path, goal=None), FakeRunner("stop reason end_turn", "unused")
    async with running(run, runner) as (started, cleaned):
        await run.ended.wait()
    assert started is None
    assert len(runner.texts) == 1 and runner.closed
    status = run.status()
    assert (status["state"], status["endReason"], status["turn"], status["maxTurns"]) == ("idle", "no_goal", 1, 1)
    assert cleaned == [run]  # token revoked, config file removed: once
    assert "end reason: no_goal" in (tmp_path / "report.md").read_text()


async def test_goal_reached_in_a_later_turn_ends_the_loop_there(tmp_path):
    run = make_run(tmp_path)
    runner = FakeRunner("stop reason end_turn", signal("goal_reached", summary="shipped"))
    async with running(run, runner):
        await run.ended.wait()
    assert len(runner.texts) == 2
    assert "Goal: ship it" in runner.texts[0]
    assert "haven't reported the goal reached" in runner.texts[1] and "turn 2 of 5" in runner.texts[1]
    status = run.status()
    assert (status["endReason"], status["turn"], status["goalReachedSelfReported"]) == ("goal_reached", 2, True)
    assert "self-reported" in status["done"] and "shipped" in status["done"]


async def test_need_help_is_its_own_state_and_ends_the_loop(tmp_path):
    run = make_run(tmp_path)
    runner = FakeRunner(signal("need_help", question="where is the key?"))
    async with running(run, runner):
        await run.ended.wait()
    status = run.status()
    assert (status["state"], status["endReason"], status["question"]) == ("needs_help", "need_help",
                                                                         "where is the key?")
    assert len(runner.texts) == 1


async def test_the_turn_cap_says_the_goal_was_never_reported_reached(tmp_path):
    run = make_run(tmp_path, max_turns=3)
    runner = FakeRunner()
    async with running(run, runner):
        await run.ended.wait()
    assert len(runner.texts) == 3
    status = run.status()
    assert (status["endReason"], status["turn"], status["maxTurns"]) == ("turn_cap", 3, 3)
    assert "harness limit of 3 turn(s) was reached and the goal was never reported reached" in status["done"]


async def test_every_stop_extends_the_done_message_and_the_first_signal_decides(tmp_path):
    run = make_run(tmp_path)

    async def twice(r: SubagentRun) -> str:
        await signal("goal_reached", summary="first claim")(r)
        assert r.ref is not None
        _, text = await r.ref.ask(lambda reply: Signal("need_help", {"question": "actually, help?"}, reply))
        assert "stays goal_reached" in text
        return "stop reason end_turn"

    async with running(run, FakeRunner(twice)):
        await run.ended.wait()
    lines = run.done.text.splitlines()
    assert [i for i, line in enumerate(lines) if "first claim" in line] < \
        [i for i, line in enumerate(lines) if "actually, help?" in line]
    assert run.end_reason == "goal_reached"
    on_disk = (tmp_path / "report.md").read_text().splitlines()
    assert len(on_disk) == len(lines)  # each line appended once, in order
    assert all(line.endswith(text) for line, text in zip(on_disk, lines))


async def test_a_signalling_turn_gets_a_grace_period_then_is_cut_short(tmp_path, autojump_clock):
    run = make_run(tmp_path, grace=30, report=False)  # no file I/O: threads would move the virtual clock
    runner = FakeRunner(signal("goal_reached", then="hang"))
    async with running(run, runner):
        before = trio.current_time()
        await run.ended.wait()
        assert 30 <= trio.current_time() - before < 31
    assert run.end_reason == "goal_reached"
    assert "cut short" in run.done.text


async def test_the_last_event_age_grows_while_a_run_is_wedged(tmp_path, autojump_clock):
    run = make_run(tmp_path, max_turns=4)
    async with running(run, FakeRunner(hang)):
        await trio.sleep(5)
        early = run.status()
        await trio.sleep(40)
        late = run.status()
        assert (late["state"], late["turn"], late["maxTurns"], late["endReason"]) == ("running", 1, 4, None)
        assert late["lastEventAgeS"] == pytest.approx(early["lastEventAgeS"] + 40)
        assert await run.await_resume(10) == "underway"  # a timed-out wait answers underway
        run.touch()
        assert run.status()["lastEventAgeS"] == 0


async def test_stop_cancels_the_turn_and_records_stopped(tmp_path, autojump_clock):
    run = make_run(tmp_path)
    async with running(run, FakeRunner(hang)):
        await trio.sleep(1)
        assert run.ref is not None
        assert "stopping" in await run.ref.ask(Stop)
        await run.ended.wait()
    assert run.end_reason == "stopped" and run.state == "idle"
    assert "end reason: stopped" in (tmp_path / "report.md").read_text()


async def test_a_runner_failure_is_the_error_end(tmp_path):
    run = make_run(tmp_path)
    async with running(run, FakeRunner("stop reason end_turn", crash)):
        await run.ended.wait()
    assert run.end_reason == "error" and "the child vanished" in run.done.text


async def test_a_run_that_never_spawns_reports_spawn_failed_and_cleans_up(tmp_path):
    run = make_run(tmp_path)
    runner = FakeRunner(spawn_error=FileNotFoundError("no such CLI"))
    async with running(run, runner) as (started, cleaned):
        pass
    assert isinstance(started, SpawnFailed) and "no such CLI" in started.reason
    assert cleaned == [run]
    assert not run.ended.is_set() and not (tmp_path / "report.md").exists()


async def test_await_resume_answers_needs_help_and_ended(tmp_path):
    run = make_run(tmp_path)
    gate = trio.Event()

    async def ask_later(r: SubagentRun) -> str:
        await gate.wait()
        return await signal("need_help", question="?")(r)

    async with running(run, FakeRunner(ask_later)):
        answers: list[str] = []

        async def wait() -> None:
            answers.append(await run.await_resume(30))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.sleep(0.05)
            gate.set()
        assert answers == ["needs_help"]
        await run.ended.wait()
        assert await run.await_resume(30) == "ended"


async def test_a_closed_channel_with_no_send_fails_open_as_underway(tmp_path):
    run = make_run(tmp_path)
    ref, inbox = open_mailbox("subagent:r1", 4)
    run.ref = ref
    answers: list[str] = []

    async def wait() -> None:
        answers.append(await run.await_resume(30))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)
        await trio.sleep(0.05)
        # The actor stops without answering the wait it had queued.
        refuse_unhandled(inbox)
    assert answers == ["underway"]


async def test_malformed_signals_are_refused_not_fatal(tmp_path):
    run = make_run(tmp_path, goal=None)

    async def odd(r: SubagentRun) -> str:
        assert r.ref is not None
        refused = await r.ref.ask(lambda reply: Signal("need_help", {}, reply))
        assert refused == (True, "need_help needs a question")
        unknown = await r.ref.ask(lambda reply: Signal("start", {"name": "x"}, reply))
        assert unknown[0] is True
        return "stop reason end_turn"

    async with running(run, FakeRunner(odd)):
        await run.ended.wait()
    assert run.end_reason == "no_goal"
    assert "need_help" not in run.done.text
