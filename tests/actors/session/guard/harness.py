"""Shared helpers for the session-level Todo Stop Guard tests (spec 000).

A guard-enabled daemon in process (yolo approval, counting ids, virtual wall
clock), a scripted model, and helpers that run a prompt to its terminal event
and read the guard's telemetry and the model's calls back.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import attrs
import trio

from actors import CountingIds, Settings, load_script, open_daemon, wire
from actors.model import ScriptedModel

BASE = datetime(2026, 11, 30, 12, 0, 30, tzinfo=timezone.utc)
GUARD_SOURCE = "todo_stop_guard"
GUARD_PREFIX = "[Todo Stop Guard]"
FINAL_SENTENCE = "This is the final automatic continuation."


def virtual_now() -> datetime:
    return BASE + timedelta(seconds=trio.current_time())


# ----------------------------------------------------------------- script steps


def call(name: str, call_id: str | None = None, **arguments: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "arguments": arguments}
    if call_id is not None:
        body["id"] = call_id
    return {"tool_call": body}


def todos(unfinished: int, completed: int = 0, *, word: str = "secret-task") -> list[dict[str, str]]:
    """A todo list: ``unfinished`` pending/in-progress items, then ``completed`` done ones."""
    items = []
    for i in range(unfinished):
        items.append({"id": f"u{i}", "content": f"{word}-{i}", "status": "in_progress" if i == 0 else "pending"})
    for i in range(completed):
        items.append({"id": f"c{i}", "content": f"{word}-done-{i}", "status": "completed"})
    return items


def todo_write(unfinished: int = 2, completed: int = 0, call_id: str | None = None, *,
               word: str = "secret-task") -> dict[str, Any]:
    """A scripted ``todo_write`` tool-call step."""
    return call("todo_write", call_id, todos=todos(unfinished, completed, word=word))


def text(t: str) -> dict[str, Any]:
    return {"text": t}


def says(t: str) -> list[dict[str, Any]]:
    """A response that just says ``t`` (a natural stop)."""
    return [text(t)]


def guard_script(*, after: int = 2, unfinished: int = 2) -> list[Any]:
    """The canonical guard run: a todo write, then plain text for every later stream."""
    return [[todo_write(unfinished)]] + [says(f"reply {i}") for i in range(after + 1)]


def model_of(*responses: Any, context_window: int | None = None) -> ScriptedModel:
    model = load_script({"responses": list(responses)})
    model.context_window = context_window
    return model


# ----------------------------------------------------------------- daemon


def guard_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"todo_stop_guard": True, "approval_mode": "yolo"}
    values.update(overrides)
    return Settings(**values)


@asynccontextmanager
async def guard_session(model: ScriptedModel, settings: Settings | None = None, *, tools: Any = None,
                        workspace: str | None = None, state_dir: Any = None) -> AsyncIterator[Any]:
    """A daemon with the guard on (unless ``settings`` says otherwise) and one session in it."""
    async with open_daemon(settings or guard_settings(), model=model, ids=CountingIds(), now=virtual_now,
                           tools=tools, workspace=workspace, state_dir=state_dir) as daemon:
        session, _ = await daemon.create_session()
        if model.context_window is not None:
            # A test's window is room for the conversation: the system prompt and the tool schemas,
            # which every request carries and every estimate counts, come on top.
            model.context_window += (await session.status())["context"]["baseTokens"]
        yield session


def body(t: str, meta: dict[str, Any] | None = None) -> wire.PromptBody:
    return wire.PromptBody(prompt=[wire.TextBlock(type="text", text=t)], meta=meta)


RETRY = {"retry": True}


@attrs.define
class Run:
    """The events of one prompt or automatic turn, from its admission to its terminal event."""

    prompt_id: str
    events: list[Any]

    @property
    def end(self) -> Any:
        return self.events[-1]

    @property
    def stop_reason(self) -> str | None:
        return self.end.data.get("stopReason") if self.end.type == "turn_complete" else None

    @property
    def errored(self) -> bool:
        return self.end.type == "turn_error"

    @property
    def guard(self) -> list[dict[str, Any]]:
        return guard_updates(self.events)

    @property
    def attempts(self) -> list[int]:
        return [u["_meta"]["attempt"] for u in self.guard]

    @property
    def unfinished(self) -> list[int]:
        return [u["_meta"]["unfinishedCount"] for u in self.guard]


def is_terminal(event: Any, prompt_id: str | None = None) -> bool:
    return event.type in ("turn_complete", "turn_error") and (prompt_id is None or event.prompt_id == prompt_id)


def guard_updates(events: list[Any]) -> list[dict[str, Any]]:
    out = []
    for event in events:
        update = event.update
        if update and (update.get("_meta") or {}).get("source") == GUARD_SOURCE:
            out.append(update)
    return out


async def admit(session: Any, t: str = "do the work", meta: dict[str, Any] | None = None) -> Any:
    admitted = await session.prompt(body(t, meta))
    assert hasattr(admitted, "prompt_id"), f"not admitted: {admitted!r}"
    return admitted


async def collect(session: Any, after: int, prompt_id: str | None = None, *, timeout: float = 600) -> Run:
    """Events after ``after`` (replayed, then live) up to the terminal event of ``prompt_id`` (any, if None)."""
    events: list[Any] = []
    with trio.fail_after(timeout):
        async with session.subscribe(last_event_id=after) as sub:
            async for event in sub:
                if event.id is None:
                    continue  # replay markers
                if prompt_id is None or event.prompt_id in (prompt_id, None):
                    events.append(event)  # only this turn's events (and session-wide ones)
                if is_terminal(event, prompt_id):
                    return Run(event.prompt_id, events)
    raise AssertionError("the event stream ended before the terminal event")


async def run_prompt(session: Any, t: str = "do the work", meta: dict[str, Any] | None = None, *,
                     timeout: float = 600) -> Run:
    """Admit a prompt and return its events up to its terminal event."""
    admitted = await admit(session, t, meta)
    return await collect(session, admitted.last_event_id, admitted.prompt_id, timeout=timeout)


async def next_automatic(session: Any, after: int, *, timeout: float = 600) -> Run:
    """The events of the next automatic turn that ends after event ``after``."""
    events: list[Any] = []
    with trio.fail_after(timeout):
        async with session.subscribe(last_event_id=after) as sub:
            async for event in sub:
                if event.id is None:
                    continue
                events.append(event)
                if is_terminal(event) and (event.prompt_id or "").startswith("auto"):
                    return Run(event.prompt_id, [e for e in events if e.prompt_id in (event.prompt_id, None)])
    raise AssertionError("the event stream ended before an automatic turn ended")


async def wait_for(predicate: Any, *, step: float = 0.01, timeout: float = 60) -> None:
    """Poll ``predicate`` (sync) under the current clock until it holds."""
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(step)


async def guard_state(session: Any) -> dict[str, Any]:
    return (await session.status())["todoStopGuard"]


# ----------------------------------------------------------------- model calls


def primary_calls(model: ScriptedModel) -> list[Any]:
    return [c for c in model.calls if c.purpose == "primary"]


def user_messages(request: Any) -> list[Any]:
    return [m for m in request.messages if m.role == "user"]


def last_user(request: Any) -> Any:
    return user_messages(request)[-1]


def origins(request: Any) -> list[str | None]:
    return [m.origin for m in user_messages(request)]


def guard_prompts_in(request: Any) -> list[str]:
    return [m.content for m in user_messages(request) if m.origin == "guard"]


def new_user_origins(model: ScriptedModel, index: int) -> list[str | None]:
    """Origins of the user messages call ``index`` added over call ``index - 1``."""
    calls = primary_calls(model)
    before = len(user_messages(calls[index - 1])) if index else 0
    return [m.origin for m in user_messages(calls[index])][before:]


# ----------------------------------------------------------------- hooks


def hook_script(directory: Path, name: str, body_text: str) -> str:
    """An executable ``/bin/sh`` hook in ``directory``; returns a command that runs it."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + body_text + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def echo_json_hook(directory: Path, name: str, payload: dict[str, Any], *, log: Path | None = None) -> str:
    """A hook that (optionally) appends a line to ``log`` and prints ``payload`` as JSON."""
    lines = ["cat > /dev/null"]
    if log is not None:
        lines.append(f"echo ran >> '{log}'")
    lines.append(f"printf '%s' '{json.dumps(payload)}'")
    return hook_script(directory, name, "\n".join(lines))


def hooks_for(event: str, command: str, matcher: str | None = None) -> dict[str, Any]:
    group: dict[str, Any] = {"hooks": [{"type": "command", "command": command}]}
    if matcher is not None:
        group["matcher"] = matcher
    return {event: [group]}


def count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if os.path.exists(path) else 0
