"""A loopback fake of the Anthropic Messages API that plays scripted responses.

Enough of ``POST /v1/messages`` for a real agent CLI (Claude Code, with
``ANTHROPIC_BASE_URL`` pointing here) to run a turn: the streaming SSE wire
(``message_start``, ``content_block_start/delta/stop``, ``message_delta``,
``message_stop``, ``ping``) when the request says ``stream: true``, one
``message`` object when it does not, ``tool_use`` blocks whose input arrives as
``input_json_delta`` fragments, and ``POST /v1/messages/count_tokens``. The
HTTP layer is :class:`transport.fake_openai.FakeOpenAI`'s (h11 over Trio
sockets, disconnect counting); every messages request is recorded.

A script is a list of responses, one used per request, in order; when it runs
out the fake answers ``ok`` (``fallback``). A response is one of::

    [step, ...]                                   # a message; same as {"steps": [...]}
    {"steps": [...], "delay": 0, "when": {...}}   # delay: seconds before the headers (null: forever)
    {"status": 529, "body": {...} | "text", "headers": {...}, "delay": 0, "when": {...}}

``when`` picks which request a response is for, so the side requests a CLI
makes besides its turn (Claude Code asks a small model for a title, checks
quota with ``max_tokens: 1``) do not use up the turn's script: the first
scripted response whose ``when`` matches is used, the others wait. Its keys,
all of which must match:

    {"tools": "mcp__trellis__goal_reached"}   the request offers a tool of that name
    {"tool_result": true}                     its last message carries a tool_result block
                                              (false: it does not)
    {"model": "haiku"}                        the request's model contains this text
    {"text": "needle"}                        its messages or system prompt contain this text

A request no response matches gets the fallback. Steps (each an object with one key)::

    {"text": "Hello", "split": 1}     a text block (text steps in a row are one block, ``split``
                                      deltas each)
    {"thinking": "hmm"}               a thinking block, with a signature
    {"tool_use": {"name": "mcp__trellis__goal_reached", "input": {...} | "raw json",
                  "id": "toolu_x", "split": 3}}
    {"usage": {"input_tokens": 10, "output_tokens": 5}}   the message's usage (default 10 / 5)
    {"stop": "end_turn"}              stop_reason (default "tool_use" with a tool_use block,
                                      else "end_turn")
    {"stall": 2.5 | null}             sleep N seconds (null: forever) before the next event
    {"cut": true}                     close the connection mid-body
    {"raw": "event: x\\ndata: {}\\n\\n"}   bytes sent verbatim

Run by hand (``ANTHROPIC_BASE_URL`` is the printed URL, without ``/v1``)::

    python -m transport.fake_anthropic --port 0 [--script FILE.json]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import attrs
import h11
import orjson
import trio

from .fake_openai import FakeOpenAI, ReceivedRequest, _Cut, _fail, _seconds, _split, _Stall, serve_by_hand

__all__ = ["DEMO_SCRIPT", "FALLBACK", "FakeAnthropic", "MessagePlan", "ReceivedRequest", "main"]

DEMO_SCRIPT: list[Any] = [
    {"when": {"tool_result": False}, "steps": [
        {"text": "Hello from the fake Anthropic API. "},
        {"tool_use": {"name": "mcp__trellis__goal_reached", "input": {"summary": "said hello"}}},
    ]},
    {"when": {"tool_result": True}, "steps": [{"text": "Done."}]},
]
FALLBACK: list[Any] = [{"text": "ok"}]
MATCH_KEYS = ("tools", "tool_result", "model", "text")


@attrs.frozen
class MessagePlan:
    """A compiled response: an error, or a message's content blocks and the stream operations around them."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    delay: float | None = 0.0
    # ("block", index, start_block, [delta, ...]) | _Stall | _Cut | bytes, in wire order
    ops: tuple[Any, ...] = ()
    stop_reason: str = "end_turn"
    usage: tuple[tuple[str, int], ...] = (("input_tokens", 10), ("output_tokens", 5))
    when: tuple[tuple[str, Any], ...] = ()

    def matches(self, body: Any) -> bool:
        return all(_matches(key, value, body) for key, value in self.when)

    def message(self, model: str, message_id: str) -> dict[str, Any]:
        """The whole message, as a request without ``stream`` gets it."""
        content: list[dict[str, Any]] = []
        for op in self.ops:
            if type(op) is tuple:
                content.append(_assemble(op[2], op[3]))
        return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": self.stop_reason, "stop_sequence": None, "usage": dict(self.usage)}


def _matches(key: str, value: Any, body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    if key == "tools":
        return any(isinstance(t, dict) and t.get("name") == value for t in body.get("tools") or ())
    if key == "tool_result":
        messages = body.get("messages") or [{}]
        last = messages[-1] if isinstance(messages[-1], dict) else {}
        content = last.get("content")
        has = isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        return has is bool(value)
    if key == "model":
        return value in str(body.get("model", ""))
    if key == "text":
        return value in json.dumps([body.get("system"), body.get("messages")])
    return False


def _assemble(start: dict[str, Any], deltas: list[dict[str, Any]]) -> dict[str, Any]:
    block = dict(start)
    if block["type"] == "text":
        block["text"] = "".join(d["text"] for d in deltas)
    elif block["type"] == "thinking":
        block["thinking"] = "".join(d.get("thinking", "") for d in deltas)
        block["signature"] = next((d["signature"] for d in deltas if d["type"] == "signature_delta"), "")
    elif block["type"] == "tool_use":
        raw = "".join(d["partial_json"] for d in deltas)
        block["input"] = json.loads(raw) if raw else {}
    return block


class _Compiler:
    def __init__(self, next_id: Any) -> None:
        self.next_id = next_id

    def response(self, raw: Any, where: str) -> MessagePlan:
        if isinstance(raw, list):
            raw = {"steps": raw}
        if not isinstance(raw, dict):
            raise _fail(where, "a list of steps or an object {steps, delay?, when?} / {status, body?, headers?}")
        delay = _seconds(raw.get("delay", 0), f"{where}.delay")
        when = self.when(raw.get("when", {}), f"{where}.when")
        if "status" in raw:
            extra = set(raw) - {"status", "body", "headers", "delay", "when"}
            if extra or type(raw["status"]) is not int or not 100 <= raw["status"] <= 599:
                raise _fail(where, "{status: int, body?, headers?, delay?, when?}")
            body = raw.get("body", {"type": "error", "error": {
                "type": "api_error", "message": f"scripted HTTP {raw['status']}"}})
            headers = dict(raw.get("headers") or {})
            if isinstance(body, str):
                data = body.encode()
                headers.setdefault("Content-Type", "text/plain")
            else:
                data = orjson.dumps(body)
                headers.setdefault("Content-Type", "application/json")
            return MessagePlan(raw["status"], tuple((str(k), str(v)) for k, v in headers.items()), data, delay,
                               when=when)
        extra = set(raw) - {"steps", "delay", "when"}
        if extra or not isinstance(raw.get("steps", []), list):
            raise _fail(where, f"{{steps: [...], delay?, when?}} (found {sorted(raw)})")
        ops: list[Any] = []
        usage = {"input_tokens": 10, "output_tokens": 5}
        stop: str | None = None
        calls = 0
        for i, step in enumerate(raw.get("steps", [])):
            here = f"{where}.steps[{i}]"
            if not isinstance(step, dict) or not step:
                raise _fail(here, "an object with one key")
            key = "text" if "text" in step else next(iter(step))
            value = step[key]
            if key == "text" and set(step) <= {"text", "split"}:
                if not isinstance(value, str):
                    raise _fail(f"{here}.text", "a string")
                pieces = [{"type": "text_delta", "text": p} for p in _split(value, int(step.get("split", 1)))]
                last = ops[-1] if ops else None
                if type(last) is tuple and last[2]["type"] == "text":
                    last[3].extend(pieces)  # text steps in a row are one block
                else:
                    ops.append(("block", 0, {"type": "text", "text": ""}, pieces))
            elif len(step) != 1:
                raise _fail(here, "an object with exactly one key (text may add split)")
            elif key == "thinking":
                if not isinstance(value, str):
                    raise _fail(f"{here}.thinking", "a string")
                ops.append(("block", 0, {"type": "thinking", "thinking": ""}, [
                    {"type": "thinking_delta", "thinking": value},
                    {"type": "signature_delta", "signature": "fake-signature"}]))
            elif key == "tool_use":
                ops.append(self.tool_use(value, f"{here}.tool_use"))
                calls += 1
            elif key == "usage":
                if not isinstance(value, dict) or not all(type(v) is int for v in value.values()):
                    raise _fail(f"{here}.usage", "an object of token counts")
                usage.update(value)
            elif key == "stop":
                if not isinstance(value, str):
                    raise _fail(f"{here}.stop", "a stop reason")
                stop = value
            elif key == "stall":
                ops.append(_Stall(_seconds(value, f"{here}.stall")))
            elif key == "cut":
                ops.append(_Cut())
            elif key == "raw":
                if not isinstance(value, str):
                    raise _fail(f"{here}.raw", "a string")
                ops.append(value.encode())
            else:
                raise _fail(here, "one of text, thinking, tool_use, usage, stop, stall, cut, raw")
        index = 0
        numbered: list[Any] = []
        for op in ops:  # blocks are numbered in order
            if type(op) is tuple:
                op = ("block", index, op[2], op[3])
                index += 1
            numbered.append(op)
        return MessagePlan(delay=delay, ops=tuple(numbered), stop_reason=stop or ("tool_use" if calls else "end_turn"),
                           usage=tuple(usage.items()), when=when)

    def when(self, value: Any, where: str) -> tuple[tuple[str, Any], ...]:
        if not isinstance(value, dict) or set(value) - set(MATCH_KEYS):
            raise _fail(where, f"an object of {', '.join(MATCH_KEYS)}")
        for key, item in value.items():
            if (key == "tool_result") is not (type(item) is bool) or (key != "tool_result" and type(item) is not str):
                raise _fail(f"{where}.{key}", "true or false" if key == "tool_result" else "a string")
        return tuple(value.items())

    def tool_use(self, value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            raise _fail(where, "an object {name, input?, id?, split?}")
        extra = set(value) - {"name", "input", "id", "split"}
        if extra:
            raise _fail(where, f"only name, input, id and split (found {sorted(extra)})")
        arguments = value.get("input", {})
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        pieces = [{"type": "input_json_delta", "partial_json": p} for p in _split(text, int(value.get("split", 3)))]
        start = {"type": "tool_use", "id": value.get("id") or self.next_id(), "name": value["name"], "input": {}}
        return ("block", 0, start, pieces)


def sse(event: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def render(plan: MessagePlan, model: str, message_id: str) -> Iterator[bytes | _Stall | _Cut]:
    """The wire bytes of a streamed message (stalls and cuts passed through as markers)."""
    usage = dict(plan.usage)
    yield sse("message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 1}}})
    yield sse("ping", {"type": "ping"})
    for op in plan.ops:
        if type(op) is not tuple:
            yield op
            continue
        _, index, start, deltas = op
        yield sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})
        for delta in deltas:
            yield sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield sse("message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": plan.stop_reason, "stop_sequence": None},
                                "usage": {"output_tokens": usage.get("output_tokens", 0)}})
    yield sse("message_stop", {"type": "message_stop"})


# ----------------------------------------------------------------- the server


class FakeAnthropic(FakeOpenAI):
    """Plays ``responses`` (the script, see the module doc) to messages requests; records ``requests``.

    ``url`` is the base URL a client wants in ``ANTHROPIC_BASE_URL`` (no ``/v1``).
    """

    def __init__(self, responses: Iterable[Any] = (), *, fallback: Any = FALLBACK) -> None:
        self._ids = 0
        self._compile = _Compiler(self._next_id)  # type: ignore[assignment]
        self.plans: list[MessagePlan] = []  # type: ignore[assignment]
        self.fallback = self._compile.response(fallback, "fallback")
        self.requests: list[ReceivedRequest] = []
        self.disconnects = 0
        self.disconnected = trio.Event()
        self.url: str | None = None
        self.add(*responses)

    def _next_id(self) -> str:
        self._ids += 1
        return f"toolu_fake_{self._ids:02d}"

    async def serve(self, *, host: str = "127.0.0.1", port: int = 0,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports ``http://HOST:PORT`` through ``task_status``."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()[1]
        self.url = f"http://{host}:{bound}"
        task_status.started(self.url)
        await trio.serve_listeners(self._connection, listeners)

    def pick(self, body: Any) -> MessagePlan:
        """The first scripted response whose ``when`` matches ``body`` (removed), else the fallback."""
        for i, plan in enumerate(self.plans):
            if plan.matches(body):
                return self.plans.pop(i)
        return self.fallback  # type: ignore[return-value]

    async def _answer(self, stream: trio.SocketStream, conn: h11.Connection, head: h11.Request, raw: bytes) -> bool:
        method, path = head.method.decode(), head.target.decode().split("?")[0]
        if method != "POST" or not path.startswith("/v1/messages"):
            await self._simple(stream, conn, 404, _error("not_found_error", f"no route {method} {path}"))
            return True
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            await self._simple(stream, conn, 400, _error("invalid_request_error", "the body is not JSON"))
            return True
        if path == "/v1/messages/count_tokens":
            await self._simple(stream, conn, 200, {"input_tokens": len(raw) // 4})
            return True
        if path != "/v1/messages":
            await self._simple(stream, conn, 404, _error("not_found_error", f"no route {method} {path}"))
            return True
        headers = {k.decode().lower(): v.decode() for k, v in head.headers}
        self.requests.append(ReceivedRequest(method, path, headers, body))
        plan = self.pick(body)
        model = str(body.get("model", "fake")) if isinstance(body, dict) else "fake"
        message_id = f"msg_fake_{len(self.requests):02d}"
        if plan.status == 200 and not (isinstance(body, dict) and body.get("stream")):
            if plan.delay is None:
                await trio.sleep_forever()
            await trio.sleep(plan.delay or 0)
            await self._simple(stream, conn, 200, plan.message(model, message_id))
            return True
        return await self._play(stream, conn, plan, model, message_id)  # type: ignore[arg-type]

    async def _respond(self, stream: trio.SocketStream, conn: h11.Connection, plan: Any, model: str,
                       completion_id: str) -> str:
        if plan.delay is None:
            await trio.sleep_forever()
        elif plan.delay:
            await trio.sleep(plan.delay)
        if plan.status != 200:
            headers = [*plan.headers, ("Content-Length", str(len(plan.body)))]
            await self._send(stream, conn, h11.Response(status_code=plan.status, headers=headers),
                             h11.Data(data=plan.body), h11.EndOfMessage())
            return "finished"
        await self._send(stream, conn, h11.Response(status_code=200, headers=[
            ("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"),
            ("request-id", f"req_{completion_id}")]))
        for item in render(plan, model, completion_id):
            if type(item) is bytes:
                await stream.send_all(conn.send(h11.Data(data=item)))
            elif type(item) is _Stall:
                await (trio.sleep_forever() if item.seconds is None else trio.sleep(item.seconds))
            else:
                return "cut"
        await self._send(stream, conn, h11.EndOfMessage())
        return "finished"


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


# ----------------------------------------------------------------- by hand


def main(argv: list[str] | None = None) -> int:
    return serve_by_hand(argv, prog="python -m transport.fake_anthropic",
                         description="A loopback fake of the Anthropic Messages API playing a script.",
                         make=FakeAnthropic, demo=DEMO_SCRIPT)


if __name__ == "__main__":
    sys.exit(main())
