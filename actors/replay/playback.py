"""Replaying a recording (``python -m actors.replay --recording FILE``): the real session, recorded inputs.

The recorded session runs again in process, on virtual time with Trio's scheduler seeded
(:mod:`.determinism`), with no network and no subprocesses:

- the model plays the recorded calls in order, each item after its recorded delay, each error
  where it happened (a call the recording does not have, or of another purpose, is a difference);
- tools return their recorded results after their recorded duration — after asking again for the
  permissions they asked for and publishing the progress they published — except the session's own
  (``todo_write``, ``schedule_wakeup``, ``cron_create``, ``cron_delete``), which run for real: their
  effect is the session's state; the sandbox is never used;
- hook commands answer as recorded;
- the client's calls are made at their recorded times, ids (prompts, permission requests, tasks)
  translated to the replay's own.

Every event the session publishes is compared, as it is published, with the next recorded one
(wall-clock fields dropped, daemon-made ids named by order of appearance, the cwd and state directory
replaced); so is every client call's answer. The first difference stops the replay: :class:`Difference`
says the recording's step (its entry ``n``), the virtual time, what was expected and what came.
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing

from .. import Settings, open_daemon, wire
from ..model import ContextWindowExceeded, Finish, ModelError, TextDelta, ThoughtDelta, ToolCall, Usage
from ..runtime import default_tools
from ..session.tools import ToolRegistry, ToolResult
from ..settings import Limits
from .determinism import run_deterministic
from .recorded_tools import SESSION_TOOLS, answer_recorded
from .recording import _ID, Entry, HexCountingIds, IdNames, Recording, normalize, read_recording
from .world import virtual_clock_ms, virtual_now

SETTLE_LIMIT = 24 * 3600.0  # virtual seconds after the last recorded step before a replay gives up


@attrs.frozen
class Difference:
    step: int  # the recording's entry ``n`` that was expected next (0: none left)
    t: float  # virtual seconds
    what: str
    expected: Any
    got: Any

    def describe(self) -> str:
        return (f"difference at step {self.step} (t={self.t:.6f}s): {self.what}\n"
                f"  recorded: {json.dumps(self.expected, sort_keys=True, default=str)}\n"
                f"  replayed: {json.dumps(self.got, sort_keys=True, default=str)}")


@attrs.frozen
class PlaybackResult:
    recording: Recording
    difference: Difference | None
    events: int  # events compared
    model_calls: int
    tools: int

    @property
    def ok(self) -> bool:
        return self.difference is None


class _Stop(Exception):
    pass


class Playback:
    """The state of one replay: the recorded inputs still to use and the comparison so far."""

    def __init__(self, recording: Recording, workspace: Path, state_dir: Path) -> None:
        self.recording = recording
        h = recording.header
        self.rec_names = IdNames()
        self.rep_names = IdNames()
        paths_rec = [(h.cwd, "$CWD")] + ([(h.stateDir, "$STATE")] if h.stateDir else []) + (
            [(h.epoch, "$EPOCH")] if h.epoch else [])
        self.rec_paths = tuple(sorted(paths_rec, key=lambda p: len(p[0]), reverse=True))
        self.rep_paths: tuple[tuple[str, str], ...] = ((str(workspace), "$CWD"), (str(state_dir), "$STATE"))
        self.events: deque[Entry] = deque(recording.of_kind("event"))
        self.models: deque[Entry] = deque(recording.of_kind("model"))
        self.tools: dict[str, Entry] = {e.data["toolCallId"]: e for e in recording.of_kind("tool")}
        self.hooks: deque[Entry] = deque(recording.of_kind("hook"))
        self.all_events: list[Entry] = recording.of_kind("event")
        self.notifications: dict[str, list[Entry]] = {}  # recorded task id -> its notifications
        for e in recording.of_kind("background"):
            self.notifications.setdefault(e.data["taskId"], []).append(e)
        self.nursery: trio.Nursery | None = None
        self.pending = 0  # background effects still to come
        self.difference: Difference | None = None
        self.compared = 0
        self.model_calls = 0
        self.tool_calls = 0
        self.scope: trio.CancelScope | None = None

    def differ(self, step: int, what: str, expected: Any, got: Any) -> None:
        if self.difference is None:
            self.difference = Difference(step, round(trio.current_time(), 6), what, expected, got)
            if self.scope is not None:
                self.scope.cancel()
        raise _Stop(what)

    def differ_quietly(self, *args: Any) -> None:
        with contextlib.suppress(_Stop):
            self.differ(*args)

    # ------------------------------------------------------------- events

    def rec(self, value: Any) -> Any:
        return normalize(value, self.rec_names, self.rec_paths)

    def rep(self, value: Any) -> Any:
        return normalize(value, self.rep_names, self.rep_paths)

    def on_event(self, event: Any) -> None:
        if self.difference is not None:
            return
        got = self.rep({"id": event.id, "type": event.type, "promptId": event.prompt_id, "data": event.data})
        if not self.events:
            self.differ_quietly(0, f"an event the recording does not have ({event.type})", None, got)
            return
        entry = self.events.popleft()
        expected = self.rec(entry.data)
        self.compared += 1
        if expected != got:
            self.differ_quietly(entry.n, f"event {self.compared} differs", expected, got)

    def localize(self, value: Any) -> Any:
        """A recorded value with the recorded cwd and state directory made the replay's."""
        if isinstance(value, dict):
            return {k: self.localize(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.localize(v) for v in value]
        if isinstance(value, str):
            h = self.recording.header
            pairs = ((h.cwd, self.rep_paths[0][0]), (h.stateDir or "", self.rep_paths[1][0]))
            for old, new in sorted(pairs, key=lambda p: len(p[0]), reverse=True):  # the longer may hold the other
                if old and old in value:
                    value = value.replace(old, new)
            return self.localize_ids(value)
        return value

    def translate(self, raw: Any) -> Any:
        """A recorded id (a prompt's, a permission request's, a task's) as the replay knows it."""
        if not isinstance(raw, str):
            return raw
        name = self.rec_names.names.get(raw)
        if name is None:  # not seen yet: named now, as the comparison would
            name = self.rec(raw)
        return self.rep_names.ids.get(name, raw) if isinstance(name, str) else raw

    # ------------------------------------------------------------- background work a recorded tool started

    def start_background(self, context: Any, data: dict[str, Any]) -> None:
        """The background tasks the recorded call started (a shell, a monitor, a subagent run), tracked
        in the session as work run elsewhere; their recorded output, end and notification come at their
        recorded times."""
        before, after = data.get("events", [0, 0])
        manager = context.services.background
        for entry in self.all_events[before:after]:
            d = entry.data.get("data") or {}
            if entry.data["type"] != "background_task" or d.get("status") != "started":
                continue
            item = manager.track(d.get("kind", "shell"), d.get("label", ""))
            later = [e for e in self.all_events[after:] if e.data["type"] == "background_task"
                     and (e.data.get("data") or {}).get("taskId") == d.get("taskId")]
            self.pending += 1
            assert self.nursery is not None
            self.nursery.start_soon(self._play_task, manager, item, d.get("taskId"), later)

    async def _play_task(self, manager: Any, item: Any, recorded_id: str, later: list[Entry]) -> None:
        try:
            notes = list(self.notifications.get(recorded_id, []))
            for entry in later:
                d = entry.data["data"]
                await trio.sleep_until(max(entry.t, trio.current_time()))
                if d.get("status") == "output":
                    manager._event(item, "output", **{k: d[k] for k in ("text", "truncated") if k in d})
                elif d.get("status") == "finished":
                    note = next((n for n in notes if not n.data.get("merge")), None)
                    text = self.localize(note.data["text"]) if note is not None else ""
                    manager.finish(item.task_id, state=d.get("state", "completed"), text=text,
                                   exit_code=d.get("exitCode"), notify=note is not None)
                    return
        finally:
            self.pending -= 1

    def localize_ids(self, text: str) -> str:
        """A recorded text with the daemon's ids it names made the replay's."""
        return _ID.sub(lambda m: self.translate(m.group(0)), text)

    # ------------------------------------------------------------- the model

    def next_model_call(self, request: Any) -> Entry:
        self.model_calls += 1
        if not self.models:
            self.differ(self.events[0].n if self.events else 0,
                        f"model call {self.model_calls} ({request.purpose}) is not in the recording",
                        None, {"purpose": request.purpose})
        entry = self.models.popleft()
        if entry.data.get("purpose") != request.purpose:
            self.differ(entry.n, f"model call {self.model_calls} has another purpose",
                        entry.data.get("purpose"), request.purpose)
        return entry


class PlaybackModel:
    name = "recorded"

    def __init__(self, playback: Playback) -> None:
        self.playback = playback

    @contextlib.asynccontextmanager
    async def stream(self, request: Any) -> AsyncIterator[Any]:
        entry = self.playback.next_model_call(request)
        data = entry.data
        # Never earlier than it was recorded: the replay's own work takes no virtual time, the live one's did,
        # and what raced it (a background shell's output, a client's call) came at recorded times.
        await trio.sleep_until(max(trio.current_time(), entry.t) + (data.get("delay") or 0))
        error = data.get("error")
        if error is not None and not error.get("committed"):
            raise _error(error)
        if data.get("cancelled") and "items" not in data:
            await trio.sleep_forever()
        yield _items(data.get("items", []), error, bool(data.get("cancelled")))


async def _items(items: list[dict[str, Any]], error: dict[str, Any] | None,
                 cancelled: bool = False) -> AsyncIterator[Any]:
    at = trio.current_time()
    for item in items:
        at += item.get("dt") or 0
        if at > trio.current_time():
            await trio.sleep_until(at)
        else:
            await trio.lowlevel.checkpoint()
        made = _item(item)
        if made is not None:
            yield made
    if error is not None:
        raise _error(error)
    if cancelled:  # it was cancelled mid-stream (by a client's cancel, say): it is again, or it hangs here
        await trio.sleep_forever()


def _item(item: dict[str, Any]) -> Any:
    if "text" in item:
        return TextDelta(item["text"])
    if "thought" in item:
        return ThoughtDelta(item["thought"])
    if "tool_call" in item:
        c = item["tool_call"]
        return ToolCall(c["id"], c["name"], c["arguments"])
    if "usage" in item:
        return Usage(**item["usage"])
    if "finish" in item:
        return Finish(item["finish"])
    return None


def _error(error: dict[str, Any]) -> Exception:
    if error.get("code") == "context_window_exceeded" and "context" in error:
        return ContextWindowExceeded(error["context"]["needed"], error["context"]["window"])
    return ModelError(error["code"], error.get("message", ""), committed=bool(error.get("committed")),
                      retry_after=error.get("retryAfter"))


class PlaybackRegistry(ToolRegistry):
    """A replayed session's tools: each call answered from the recording."""

    def __init__(self, tools: list[Any], playback: Playback) -> None:
        super().__init__(tools)
        self.playback = playback

    async def execute(self, tool: Any, context: Any, arguments: Any) -> ToolResult:
        pb = self.playback
        pb.tool_calls += 1
        entry = pb.tools.pop(context.tool_call_id, None)
        if entry is None:
            pb.differ(0, f"tool call {context.tool_call_id} ({tool.name}) is not in the recording", None,
                      {"toolCallId": context.tool_call_id, "name": tool.name, "arguments": arguments})
        data = entry.data
        if data["name"] != tool.name or pb.rec(data["arguments"]) != pb.rep(arguments):
            pb.differ(entry.n, f"tool call {context.tool_call_id} differs",
                      {"name": data["name"], "arguments": pb.rec(data["arguments"])},
                      {"name": tool.name, "arguments": pb.rep(arguments)})
        if tool.name in SESSION_TOOLS and tool.builtin:
            result = await super().execute(tool, context, arguments)
            got = pb.rep(_result_record(result))
            if "result" in data and pb.rec(data["result"]) != got:
                pb.differ(entry.n, f"the result of {tool.name} ({context.tool_call_id}) differs",
                          pb.rec(data["result"]), got)
            return result
        return await answer_recorded(context, {**data, "t": entry.t}, pb.localize,
                                     lambda: pb.start_background(context, data))


def _result_record(result: ToolResult) -> dict[str, Any]:
    return {"content": result.content, "display": result.display, "error": result.error,
            "locations": list(result.locations), "acpContent": list(result.acp_content)}


def settings_of(recording: Recording) -> Settings:
    h = recording.header
    limits = Limits(**{k: v for k, v in h.limits.items() if k in attrs.fields_dict(Limits)})
    values = {k: v for k, v in h.settings.items() if k in attrs.fields_dict(Settings)}
    return Settings(**values, limits=limits, checkpoints_enabled=False, sandbox="off")


# ----------------------------------------------------------------- the run


def replay_recording(recording: Recording | str | Path, *, seed: int = 0) -> PlaybackResult:
    """Replay a recording; never raises for a replay that differs (see :class:`PlaybackResult`)."""
    if not isinstance(recording, Recording):
        recording = read_recording(recording)
    with tempfile.TemporaryDirectory(prefix="trellis-playback-") as tmp:
        workspace = Path(tmp) / "workspace"
        state_dir = Path(tmp) / "state"
        workspace.mkdir()
        pb = Playback(recording, workspace, state_dir)
        try:
            run_deterministic(_drive, pb, workspace, state_dir, seed=seed)
        except Exception as exc:
            if pb.difference is None:
                pb.difference = Difference(0, -1.0, f"the replay crashed: {type(exc).__name__}: {exc}", None, None)
        if pb.difference is None and pb.events:
            entry = pb.events[0]
            pb.difference = Difference(entry.n, -1.0, f"the replay ended before event {pb.compared + 1}",
                                       pb.rec(entry.data), None)
        return PlaybackResult(recording, pb.difference, pb.compared, pb.model_calls, pb.tool_calls)


async def _drive(pb: Playback, workspace: Path, state_dir: Path) -> None:
    recording = pb.recording
    settings = settings_of(recording)

    def tools() -> ToolRegistry:
        return PlaybackRegistry(list(default_tools(settings)), pb)

    async def hook_runner(hook: Any, stdin: bytes, cwd: str) -> Any:
        if not pb.hooks or pb.hooks[0].data["command"] != hook.command:
            pb.differ(pb.hooks[0].n if pb.hooks else 0, f"hook {hook.command!r} ran",
                      pb.hooks[0].data if pb.hooks else None, {"command": hook.command})
        entry = pb.hooks.popleft()
        await trio.sleep(entry.data.get("duration") or 0)
        outcome = entry.data["outcome"]
        return tuple(outcome) if isinstance(outcome, list) else outcome

    def observe(session: Any) -> None:
        if session.session_id == recording.header.sessionId:
            pb.rep_paths = (*pb.rep_paths, (session.bus.epoch, "$EPOCH"))
            session.bus.observers.append(pb.on_event)

    with trio.CancelScope() as scope:
        pb.scope = scope
        async with trio.open_nursery() as helpers:
            pb.nursery = helpers
            async with open_daemon(settings, model=PlaybackModel(pb), ids=HexCountingIds(),  # type: ignore[arg-type]
                                   clock_ms=virtual_clock_ms, now=virtual_now, state_dir=state_dir,
                                   workspace=str(workspace), tools=tools, hook_runner=hook_runner) as daemon:
                daemon.session_observers.append(observe)
                handle, _ = await daemon.create_session(session_id=recording.header.sessionId)
                subs: dict[int, Any] = {}
                for entry in recording.of_kind("action"):
                    await trio.sleep_until(max(entry.t, trio.current_time()))
                    await _events_before(pb, entry)
                    await _act(pb, handle, entry, subs)
                await _settle(pb, handle)
                closed = [e for e in pb.events if e.data.get("type") == "session_closed"
                          and e.data.get("data", {}).get("reason") == "closed"]
                if closed:
                    await trio.sleep_until(max(closed[0].t, trio.current_time()))
                    await daemon.close_session(handle.session_id)
                for sub in subs.values():
                    sub.close()
            helpers.cancel_scope.cancel()  # background effects still to come when the daemon closed: dropped


async def _act(pb: Playback, handle: Any, entry: Entry, subs: dict[int, Any]) -> None:
    do, args = entry.data["do"], entry.data.get("args") or {}
    if do == "prompt":
        body = wire.structure(args["body"], wire.PromptBody)
        result: Any = await handle.prompt(body, client_id=args.get("clientId"))
        result = {"type": type(result).__name__, **attrs.asdict(result)} if attrs.has(type(result)) else result
    elif do == "abort":
        result = await handle.abort_prompt(pb.translate(args["promptId"]))
    elif do == "mid_turn":
        result = await handle.post_mid_turn_message(args["text"], args.get("messageId"))
    elif do == "cancel":
        result = await handle.cancel()
    elif do == "kill_task":
        result = await handle.kill_task(pb.translate(args["taskId"]))
    elif do == "vote":
        try:
            result = await handle.vote(pb.translate(args["requestId"]), args["outcome"], args.get("optionId"))
        except ValueError as exc:
            result = {"error": str(exc)}
    elif do == "approval_mode":
        result = await handle.set_approval_mode(args["mode"])
    elif do == "model":
        result = await handle.set_model(args["model"])
    elif do == "attach":
        subs[args["client"]] = handle.subscribe(args.get("lastEventId"))
        result = None
    elif do == "detach":
        sub = subs.pop(args["client"], None)
        if sub is not None:
            sub.close()
        result = None
    else:
        pb.differ(entry.n, f"an action this replay does not know: {do}", entry.data, None)
        return
    expected = pb.rec(entry.data.get("result"))
    got = pb.rep(result)
    if expected != got:
        pb.differ(entry.n, f"the answer to {do} differs", expected, got)


async def _events_before(pb: Playback, entry: Entry) -> None:
    """Wait until the replay has published the events the recording had before this call began
    (a call at one instant with the work it answers, a vote say, comes after what it answers)."""
    after = entry.data.get("after", 0)
    while pb.compared < after:
        await trio.testing.wait_all_tasks_blocked()
        if pb.compared >= after:
            return
        wait = trio.lowlevel.current_statistics().seconds_to_next_deadline
        if math.isinf(wait):
            pending = pb.events[0] if pb.events else None
            pb.differ(pending.n if pending else entry.n,
                      f"the replay stopped before event {pb.compared + 1}, which came before step {entry.n}",
                      pb.rec(pending.data) if pending else None, None)
        await trio.sleep(wait)


async def _settle(pb: Playback, handle: Any) -> None:
    """Until the session is idle with no wakeup still to fire (virtual time jumps to each deadline)."""
    deadline = trio.current_time() + SETTLE_LIMIT
    while trio.current_time() < deadline:
        await trio.testing.wait_all_tasks_blocked()
        session = handle._session
        if session.bus.closed or (session.is_idle() and not session.background.registry.live("wakeup")
                                  and not pb.pending):
            return
        wait = trio.lowlevel.current_statistics().seconds_to_next_deadline
        await trio.sleep(0 if math.isinf(wait) else min(wait, deadline - trio.current_time()))
