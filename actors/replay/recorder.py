"""Recording live sessions (``python -m transport --record DIR``): the format is :mod:`.recording`.

A :class:`Recorder` is attached to a running daemon (:meth:`Recorder.attach`). It wraps the edges
where the outside enters a session, and nothing in the turn itself:

- the model provider — each call's stream, item by item with its timing, or its error;
- each session's tool registry (``execute``) — each tool's result, the permissions the tool asked
  for itself and the progress it published;
- the hook runner — each hook command's outcome;
- the session handle (the daemon's ``make_handle``) — every client call that can change the session
  (:data:`.recording.ACTIONS`: prompts, mid-turn messages, votes, aborts, cancels, titles, cwd changes,
  rewinds, checkpoint restores, permission-rule edits, subscriptions, ...); the calls that only read it
  (:data:`.recording.READS`) are not;
- the session's event bus — every published event, to compare against;
- a restore from the state directory (a restarted daemon, a closed session opened again) — what it was
  restored from, as a ``restored`` step of the session's recording, which goes on in the same file.

Which session a model call or hook belongs to is the work loop task it runs in (``work:<id>``).
Which sessions are recorded: every one, by default, or as :meth:`choose` says for the session
being created (``POST /session`` ``record``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import attrs
import trio

from .. import wire
from ..model import ContextWindowExceeded, Finish, ModelError, TextDelta, ThoughtDelta, ToolCall, Usage
from ..model import ScriptedModel
from ..model.base import ModelProvider
from ..model.overflow import ContextOverflow
from ..runtime import default_tools
from ..session.handle import SessionHandle
from ..session.messages import NOT_REPLACING
from ..session.hooks import run_hook_command
from ..session.system_prompt import os_name
from ..session.tools import ToolRegistry
from ..settings import Settings
from .recording import (
    REPLAYED_SETTINGS, VERSION, Entry, Header, Redactor, RequestEncoder, answer_record, dump_line, read_recording,
    settings_secrets,
)

log = logging.getLogger("trellis.recorder")

_choice: contextvars.ContextVar[bool | None] = contextvars.ContextVar("trellis_record_choice", default=None)


class RecordRefused(Exception):
    """``record: true`` for a daemon without a record directory."""


def session_of_task(known: Callable[[str], bool]) -> str | None:
    """The id of the session whose work loop (``work:<id>``) the current task runs in, or under."""
    task: Any = trio.lowlevel.current_task()
    while task is not None:
        if task.name.startswith("work:") and known(task.name[5:]):
            return task.name[5:]
        nursery = task.parent_nursery
        task = nursery.parent_task if nursery is not None else None
    return None


def item_record(item: Any) -> dict[str, Any]:
    kind = type(item)
    if kind is TextDelta:
        return {"text": item.text}
    if kind is ThoughtDelta:
        return {"thought": item.text}
    if kind is ToolCall:
        return {"tool_call": {"id": item.id, "name": item.name, "arguments": item.arguments}}
    if kind is Usage:
        return {"usage": attrs.asdict(item)}
    if kind is Finish:
        return {"finish": item.reason}
    return {"unknown": repr(item)}


def error_record(exc: BaseException, committed: bool) -> dict[str, Any]:
    if isinstance(exc, ContextWindowExceeded):
        return {"code": "context_window_exceeded", "message": str(exc), "committed": False,
                "context": {"needed": exc.needed, "window": exc.window}}
    if isinstance(exc, ModelError):
        record = {"code": exc.code, "message": exc.message, "committed": exc.committed,
                  "retryAfter": exc.retry_after, "class": type(exc).__name__}
        if isinstance(exc, ContextOverflow):  # what the server showed of its window: the session learns it
            record.update(limit=exc.limit, promptTokens=exc.prompt_tokens)
        return record
    return {"code": "exception", "message": f"{type(exc).__name__}: {exc}", "committed": committed}


def _start_record(record: dict[str, Any]) -> dict[str, Any]:
    """A session record as a recording's header keeps it: without its times and its random epoch."""
    return {k: v for k, v in record.items() if k not in ("createdAt", "updatedAt", "eventEpoch")}


class SessionRecording:
    """One session's file: lines are written (and flushed) as they happen."""

    def __init__(self, session_id: str, out: IO[str], redact: Redactor, *, n: int = 0, t: float = 0.0,
                 events: int = 0) -> None:
        """``n``, ``t``, ``events``: where a recording that goes on in its file (a restored session's) stood."""
        self.session_id = session_id
        self._out = out
        self._redact = redact
        self._start = trio.current_time() - t
        self._n = n
        self.events = events  # events recorded so far (an action says how many came before it: ``after``)
        self.requests = RequestEncoder()
        self.closed = False

    def now(self) -> float:
        return round(trio.current_time() - self._start, 6)

    def header(self, header: Header) -> None:
        self._write(dump_line(header))

    def add(self, kind: str, data: dict[str, Any], t: float | None = None) -> None:
        if self.closed:
            return
        self._n += 1
        self._write(dump_line(Entry(n=self._n, t=self.now() if t is None else t, kind=kind, data=data)))

    def _write(self, line: str) -> None:
        self._out.write(self._redact(line) + "\n")
        self._out.flush()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._out.close()


class Recorder:
    """Writes one recording per recorded session under ``directory``."""

    def __init__(self, directory: str | Path | None, *, record_all: bool = True,
                 secrets: Iterable[str | None] = (), live_secrets: Iterable[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.record_all = record_all
        self.redact = Redactor(secrets, live=live_secrets)
        self.sessions: dict[str, SessionRecording] = {}
        self.files: dict[str, Path] = {}
        self._runtime: Any = None
        self._live: dict[str, Any] = {}  # the daemon's live sessions (each leaves as it publishes session_closed)

    # ------------------------------------------------------------- wiring

    def edges(self, settings: Settings, model: ModelProvider | None = None, tools: Any = None,
              hook_runner: Any = None) -> dict[str, Any]:
        """What :func:`actors.open_daemon` takes to open a daemon whose edges are recorded: the model, the tools
        and the hook runner it would have used (given, else its defaults), each wrapped; then :meth:`attach`."""
        for secret in settings_secrets(settings):
            self.redact.add(secret)
        return {"model": RecordingProvider(model if model is not None else ScriptedModel(), self),
                "tools": self.wrap_tools(tools or functools.partial(default_tools, settings)),
                "hook_runner": functools.partial(self.run_hook, hook_runner)}

    def attach(self, daemon: Any) -> Recorder:
        """Follow the daemon's sessions (before any starts): its edges were given by :meth:`edges`."""
        self._runtime = daemon.runtime
        daemon.session_observers.append(self.observe)
        daemon.make_handle = self.make_handle
        return self

    @contextlib.contextmanager
    def choose(self, record: bool | None) -> Iterator[None]:
        """Around ``create_session``: record this session (``True``), not (``False``), or as the daemon does."""
        if record and self.directory is None:
            raise RecordRefused("this daemon has no record directory (start it with --record DIR)")
        token = _choice.set(record)
        try:
            yield
        finally:
            _choice.reset(token)

    def recording(self, session_id: str | None) -> SessionRecording | None:
        if session_id is None:
            return None
        found = self.sessions.get(session_id)
        return found if found is not None and not found.closed else None

    def caller(self) -> SessionRecording | None:
        return self.recording(session_of_task(lambda sid: sid in self.sessions))

    # ------------------------------------------------------------- sessions

    def observe(self, session: Any) -> None:
        self._live[session.session_id] = session  # its hooks run in its own sandbox, recorded or not

        def gone(e: Any, sid: str = session.session_id) -> None:
            if e.type == "session_closed" and self._live.get(sid) is session:
                del self._live[sid]

        session.bus.observers.append(gone)
        choice = _choice.get()
        store = session.runtime.store
        # Observed before it starts: a session the store has already is being restored (the daemon's _start).
        restoring = store is not None and store.exists(session.session_id)
        previous = self._previous(session.session_id) if restoring else None
        if previous is None and (self.directory is None or not (choice if choice is not None else self.record_all)):
            return
        assert self.directory is not None
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc)
        if previous is not None:  # the recording goes on where it stopped, its clock with the wall clock's
            path, header, last, events = previous
            try:
                gap = (stamp - datetime.fromisoformat(header.startedAt)).total_seconds()
            except ValueError:
                gap = 0.0
            rec = SessionRecording(session.session_id, path.open("a", encoding="utf-8"), self.redact,
                                   n=last.n if last else 0, t=max(gap, last.t if last else 0.0),
                                   events=events)
        else:
            path = self.directory / f"{session.session_id}-{stamp.strftime('%Y%m%dT%H%M%S%f')}.jsonl"
            rec = SessionRecording(session.session_id, path.open("w", encoding="utf-8"), self.redact)
        self.sessions[session.session_id] = rec
        self.files[session.session_id] = path
        settings = session.runtime.settings
        if previous is None:
            rec.header(Header(
                sessionId=session.session_id, cwd=session.cwd,
                stateDir=str(session.runtime.state_dir) if session.runtime.state_dir is not None else None,
                epoch=session.bus.epoch, startedAt=stamp.isoformat(),
                model=getattr(session.runtime.provider, "name", None),
                settings={name: getattr(settings, name) for name in REPLAYED_SETTINGS},
                limits=attrs.asdict(settings.limits), tools=list(session.tools.names()),
                record=_start_record(session.record()), now=session.runtime.now().isoformat(), os=os_name(),
                sandbox=session.runtime.sandbox.kind,
            ))
        if restoring:
            sid = session.session_id
            rec.add("restored", {
                "record": store.record_read(sid), "journal": store.journal_read(sid),
                "transcript": store.transcript(sid).records(), "replay": store.replay_read(sid),
                "epoch": session.bus.epoch, "cwd": session.cwd, "after": rec.events,
            })

        def event(e: Any) -> None:
            rec.events += 1
            rec.add("event", {"id": e.id, "type": e.type, "promptId": e.prompt_id, "data": e.data})
            if e.type == "session_closed":
                rec.close()

        session.bus.observers.append(event)
        background = session.background
        notify = background.notify

        def notifying(item: Any, text: str, *, merge: bool = False) -> None:
            rec.add("background", {"taskId": item.task_id, "kind": item.kind, "state": item.state,
                                   "exitCode": item.exit_code, "text": text, "merge": merge})
            notify(item, text, merge=merge)

        background.notify = notifying
        log.info("recording session %s to %s%s", session.session_id, path, " (restored)" if restoring else "")

    def _previous(self, session_id: str) -> tuple[Path, Header, Entry | None, int] | None:
        """The newest recording of this session in the directory that this version writes, if any: a restored
        session's recording goes on there (as the same session, from the state it was restored from)."""
        if self.directory is None or not self.directory.is_dir():
            return None
        for path in sorted(self.directory.glob(f"{session_id}-*.jsonl"), reverse=True):
            live = self.sessions.get(session_id)
            if live is not None and not live.closed:
                return None
            try:
                recording = read_recording(path)
            except ValueError:
                continue
            if recording.header.version != VERSION or recording.header.sessionId != session_id:
                continue
            return (path, recording.header, recording.entries[-1] if recording.entries else None,
                    len(recording.of_kind("event")))
        return None

    def make_handle(self, session: Any) -> SessionHandle:
        rec = self.recording(session.session_id)
        return RecordingHandle(session, rec) if rec is not None else SessionHandle(session)

    # ------------------------------------------------------------- tools and hooks

    def wrap_tools(self, make: Callable[[], ToolRegistry]) -> Callable[[], ToolRegistry]:
        def made() -> ToolRegistry:
            return RecordingRegistry(self, list(make()))
        return made

    async def run_hook(self, inner: Any, hook: Any, stdin: bytes, cwd: str) -> Any:
        try:
            payload = json.loads(stdin)
        except ValueError:
            payload = {}
        if not isinstance(payload, dict):
            payload = {}
        sid = payload.get("session_id") if payload.get("session_id") in self._live else None
        if sid is None:
            sid = session_of_task(lambda known: known in self._live)
        if inner is None:  # the daemon's own runner: a real process, in the session's sandbox (as without us)
            session = self._live.get(sid) if sid is not None else None
            inner = functools.partial(run_hook_command, sandbox=session.sandbox if session is not None
                                      else self._runtime.sandbox)
        rec = self.recording(sid)
        started = trio.current_time()
        outcome = await inner(hook, stdin, cwd)
        if rec is not None:
            rec.add("hook", {"command": hook.command, "event": payload.get("hook_event_name"),
                             "duration": round(trio.current_time() - started, 6),
                             "outcome": list(outcome) if isinstance(outcome, tuple) else outcome})
        return outcome


class RecordingRegistry(ToolRegistry):
    """A session's tools, each call's result (and the permissions and progress it asked for) recorded."""

    def __init__(self, recorder: Recorder, tools: list[Any]) -> None:
        super().__init__(tools)
        self._recorder = recorder

    async def execute(self, tool: Any, context: Any, arguments: Any) -> Any:
        rec = self._recorder.recording(context.session_id)
        if rec is None:
            return await super().execute(tool, context, arguments)
        started = trio.current_time()
        asks: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        if context.services is not None:
            context = attrs.evolve(context, services=_ServicesTap(context.services, asks, updates, started))
        data: dict[str, Any] = {"toolCallId": context.tool_call_id, "name": tool.name, "arguments": arguments}
        before = rec.events
        try:
            result = await super().execute(tool, context, arguments)
        except BaseException as exc:
            data.update(events=[before, rec.events])
            data.update(duration=round(trio.current_time() - started, 6), raised=type(exc).__name__,
                        message=str(exc), asks=asks, updates=updates)
            rec.add("tool", data)
            raise
        data.update(events=[before, rec.events])
        data.update(duration=round(trio.current_time() - started, 6), asks=asks, updates=updates, result={
            "content": result.content, "display": result.display, "error": result.error,
            "locations": list(result.locations), "acpContent": list(result.acp_content)})
        rec.add("tool", data)
        return result


class _ServicesTap:
    """A tool's services, its own permission requests and progress updates noted on the way."""

    def __init__(self, inner: Any, asks: list[dict[str, Any]], updates: list[dict[str, Any]],
                 started: float) -> None:
        self._inner = inner
        self._asks = asks
        self._updates = updates
        self._started = started

    async def authorize(self, context: Any, **request: Any) -> str | None:
        record: dict[str, Any] = {"dt": round(trio.current_time() - self._started, 6), "request": request}
        self._asks.append(record)
        try:
            answer = await self._inner.authorize(context, **request)
        except BaseException as exc:
            record["raised"] = type(exc).__name__
            raise
        record["answer"] = answer
        return answer

    def publish_update(self, update: dict[str, Any], prompt_id: str | None = None) -> None:
        self._updates.append({"dt": round(trio.current_time() - self._started, 6), "update": update})
        self._inner.publish_update(update, prompt_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


# ----------------------------------------------------------------- the model


class RecordingProvider:
    """The daemon's model provider, each call of a recorded session written as it streams."""

    def __init__(self, inner: Any, recorder: Recorder) -> None:
        self.inner = inner
        self.recorder = recorder
        self.name = getattr(inner, "name", "model")
        self.model = getattr(inner, "model", None)

    @contextlib.asynccontextmanager
    async def stream(self, request: Any) -> AsyncIterator[Any]:
        rec = self.recorder.caller()
        if rec is None:
            async with self.inner.stream(request) as stream:
                yield stream
            return
        t0 = rec.now()
        started = trio.current_time()
        data: dict[str, Any] = {"purpose": request.purpose, "model": request.model,
                                "request": rec.requests.encode(request), "items": []}
        opened = False
        try:
            async with self.inner.stream(request) as stream:
                opened = True
                data["delay"] = round(trio.current_time() - started, 6)
                yield _TapStream(stream, data["items"])
        except BaseException as exc:
            if not isinstance(exc, trio.Cancelled):
                data["error"] = error_record(exc, opened)
                if "delay" not in data:
                    data["delay"] = round(trio.current_time() - started, 6)
            else:
                data["cancelled"] = True
            raise
        finally:
            data["end"] = round(trio.current_time() - started, 6)
            rec.add("model", data, t0)

    def __getattr__(self, name: str) -> Any:  # context_window, supports_images, aclose, ...
        return getattr(self.inner, name)


class _TapStream:
    def __init__(self, inner: Any, items: list[dict[str, Any]]) -> None:
        self._inner = inner.__aiter__()
        self._items = items
        self._last = trio.current_time()

    def __aiter__(self) -> _TapStream:
        return self

    async def __anext__(self) -> Any:
        item = await self._inner.__anext__()
        now = trio.current_time()
        self._items.append({"dt": round(now - self._last, 6), **item_record(item)})
        self._last = now
        return item


# ----------------------------------------------------------------- the client's calls


def failure_record(exc: BaseException) -> dict[str, Any]:
    """A client call's failure as a recording keeps it: its type, message and (a checkpoint refusal's) code."""
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(getattr(exc, "code", None), str):
        out["code"] = exc.code  # type: ignore[attr-defined]
    if isinstance(getattr(exc, "paths", None), list):
        out["paths"] = list(exc.paths)  # type: ignore[attr-defined]
    return out


def _result(value: Any) -> Any:
    if attrs.has(type(value)):
        return {"type": type(value).__name__, **attrs.asdict(value)}
    return value


class RecordingHandle(SessionHandle):
    """A session handle that writes every client call (with its answer) to the recording."""

    def __init__(self, session: Any, rec: SessionRecording) -> None:
        super().__init__(session)
        self._rec = rec
        self._clients = 0

    def _note(self, do: str, args: dict[str, Any], result: Any, t: tuple[float, int]) -> None:
        self._rec.add("action", {"do": do, "args": args, "result": _result(result), "after": t[1]}, t[0])

    def _now(self) -> tuple[float, int]:
        """When a call began: the time, and how many events had been published before it."""
        return self._rec.now(), self._rec.events

    async def prompt(self, body: wire.PromptBody | str, *, client_id: str | None = None) -> Any:
        if isinstance(body, str):
            body = wire.PromptBody(prompt=[wire.TextBlock(type="text", text=body)])
        prompt = super().prompt
        return await self._call("prompt", {"body": wire.converter.unstructure(body), "clientId": client_id},
                                lambda: prompt(body, client_id=client_id))

    async def abort_prompt(self, prompt_id: str) -> bool:
        return await self._call("abort", {"promptId": prompt_id},
                                lambda: super(RecordingHandle, self).abort_prompt(prompt_id))

    async def post_mid_turn_message(self, text: str, message_id: str | None = None, *,
                                    client_id: str | None = None) -> dict[str, Any]:
        args = {"text": text, "messageId": message_id, **({"clientId": client_id} if client_id is not None else {})}
        return await self._call("mid_turn", args, lambda: super(RecordingHandle, self).post_mid_turn_message(
            text, message_id, client_id=client_id))

    async def remove_mid_turn_message(self, message_id: str) -> Any:
        return await self._call("remove_mid_turn", {"messageId": message_id},
                                lambda: super(RecordingHandle, self).remove_mid_turn_message(message_id), answer_record)

    async def cancel(self) -> bool:
        return await self._call("cancel", {}, super().cancel)

    async def kill_task(self, task_id: str) -> bool:
        return await self._call("kill_task", {"taskId": task_id},
                                lambda: super(RecordingHandle, self).kill_task(task_id))

    async def vote(self, request_id: str, outcome: str, option_id: str | None = None) -> bool:
        t = self._now()
        try:
            answer = await super().vote(request_id, outcome, option_id)
        except ValueError as exc:
            self._note("vote", {"requestId": request_id, "outcome": outcome, "optionId": option_id},
                       {"error": str(exc)}, t)
            raise
        self._note("vote", {"requestId": request_id, "outcome": outcome, "optionId": option_id}, answer, t)
        return answer

    async def set_approval_mode(self, mode: str) -> str:
        return await self._call("approval_mode", {"mode": mode},
                                lambda: super(RecordingHandle, self).set_approval_mode(mode))

    async def set_model(self, model: str) -> str:
        return await self._call("model", {"model": model}, lambda: super(RecordingHandle, self).set_model(model))

    async def _call(self, do: str, args: dict[str, Any], call: Callable[[], Any],
                    shown: Callable[[Any], Any] = lambda answer: answer) -> Any:
        """Make a call and write it with its answer (``shown``: as the recording keeps it) or its failure."""
        t = self._now()
        try:
            answer = await call()
        except Exception as exc:
            self._note(do, args, {"error": failure_record(exc)}, t)
            raise
        self._note(do, args, shown(answer), t)
        return answer

    async def set_title(self, title: str | None) -> str | None:
        return await self._call("title", {"title": title}, lambda: super(RecordingHandle, self).set_title(title))

    async def change_cwd(self, cwd: str) -> str:
        return await self._call("cwd", {"cwd": cwd}, lambda: super(RecordingHandle, self).change_cwd(cwd))

    async def rewind(self, turn: int) -> int:
        return await self._call("rewind", {"turn": turn}, lambda: super(RecordingHandle, self).rewind(turn))

    async def checkpoints(self, op: str, *, turn: int | None = None, undo_id: str | None = None,
                          force: bool = False) -> dict[str, Any]:
        call = functools.partial(super().checkpoints, op, turn=turn, undo_id=undo_id, force=force)
        if op not in ("rewind", "undo"):  # ``list`` and ``diff`` read the checkpoints: nothing changes
            return await call()
        return await self._call("checkpoints", {"op": op, "turn": turn, "undoId": undo_id, "force": force}, call)

    async def add_permission_rule(self, effect: str, rule: str) -> bool:
        return await self._call("add_rule", {"effect": effect, "rule": rule},
                                lambda: super(RecordingHandle, self).add_permission_rule(effect, rule))

    async def remove_permission_rule(self, effect: str, rule: str) -> bool:
        return await self._call("remove_rule", {"effect": effect, "rule": rule},
                                lambda: super(RecordingHandle, self).remove_permission_rule(effect, rule))

    async def load(self) -> int:
        return await self._call("load", {}, super().load)

    async def snapshot(self) -> list:
        return await self._call("snapshot", {}, super().snapshot, lambda history: {"messages": len(history)})

    async def release_queued_prompt_wait(self) -> bool:
        return await self._call("release_queue", {}, super().release_queued_prompt_wait)

    async def turn_off_todo_stop_guard(self) -> None:
        return await self._call("guard_off", {}, super().turn_off_todo_stop_guard)

    async def add_tools(self, *tools: Any) -> None:
        specs = [{"name": t.name, "description": t.description, "parameters": t.parameters,
                  "builtin": bool(getattr(t, "builtin", False)), "kind": getattr(t, "kind", "other"),
                  "asksPermission": bool(getattr(t, "asks_permission", False))} for t in tools]
        return await self._call("add_tools", {"tools": specs}, lambda: super(RecordingHandle, self).add_tools(*tools))

    async def add_mcp_servers(self, servers: tuple[Any, ...]) -> list[str]:
        names = [getattr(s, "name", repr(s)) for s in servers]
        return await self._call("mcp_servers", {"servers": names},
                                lambda: super(RecordingHandle, self).add_mcp_servers(servers))

    async def take_inbox(self, take: Any) -> int:
        taken: list[Any] = []

        def taking() -> Any:
            records = take()
            taken.extend(records)
            return records

        t = self._now()
        answer = await super().take_inbox(taking)
        self._note("take_inbox", {"records": taken}, answer, t)
        return answer

    async def set_drain_source(self, source: Any, *, replacing: Any = NOT_REPLACING) -> bool:
        return await self._call("drain_source", {"set": source is not None},
                                lambda: super(RecordingHandle, self).set_drain_source(source, replacing=replacing))

    async def set_client_services(self, services: Any, *, replacing: Any = NOT_REPLACING) -> bool:
        return await self._call("client_services", {"set": services is not None},
                                lambda: super(RecordingHandle, self).set_client_services(services,
                                                                                          replacing=replacing))

    def subscribe(self, last_event_id: int | None = None, epoch: str | None = None,
                  max_queued: int | None = None) -> Any:
        sub = super().subscribe(last_event_id, epoch, max_queued)
        self._clients += 1
        client = self._clients
        self._note("attach", {"client": client, "lastEventId": last_event_id}, None, self._now())
        close = sub.close

        def closing() -> None:
            if not sub._closed:
                self._note("detach", {"client": client}, None, self._now())
            close()

        sub.close = closing  # type: ignore[method-assign]
        return sub
