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
- checkpoint restores (a rewind with its files, an undo) do to the conversation what they did, from a
  stand-in for the checkpoint store (:class:`PlaybackCheckpoints`): the files are the world outside;
- the client's calls are made at their recorded times, ids (prompts, permission requests, tasks)
  translated to the replay's own, a cwd outside the recorded one mapped to a directory of the replay's;
- a ``restored`` step ends the daemon the session ran in (as it ended: closed, shut down, or gone without
  a word) and starts another on the state the session was restored from, as recorded; work the end cut
  (not in the recording: a call or a tool is written when it ends) hangs until then, a model stream after
  playing what it had published (:meth:`Playback.cut_call`).

Every event the session publishes is compared, as it is published, with the next recorded one
(wall-clock fields dropped, daemon-made ids named by order of appearance, the cwd and state directory
replaced); so is every client call's answer, and (version 2) every request the session sends the model
(messages, tools, parameters; the operating system's name and the sandbox sentence of the system prompt
are the machine's, not compared). The first difference stops the replay: :class:`Difference` says the
recording's step (its entry ``n``), the virtual time, what was expected and what came.
"""

from __future__ import annotations

import contextlib
import json
import os
import math
import tempfile
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing

from datetime import datetime, timedelta

from .. import Settings, checked, open_daemon, wire
from ..checkpoints import CheckpointRefused
from ..model import ContextWindowExceeded, Finish, ModelError, TextDelta, ThoughtDelta, ToolCall, Usage
from ..model.overflow import ContextOverflow, EmptyResponse
from ..permission_rules import RuleLists
from ..runtime import MachineDescription, default_tools
from ..session.system_prompt import default_prompt, os_name
from ..session.tools import ToolRegistry, ToolResult
from ..settings import Limits
from ..storage.local import LocalStore
from .determinism import run_deterministic
from .recorded_tools import SESSION_TOOLS, answer_recorded
from .recorder import failure_record
from .recording import (
    _ID, Entry, HexCountingIds, IdNames, Recording, RequestDecoder, answer_record, normalize, read_recording,
    request_record,
)
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
        # The recorded directories and the replay's for them: the cwd, the state directory, and each directory
        # outside them the session moved to (a cwd change, a restore's record), made under the replay's own.
        self.places: list[tuple[str, str, str]] = [(h.cwd, str(workspace), "$CWD")]
        if h.stateDir:
            self.places.append((h.stateDir, str(state_dir), "$STATE"))
        moved = [e.data.get("result") for e in recording.of_kind("action") if e.data.get("do") == "cwd"]
        moved += [(e.data.get("record") or {}).get("cwd") for e in recording.of_kind("restored")]
        for path in moved:
            if isinstance(path, str) and path.startswith("/") and not self._placed(path):
                name = f"$DIR{len(self.places)}"
                self.places.append((path, str(workspace.parent / "dirs" / f"d{len(self.places)}"), name))
        paths_rec = [(rec, name) for rec, _, name in self.places] + ([(h.epoch, "$EPOCH")] if h.epoch else [])
        paths_rec += [(e.data["epoch"], "$EPOCH") for e in recording.of_kind("restored") if e.data.get("epoch")]
        self.rec_paths = tuple(sorted(paths_rec, key=lambda p: len(p[0]), reverse=True))
        self.rep_paths: tuple[tuple[str, str], ...] = tuple(
            sorted(((rep, name) for _, rep, name in self.places), key=lambda p: len(p[0]), reverse=True))
        # What the system prompt says of the machine (the OS's name, whether commands run in a sandbox): the
        # replay says what the recorded machine said (the header has it from version 2 on), so requests and the
        # token estimates that count them are the recorded ones. A version 1 file does not say: those parts
        # are left out of the comparison.
        self.machine = None if h.os is None else MachineDescription(h.os, h.sandbox == "bwrap", self.recorded_path)
        sandbox = _sandbox_sentence()
        self.rec_env = () if self.machine else tuple(p for p in ((h.os or "", "$OS"), (sandbox, "")) if p[0])
        self.rep_env = tuple(sorted(((rec, name) for rec, _, name in self.places), key=lambda p: len(p[0]),
                                    reverse=True)) if self.machine else \
            tuple(p for p in ((os_name(), "$OS"), (sandbox, "")) if p[0])  # the prompt names recorded paths
        self.requests = RequestDecoder()
        self.checkpoint_call: Entry | None = None  # the recorded checkpoint restore being replayed
        self.undo_histories: dict[str, list[dict[str, Any]]] = {}  # an undo id -> the conversation it restores
        self.restore_at: int | None = None  # the ``n`` of the next ``restored`` step: the daemon ends before it
        self.cut: str | None = None  # the work the recorded daemon's end cut, unrecorded (it hangs in the replay)
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


    def recorded_path(self, path: str) -> str:
        """A directory of the replay as the recorded session named it (the system prompt says it)."""
        for recorded, replayed, _ in self.places:
            if path == replayed or path.startswith(replayed + os.sep):
                return recorded + path[len(replayed):]
        return path

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

    def _placed(self, path: str) -> bool:
        return any(path == rec or path.startswith(rec.rstrip("/") + "/") for rec, _, _ in self.places)

    def localize(self, value: Any, *, name: bool = True) -> Any:
        """A recorded value with the recorded cwd and state directory (and the other directories the session
        moved to) made the replay's, and the daemon's ids it names made the replay's (``name``: an id not seen
        yet is named now, as the comparison would; else it is left as it is, to be named where it shows)."""
        if isinstance(value, dict):
            return {k: self.localize(v, name=name) for k, v in value.items()}
        if isinstance(value, list):
            return [self.localize(v, name=name) for v in value]
        if isinstance(value, str):
            pairs = sorted(((rec, rep) for rec, rep, _ in self.places), key=lambda p: len(p[0]), reverse=True)
            for old, new in pairs:  # the longer may hold the other
                if old and old in value:
                    value = value.replace(old, new)
            return self.localize_ids(value, name=name)
        return value

    def rec_request(self, value: Any) -> Any:
        return normalize(value, self.rec_names, (*self.rec_paths, *self.rec_env))

    def rep_request(self, value: Any) -> Any:
        return normalize(value, self.rep_names, (*self.rep_paths, *self.rep_env))

    def cut_call(self, request: Any) -> Entry | None:
        """A model call the recorded daemon's end (a kill) cut: a call is written when its stream ends, so it is
        not in the recording, but the text and thoughts it streamed before the kill were published: they are
        played as its stream, at their recorded times, and then it hangs as it did (its request is not
        compared)."""
        assert self.restore_at is not None
        items: list[dict[str, Any]] = []
        last = trio.current_time()
        for entry in self.events:
            if entry.n > self.restore_at:
                break
            update = (entry.data.get("data") or {}).get("update") or {}
            kind = {"agent_message_chunk": "text", "agent_thought_chunk": "thought"}.get(update.get("sessionUpdate"))
            if entry.data.get("type") != "session_update" or kind is None:
                continue
            items.append({"dt": max(0.0, entry.t - last), kind: (update.get("content") or {}).get("text", "")})
            last = max(last, entry.t)
        if not items:
            return None
        return Entry(n=self.restore_at, t=trio.current_time(), kind="model",
                     data={"purpose": request.purpose, "items": items, "cancelled": True})

    def pending_restore(self, entry: Entry | None) -> bool:
        """Whether the recorded work this replay asks for next was cut by the end of the daemon (a restore
        follows, and nothing of it was recorded before): it hangs, as it did, until the daemon ends."""
        return self.restore_at is not None and (entry is None or entry.n > self.restore_at)

    def translate(self, raw: Any, *, name_it: bool = True) -> Any:
        """A recorded id (a prompt's, a permission request's, a task's) as the replay knows it."""
        if not isinstance(raw, str):
            return raw
        name = self.rec_names.names.get(raw)
        if name is None and not name_it:
            return raw
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
                    manager.report_output(item.task_id, d.get("text", ""), truncated=d.get("truncated"))
                elif d.get("status") == "finished":
                    note = next((n for n in notes if not n.data.get("merge")), None)
                    text = self.localize(note.data["text"]) if note is not None else ""
                    manager.finish(item.task_id, state=d.get("state", "completed"), text=text,
                                   exit_code=d.get("exitCode"), notify=note is not None)
                    return
        finally:
            self.pending -= 1

    def localize_ids(self, text: str, *, name: bool = True) -> str:
        """A recorded text with the daemon's ids it names made the replay's."""
        return _ID.sub(lambda m: self.translate(m.group(0), name_it=name), text)

    # ------------------------------------------------------------- the model

    def next_model_call(self, request: Any) -> Entry | None:
        """The recorded call this request is (``None``: one the daemon's end cut before anything of it was
        published)."""
        if self.pending_restore(self.models[0] if self.models else None):
            self.cut = f"model call {self.model_calls + 1} ({request.purpose})"
            return self.cut_call(request)
        self.model_calls += 1
        if not self.models:
            self.differ(self.events[0].n if self.events else 0,
                        f"model call {self.model_calls} ({request.purpose}) is not in the recording",
                        None, {"purpose": request.purpose})
        entry = self.models.popleft()
        if entry.data.get("purpose") != request.purpose:
            self.differ(entry.n, f"model call {self.model_calls} has another purpose",
                        entry.data.get("purpose"), request.purpose)
        if "request" in entry.data:  # version 2: what the session sent must be what it sent then
            expected = self.rec_request(self.requests.decode(entry.data["request"]))
            got = self.rep_request(request_record(request))
            if expected != got:
                self.differ(entry.n, f"the request of model call {self.model_calls} ({request.purpose}) differs "
                            f"at {_first_difference(expected, got)}", expected, got)
        return entry


class PlaybackModel:
    name = "recorded"

    def __init__(self, playback: Playback) -> None:
        self.playback = playback

    @contextlib.asynccontextmanager
    async def stream(self, request: Any) -> AsyncIterator[Any]:
        entry = self.playback.next_model_call(request)
        if entry is None:  # in flight when the recorded daemon ended
            await trio.sleep_forever()
        assert entry is not None
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
    # The session reads more than the code off these two (the window a server showed, an empty stream).
    if error.get("class") == "ContextOverflow":
        return ContextOverflow(error.get("message", ""), committed=bool(error.get("committed")),
                               limit=error.get("limit"), prompt_tokens=error.get("promptTokens"))
    if error.get("class") == "EmptyResponse":
        return EmptyResponse(error.get("message", ""))
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
        if entry is None and pb.restore_at is not None:  # running when the recorded daemon ended
            await trio.sleep_forever()
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


def _sandbox_sentence() -> str:
    """What the default system prompt says when commands run in a sandbox (the text the runtime has now)."""
    args: dict[str, Any] = {"cwd": "/", "os": "os", "today": "today", "tools": ()}
    on, off = default_prompt(**args, sandboxed=True), default_prompt(**args, sandboxed=False)
    start = 0
    while start < len(off) and on[start] == off[start]:
        start += 1
    end = 0
    while end < len(off) - start and on[-1 - end] == off[-1 - end]:
        end += 1
    return on[start:len(on) - end]


def _first_difference(expected: Any, got: Any, path: str = "$") -> str:
    """Where two values first differ, as a path (``$.messages[0].content``)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        for key in list(expected) + [k for k in got if k not in expected]:
            if expected.get(key, _MISSING) != got.get(key, _MISSING):
                return _first_difference(expected.get(key, _MISSING), got.get(key, _MISSING), f"{path}.{key}")
        return path
    if isinstance(expected, list) and isinstance(got, list):
        for i, (a, b) in enumerate(zip(expected, got)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
        return f"{path} (length {len(expected)}, now {len(got)})" if len(expected) != len(got) else path
    return path


_MISSING = object()


class PlaybackCheckpoints:
    """A replayed session's checkpoints: the files are the world outside (no tool wrote any in the replay), so
    the checkpoint store answers as recorded, and what a restore does to the conversation is done again
    through the session's own port — a rewind drops the same turns, an undo puts back the conversation the
    replay had before the rewind (or undo) it undoes. Taking checkpoints costs nothing."""

    restoring = False

    def __init__(self, playback: Playback) -> None:
        self.playback = playback

    async def turn_started(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def turn_ended(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def settled(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def before_change(self) -> None:
        return None

    async def listing(self, turn_texts: Any) -> dict[str, Any]:
        raise CheckpointRefused("checkpoints_unavailable", "a replay answers only the recorded restores")

    async def diff(self, turn: int, turn_texts: Any) -> dict[str, Any]:
        raise CheckpointRefused("checkpoints_unavailable", "a replay answers only the recorded restores")

    def _recorded(self, op: str) -> dict[str, Any]:
        pb = self.playback
        entry = pb.checkpoint_call
        if entry is None or entry.data["args"].get("op") != op:
            pb.differ(entry.n if entry else 0, f"a checkpoint {op} the recording does not have",
                      entry.data if entry else None, {"op": op})
        assert entry is not None
        result = entry.data.get("result") or {}
        if "error" in result:
            e = pb.localize(result["error"])
            raise CheckpointRefused(e.get("code", "storage_unavailable"), e.get("message", ""), e.get("paths"))
        return pb.localize(result)

    async def rewind(self, turn: int, force: bool, conversation: Any) -> dict[str, Any]:
        result = self._recorded("rewind")
        self.playback.undo_histories[result.get("undoId", "")] = conversation.dump()
        kept = conversation.rewind(turn)
        if isinstance(kept, str):
            raise CheckpointRefused("invalid_turn", kept)
        return {**result, "historyLength": kept}

    async def undo(self, undo_id: str, force: bool, conversation: Any) -> dict[str, Any]:
        result = self._recorded("undo")
        history = self.playback.undo_histories.get(undo_id)
        if history is None:
            raise CheckpointRefused("checkpoint_not_found", f"no undo entry {undo_id!r} in this session")
        self.playback.undo_histories[result.get("undoId", "")] = conversation.dump()
        return {**result, "historyLength": conversation.replace(history)}


@attrs.frozen
class RecordedTool:
    """A tool a client added to the session (``add_tools``), as recorded: offered to the model with its
    recorded schema; its calls are answered from the recording like any other."""

    name: str
    description: str
    parameters: dict[str, Any]
    builtin: bool = False
    kind: str = "other"
    asks_permission: bool = False

    async def execute(self, context: Any, arguments: Any) -> ToolResult:
        raise RuntimeError(f"{self.name} is answered from the recording")


def _create_args(record: dict[str, Any]) -> dict[str, Any]:
    """What ``create_session`` took (as the session record at its start says)."""
    out: dict[str, Any] = {"title": record.get("title"), "system_prompt": record.get("systemPrompt"),
                           "append_system_prompt": record.get("appendSystemPrompt")}
    if record.get("permissions"):
        out["permissions"] = checked.structure(record["permissions"], RuleLists, "permissions")
    return out


def _install(pb: Playback, state_dir: Path, entry: Entry) -> None:
    """Put the state a ``restored`` step says the session was restored from in the replay's state directory."""
    data = pb.localize(entry.data, name=False)
    sid = pb.recording.header.sessionId
    store = LocalStore(state_dir, fsync="never")
    for suffix in (".jsonl", ".journal.jsonl", ".replay.jsonl", ".session.json"):
        (store.directory / f"{sid}{suffix}").unlink(missing_ok=True)
    store.directory.mkdir(parents=True, exist_ok=True)
    if data.get("record") is not None:
        store.record_write(sid, data["record"])
        cwd = data["record"].get("cwd")
        if isinstance(cwd, str):
            Path(cwd).mkdir(parents=True, exist_ok=True)
    store.journal_rewrite(sid, data.get("journal") or [])
    transcript = store.transcript(sid)
    for record in data.get("transcript") or []:
        transcript.append_record(record)
    if data.get("replay") is not None:
        store.replay_rewrite(sid, data["replay"])
    store.close(sid)


def _clock(recording: Recording) -> Any:
    """The replay's wall clock: the recorded one from the session's start (version 2), else the library's."""
    if not recording.header.now:
        return virtual_now
    try:
        start = datetime.fromisoformat(recording.header.now)
    except ValueError:
        return virtual_now
    zero = trio.current_time()
    return lambda: start + timedelta(seconds=trio.current_time() - zero)


async def _drive(pb: Playback, workspace: Path, state_dir: Path) -> None:
    recording = pb.recording
    settings = settings_of(recording)
    ids = HexCountingIds()  # one for every daemon of the replay: no id comes twice
    now = _clock(recording)

    def tools() -> ToolRegistry:
        return PlaybackRegistry(list(default_tools(settings)), pb)

    async def hook_runner(hook: Any, stdin: bytes, cwd: str) -> Any:
        if (not pb.hooks or pb.hooks[0].data["command"] != hook.command) and pb.pending_restore(
                pb.hooks[0] if pb.hooks else None):
            await trio.sleep_forever()  # running when the recorded daemon ended
        if not pb.hooks or pb.hooks[0].data["command"] != hook.command:
            pb.differ(pb.hooks[0].n if pb.hooks else 0, f"hook {hook.command!r} ran",
                      pb.hooks[0].data if pb.hooks else None, {"command": hook.command})
        entry = pb.hooks.popleft()
        await trio.sleep(entry.data.get("duration") or 0)
        outcome = entry.data["outcome"]
        return tuple(outcome) if isinstance(outcome, list) else outcome

    checkpoints = any(e.data.get("do") == "checkpoints" for e in recording.of_kind("action"))

    def replayed_checkpoints(session_id: str) -> PlaybackCheckpoints | None:
        return PlaybackCheckpoints(pb) if session_id == recording.header.sessionId else None

    def observe(session: Any) -> None:
        if session.session_id == recording.header.sessionId:
            pb.rep_paths = (*pb.rep_paths, (session.bus.epoch, "$EPOCH"))
            session.bus.observers.append(pb.on_event)

    # The daemons the session ran in: a ``restored`` step starts the next one.
    lives: list[tuple[Entry | None, list[Entry]]] = [(None, [])]
    for entry in recording.entries:
        if entry.kind == "restored":
            lives.append((entry, []))
        elif entry.kind == "action":
            lives[-1][1].append(entry)
    if recording.entries and recording.entries[0].kind == "restored":
        lives.pop(0)  # recorded from its restore on
    for place in pb.places[2:]:
        Path(place[1]).mkdir(parents=True, exist_ok=True)

    with trio.CancelScope() as scope:
        pb.scope = scope
        async with trio.open_nursery() as helpers:
            pb.nursery = helpers
            for i, (restored, actions) in enumerate(lives):
                following = lives[i + 1][0] if i + 1 < len(lives) else None
                pb.restore_at = following.n if following is not None else None
                if restored is not None:
                    await trio.sleep_until(max(restored.t, trio.current_time()))
                    _install(pb, state_dir, restored)
                async with open_daemon(settings, model=PlaybackModel(pb), ids=ids,  # type: ignore[arg-type]
                                       clock_ms=virtual_clock_ms, now=now, state_dir=state_dir,
                                       workspace=str(workspace), tools=tools, hook_runner=hook_runner,
                                       described_machine=pb.machine,
                                       make_checkpoints=replayed_checkpoints if checkpoints else None,
                                       commands_run=False) as daemon:
                    daemon.session_observers.append(observe)
                    sid = recording.header.sessionId
                    if restored is None:
                        handle, _ = await daemon.create_session(session_id=sid,
                                                                **_create_args(recording.header.record))
                    else:
                        handle, _ = await daemon.create_session(session_id=sid)  # restored from the state
                    subs: dict[int, Any] = {}
                    for entry in actions:
                        await trio.sleep_until(max(entry.t, trio.current_time()))
                        await _events_before(pb, entry)
                        await _act(pb, handle, entry, subs)
                    if following is None:
                        await _settle(pb, handle)
                        closed = [e for e in pb.events if e.data.get("type") == "session_closed"
                                  and e.data.get("data", {}).get("reason") == "closed"]
                        if closed:
                            await trio.sleep_until(max(closed[0].t, trio.current_time()))
                            await daemon.close_session(handle.session_id)
                    else:
                        await _end_of_life(pb, daemon, handle, following)
                    for sub in subs.values():
                        sub.close()
                if following is not None:
                    expected = len([e for e in pb.all_events if e.n < following.n])
                    if pb.compared < expected:
                        pending = pb.events[0]
                        pb.differ(pending.n, f"the replay's daemon ended before event {pb.compared + 1}, which "
                                  f"came before the restore at step {following.n}", pb.rec(pending.data), None)
            helpers.cancel_scope.cancel()  # background effects still to come when the daemon closed: dropped


async def _end_of_life(pb: Playback, daemon: Any, handle: Any, restored: Entry) -> None:
    """End the daemon of the session before a ``restored`` step as the recorded one ended: the session closed
    (``DELETE``), the daemon shut down (both publish ``session_closed``, compared), or it was gone without a
    word (killed): then nothing after the last recorded step before the restore is compared."""
    before = [e for e in pb.recording.entries if e.n < restored.n]
    events = [e for e in before if e.kind == "event"]
    last = events[-1] if events else None
    reason = (last.data.get("data") or {}).get("reason") if last is not None and \
        last.data.get("type") == "session_closed" else None
    session = handle._session
    if reason is not None:
        await trio.sleep_until(max(last.t, trio.current_time()))  # type: ignore[union-attr]
        if reason == "closed":
            await daemon.close_session(handle.session_id)
        return  # daemon_shutdown: leaving open_daemon shuts it down, as it was
    if before:
        await trio.sleep_until(max(before[-1].t, trio.current_time()))
    waiting = Entry(n=restored.n, t=restored.t, kind="restored", data={"after": len(events)})
    await _events_before(pb, waiting)
    session.bus.observers.remove(pb.on_event)  # what the replay's daemon does as it ends was not recorded


async def _act(pb: Playback, handle: Any, entry: Entry, subs: dict[int, Any]) -> None:
    do, args = entry.data["do"], entry.data.get("args") or {}
    recorded = entry.data.get("result")
    failed = isinstance(recorded, dict) and "error" in recorded and isinstance(recorded["error"], dict)
    try:
        result = await _call(pb, handle, entry, do, args, subs, recorded, failed)
    except _Stop:
        raise
    except Exception as exc:
        if do in _OLD_ACTIONS:
            raise
        result = {"error": failure_record(exc)}
    if result is _UNKNOWN:
        return
    expected = pb.rec(recorded)
    got = pb.rep(result)
    if expected != got:
        pb.differ(entry.n, f"the answer to {do} differs", expected, got)


# Calls whose failures a recording does not keep as {"error": {...}} (a vote's refusal is kept as its message).
_OLD_ACTIONS = frozenset({"vote", "attach", "detach"})
_UNKNOWN = object()


async def _call(pb: Playback, handle: Any, entry: Entry, do: str, args: dict[str, Any], subs: dict[int, Any],
                recorded: Any, failed: bool) -> Any:
    if do == "prompt":
        body = wire.structure(args["body"], wire.PromptBody)
        result: Any = await handle.prompt(body, client_id=args.get("clientId"))
        return {"type": type(result).__name__, **attrs.asdict(result)} if attrs.has(type(result)) else result
    if do == "abort":
        return await handle.abort_prompt(pb.translate(args["promptId"]))
    if do == "mid_turn":
        return await handle.post_mid_turn_message(args["text"], args.get("messageId"), client_id=args.get("clientId"))
    if do == "remove_mid_turn":
        return answer_record(await handle.remove_mid_turn_message(args["messageId"]))
    if do == "cancel":
        return await handle.cancel()
    if do == "kill_task":
        return await handle.kill_task(pb.translate(args["taskId"]))
    if do == "vote":
        try:
            return await handle.vote(pb.translate(args["requestId"]), args["outcome"], args.get("optionId"))
        except ValueError as exc:
            return {"error": str(exc)}
    if do == "approval_mode":
        return await handle.set_approval_mode(args["mode"])
    if do == "model":
        return await handle.set_model(args["model"])
    if do == "attach":
        subs[args["client"]] = handle.subscribe(args.get("lastEventId"))
        return None
    if do == "detach":
        sub = subs.pop(args["client"], None)
        if sub is not None:
            sub.close()
        return None
    if do == "title":
        return await handle.set_title(args.get("title"))
    if do == "cwd":
        if not failed and isinstance(recorded, str):
            Path(pb.localize(recorded)).mkdir(parents=True, exist_ok=True)
        return await handle.change_cwd(pb.localize(args["cwd"]))
    if do == "rewind":
        return await handle.rewind(args["turn"])
    if do == "checkpoints":
        pb.checkpoint_call = entry
        try:
            return await handle.checkpoints(args["op"], turn=args.get("turn"),
                                            undo_id=pb.translate(args.get("undoId")), force=bool(args.get("force")))
        finally:
            pb.checkpoint_call = None
    if do == "add_rule":
        return await handle.add_permission_rule(args["effect"], args["rule"])
    if do == "remove_rule":
        return await handle.remove_permission_rule(args["effect"], args["rule"])
    if do == "load":
        return await handle.load()
    if do == "snapshot":
        return {"messages": len(await handle.snapshot())}
    if do == "release_queue":
        return await handle.release_queued_prompt_wait()
    if do == "guard_off":
        return await handle.turn_off_todo_stop_guard()
    if do == "add_tools":
        tools = [RecordedTool(t["name"], t.get("description", ""), pb.localize(t.get("parameters") or {}),
                              bool(t.get("builtin")), t.get("kind", "other"), bool(t.get("asksPermission")))
                 for t in args.get("tools", [])]
        return await handle.add_tools(*tools)
    if do == "take_inbox":
        records = pb.localize(args.get("records") or [])
        return await handle.take_inbox(lambda: records)
    if do == "client_services":  # a client's files and terminal: the tools that use them answer as recorded
        return recorded
    if do in ("mcp_servers", "drain_source") and (recorded == [] or args.get("set") is False):
        return recorded  # nothing started, nothing lent: nothing changed
    if do in ("mcp_servers", "drain_source"):
        what = ("MCP servers (their tools and answers are not in the recording)" if do == "mcp_servers" else
                "a bridge's drain source (what it answered is not in the recording)")
        pb.differ(entry.n, f"step {entry.n} cannot be replayed: {what}", entry.data, None)
    pb.differ(entry.n, f"an action this replay does not know: {do}", entry.data, None)
    return _UNKNOWN


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
            cut = (f" ({pb.cut} was under way when the recorded daemon ended: what it did then is not in the "
                   f"recording)") if pb.cut else ""
            pb.differ(pending.n if pending else entry.n,
                      f"the replay stopped before event {pb.compared + 1}, which came before step {entry.n}{cut}",
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
