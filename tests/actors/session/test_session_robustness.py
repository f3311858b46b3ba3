"""Regression tests for the session's robustness fixes (review findings).

Stale FIFO priority, unreadable and torn transcripts, credentials kept from model-run commands,
mid-turn input of automatic turns, suggestions as work items, cron fires and lifecycle baselines
in the work chain, terminal events when a session closes, cancels at the FIFO hand-off, concurrent
starts of one id, ``close_session`` under virtual time, and session-id validation.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import trio

from actors import CountingIds, Settings, load_script, open_daemon
from actors._actor import reply_pair
from actors.session import fifo as f
from actors.session.messages import Cancel
from actors.session.tools import ToolRegistry, ToolResult
from actors.session.transcript import Transcript, TranscriptError, is_safe_session_id
from tests.actors.session.guard.harness import (
    admit,
    call,
    collect,
    guard_session,
    guard_state,
    last_user,
    model_of,
    next_automatic,
    primary_calls,
    run_prompt,
    says,
    todo_write,
    virtual_now,
    wait_for,
)

YOLO = Settings(approval_mode="yolo")


def wakeup(delay: float, note: str) -> dict[str, Any]:
    return call("schedule_wakeup", delay=delay, note=note)


async def next_terminal(session: Any, after: int, prefix: str, *, timeout: float = 120) -> Any:
    """The first terminal event after ``after`` whose prompt id starts with ``prefix``."""
    with trio.fail_after(timeout):
        async with session.subscribe(last_event_id=after) as sub:
            async for event in sub:
                if event.type in ("turn_complete", "turn_error") and (event.prompt_id or "").startswith(prefix):
                    return event
    raise AssertionError("the event stream ended first")


# ----------------------------------------------------------------- 1. stale FIFO priority


class _AbortAfterDrain:
    """Stands in for the session's FIFO reference and stretches one real interleaving.

    The FIFO answers the stop path's drain with ``hasQueuedPrompt: true``; before the session
    applies that answer, the last queued prompt is aborted (``abort``). Everything else goes
    to the real FIFO unchanged.
    """

    def __init__(self, ref: Any, abort: Any) -> None:
        self._ref = ref
        self._abort = abort
        self.aborted: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ref, name)

    def ask_nowait(self, make: Any) -> Any:
        return _Stretched(self._ref.ask_nowait(make), self)


class _Stretched:
    def __init__(self, pending: Any, owner: _AbortAfterDrain) -> None:
        self._pending = pending
        self._owner = owner

    def poll(self) -> Any:
        return self._pending.poll()

    async def wait(self, timeout: float = float("inf"), *, shared: bool = False) -> Any:
        result = await self._pending.wait(timeout, shared=shared)
        if result.has_queued_prompt and not self._owner.aborted:
            self._owner.aborted.append(await self._owner._abort())
        return result


async def test_a_queued_prompt_aborted_while_the_drain_answer_travels_does_not_stall_automatic_work(
        autojump_clock):
    model = model_of(
        [wakeup(20, "old reminder")], says("scheduled"),
        [todo_write(2)], {"delay": 1, "steps": [{"text": "stopping"}]},
        says("reminder handled"),
    )
    with trio.fail_after(600):
        async with guard_session(model) as session:
            await run_prompt(session, "remind me")
            work = await admit(session, "real work")
            queued = await admit(session, "then this")  # queued behind the armed chain
            inner = session._session
            inner.fifo_ref = _AbortAfterDrain(inner.fifo_ref, lambda: session.abort_prompt(queued.prompt_id))
            run = await collect(session, work.last_event_id, work.prompt_id)
            assert inner.fifo_ref.aborted == [True]  # the race really happened
            assert (await session.turn(queued.prompt_id))["state"] == "cancelled"
            auto = await next_automatic(session, run.end.id, timeout=120)  # stalled forever before the fix
            status = await session.status()
    assert run.stop_reason == "end_turn"
    assert auto.end.type == "turn_complete"
    assert last_user(primary_calls(model)[4]).content == "@wakeup: old reminder"
    assert status["queuedPromptPriority"] is False and status["pendingCount"] == 0


async def test_a_stale_priority_flag_left_while_idle_is_released_when_the_work_loop_wakes(autojump_clock):
    model = model_of([wakeup(30, "check")], says("scheduled"), says("checked"))
    with trio.fail_after(600):
        async with guard_session(model) as session:
            run = await run_prompt(session, "remind me")
            # What the race above leaves behind: priority for a queued prompt that no longer exists.
            session._session.chain.queued_prompt_priority = True
            assert (await session.status())["pendingCount"] == 0
            auto = await next_automatic(session, run.end.id, timeout=120)
            status = await session.status()
    assert auto.end.type == "turn_complete"
    assert last_user(primary_calls(model)[2]).content == "@wakeup: check"
    assert 29 <= trio.current_time() and status["queuedPromptPriority"] is False


# ----------------------------------------------------------------- 2. unreadable and torn transcripts


async def _session_with_history(daemon: Any, session_id: str) -> Any:
    session, _ = await daemon.create_session(session_id=session_id)
    for text in ("first", "second"):
        assert (await run_prompt(session, text)).stop_reason == "end_turn"
    return session


async def test_load_of_a_transcript_corrupt_in_the_middle_raises_and_the_session_goes_on(autojump_clock, tmp_path):
    model = load_script([[{"text": "one"}], [{"text": "two"}], [{"text": "three"}]])
    state = tmp_path / "state"
    with trio.fail_after(120):
        async with open_daemon(model=model, ids=CountingIds(), state_dir=state) as daemon:
            session = await _session_with_history(daemon, "broken")
            path = state / "sessions" / "broken.jsonl"
            lines = path.read_bytes().splitlines(keepends=True)
            assert len(lines) == 4
            lines[1] = b'{"type": "message", "mess\n'
            path.write_bytes(b"".join(lines))
            with pytest.raises(TranscriptError):
                await session.load()
            # The actor survived: it answers and runs the next prompt.
            assert daemon.session_count == 1
            assert (await session.status())["state"] == "idle"
            assert (await run_prompt(session, "third")).stop_reason == "end_turn"


async def test_a_rewind_whose_transcript_cannot_be_rewritten_answers_an_error(autojump_clock, tmp_path):
    model = load_script([[{"text": "one"}], [{"text": "two"}], [{"text": "three"}]])
    state = tmp_path / "state"
    with trio.fail_after(120):
        async with open_daemon(model=model, ids=CountingIds(), state_dir=state) as daemon:
            session = await _session_with_history(daemon, "stuck")
            # The rewrite goes through "<id>.jsonl.tmp": a directory there makes it fail (also as root).
            (state / "sessions" / "stuck.jsonl.tmp").mkdir()
            with pytest.raises(ValueError, match="not rewritten"):
                await session.rewind(0)
            assert daemon.session_count == 1
            assert (await run_prompt(session, "third")).stop_reason == "end_turn"


async def test_a_torn_last_line_is_cut_before_the_next_append(autojump_clock, tmp_path):
    state = tmp_path / "state"
    path = state / "sessions" / "torn.jsonl"
    path.parent.mkdir(parents=True)
    good = [{"type": "message", "message": {"role": "user", "content": "hello"}},
            {"type": "message", "message": {"role": "assistant", "content": "hi"}}]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in good) + b'{"type": "message", "message": {"ro')
    model = load_script([[{"text": "answer"}], [{"text": "again"}]])
    with trio.fail_after(120):
        async with open_daemon(model=model, ids=CountingIds(), state_dir=state) as daemon:
            session = await daemon.load_session("torn")
            assert (await session.status())["historyLength"] == 2
            assert (await run_prompt(session, "next")).stop_reason == "end_turn"
            assert (await run_prompt(session, "and more")).stop_reason == "end_turn"
    messages = Transcript(state, "torn").messages()  # readable: no torn fragment in the middle
    assert [m.content for m in messages] == ["hello", "hi", "next", "answer", "and more", "again"]
    assert path.read_bytes().endswith(b"\n")


# ----------------------------------------------------------------- 3. credentials and model-run commands


async def test_the_shell_tool_never_sees_the_model_key_or_the_daemon_token(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-leak-me-not")
    monkeypatch.setenv("TRELLIS_TOKEN", "token-leak-me-not")
    monkeypatch.setenv("TRELLIS_TEST_VISIBLE", "seen-by-commands")
    model = load_script([[call("shell", command="env")], [{"text": "done"}]])
    with trio.fail_after(20):
        async with open_daemon(YOLO, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session()
            assert (await run_prompt(session, "print the environment")).stop_reason == "end_turn"
    result = model.calls[1].messages[-1]
    assert result.role == "tool" and result.name == "shell"
    # Only the allowlist is passed on (PATH, HOME, ...): any other variable of the daemon's stays out.
    assert "PATH=" in result.content and "TRELLIS_TEST_VISIBLE" not in result.content
    assert "leak-me-not" not in result.content
    assert "OPENAI_API_KEY" not in result.content and "TRELLIS_TOKEN" not in result.content


# ----------------------------------------------------------------- 4. mid-turn input of automatic turns


async def test_mid_turn_input_posted_during_an_automatic_turn_runs_as_the_next_prompt(autojump_clock):
    model = load_script([[wakeup(10, "check")], [{"text": "scheduled"}],
                         [{"sleep": 5}, {"text": "woke"}], [{"text": "tidied"}]])
    with trio.fail_after(600):
        async with open_daemon(YOLO, model=model, ids=CountingIds(), now=virtual_now) as daemon:
            session, _ = await daemon.create_session()
            run = await run_prompt(session, "remind me")
            await wait_for(lambda: len(model.calls) == 3)  # the wakeup's automatic turn is streaming
            posted = await session.post_mid_turn_message("also tidy up")
            assert posted["accepted"] is True
            auto = await next_automatic(session, run.end.id)
            # It runs under its message id, as qwen serve promotes a waiting mid-turn message.
            follow = await next_terminal(session, auto.end.id, posted["messageId"])
    assert auto.stop_reason == "end_turn"
    assert follow.type == "turn_complete" and follow.data["stopReason"] == "end_turn"
    assert len(model.calls) == 4 and last_user(model.calls[3]).content == "also tidy up"


# ----------------------------------------------------------------- 5. follow-up suggestions


async def test_a_suggestion_call_is_running_work_that_cancel_ends(autojump_clock):
    model = load_script([[{"text": "answer"}], {"delay": 100, "steps": [{"text": "one\ntwo"}]}])
    settings = Settings(followup_suggestions=True)
    with trio.fail_after(600):
        async with open_daemon(settings, model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            run = await run_prompt(session, "question")
            await wait_for(lambda: len(model.calls) == 2)
            assert model.calls[1].purpose == "suggestion"
            status = await session.status()
            assert status["state"] == "running" and status["activeWorkState"] == "suggestion"
            assert await session.cancel() is True
            await wait_for(lambda: not session._session.work.running, timeout=5)
            assert (await session.status())["state"] == "idle"
            suggestions = [e for e in session._session.bus.ring if e.type == "followup_suggestion"]
    assert run.stop_reason == "end_turn"
    assert trio.current_time() < 100 and suggestions == []


async def test_no_suggestion_call_while_a_prompt_is_queued(autojump_clock):
    model = load_script([{"delay": 1, "steps": [{"text": "one"}]}, [{"text": "two"}],
                         [{"text": "next idea\nanother idea"}]])
    settings = Settings(followup_suggestions=True)
    with trio.fail_after(600):
        async with open_daemon(settings, model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            first = await admit(session, "first")
            second = await admit(session, "second")
            await collect(session, first.last_event_id, second.prompt_id)
            await wait_for(lambda: any(e.type == "followup_suggestion" for e in session._session.bus.ring))
            suggestions = [e for e in session._session.bus.ring if e.type == "followup_suggestion"]
    assert [c.purpose for c in model.calls] == ["primary", "primary", "suggestion"]
    assert [e.prompt_id for e in suggestions] == [second.prompt_id]
    assert suggestions[0].data["suggestions"] == ["next idea", "another idea"]


# ----------------------------------------------------------------- 6. and 7. the work chain


async def test_a_cron_fire_of_the_chains_own_job_waits_until_the_chain_cannot_resume(autojump_clock):
    model = model_of(
        [todo_write(2), call("cron_create", schedule="* * * * *", prompt="poll the queue", recurring=False),
         wakeup(300, "my build")],
        says("waiting"),                                 # deferred: the chain's wakeup is pending
        says("build checked"), says("g1"), says("g2"),   # the related wakeup continues the chain
        says("polled"),                                  # only then the cron fire
        says("never"),
    )
    with trio.fail_after(3000):
        async with guard_session(model) as session:
            run = await run_prompt(session, "real work")
            await trio.sleep(100)  # the cron job fired at 12:01:00, 30 s in
            held = await session.status()
            related = await next_automatic(session, run.end.id)
            cron = await next_automatic(session, related.end.id)
    assert held["automaticQueue"] == 1 and held["state"] == "idle" and held["todoStopGuard"]["armed"]
    calls = primary_calls(model)
    assert last_user(calls[2]).content == "@wakeup: my build"
    assert related.attempts == [1, 2, 2]
    assert last_user(calls[5]).content == "poll the queue"
    assert cron.guard == [] and len(calls) == 6


async def test_after_a_mid_turn_cwd_change_an_automatic_turn_for_old_work_is_an_independent_chain(
        autojump_clock, tmp_path):
    model = model_of(
        [wakeup(60, "check")], [{"sleep": 5}, {"text": "waiting"}],   # the cwd changes during the sleep
        [todo_write(2)], says("stop"), says("g1"), says("g2"),         # the wakeup's own chain
        says("never"),
    )
    with trio.fail_after(3000):
        async with guard_session(model, workspace=str(tmp_path)) as session:
            admitted = await admit(session, "start")
            await wait_for(lambda: len(model.calls) == 2)
            await session.change_cwd(str(tmp_path))
            run = await collect(session, admitted.last_event_id, admitted.prompt_id)
            auto = await next_automatic(session, run.end.id)
            state = await guard_state(session)
    assert run.stop_reason == "end_turn"
    assert last_user(primary_calls(model)[2]).content == "@wakeup: check"
    assert auto.attempts == [1, 2, 2]  # its own todo_write armed the guard
    assert state["armed"] is True


# ----------------------------------------------------------------- 12. closing while a prompt runs


def _terminal_then_closed(events: list[Any], prompt_id: str) -> tuple[int, int]:
    ends = [i for i, e in enumerate(events) if e.type in ("turn_complete", "turn_error") and e.prompt_id == prompt_id]
    closed = [i for i, e in enumerate(events) if e.type == "session_closed"]
    assert len(ends) == 1, [e.type for e in events]
    assert events[ends[0]].type == "turn_complete" and events[ends[0]].data["stopReason"] == "cancelled"
    assert closed == [len(events) - 1]
    return ends[0], closed[0]


async def test_closing_a_session_ends_its_running_turn_cancelled_before_session_closed(autojump_clock):
    model = load_script([[{"sleep": 1000}, {"text": "late"}]])
    with trio.fail_after(600):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            pid = (await session.prompt("long")).prompt_id
            await wait_for(lambda: len(model.calls) == 1)
            await daemon.close_session(session.session_id)
            events = [e async for e in sub]
    end, closed = _terminal_then_closed(events, pid)
    assert end < closed and events[closed].data["reason"] == "closed"
    assert trio.current_time() < 1000


async def test_closing_the_daemon_ends_a_running_turn_cancelled_before_session_closed(autojump_clock):
    model = load_script([[{"sleep": 1000}, {"text": "late"}]])
    with trio.fail_after(600):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            pid = (await session.prompt("long")).prompt_id
            await wait_for(lambda: len(model.calls) == 1)
        events = [e async for e in sub]
    end, closed = _terminal_then_closed(events, pid)
    assert end < closed and events[closed].data["reason"] == "daemon_shutdown"


# ----------------------------------------------------------------- 13. cancel at the FIFO hand-off


class _HoldHandoff:
    """Stands in for the session's FIFO reference: after the FIFO hands a prompt over (``TakeNext``
    answered, the prompt ``running`` in the FIFO), the work loop is held before it resumes.

    In the real system that gap is one scheduling step (the reply is sent, the work loop not yet
    rescheduled) during which the session's mailbox may handle a ``Cancel`` — without holding
    anything, a ``cancel()`` sent right after admitting a prompt to an idle session lands there
    about half the time (Trio randomises the order within a scheduling batch). Holding it makes
    the interleaving deterministic without changing what either actor does.
    """

    def __init__(self, ref: Any) -> None:
        self._ref = ref
        self.handed = trio.Event()
        self.release = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ref, name)

    async def ask(self, make: Any, timeout: float = 10.0) -> Any:
        answer = await self._ref.ask(make, timeout)
        if isinstance(answer, f.PendingPrompt) and not self.handed.is_set():
            self.handed.set()
            await self.release.wait()
        return answer


async def test_a_cancel_between_the_fifo_handoff_and_the_work_item_is_kept(autojump_clock):
    model = load_script([[{"sleep": 100}, {"text": "late"}], [{"text": "next"}]])
    with trio.fail_after(600):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            inner = session._session
            gate = _HoldHandoff(inner.fifo_ref)
            inner.fifo_ref = gate
            admitted = await admit(session, "slow")
            with trio.fail_after(5):
                await gate.handed.wait()
            assert (await session.turn(admitted.prompt_id))["state"] == "running"  # handed over
            assert (await session.status())["state"] == "idle"  # its work item has not begun
            cancelled = await session.cancel()
            gate.release.set()
            run = await collect(session, admitted.last_event_id, admitted.prompt_id, timeout=300)
    assert cancelled is True
    assert run.stop_reason == "cancelled" and trio.current_time() < 100


async def test_a_cancel_after_the_work_loop_marked_the_prompt_starting_is_kept(autojump_clock):
    # A user's cancel at the one point the work item's state machine keeps it for (the work loop took the
    # prompt from the FIFO, its work item has not begun): no public call can land exactly there, because
    # nothing between TakeNext's return and the work item yields to the scheduler; the mailbox's handler
    # is called as a Cancel message would be.
    model = load_script([[{"sleep": 100}, {"text": "late"}]])
    with trio.fail_after(600):
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            inner = session._session
            original = inner.run_prompt
            answers: list[bool] = []

            async def cancel_first(entry: f.PendingPrompt) -> None:
                reply, pending = reply_pair()
                inner._handle(Cancel(reply))
                answers.append(pending.poll()[1])
                await original(entry)

            inner.run_prompt = cancel_first
            run = await run_prompt(session, "slow", timeout=300)
    assert answers == [True]
    assert run.stop_reason == "cancelled" and trio.current_time() < 100


# ----------------------------------------------------------------- 14. an id that is already starting


async def test_starting_an_id_that_is_already_starting_raises_session_starting():
    from actors import SessionStarting  # new with the fix

    with trio.fail_after(10):
        async with open_daemon(ids=CountingIds()) as daemon:
            started: list[Any] = []
            async with trio.open_nursery() as nursery:
                async def first() -> None:
                    started.append(await daemon.create_session(session_id="dup"))

                nursery.start_soon(first)
                while "dup" not in daemon._starting:
                    await trio.sleep(0)
                with pytest.raises(SessionStarting):
                    await daemon.create_session(session_id="dup")
            assert started[0][0].session_id == "dup" and started[0][1] is False
            assert daemon.session_count == 1


# ----------------------------------------------------------------- 15. close waits for the session


CLEANUP_SECONDS = 10.0  # longer than the five seconds close_session used to wait at most


class _HoldsAResource:
    """A tool whose cleanup takes a while (say, a graceful shutdown of something it started)."""

    name, kind, builtin = "hold", "other", False
    description, parameters = "holds a resource until cancelled", {"type": "object"}

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def execute(self, context: Any, arguments: Any) -> ToolResult:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(CLEANUP_SECONDS)
            self.log.append("released")
        return ToolResult("unreachable")


async def test_close_session_returns_once_the_session_stopped_also_under_virtual_time(autojump_clock):
    log: list[str] = []
    model = load_script([[call("hold")]])
    with trio.fail_after(600):
        async with open_daemon(model=model, ids=CountingIds(),
                               tools=lambda: ToolRegistry([_HoldsAResource(log)])) as daemon:
            session, _ = await daemon.create_session()
            inner = session._session
            await session.prompt("hold it")
            await wait_for(lambda: len(model.calls) == 1)
            await trio.sleep(1)  # the tool is running
            asked = trio.current_time()
            await daemon.close_session(session.session_id)
            # No checkpoint since the call returned: all of this was true when it did.
            assert trio.current_time() - asked >= CLEANUP_SECONDS
            assert log == ["released"]
            assert inner.bus.closed
            assert session.session_id not in [h.session_id for h in daemon.sessions()]


# ----------------------------------------------------------------- 16. session ids


def test_a_session_id_with_a_trailing_newline_is_not_safe():
    assert is_safe_session_id("abc") is True
    assert is_safe_session_id("abc\n") is False
    assert is_safe_session_id("abc\nmore") is False
