"""The scripted model: deterministic, in-process, no server and no key.

A script is a list of responses played one per model call::

    {"responses": [
        [{"text": "Planning. "}, {"tool_call": {"name": "todo_write", "arguments": {"todos": []}}}],
        {"refuse": {"code": "rate_limited", "message": "slow down"}},
        {"delay": 1.5, "steps": [{"text": "done"}]}
    ]}

A response is a list of steps or an object with ``steps`` plus optional
``delay`` (seconds before the stream is returned) and ``refuse`` (an error
raised before the stream is returned, so nothing is committed). Steps:
``text``, ``thought``, ``tool_call`` ``{name, arguments, id?}``, ``usage``
``{prompt_tokens?, completion_tokens?, total_tokens?, cached_tokens?}``,
``sleep`` (seconds, after commit), ``fail`` ``{code, message?}`` (the stream is
cut after commit) and ``finish`` (a finish reason). A ``refuse`` with code
``context_overflow`` is a :class:`~.overflow.ContextOverflow`, its limit and
prompt count read from the message as from a server's (``"This model's maximum
context length is 4096 tokens. However, your messages resulted in 5000
tokens."``); the response ``{"empty": true}`` is a stream that ends before any
item (:class:`~.overflow.EmptyResponse`, as llama-cpp-python's server answers an
overflow). A ``context_window`` refuses, before any response is used, a request
whose estimate (the caller's ``estimated_tokens``, else
:func:`~.estimate.estimate_request`) exceeds it. When the responses run out
the model refuses with ``script_exhausted`` — or, with ``"then": "demo"``, goes
on as the demo model.

Without a script the model is the *demo*: it answers any prompt by planning
three todos with ``todo_write``, working through them one call at a time, and
reporting — deterministic, so the daemon demonstrates itself out of the box.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio

from .base import (
    ChatMessage,
    ChatRequest,
    ContextWindowExceeded,
    Finish,
    ModelError,
    StreamItem,
    TextDelta,
    ThoughtDelta,
    ToolCall,
    Usage,
)
from .estimate import estimate_request
from .overflow import ContextOverflow, EmptyResponse, overflow_from_text


class ScriptError(ValueError):
    """A script that does not have the documented form."""


@attrs.frozen
class Sleep:
    seconds: float


@attrs.frozen
class Fail:
    code: str
    message: str


EMPTY = object()  # the step of an {"empty": true} response


@attrs.frozen
class Response:
    steps: tuple[Any, ...] = ()
    delay: float = 0.0
    refuse: ModelError | None = None


# ----------------------------------------------------------------- parsing


def _expect(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise ScriptError(f"{where}: expected {what}")


def _number(value: Any, where: str) -> float:
    _expect(type(value) in (int, float) and value >= 0, where, "a non-negative number")
    return float(value)


def _string(value: Any, where: str) -> str:
    _expect(isinstance(value, str), where, "a string")
    return value


def _parse_step(step: Any, where: str, counter: Callable[[], str]) -> Any:
    _expect(isinstance(step, dict) and len(step) == 1, where, "an object with exactly one key")
    (key, value), = step.items()
    here = f"{where}.{key}"
    if key == "text":
        return TextDelta(_string(value, here))
    if key == "thought":
        return ThoughtDelta(_string(value, here))
    if key == "tool_call":
        _expect(isinstance(value, dict), here, "an object {name, arguments, id?}")
        extra = set(value) - {"name", "arguments", "id"}
        _expect(not extra, here, f"only name, arguments and id (found {sorted(extra)})")
        name = _string(value.get("name"), f"{here}.name")
        call_id = value.get("id")
        if call_id is not None:
            _string(call_id, f"{here}.id")
        return ToolCall(call_id or counter(), name, value.get("arguments", {}))
    if key == "usage":
        _expect(isinstance(value, dict), here, "an object of token counts")
        for k, v in value.items():
            _expect(type(v) is int and v >= 0, f"{here}.{k}", "a non-negative integer")
        try:
            return Usage(**value)
        except TypeError as exc:
            raise ScriptError(f"{here}: {exc}") from None
    if key == "sleep":
        return Sleep(_number(value, here))
    if key == "fail":
        _expect(isinstance(value, dict) and "code" in value, here, "an object {code, message?}")
        return Fail(_string(value["code"], f"{here}.code"), _string(value.get("message", "stream failed"), f"{here}.message"))
    if key == "finish":
        return Finish(_string(value, here))
    raise ScriptError(f"{where}: unknown step {key!r}; expected text, thought, tool_call, usage, sleep, fail or finish")


def parse_response(raw: Any, where: str, counter: Callable[[], str]) -> Response:
    if isinstance(raw, list):
        raw = {"steps": raw}
    _expect(isinstance(raw, dict), where, "a list of steps or an object {steps, delay?, refuse?, empty?}")
    extra = set(raw) - {"steps", "delay", "refuse", "empty"}
    _expect(not extra, where, f"only steps, delay, refuse and empty (found {sorted(extra)})")
    if raw.get("empty"):
        return Response((EMPTY,), _number(raw.get("delay", 0), f"{where}.delay"))
    steps_raw = raw.get("steps", [])
    _expect(isinstance(steps_raw, list), f"{where}.steps", "a list")
    steps = tuple(_parse_step(s, f"{where}.steps[{i}]", counter) for i, s in enumerate(steps_raw))
    refuse = None
    if "refuse" in raw:
        r = raw["refuse"]
        _expect(isinstance(r, dict) and "code" in r, f"{where}.refuse", "an object {code, message?}")
        code = _string(r["code"], f"{where}.refuse.code")
        message = _string(r.get("message", "model refused"), f"{where}.refuse.message")
        refuse = ModelError(code, message, committed=False)
        if code == "context_overflow":
            refuse = overflow_from_text(message, message, committed=False) or ContextOverflow(message,
                                                                                              committed=False)
    return Response(steps, _number(raw.get("delay", 0), f"{where}.delay"), refuse)


def load_script(source: str | Path | dict[str, Any] | list[Any]) -> ScriptedModel:
    """Build a scripted model from a JSON file path, or from already-parsed data."""
    where = "script"
    if isinstance(source, (str, Path)):
        where = str(source)
        try:
            data = json.loads(Path(source).read_text())
        except OSError as exc:
            raise ScriptError(f"{where}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ScriptError(f"{where}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
        except json.JSONDecodeError as exc:
            raise ScriptError(f"{where}: invalid JSON: {exc}") from None
    else:
        data = source
    if isinstance(data, list):
        data = {"responses": data}
    _expect(isinstance(data, dict), where, "an object {responses, then?}")
    extra = set(data) - {"responses", "then"}
    _expect(not extra, where, f"only responses and then (found {sorted(extra)})")
    then = data.get("then", "error")
    _expect(then in ("error", "demo"), f"{where}.then", "'error' or 'demo'")
    responses = data.get("responses")
    _expect(isinstance(responses, list), f"{where}.responses", "a list")
    model = ScriptedModel(demo_after=then == "demo")
    model.extend(responses, where=f"{where}.responses")
    return model


# ----------------------------------------------------------------- the model


class ScriptedModel:
    """Plays scripted responses in order; records every request it receives."""

    name = "scripted"
    supports_images = True  # image parts are recorded with the request (``calls``), so tests can see them

    def __init__(
        self,
        responses: list[Response] | None = None,
        *,
        demo_after: bool = True,
        context_window: int | None = None,
    ) -> None:
        self._responses: list[Response] = list(responses or [])
        self._cursor = 0
        self._ids = 0
        self.demo_after = demo_after
        self.context_window = context_window
        self.calls: list[ChatRequest] = []

    def _next_id(self) -> str:
        self._ids += 1
        return f"call_{self._ids}"

    def extend(self, raw_responses: list[Any], where: str = "responses") -> None:
        """Append responses given in the script's JSON form."""
        base = len(self._responses)
        for i, raw in enumerate(raw_responses):
            self._responses.append(parse_response(raw, f"{where}[{base + i}]", self._next_id))

    @property
    def remaining(self) -> int:
        return len(self._responses) - self._cursor

    def _take(self, request: ChatRequest) -> Response:
        if self._cursor < len(self._responses):
            response = self._responses[self._cursor]
            self._cursor += 1
            return response
        if self.demo_after:
            return demo_response(request, self._next_id)
        return Response(refuse=ModelError("script_exhausted", "the model script has no more responses", committed=False))

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamItem]]:
        if self.context_window is not None:
            needed = request.estimated_tokens if request.estimated_tokens is not None else estimate_request(request)
            if needed > self.context_window:
                raise ContextWindowExceeded(needed, self.context_window)
        self.calls.append(request)
        response = self._take(request)
        if response.delay:
            await trio.sleep(response.delay)
        else:
            await trio.lowlevel.checkpoint()
        if response.refuse is not None:
            raise response.refuse
        yield _play(response.steps)


async def _play(steps: tuple[Any, ...]) -> AsyncIterator[StreamItem]:
    checkpoint = trio.lowlevel.checkpoint
    for step in steps:
        if type(step) is Sleep:
            await trio.sleep(step.seconds)
            continue
        if type(step) is Fail:
            raise ModelError(step.code, step.message, committed=True)
        if step is EMPTY:
            raise EmptyResponse("the response ended before any chunk (scripted)")
        await checkpoint()
        yield step


# ----------------------------------------------------------------- the demo


def _last_todos(messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]] | None:
    """The todos of the model's own last todo_write in this turn, if any."""
    for m in reversed(messages):
        if m.role == "user":
            return None
        if m.role == "assistant":
            for call in m.tool_calls:
                if call.name == "todo_write" and isinstance(call.arguments, dict):
                    todos = call.arguments.get("todos")
                    if isinstance(todos, list):
                        return [dict(t) for t in todos]
    return None


def demo_response(request: ChatRequest, next_id: Callable[[], str]) -> Response:
    """Plan three todos, complete them one call at a time, then report."""
    if request.purpose != "primary":
        return Response((TextDelta("Summary of the conversation so far."),))
    ask = next((m.content for m in reversed(request.messages) if m.role == "user"), "")
    topic = " ".join(ask.split())[:60] or "the request"
    todos = _last_todos(request.messages)
    can_plan = any(t.name == "todo_write" for t in request.tools)
    if todos is None and can_plan:
        plan = [
            {"id": "1", "content": f"Understand: {topic}", "status": "in_progress"},
            {"id": "2", "content": "Do the work", "status": "pending"},
            {"id": "3", "content": "Report the result", "status": "pending"},
        ]
        return Response((TextDelta("I'll plan this first. "), ToolCall(next_id(), "todo_write", {"todos": plan})))
    open_items = [t for t in todos or [] if t.get("status") != "completed"]
    if open_items:
        current = open_items[0]
        current["status"] = "completed"
        if len(open_items) > 1:
            open_items[1]["status"] = "in_progress"
        text = f"Done with: {current.get('content', '')}. "
        return Response((TextDelta(text), ToolCall(next_id(), "todo_write", {"todos": todos})))
    return Response((TextDelta(f"All done. Summary: worked through '{topic}'."),))
