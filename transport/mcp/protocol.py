"""MCP over Streamable HTTP, framework-free: the handshake, sessions, versions, batches, tools/call.

:meth:`McpEndpoint.receive` turns one POST (scope, tools, headers, body) into
either an :class:`Answer` — initialize, a 202, or an HTTP-level refusal — or
an :class:`Exchange`: the requests it carried, to be answered by
:meth:`Exchange.answer` as one JSON body, or as an SSE stream when
:attr:`Exchange.streams` says so (``streaming.py``). The routes wrap it for
Quart. What a client gets:

- ``initialize``: the protocol version echoed when supported (else our
  newest) and an ``Mcp-Session-Id``; the session remembers that version;
- the negotiated version governs every later request of the session. An
  ``MCP-Protocol-Version`` header may repeat it; one naming another version,
  or one we don't speak, is a 400 (the spec's "invalid or unsupported");
- a JSON array body is a JSON-RPC batch: answered (an array of responses,
  202 when it held only notifications and responses) only on a session that
  negotiated 2025-03-26, the one revision that has batches; 2025-06-18 removed
  them, and 2024-11-05 never had them: 400 on those;
- notifications and client responses: 202, no body;
- ``ping``, ``tools/list``, ``tools/call`` (``{content, isError}``, plus
  ``structuredContent`` where a tool declares an ``outputSchema``);
- GET: 405 (no server-initiated stream); DELETE ends the session;
- no ``Mcp-Session-Id`` on a request other than ``initialize``: 400; an
  unknown one: 404 (the client re-initializes);
- protocol errors with their JSON-RPC codes: -32700 unparsable, -32600 not a
  request, -32601 unknown method, -32602 unknown tool or a ``tools/call``
  whose params break the request schema. Arguments that miss the tool's
  ``inputSchema`` are a *tool execution error* instead (MCP 2025-11-25): a
  result with ``isError: true`` whose text says what was wrong and where, so
  the model can correct the call.

Sessions are scoped: one opened on a run's signal URL is no use on another.
"""

from __future__ import annotations

import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from actors.session.tool_arguments import ArgumentCheck
from actors.wire import jsonrpc, shorten
from actors.wire.jsonrpc import (
    INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, Batch, Invalid, Request, RpcError, error_response,
    result_response,
)

from . import jsonrpc as mcp_jsonrpc
from .progress import Notify, Progress, ToolContext
from .streaming import accepts_event_stream

log = logging.getLogger("trellis.mcp")

SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")  # newest first
BATCH_VERSIONS = frozenset({"2025-03-26"})  # added in 2025-03-26, removed in 2025-06-18
MAX_SESSIONS = 1024  # per endpoint; the oldest idle ones go first
MAX_BODY = 1024 * 1024
MAX_BATCH = 64  # messages in one batch: each request of it runs concurrently


@attrs.frozen
class ToolOutput:
    """What a tool handler returns: text for people and models, optionally structured content."""

    text: str
    is_error: bool = False
    structured: dict[str, Any] | None = None


@attrs.frozen
class McpTool:
    """One tool: its listing (name, title, description, schemas, annotations) and its handler.

    ``handler(arguments, context)`` gets arguments already checked against ``input_schema``.
    A tool that returns ``structured`` content declares ``output_schema``, which it must match.
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Callable[[dict[str, Any], ToolContext], Awaitable[ToolOutput]]
    output_schema: dict[str, Any] | None = None
    title: str | None = None
    annotations: dict[str, Any] | None = None
    # Built once: the same check as a session's built-in tools (actors/session/tool_arguments.py).
    input_check: ArgumentCheck = attrs.field(init=False, eq=False, repr=False,
                                             default=attrs.Factory(lambda self: ArgumentCheck(self.input_schema),
                                                                   takes_self=True))
    output_check: ArgumentCheck | None = attrs.field(
        init=False, eq=False, repr=False,
        default=attrs.Factory(lambda self: None if self.output_schema is None else ArgumentCheck(self.output_schema),
                              takes_self=True))

    def describe(self) -> dict[str, Any]:
        """The ``tools/list`` entry."""
        out: dict[str, Any] = {"name": self.name}
        if self.title is not None:
            out["title"] = self.title
        out.update(description=self.description, inputSchema=self.input_schema)
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        if self.annotations is not None:
            out["annotations"] = self.annotations
        return out


@attrs.frozen
class Answer:
    """An HTTP answer: status, body, headers."""

    status: int
    body: bytes = b""
    headers: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class Session:
    scope: str
    version: str  # negotiated at initialize; governs every later request of the session


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by name, whatever its case (Quart's headers already are; a plain dict may not be)."""
    value = headers.get(name)
    if value is None:
        wanted = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == wanted), None)
    return value


def _json(status: int, message: Any, headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, jsonrpc.encode(message), {"Content-Type": "application/json", **(headers or {})})


def _refuse(status: int, request_id: Any, code: int, message: str) -> Answer:
    return _json(status, error_response(request_id, RpcError(code, message)))


@attrs.define(eq=False)
class Exchange:
    """The requests one POST carried, accepted on a session: answer them with :meth:`answer`.

    ``slots`` holds, in order, each request to run or the error response already decided
    for a bad member of a batch.
    """

    endpoint: McpEndpoint
    tools: Mapping[str, McpTool]
    session: Session
    slots: list[Request | dict[str, Any]]
    batch: bool
    streams: bool  # answer as text/event-stream: a tools/call asked for progress and Accept allows it

    async def answer(self, notify: Notify | None = None) -> Answer:
        """Run every request (a batch's concurrently) and answer: one response, or a batch's array."""
        return _json(200, await self.run(notify))

    async def run(self, notify: Notify | None = None) -> Any:
        """The JSON-RPC answer itself; ``notify`` sends notifications that relate to it (SSE only)."""
        responses: list[dict[str, Any] | None] = [None] * len(self.slots)

        async def one(index: int, message: Request) -> None:
            responses[index] = await self.endpoint.dispatch(self.tools, message, notify)

        async with trio.open_nursery() as nursery:
            for index, slot in enumerate(self.slots):
                if isinstance(slot, Request):
                    nursery.start_soon(one, index, slot)
                else:
                    responses[index] = slot
        return responses if self.batch else responses[0]


class McpEndpoint:
    """One MCP server surface (a name, instructions, sessions); tools are given per call."""

    def __init__(self, server_name: str, instructions: str = "", title: str | None = None) -> None:
        self.server_name = server_name
        self.title = title
        self.instructions = instructions
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    # ------------------------------------------------------------- HTTP methods

    def get(self) -> Answer:
        """No server-initiated stream."""
        return Answer(405, b"", {"Allow": "POST, DELETE"})

    def delete(self, scope: str, headers: Mapping[str, str]) -> Answer:
        """End a session."""
        session_id = header(headers, "Mcp-Session-Id")
        if not session_id:
            return _refuse(400, None, INVALID_REQUEST, "Bad Request: missing Mcp-Session-Id header")
        session = self._sessions.get(session_id)
        if session is None or session.scope != scope:
            return _refuse(404, None, INVALID_REQUEST, "Session not found")
        del self._sessions[session_id]
        return Answer(200)

    async def post(self, scope: str, tools: Mapping[str, McpTool], headers: Mapping[str, str],
                   body: bytes) -> Answer:
        """One POST answered as JSON (no notifications): :meth:`receive`, then the exchange's answer."""
        received = self.receive(scope, tools, headers, body)
        return received if isinstance(received, Answer) else await received.answer()

    def receive(self, scope: str, tools: Mapping[str, McpTool], headers: Mapping[str, str],
                body: bytes) -> Answer | Exchange:
        """Read one POST: an :class:`Answer` when nothing is left to run, else an :class:`Exchange`."""
        if len(body) > MAX_BODY:
            return _refuse(413, None, INVALID_REQUEST, f"message larger than {MAX_BODY} bytes")
        message = mcp_jsonrpc.parse(body)
        if isinstance(message, Invalid):
            return _json(400, message.response())
        if isinstance(message, Batch):
            return self._batch(scope, tools, headers, message)
        if not isinstance(message, Request) or message.is_notification:
            # A notification, or a client's response to us: accepted on a session, nothing to say.
            session = self._session(scope, headers)
            return session if isinstance(session, Answer) else Answer(202)
        if message.method == "initialize":
            return self._initialize(scope, message)
        session = self._session(scope, headers, message.id)
        if isinstance(session, Answer):
            return session
        return Exchange(self, tools, session, [message], batch=False, streams=_streams(headers, [message]))

    # ------------------------------------------------------------- sessions and batches

    def _session(self, scope: str, headers: Mapping[str, str], request_id: Any = None) -> Session | Answer:
        session_id = header(headers, "Mcp-Session-Id")
        if not session_id:
            return _refuse(400, request_id, INVALID_REQUEST, "Bad Request: missing Mcp-Session-Id header "
                                                             "(initialize first)")
        session = self._sessions.get(session_id)
        if session is None or session.scope != scope:
            return _refuse(404, request_id, INVALID_REQUEST, "Session not found")
        self._sessions.move_to_end(session_id)
        version = header(headers, "MCP-Protocol-Version")
        if version is not None and version != session.version:
            if version not in SUPPORTED_VERSIONS:
                why = f"unsupported protocol version {version!r} (supported: {', '.join(SUPPORTED_VERSIONS)})"
            else:
                why = f"MCP-Protocol-Version {version} is not the version this session negotiated ({session.version})"
            return _refuse(400, request_id, INVALID_REQUEST, f"Bad Request: {why}")
        return session

    def _batch(self, scope: str, tools: Mapping[str, McpTool], headers: Mapping[str, str],
               batch: Batch) -> Answer | Exchange:
        # Whether batches exist at all is the session's negotiated version: initialize may not be
        # batched, so a batch always arrives on a session whose version is known.
        session = self._session(scope, headers)
        if isinstance(session, Answer):
            return session
        if session.version not in BATCH_VERSIONS:
            return _refuse(400, None, INVALID_REQUEST,
                           f"Invalid Request: JSON-RPC batches are not supported in protocol version "
                           f"{session.version}, which this session negotiated; they exist only in 2025-03-26 "
                           f"(2025-06-18 removed them). Send one message per POST.")
        if len(batch.messages) > MAX_BATCH:
            return _refuse(400, None, INVALID_REQUEST, f"Invalid Request: at most {MAX_BATCH} messages in a batch")
        slots: list[Request | dict[str, Any]] = []
        for message in filter(jsonrpc.needs_answer, batch.messages):  # notifications and responses: accepted
            if isinstance(message, Invalid):
                slots.append(message.response())
            elif isinstance(message, Request) and message.method == "initialize":
                slots.append(error_response(message.id, jsonrpc.invalid_request(
                    "initialize must not be part of a JSON-RPC batch")))
            elif isinstance(message, Request):
                slots.append(message)
        if not slots:
            return Answer(202)  # nothing to answer: no body at all, never [] (JSON-RPC §6)
        requests = [slot for slot in slots if isinstance(slot, Request)]
        return Exchange(self, tools, session, slots, batch=True, streams=_streams(headers, requests))

    def forget_scope(self, scope: str) -> None:
        """Drop every session opened under ``scope`` (a run that ended)."""
        for session_id in [s for s, session in self._sessions.items() if session.scope == scope]:
            del self._sessions[session_id]

    # ------------------------------------------------------------- methods

    def _initialize(self, scope: str, incoming: Request) -> Answer:
        asked = incoming.params.get("protocolVersion")
        if not isinstance(asked, str):
            return _refuse(200, incoming.id, INVALID_PARAMS, "params.protocolVersion must be a string")
        version = asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0]
        session_id = secrets.token_hex(16)
        self._sessions[session_id] = Session(scope, version)
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        info = {"name": self.server_name, "version": "0.1.0"}
        if self.title:
            info["title"] = self.title
        result: dict[str, Any] = {"protocolVersion": version, "capabilities": {"tools": {"listChanged": False}},
                                  "serverInfo": info}
        if self.instructions:
            result["instructions"] = self.instructions
        return _json(200, result_response(incoming.id, result), {"Mcp-Session-Id": session_id})

    async def dispatch(self, tools: Mapping[str, McpTool], incoming: Request,
                       notify: Notify | None = None) -> dict[str, Any]:
        """The response to one request of a session; never raises an ``Exception``."""
        try:
            if incoming.method == "ping":
                return result_response(incoming.id, {})
            if incoming.method == "tools/list":
                return result_response(incoming.id, {"tools": [tool.describe() for tool in tools.values()]})
            if incoming.method == "tools/call":
                return await self._call(tools, incoming, notify)
            return error_response(incoming.id, jsonrpc.method_not_found(incoming.method))
        except Exception:
            log.exception("MCP %s failed", incoming.method)
            return error_response(incoming.id, RpcError(INTERNAL_ERROR, f"{incoming.method} failed inside the daemon"))

    async def _call(self, tools: Mapping[str, McpTool], incoming: Request, notify: Notify | None) -> dict[str, Any]:
        # Protocol errors: what no retry with other arguments can fix (the request itself is malformed,
        # or names no tool of this server).
        request_id, params = incoming.id, incoming.params
        name = params.get("name")
        if not isinstance(name, str):
            return _invalid_params(request_id, "params.name must be a string")
        tool = tools.get(name)
        if tool is None:
            return _invalid_params(request_id, f"Unknown tool: {shorten(name, 80)} "
                                               f"(this server has: {', '.join(tools) or 'none'})")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return _invalid_params(request_id, "params.arguments must be an object")
        problem = mcp_jsonrpc.meta_problem(params)
        if problem is not None:
            return _invalid_params(request_id, problem)
        # A tool execution error: the model reads it and can call again with corrected arguments.
        problems = tool.input_check.problems(arguments)
        if problems:
            problem = "; ".join(problems)
            return result_response(request_id, _content(ToolOutput(
                f"Invalid arguments for {name}: {problem}. Nothing was done; call {name} again with "
                f"corrected arguments.", is_error=True)))
        progress = Progress(mcp_jsonrpc.progress_token(params), notify)
        try:
            output = await tool.handler(arguments, ToolContext(progress))
        except Exception:
            log.exception("MCP tool %s failed", name)
            output = ToolOutput(f"{name} failed inside the daemon", is_error=True)
        finally:
            progress.finish()
        _check_output(tool, output)
        return result_response(request_id, _content(output))


def _invalid_params(request_id: Any, message: str) -> dict[str, Any]:
    # MCP's own messages (``params.name must be a string``), not JSON-RPC's ``Invalid params: … at $.path``.
    return error_response(request_id, RpcError(INVALID_PARAMS, message))


def _content(output: ToolOutput) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": output.text}], "isError": output.is_error}
    if output.structured is not None:
        result["structuredContent"] = output.structured
    return result


def _check_output(tool: McpTool, output: ToolOutput) -> None:
    # The spec says a server MUST match its outputSchema; a mismatch is a bug here, logged where it is seen
    # (the client validates too, and would refuse the result).
    if output.is_error or tool.output_check is None:
        return
    if output.structured is None:
        log.error("MCP tool %s declares an outputSchema but returned no structuredContent", tool.name)
        return
    problems = tool.output_check.problems(output.structured, "structuredContent")
    if problems:
        log.error("MCP tool %s returned structuredContent its outputSchema does not describe: %s", tool.name,
                  "; ".join(problems))


def _streams(headers: Mapping[str, str], requests: list[Request]) -> bool:
    """Answer as SSE: a ``tools/call`` asked for progress, and the client accepts an event stream."""
    wants = any(r.method == "tools/call" and mcp_jsonrpc.progress_token(r.params) is not None for r in requests)
    return wants and accepts_event_stream(header(headers, "Accept"))
