"""A loopback fake of an OpenAI-compatible server that plays scripted streams.

It speaks real HTTP/1.1 (h11 over Trio sockets) and the real SSE wire of
``POST /v1/chat/completions`` with ``stream: true``, so the ``openai`` provider
is tested on the same code path it uses against OpenAI, vLLM or Ollama. It
also answers ``GET /v1/models``. Every chat request is recorded.

A script is a list of responses, one used per chat request, in order; when it
runs out the fake answers ``ok`` (``fallback``). A response is one of::

    [step, ...]                                  # a stream; same as {"steps": [...]}
    {"steps": [...], "done": true, "delay": 0, "burst": false}
        # done=false omits "data: [DONE]"; delay = seconds before the headers (null: forever);
        # burst=true sends chunks back to back in 64 KiB writes (benchmarks), not one write each
    {"status": 429, "body": {...} | "text", "headers": {"Retry-After": "2"}, "delay": 0}
    {"overflow": "llama-server", "limit": 4096, "prompt": 4138, "completion": 0}
        # a context overflow in that server's words (see OVERFLOW_STYLES)
    {"empty": true, "delay": 0}                  # 200 and SSE headers, then the body ends: no chunk at all

Overflow styles, each as that server answers a request longer than its context:
``openai`` (400, ``code: context_length_exceeded``), ``vllm`` (400, the wording of
current releases), ``vllm-0.6`` and ``vllm-0.4`` (earlier wordings, top-level
``object: error`` bodies), ``llama-server`` (400, ``type: exceed_context_size_error``
with ``n_prompt_tokens`` and ``n_ctx``), ``llama-server-old`` (400, no numbers) and
``llama-cpp-python`` (200, then nothing: its server fails inside the stream).

Steps (each an object with one key)::

    {"text": "Hello"}                 content delta
    {"thought": "hmm"}                reasoning_content delta
    {"tool_call": {"name": "todo_write", "arguments": {...} | "raw text", "id": "call_x",
                   "index": 0 | null, "split": 3, "object": false}}
    {"usage": {"prompt_tokens": 10, "completion_tokens": 5}}   a chunk with empty choices; the object is
                                      sent as given (e.g. "prompt_tokens_details": {"cached_tokens": 4}),
                                      total_tokens added when missing
    {"finish": "stop"}                finish_reason chunk (default: "tool_calls" if the response has
                                      calls, else "stop", sent after the last step but before
                                      trailing usage chunks)
    {"stall": 2.5 | null}             sleep N seconds (null: forever) before the next step
    {"cut": true}                     close the connection mid-body (incomplete chunked body)
    {"raw": "data: {oops\\n\\n"}      bytes sent verbatim

``tool_call`` options give the quirk variants: by default the call is sent as
OpenAI does (first fragment with index, id, name and ``arguments: ""``, then the
JSON arguments in ``split`` string fragments), with ``index`` counting the calls
of the response. ``"index": null`` omits the index (Ollama); ``"split": 1`` sends
the whole call in one chunk; ``"object": true`` sends ``arguments`` as a JSON
object (LiteLLM); giving several calls ``"index": 0`` with distinct ids is the
parallel-calls-at-index-0 quirk; ``{"finish": "stop"}`` the wrong finish reason.

``disconnects`` counts responses the client walked away from before they were
finished; ``disconnected`` is set at the first. Run by hand::

    python -m transport.fake_openai --port 0 [--script FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from typing import Any

import attrs
import h11
import orjson
import trio

DEMO_SCRIPT: list[Any] = [
    [
        {"text": "Hello from the fake OpenAI server. I'll plan this. "},
        {"tool_call": {"name": "todo_write", "arguments": {"todos": [
            {"id": "1", "content": "Say hello", "status": "completed"}]}}},
        {"usage": {"prompt_tokens": 20, "completion_tokens": 12}},
    ],
    [
        {"thought": "The only todo is done."},
        {"text": "Done: said hello."},
        {"usage": {"prompt_tokens": 40, "completion_tokens": 4}},
    ],
]
FALLBACK: list[Any] = [{"text": "ok"}]


@attrs.frozen
class ReceivedRequest:
    """A chat-completions request as the fake received it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


# ----------------------------------------------------------------- script -> plan


@attrs.frozen
class _Stall:
    seconds: float | None


@attrs.frozen
class _Cut:
    pass


@attrs.frozen
class Plan:
    """A compiled response: an error, or stream operations (chunk payloads, raw bytes, stalls, cuts)."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    delay: float | None = 0.0
    ops: tuple[Any, ...] = ()  # ("delta", delta, finish) | ("usage", usage) | bytes | _Stall | _Cut
    done: bool = True
    burst: bool = False


def _fail(where: str, what: str) -> ValueError:
    return ValueError(f"{where}: expected {what}")


def _seconds(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float) or value < 0:
        raise _fail(where, "a non-negative number or null")
    return float(value)


def _split(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, parts)))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


class _Compiler:
    def __init__(self, next_id: Any) -> None:
        self.next_id = next_id

    def response(self, raw: Any, where: str) -> Plan:
        if isinstance(raw, list):
            raw = {"steps": raw}
        if not isinstance(raw, dict):
            raise _fail(where, "a list of steps or an object {steps, done?, delay?} / {status, body?, headers?}")
        if "overflow" in raw:
            raw = overflow_response(raw, where)
        delay = _seconds(raw.get("delay", 0), f"{where}.delay")
        if "empty" in raw:
            if set(raw) - {"empty", "delay"} or raw["empty"] is not True:
                raise _fail(where, "{empty: true, delay?}")
            return Plan(delay=delay, done=False)
        if "status" in raw:
            extra = set(raw) - {"status", "body", "headers", "delay"}
            if extra or type(raw["status"]) is not int or not 100 <= raw["status"] <= 599:
                raise _fail(where, "{status: int, body?, headers?, delay?}")
            body = raw.get("body", {"error": {"message": f"scripted HTTP {raw['status']}", "type": "fake"}})
            headers = dict(raw.get("headers") or {})
            if isinstance(body, str):
                data = body.encode()
                headers.setdefault("Content-Type", "text/plain")
            else:
                data = orjson.dumps(body)
                headers.setdefault("Content-Type", "application/json")
            return Plan(raw["status"], tuple((str(k), str(v)) for k, v in headers.items()), data, delay)
        extra = set(raw) - {"steps", "done", "delay", "burst"}
        if extra or not isinstance(raw.get("steps", []), list):
            raise _fail(where, f"{{steps: [...], done?, delay?, burst?}} (found {sorted(raw)})")
        ops: list[Any] = [("delta", {"role": "assistant", "content": ""}, None)]
        calls = 0
        finished = False
        for i, step in enumerate(raw.get("steps", [])):
            here = f"{where}.steps[{i}]"
            if not isinstance(step, dict) or len(step) != 1:
                raise _fail(here, "an object with exactly one key")
            (key, value), = step.items()
            if key in ("text", "thought"):
                if not isinstance(value, str):
                    raise _fail(f"{here}.{key}", "a string")
                ops.append(("delta", {"content" if key == "text" else "reasoning_content": value}, None))
            elif key == "tool_call":
                ops.extend(self.tool_call(value, calls, f"{here}.tool_call"))
                calls += 1
            elif key == "usage":
                if not isinstance(value, dict):
                    raise _fail(f"{here}.usage", "an object of token counts")
                usage = dict(value)
                usage.setdefault("total_tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0))
                ops.append(("usage", usage))
            elif key == "finish":
                ops.append(("delta", {}, value))
                finished = True
            elif key == "stall":
                ops.append(_Stall(_seconds(value, f"{here}.stall")))
            elif key == "cut":
                ops.append(_Cut())
            elif key == "raw":
                if not isinstance(value, str):
                    raise _fail(f"{here}.raw", "a string")
                ops.append(value.encode())
            else:
                raise _fail(here, "one of text, thought, tool_call, usage, finish, stall, cut, raw")
        if not finished:  # before trailing usage chunks, as OpenAI orders them
            at = len(ops)
            while type(ops[at - 1]) is tuple and ops[at - 1][0] == "usage":
                at -= 1
            ops.insert(at, ("delta", {}, "tool_calls" if calls else "stop"))
        return Plan(ops=tuple(ops), done=bool(raw.get("done", True)), delay=delay, burst=bool(raw.get("burst")))

    def tool_call(self, value: Any, position: int, where: str) -> list[Any]:
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            raise _fail(where, "an object {name, arguments?, id?, index?, split?, object?}")
        extra = set(value) - {"name", "arguments", "id", "index", "split", "object"}
        if extra:
            raise _fail(where, f"only name, arguments, id, index, split and object (found {sorted(extra)})")
        call_id = value.get("id") or self.next_id()
        arguments = value.get("arguments", {})
        index = value.get("index", position)

        def fragment(**fields: Any) -> dict[str, Any]:
            if index is not None:
                fields = {"index": index, **fields}
            return {"tool_calls": [fields]}

        if value.get("object"):
            return [("delta", fragment(id=call_id, type="function",
                                       function={"name": value["name"], "arguments": arguments}), None)]
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        split = int(value.get("split", 3))
        if split <= 1:
            return [("delta", fragment(id=call_id, type="function",
                                       function={"name": value["name"], "arguments": text}), None)]
        ops: list[Any] = [("delta", fragment(id=call_id, type="function",
                                             function={"name": value["name"], "arguments": ""}), None)]
        ops.extend(("delta", fragment(function={"arguments": piece}), None) for piece in _split(text, split))
        return ops


def overflow_response(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The response (``{status, body}`` or ``{empty}``) of an ``{overflow: style, ...}`` entry."""
    extra = set(raw) - {"overflow", "limit", "prompt", "completion", "delay"}
    style = raw["overflow"]
    numbers = [raw.get(k, d) for k, d in (("limit", 4096), ("prompt", 4138), ("completion", 0))]
    if extra or style not in OVERFLOW_STYLES or any(type(n) is not int or n < 0 for n in numbers):
        raise _fail(where, f"{{overflow: one of {sorted(OVERFLOW_STYLES)}, limit?, prompt?, completion?, delay?}}")
    out = OVERFLOW_STYLES[style](*numbers)
    return {**out, "delay": raw.get("delay", 0)}


def _openai_overflow(limit: int, prompt: int, completion: int) -> dict[str, Any]:
    return {"status": 400, "body": {"error": {
        "message": f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
                   f"{prompt} tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}}


def _vllm_overflow(limit: int, prompt: int, completion: int) -> dict[str, Any]:
    return {"status": 400, "body": {"error": {
        "message": f"This model's maximum context length is {limit} tokens. However, you requested {completion} "
                   f"output tokens and your prompt contains at least {prompt} input tokens, for a total of at least "
                   f"{prompt + completion} tokens. Please reduce the length of the input prompt or the number of "
                   f"requested output tokens. (parameter=input_tokens, value={prompt})",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}}}


def _vllm_06_overflow(limit: int, prompt: int, completion: int) -> dict[str, Any]:
    return {"status": 400, "body": {
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": f"This model's maximum context length is {limit} tokens. However, your request has {prompt} "
                   "input tokens. Please reduce the length of the input messages."}}


def _vllm_04_overflow(limit: int, prompt: int, completion: int) -> dict[str, Any]:
    return {"status": 400, "body": {
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": f"This model's maximum context length is {limit} tokens. However, you requested "
                   f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the completion). "
                   "Please reduce the length of the messages or completion."}}


def _llama_server_overflow(limit: int, prompt: int, completion: int) -> dict[str, Any]:
    return {"status": 400, "body": {"error": {
        "code": 400, "message": f"request ({prompt} tokens) exceeds the available context size ({limit} tokens), "
                                "try increasing it",
        "type": "exceed_context_size_error", "n_prompt_tokens": prompt, "n_ctx": limit}}}


def _llama_server_old_overflow(limit: int, prompt: int, completion: int) -> dict[str, Any]:
    return {"status": 400, "body": {"error": {
        "code": 400, "message": "the request exceeds the available context size, try increasing it",
        "type": "invalid_request_error"}}}


OVERFLOW_STYLES: dict[str, Any] = {
    "openai": _openai_overflow,
    "vllm": _vllm_overflow,
    "vllm-0.6": _vllm_06_overflow,
    "vllm-0.4": _vllm_04_overflow,
    "llama-server": _llama_server_overflow,
    "llama-server-old": _llama_server_old_overflow,
    "llama-cpp-python": lambda limit, prompt, completion: {"empty": True},
}


def sse_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def render(plan: Plan, model: str = "fake", completion_id: str = "chatcmpl-fake") -> Iterable[bytes | _Stall | _Cut]:
    """The wire bytes of a stream plan (stalls and cuts passed through as markers)."""
    created = int(time.time())
    envelope = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
    for op in plan.ops:
        if type(op) is tuple and op[0] == "delta":
            yield sse_event({**envelope, "choices": [
                {"index": 0, "delta": op[1], "logprobs": None, "finish_reason": op[2]}]})
        elif type(op) is tuple:
            yield sse_event({**envelope, "choices": [], "usage": op[1]})
        else:
            yield op
    if plan.done:
        yield b"data: [DONE]\n\n"


# ----------------------------------------------------------------- the server


class FakeOpenAI:
    """Plays ``responses`` (the script, see the module doc) to chat requests; records ``requests``."""

    def __init__(self, responses: Iterable[Any] = (), *, fallback: Any = FALLBACK) -> None:
        self._ids = 0
        self._compile = _Compiler(self._next_id)
        self.plans: list[Plan] = []
        self.fallback = self._compile.response(fallback, "fallback")
        self.requests: list[ReceivedRequest] = []
        self.disconnects = 0
        self.disconnected = trio.Event()
        self.url: str | None = None
        self.add(*responses)

    def _next_id(self) -> str:
        self._ids += 1
        return f"call_fake_{self._ids}"

    def add(self, *responses: Any) -> None:
        """Append responses in the script's JSON form (checked now; ValueError names the bad part)."""
        for raw in responses:
            self.plans.append(self._compile.response(raw, f"responses[{len(self.plans)}]"))

    @property
    def remaining(self) -> int:
        return len(self.plans)

    async def serve(self, *, host: str = "127.0.0.1", port: int = 0,
                    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; reports ``http://HOST:PORT/v1`` through ``task_status``."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()[1]
        self.url = f"http://{host}:{bound}/v1"
        task_status.started(self.url)
        await trio.serve_listeners(self._connection, listeners)

    # ------------------------------------------------------------- HTTP

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                received = await self._receive(stream, conn)
                if received is None:
                    return
                if not await self._answer(stream, conn, *received):
                    return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass
        finally:
            await stream.aclose()

    async def _receive(self, stream: trio.SocketStream, conn: h11.Connection) -> tuple[h11.Request, bytes] | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and head is not None:
                return head, bytes(body)
            else:
                return None

    @staticmethod
    async def _send(stream: trio.SocketStream, conn: h11.Connection, *events: Any) -> None:
        await stream.send_all(b"".join(conn.send(e) or b"" for e in events))

    async def _simple(self, stream: trio.SocketStream, conn: h11.Connection, status: int, body: Any) -> None:
        data = orjson.dumps(body)
        await self._send(stream, conn, h11.Response(status_code=status, headers=[
            ("Content-Type", "application/json"), ("Content-Length", str(len(data)))]),
            h11.Data(data=data), h11.EndOfMessage())

    async def _answer(self, stream: trio.SocketStream, conn: h11.Connection, head: h11.Request, raw: bytes) -> bool:
        """Answer one request; False when the connection must be closed."""
        method, path = head.method.decode(), head.target.decode().split("?")[0]
        if method == "GET" and path.endswith("/models"):
            await self._simple(stream, conn, 200, {"object": "list", "data": [
                {"id": "fake", "object": "model", "created": 0, "owned_by": "fake"}]})
            return True
        if method != "POST" or not path.endswith("/chat/completions"):
            await self._simple(stream, conn, 404, {"error": {"message": f"no route {method} {path}"}})
            return True
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            await self._simple(stream, conn, 400, {"error": {"message": "the body is not JSON"}})
            return True
        headers = {k.decode().lower(): v.decode() for k, v in head.headers}
        self.requests.append(ReceivedRequest(method, path, headers, body))
        plan = self.plans.pop(0) if self.plans else self.fallback
        model = body.get("model", "fake") if isinstance(body, dict) else "fake"
        return await self._play(stream, conn, plan, str(model), f"chatcmpl-fake-{len(self.requests)}")

    async def _play(self, stream: trio.SocketStream, conn: h11.Connection, plan: Plan, model: str,
                    completion_id: str) -> bool:
        outcome = "finished"

        def client_left() -> None:
            nonlocal outcome
            outcome = "gone"
            self.disconnects += 1
            self.disconnected.set()

        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                # The client sends nothing while it reads the response: EOF here means it left.
                while True:
                    try:
                        data = await stream.receive_some(65536)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        data = b""
                    if not data:
                        client_left()
                        nursery.cancel_scope.cancel()
                        return
                    conn.receive_data(data)  # a pipelined next request: h11 keeps it

            nursery.start_soon(watch)
            try:
                outcome = await self._respond(stream, conn, plan, model, completion_id)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                client_left()
            nursery.cancel_scope.cancel()
        return outcome == "finished"

    async def _respond(self, stream: trio.SocketStream, conn: h11.Connection, plan: Plan, model: str,
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
            ("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")]))
        pending: list[bytes] = []
        size = 0

        async def flush() -> None:
            nonlocal size
            if pending:
                await stream.send_all(conn.send(h11.Data(data=b"".join(pending))))
                pending.clear()
                size = 0

        for item in render(plan, model, completion_id):
            if type(item) is bytes:
                pending.append(item)
                size += len(item)
                if not plan.burst or size >= 65536:
                    await flush()
                continue
            await flush()
            if type(item) is _Stall:
                await (trio.sleep_forever() if item.seconds is None else trio.sleep(item.seconds))
            else:
                return "cut"
        await flush()
        await self._send(stream, conn, h11.EndOfMessage())
        return "finished"


# ----------------------------------------------------------------- by hand


def load_script_file(path: str) -> list[Any]:
    with open(path) as f:
        data = json.load(f)
    return data["responses"] if isinstance(data, dict) and "responses" in data else data


def serve_by_hand(argv: list[str] | None, *, prog: str, description: str, make: Any, demo: list[Any]) -> int:
    """The command line of a loopback fake: ``make(script)`` serves it until interrupted (also fake_anthropic's)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed)")
    p.add_argument("--script", default=None, metavar="FILE",
                   help="JSON list of responses, or {responses: [...]} (default: a short demo)")
    args = p.parse_args(argv)
    try:
        fake = make(load_script_file(args.script) if args.script else demo)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(lambda task_status: fake.serve(
                host=args.host, port=args.port, task_status=task_status))
            print(f"listening on {url}", flush=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    return serve_by_hand(argv, prog="python -m transport.fake_openai",
                         description="A loopback fake OpenAI-compatible server playing a script.",
                         make=FakeOpenAI, demo=DEMO_SCRIPT)


if __name__ == "__main__":
    sys.exit(main())
