"""The :class:`SubagentRun` actor: one subagent run and its goal loop.

A run drives its runner one turn at a time. Without a goal it is one turn.
With one, when a turn ends and nothing has said stop, the next turn
re-prompts the subagent toward the goal, up to ``max_turns``. What says stop
is a signal from the subagent (``goal_reached``, ``need_help``, which arrive
through the mailbox from ``/signal/mcp/<token>``), the parent's ``stop``, or
the turn cap. The first signal decides the end reason; the turn it arrived in
may finish within a grace period, and no further turn starts.

Identity never comes from a message field: the HTTP layer resolved a token to
this object before anything reached its mailbox.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio

from .._actor import ActorRef, Reply, open_mailbox, serve_mailbox
from . import texts
from .files import check_named_report
from .report import DoneMessage

log = logging.getLogger("trellis.subagents")

MAILBOX = 16
MAX_WAITERS = 64
MAX_SIGNALS = 32  # per run: a subagent that keeps signalling cannot grow the done message without bound


@attrs.frozen
class RunSpec:
    """What ``start`` asked for, validated."""

    name: str
    brief: str
    goal: str | None
    max_turns: int  # already 1 when there is no goal
    report_file: Path | None
    cwd: str
    runner: str


@attrs.frozen
class SpawnFailed:
    """The run never reached a spawn (its token is revoked by whoever started it)."""

    reason: str


class Turns(Protocol):
    """An opened runner: runs one turn of the subagent to its end."""

    async def turn(self, text: str, spawned: Callable[[], None]) -> str:
        """Run one turn on ``text``; call ``spawned()`` once it is running; return how it ended."""
        ...


class Runner(Protocol):
    name: str

    def open(self, run: SubagentRun) -> AbstractAsyncContextManager[Turns]: ...


# ----------------------------------------------------------------- messages


@attrs.frozen
class Signal:
    """``goal_reached`` or ``need_help`` from the subagent that owns this run's token."""

    kind: str
    arguments: dict[str, Any]
    reply: Reply[tuple[bool, str]]  # (is_error, text)


@attrs.frozen
class Stop:
    reply: Reply[str]


@attrs.frozen
class AwaitResume:
    """Answered with ``ended`` or ``needs_help``; a close without an answer means underway."""

    reply: Reply[str]


RunMessage = Signal | Stop | AwaitResume


# ----------------------------------------------------------------- the actor


class SubagentRun:
    """One run. Start it with ``await nursery.start(run.run, runner)``; read it with :meth:`status`."""

    def __init__(self, spec: RunSpec, *, clock_ms: Callable[[], int], grace: float = 60.0) -> None:
        self.spec = spec
        self.token: str | None = None
        self.config_path: Path | None = None
        self.scope_key = os.urandom(8).hex()  # MCP sessions of this run's URL are scoped to it
        # The session whose share of live runs this one counts in (None: started over MCP), and the id of the
        # child session that carries it out (a session runner's), whose own runs count in the same share.
        self.owner: str | None = None
        self.child_session_id: str | None = None
        self.turn = 0
        self.state = "starting"  # starting | running | idle | needs_help
        self.end_reason: str | None = None
        self.question: str | None = None
        # The child session's permission requests waiting for a vote (request id -> what it asks to run):
        # nobody answers them but a client of that session, so the parent polling status must see them.
        self.waiting_votes: dict[str, str] = {}
        self.named_report: str | None = None
        # Why a report path the subagent names is refused (``None``: it may be used); set by the registry.
        self.refuse_report: Callable[[str], str | None] = lambda named: check_named_report(
            Path(spec.cwd, named), spec.cwd)
        # Asks the parent's user about a named report (``None`` once allowed, else why not); ``None``: no one
        # to ask (a run started over MCP by a token holder), the rule alone decides.
        self.approve_report: Callable[[Path], Awaitable[str | None]] | None = None
        self.start_soon: Callable[..., None] = lambda *_: None  # where the approval waits (the registry's nursery)
        self._report_asked = False
        self.output_tail = ""  # the command runner's captured output (bounded)
        self.done = DoneMessage(spec.name, spec.report_file, clock_ms)
        if spec.report_file is not None:  # appended to beneath the cwd, as a named one is: no symlink swapped in
            self.done.confine = Path(spec.cwd)
        self.ended = trio.Event()
        self.ref: ActorRef[RunMessage] | None = None
        self.last_event_at = trio.current_time()
        # Called once, when a spawned run has ended (after its token is revoked and its report flushed).
        self.listeners: list[Callable[[SubagentRun], None]] = []
        # Called once, however the run stops (spawned or not): revoke the token, delete the config file.
        self.cleanup: Callable[[SubagentRun], None] = lambda _: None
        self._grace = grace
        self._signals = 0
        self._waiters: list[Reply[str]] = []
        self._loop_scope = trio.CancelScope()
        self._turn_scope = trio.CancelScope()
        self._cleaned = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def max_turns(self) -> int:
        return self.spec.max_turns

    def touch(self) -> None:
        """Something happened in the run (an event, output, a signal): the last-event age restarts."""
        self.last_event_at = trio.current_time()

    # ------------------------------------------------------------- status (readable after the run ended too)

    def status(self) -> dict[str, Any]:
        """``{state, turn, maxTurns, endReason, lastEventAgeS, ...}``; ``endReason`` is null while underway."""
        status: dict[str, Any] = {
            "name": self.name,
            "state": self.state,
            "turn": self.turn,
            "maxTurns": self.max_turns,
            "endReason": self.end_reason,
            "lastEventAgeS": round(max(0.0, trio.current_time() - self.last_event_at), 3),
            "ended": self.ended.is_set(),
            "runner": self.spec.runner,
            "goal": self.spec.goal,
            "goalReachedSelfReported": self.end_reason == "goal_reached",
            "question": self.question,
            "reportFile": str(self.done.path) if self.done.path is not None else None,
            "done": self.done.text,
        }
        if self.child_session_id is not None:
            status["childSessionId"] = self.child_session_id
            status["waitingForVote"] = [{"requestId": r, "title": t} for r, t in self.waiting_votes.items()]
        if self.done.error:
            status["reportError"] = self.done.error
        if self.output_tail:
            status["outputTail"] = self.output_tail
        return status

    # ------------------------------------------------------------- the task

    async def run(self, runner: Runner, *, task_status: trio.TaskStatus[SpawnFailed | None]) -> None:
        """Run the goal loop to its end. Reports ``None`` once spawned, or :class:`SpawnFailed`."""
        ref, inbox = open_mailbox(f"subagent:{self.name}", MAILBOX)
        self.ref = ref
        started = False

        def spawned() -> None:
            nonlocal started
            if not started:
                started = True
                self.state = "running"
                self.touch()
                task_status.started(None)

        reason, detail = "stopped", "the daemon shut down"
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_mailbox, inbox, self._handle)
                try:
                    reason, detail = await self._drive(runner, spawned)
                finally:
                    self._end(reason, detail, spawned=started)  # synchronous: a cancel cannot cut it short
                    # The mailbox drains what is queued: a late wait or signal sees the ended run.
                    ref.close()
        except Exception:
            # A bug in this actor stays in this run: it lives in the daemon's nursery.
            log.exception("subagent run %s crashed", self.name)
            detail = "the run crashed"
        finally:
            ref.close()
        if not started:
            task_status.started(SpawnFailed(detail))

    async def _drive(self, runner: Runner, spawned: Callable[[], None]) -> tuple[str, str]:
        """The goal loop under the stop scope; never raises an ``Exception`` (a failure is an end reason)."""
        try:
            with self._loop_scope:
                async with runner.open(self) as turns:
                    return await self.goal_loop(turns, spawned), ""
        except Exception as exc:
            log.warning("subagent run %s failed: %s", self.name, exc)
            return "error", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return "stopped", ""

    async def goal_loop(self, turns: Turns, spawned: Callable[[], None]) -> str:
        """Turns until something says stop; returns the end reason."""
        goal = self.spec.goal
        while True:
            self.turn += 1
            text = texts.first_brief(self.spec.brief, goal) if self.turn == 1 else \
                texts.reprompt(goal or "", self.turn, self.max_turns)
            if self.state != "needs_help":
                self.state = "running"
            self._turn_scope = trio.CancelScope()  # a signal during the spawn already bounds this turn
            detail = "cut short: the grace period after the subagent's signal ran out"
            with self._turn_scope:
                detail = await turns.turn(text, spawned)
            self.touch()
            self._record(texts.turn_line(self.turn, self.max_turns, detail))
            if self.end_reason is not None:
                return self.end_reason
            if goal is None:
                return "no_goal"
            if self.turn >= self.max_turns:
                return "turn_cap"

    def _end(self, reason: str, detail: str, *, spawned: bool) -> None:
        """Settle the run: the end line (on disk when it returns), the token revoked, then tell who waits."""
        if not spawned:
            self._clean()
            self._close_waiters()
            return
        decided = self.end_reason
        if decided is None:
            self.end_reason = reason
            self._record(texts.end_line(reason, self.turn, self.max_turns, detail))
        else:
            if reason == "stopped":
                self._record(f"Stopped while the turn wound down: {detail or 'by the parent'}.")
            elif reason == "error":
                self._record(f"The runner failed while the turn wound down: {detail}.")
            self._record(texts.end_line(decided, self.turn, self.max_turns))
        self.state = "needs_help" if self.end_reason == "need_help" else "idle"
        self._clean()  # revoked before anyone is told the run ended (every line is on disk already)
        self.touch()
        self.ended.set()
        for reply in self._waiters:
            reply.send("ended")
        self._waiters.clear()
        for listen in self.listeners:
            try:
                listen(self)
            except Exception:
                log.exception("a listener of subagent run %s failed", self.name)

    def _clean(self) -> None:
        if not self._cleaned:
            self._cleaned = True
            try:
                self.cleanup(self)
            except Exception:
                log.exception("cleaning up subagent run %s failed", self.name)

    def _close_waiters(self) -> None:
        for reply in self._waiters:
            reply.close()  # a closed channel with no send: the waiter fails open, as "underway"
        self._waiters.clear()

    def _record(self, line: str) -> None:
        """Extend the done message and append it to the report file now (a small synchronous write)."""
        self.done.add(line)
        self.done.flush()

    # ------------------------------------------------------------- the mailbox

    def _handle(self, message: RunMessage) -> None:
        try:
            self._dispatch(message)
        except Exception:  # never let one bad message take the run (and its daemon) down
            log.exception("subagent run %s could not handle %r", self.name, type(message).__name__)
            reply = getattr(message, "reply", None)
            if isinstance(reply, Reply):
                reply.close()

    def _dispatch(self, message: RunMessage) -> None:
        match message:
            case Signal(kind, arguments, reply):
                reply.send(self.record_signal(kind, arguments))
            case Stop(reply):
                reply.send(self._stop())
            case AwaitResume(reply):
                if self.ended.is_set():
                    reply.send("ended")
                elif self.state == "needs_help":
                    reply.send("needs_help")
                else:
                    self._waiters.append(reply)
                    while len(self._waiters) > MAX_WAITERS:  # waiters that timed out long ago
                        self._waiters.pop(0).close()
            case _:
                raise TypeError(f"SubagentRun cannot handle {message!r}")

    def record_signal(self, kind: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        if self.ended.is_set():
            return True, "this run has ended; nothing was recorded"
        self._signals += 1
        if self._signals > MAX_SIGNALS:
            return True, f"too many signals from this run (at most {MAX_SIGNALS}); nothing was recorded"
        self.touch()
        note = ""
        if kind == "goal_reached":
            named, summary = arguments.get("report_file"), arguments.get("summary")
            if isinstance(named, str) and named:
                note = self._name_report(named)
            self._record(texts.goal_reached_line(summary if isinstance(summary, str) else None,
                                                 self.named_report if named else None))
        elif kind == "need_help":
            question = arguments.get("question")
            if not isinstance(question, str) or not question.strip():
                return True, "need_help needs a question"
            self.question = question
            self._record(texts.need_help_line(question))
        else:
            return True, f"unknown signal {kind!r}"
        first = self.end_reason is None
        if first:
            self.end_reason = kind
            # The turn may finish what it is doing (write its report, say goodbye), but not forever.
            self._turn_scope.deadline = min(self._turn_scope.deadline, trio.current_time() + self._grace)
        if kind == "need_help":
            self.state = "needs_help"
            for reply in self._waiters:
                reply.send("needs_help")
            self._waiters.clear()
        if kind == "goal_reached":
            text = ("Recorded goal_reached as self-reported (the daemon does not verify it). "
                    "No further turn will be started.")
        else:
            text = "Recorded need_help; the parent sees your question in status. No further turn will be started."
        if not first:
            text = f"Recorded; the run's end reason stays {self.end_reason} (the first signal decides)."
        return False, text + note

    def _name_report(self, named: str) -> str:
        """The subagent names where it wrote: used only if it exists as a regular file that the report
        rule allows (:meth:`~actors.tools.paths.Scope.resolve_report`: under the run's cwd, never a
        hidden path, ``.git/`` or a file a hook runs), and, where the run has an approver (a
        session's ``agent`` tool: its approval mode decides, as for ``write_file``), once approved.

        Never created; a refused path is not used and the answer says why, while the signal itself
        is still recorded.
        """
        problem = self.refuse_report(named)
        if problem is not None:
            return f" (report_file not used, nothing was written to it: {problem})"
        path = Path(os.path.realpath(Path(self.spec.cwd, named)))
        if self.done.path is not None or self._report_asked:
            return f" (this run already reports to {self.done.path or self.named_report}; {path} is recorded " \
                   f"as where you wrote)"
        self.named_report = str(path)
        if self.approve_report is None:
            self.done.name_path(path, Path(self.spec.cwd))
            return f" The done message will be appended to {path}."
        self._report_asked = True
        self.start_soon(self._wait_report_approval, path)
        return f" The done message will be appended to {path} once the user approves it."

    async def _wait_report_approval(self, path: Path) -> None:
        """Ask (in the parent's approval mode); on approval write every line so far, and the rest as they come.

        Runs where the registry says (it outlives the run: the answer may come after its end)."""
        assert self.approve_report is not None
        try:
            denied = await self.approve_report(path)
        except Exception as exc:  # PermissionCancelled, a closed session: nothing approved
            denied = f"the request ended unanswered ({type(exc).__name__})"
        if denied is not None:
            self.done.error = f"report_file {path} not used: {denied}"
            return
        if self.done.name_path(path, Path(self.spec.cwd)):
            self.done.flush()

    def _stop(self) -> str:
        if self.ended.is_set():
            return f"run {self.name!r} has already ended ({self.end_reason})"
        self._loop_scope.cancel()
        return f"stopping run {self.name!r}"

    async def await_resume(self, timeout: float) -> str:
        """``ended``, ``needs_help`` or ``underway`` (on timeout, and when the channel closes unanswered)."""
        if self.ended.is_set():
            return "ended"
        if self.state == "needs_help":
            return "needs_help"
        ref = self.ref
        if ref is None or timeout <= 0:
            return "underway"
        try:
            pending = ref.ask_nowait(AwaitResume)
            return await pending.wait(timeout)
        except trio.TooSlowError:
            return "underway"
        except Exception:  # ActorGone, MailboxFull: a closed channel with no send fails open
            return "ended" if self.ended.is_set() else "underway"

