"""One actor per MCP server of a session, and the set of them the session owns.

:class:`McpServer` connects — a stdio process started by :mod:`.stdio`, or a
URL over Streamable HTTP or SSE — initializes with the official
:class:`mcp.ClientSession`, lists the tools, and answers :class:`CallTool`
messages, each call in a task of its own under the server's call timeout.
Whatever happens to the server stays inside its actor: one that never
starts, crashes, fails or hangs answers calls with an error, and the
session goes on.

:class:`McpServers` is the session's: it starts one actor per server in the
session's nursery — so they end with the session, and a stdio server's
process is killed on the way out — registers each server's tools once it is
ready (:mod:`.tools`), and reports a server that fails to start or stops (a
notice on the session's events, and a log warning; a stdio server's notice
quotes the last lines of its stderr, and one that did not start names its
command).

A stdio server runs in the session's sandbox (with the session's own home)
unless its settings entry says ``"sandbox": false``: then it is started as
hooks are, outside it. A client's servers (ACP) have no such member.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from .._actor import ActorGone, ActorRef, MailboxFull, Reply, open_mailbox, serve_mailbox
from ..process import NO_SANDBOX, Sandbox
from .config import ServerConfig
from .stdio import StdioProcess, base_environment, open_streams
from .tools import register_tools

log = logging.getLogger("trellis.mcp")

MAILBOX = 32
MAX_TOOL_PAGES = 100  # tools/list pages followed before the listing is taken as it is
CLIENT_INFO = ("trellis", "0.1.0")
STDERR_LINES = 20  # the last lines of a server's stderr quoted when it exits or does not start
STDERR_CHARS = 2000  # ... at most this many characters of them
COMMAND_CHARS = 300  # characters of a stdio server's command line quoted in a notice
LAST_WORDS = 1.0  # seconds a stdio server that failed is given to exit and finish writing its stderr
WITHHELD = frozenset({"TRELLIS_TOKEN", "OPENAI_API_KEY"})  # never expanded into a server's env or headers
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def available() -> bool:
    """Whether the official ``mcp`` package is installed (``pip install 'trellis[mcp]'``)."""
    import importlib.util

    return importlib.util.find_spec("mcp") is not None


def expand(value: str, environ: dict[str, str] | None = None) -> str:
    """``$VAR`` and ``${VAR}`` replaced from the daemon's environment (unset: empty), as qwen-code does.

    The daemon's own credentials are never expanded: a settings file cannot hand them to a server.
    """
    source = os.environ if environ is None else environ

    def value_of(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return "" if name in WITHHELD else source.get(name, "")

    return _VARIABLE.sub(value_of, value)


@attrs.frozen
class CallOutcome:
    """What a call came to: the server's ``CallToolResult``, or why there is none."""

    result: Any = None
    error: str | None = None


@attrs.frozen
class CallTool:
    tool: str
    arguments: dict[str, Any]
    reply: Reply[CallOutcome]


class _StartTimeout(Exception):
    pass


def _split(exc: BaseException) -> tuple[BaseException | None, BaseException | None]:
    """``(errors, the rest)``: the errors to report, and the cancellation (or interrupt) to re-raise."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(Exception)
    return (exc, None) if isinstance(exc, Exception) else (None, exc)


# What npm (under npx) adds to a failure that says nothing of it: update notices, and where its debug log went
# (a file in the session's sandbox home, gone with the session).
_NOISE = re.compile(r"^npm (notice|warn exec)\b|A complete log of this run can be found in", re.IGNORECASE)


def last_lines(text: str, lines: int = STDERR_LINES, chars: int = STDERR_CHARS) -> str:
    """The last ``lines`` non-blank lines of ``text`` (a server's stderr) that are not npm's noise, at most
    ``chars`` characters of them."""
    kept = [line.rstrip() for line in text.splitlines() if line.strip() and not _NOISE.search(line)][-lines:]
    out = "\n".join(kept)
    return out if len(out) <= chars else "…" + out[-chars:]


def command_text(config: ServerConfig) -> str:
    """A stdio server's command line as configured, quoted as a shell would take it (cut when long)."""
    text = shlex.join([config.command or "", *config.args])
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS] + "…"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


class McpServer:
    """The actor of one MCP server. ``state``: ``starting``, then ``ready`` or ``failed``."""

    def __init__(self, config: ServerConfig, cwd: str, sandbox: Sandbox, *,
                 on_ready: Callable[[McpServer], None], on_failed: Callable[[McpServer, str], None]) -> None:
        self.config = config
        self.cwd = cwd  # the session's, when the server started
        self.sandbox = sandbox
        self.state = "starting"
        self.error: str | None = None
        self.tools: list[Any] = []  # mcp.types.Tool, as listed (and filtered by include/excludeTools)
        self.settled = trio.Event()  # ready or failed
        self.ref: ActorRef[CallTool] | None = None
        self.process: StdioProcess | None = None
        self._client: Any = None
        self._calls: trio.Nursery | None = None
        self._gone: str | None = None  # how a ready server ended (its calls in flight say so)
        self._on_ready = on_ready
        self._on_failed = on_failed

    @property
    def name(self) -> str:
        return self.config.name

    async def run(self, *, task_status: trio.TaskStatus[ActorRef[CallTool]] = trio.TASK_STATUS_IGNORED) -> None:
        ref, inbox = open_mailbox(f"mcp:{self.name}", MAILBOX)
        self.ref = ref
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_mailbox, inbox, self._handle)
                task_status.started(ref)
                await self._serve()
                # Down or never up: calls keep being answered (with errors) until the session closes.
        finally:
            self.settled.set()

    # ------------------------------------------------------------- connecting

    async def _serve(self) -> None:
        if not available():
            self._settle_failed("the Python package mcp is not installed (pip install 'trellis[mcp]')")
            return
        kinds = ("http", "sse") if self.config.sse_fallback else (self.config.transport,)
        failures: list[str] = []
        for kind in kinds:
            try:
                await self._connect(kind)
                return
            except BaseException as exc:
                errors, rest = _split(exc)
                if errors is not None:
                    text = self._describe(errors)
                    if self.state == "ready":
                        self._lost(f"the connection failed: {text}")
                    else:
                        failures.append(f"{kind}: {text}" if len(kinds) > 1 else text)
                if rest is not None:
                    raise rest from None
                if self.state != "starting":
                    return
        self._settle_failed("; ".join(failures))

    async def _connect(self, kind: str) -> None:
        from mcp import ClientSession
        from mcp.types import Implementation, PaginatedRequestParams

        timeout = self.config.connect_timeout
        # One deadline over connecting, initialize and tools/list; lifted once the server is ready.
        with trio.CancelScope(deadline=trio.current_time() + timeout) as starting:
            async with self._transport(kind) as (read, write):
                info = Implementation(name=CLIENT_INFO[0], version=CLIENT_INFO[1])
                async with ClientSession(read, write, client_info=info) as client:
                    result = await client.initialize()
                    tools: list[Any] = []
                    if result.capabilities.tools is not None:
                        cursor = None
                        for _ in range(MAX_TOOL_PAGES):
                            page = await client.list_tools(
                                params=PaginatedRequestParams(cursor=cursor) if cursor else None)
                            tools.extend(page.tools)
                            cursor = page.next_cursor
                            if not cursor:
                                break
                    starting.deadline = math.inf
                    self._client = client
                    self.tools = [t for t in tools if self.config.offers(t.name)]
                    self.state = "ready"
                    async with trio.open_nursery() as calls:
                        self._calls = calls
                        self._on_ready(self)
                        self.settled.set()
                        reason = self._gone = await self._until_gone()
                        self._lost(reason)
                        self._calls = None
                        calls.cancel_scope.cancel()  # calls in flight answer "stopped before it answered"
        if starting.cancelled_caught and self.state == "starting":
            raise _StartTimeout(f"no answer to initialize and tools/list within {timeout:g} s")

    async def _until_gone(self) -> str:
        """Wait for the end of a stdio server's process (a URL's server is there until the session ends)."""
        if self.process is None:
            await trio.sleep_forever()
        code = await self.process.wait()  # type: ignore[union-attr]
        await self._last_words()
        return self._exit_text(code)

    async def _last_words(self) -> None:
        """Give a stdio server that failed a moment to exit and to finish writing its stderr."""
        if self.process is not None and self.process.child is not None:
            with trio.move_on_after(LAST_WORDS):
                await self.process.wait()
                await self.process.stderr_done.wait()

    @asynccontextmanager
    async def _transport(self, kind: str) -> AsyncIterator[tuple[Any, Any]]:
        config = self.config
        headers = {k: expand(v) for k, v in config.headers}
        if kind == "stdio":
            assert config.command is not None
            cwd = os.path.realpath(os.path.join(self.cwd, config.cwd or "."))
            if not os.path.isdir(cwd):
                raise NotADirectoryError(f"its cwd {cwd} is not a directory")
            env = base_environment() | {k: expand(v) for k, v in config.env}
            # "sandbox": false in the settings (never a client's): the user's own program, run as hooks are.
            sandbox = self.sandbox if config.sandbox else NO_SANDBOX
            if not config.sandbox and self.sandbox.active:
                log.info("MCP server %r runs outside the sandbox (its settings say \"sandbox\": false)", self.name)
            self.process = process = StdioProcess([config.command, *config.args], cwd, env,
                                                  sandbox=sandbox, session_cwd=self.cwd)
            try:
                process.start()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(process.keep_stderr)
                    try:
                        async with open_streams(process) as streams:
                            yield streams
                    except Exception:
                        # It failed (not cancelled): its exit code and its stderr's last lines say why.
                        await self._last_words()
                        raise
                    nursery.cancel_scope.cancel()
            finally:
                await process.stop()  # shielded: closing the session leaves no process behind
        elif kind == "http":
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
                async with streamable_http_client(config.url, http_client=http) as streams:  # type: ignore[arg-type]
                    yield streams
        else:
            from mcp.client.sse import sse_client

            async with sse_client(config.url, headers=headers, timeout=30) as streams:  # type: ignore[arg-type]
                yield streams

    # ------------------------------------------------------------- calls

    async def call(self, tool: str, arguments: dict[str, Any]) -> CallOutcome:
        """Call ``tool`` through this server's actor; a server that is not running, or never answers, is an error."""
        ref = self.ref
        if ref is None:
            return CallOutcome(error=f"the MCP server {self.name!r} is not running")
        try:
            # The actor keeps the call timeout itself (and cancels the request); this only bounds a lost answer.
            return await ref.ask(lambda reply: CallTool(tool, arguments, reply), timeout=self.config.call_timeout + 10)
        except (ActorGone, MailboxFull):
            return CallOutcome(error=f"the MCP server {self.name!r} is not running")
        except trio.TooSlowError:
            return CallOutcome(error=f"the MCP server {self.name!r} did not answer")

    def _handle(self, message: CallTool) -> None:
        match message:
            case CallTool(reply=reply):
                if self.state != "ready" or self._calls is None:
                    reply.send(CallOutcome(error=self._unavailable()))
                else:
                    self._calls.start_soon(self._call, message)
            case _:
                raise TypeError(f"McpServer cannot handle {message!r}")

    async def _call(self, message: CallTool) -> None:
        outcome: CallOutcome | None = None
        timeout = self.config.call_timeout
        try:
            with trio.move_on_after(timeout) as scope:
                result = await self._client.call_tool(message.tool, message.arguments)
            if scope.cancelled_caught:
                outcome = CallOutcome(error=f"the MCP server {self.name!r} did not answer within {timeout:g} s; "
                                            "the call was cancelled")
            else:
                outcome = CallOutcome(result=result)
        except Exception as exc:
            outcome = CallOutcome(error=await self._call_error(exc))
        finally:
            if outcome is None:  # cancelled: the server ended, or the session closes
                gone = f" ({self._gone})" if self._gone else ""
                outcome = CallOutcome(error=f"the MCP server {self.name!r} stopped before it answered{gone}")
            message.reply.send(outcome)

    async def _call_error(self, exc: Exception) -> str:
        from mcp.shared.exceptions import MCPError
        from mcp.types import CONNECTION_CLOSED

        if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED and self.process is not None:
            with trio.move_on_after(0.5):  # a crashed server: say how it ended
                code = await self.process.wait()
                return f"the MCP server {self.name!r} {self._exit_text(code)} during the call"
        if isinstance(exc, MCPError):
            return f"the MCP server {self.name!r} answered with error {exc.code}: {exc.message}"
        return f"the call to the MCP server {self.name!r} failed: {self._describe(exc)}"

    def _unavailable(self) -> str:
        if self.state == "starting":
            return f"the MCP server {self.name!r} is still starting"
        return f"the MCP server {self.name!r} is not running ({self.error})"

    # ------------------------------------------------------------- reporting

    def _exit_text(self, code: int | None) -> str:
        text = "was killed by signal %d" % -code if code is not None and code < 0 else f"exited with code {code}"
        tail = self.process.stderr_tail if self.process is not None else ""
        if tail:
            text += f" (stderr: {last_lines(tail)})"
        return text

    def _describe(self, exc: BaseException) -> str:
        from mcp.shared.exceptions import MCPError

        texts: list[str] = []
        for leaf in _leaves(exc):
            if isinstance(leaf, MCPError) and self.process is not None and self.process.returncode is not None:
                text = self._exit_text(self.process.returncode)
            elif isinstance(leaf, FileNotFoundError) and leaf.filename:
                text = f"cannot run {leaf.filename!r}: no such file or command"
            elif isinstance(leaf, MCPError):
                text = f"error {leaf.code}: {leaf.message}"
            elif isinstance(leaf, _StartTimeout) and self.process is not None and self.process.stderr_tail:
                text = f"{leaf} (stderr so far: {last_lines(self.process.stderr_tail)})"
            else:
                text = str(leaf) or type(leaf).__name__
                if type(leaf).__module__.split(".")[0] not in ("builtins", __name__.split(".")[0]):
                    text = f"{type(leaf).__name__}: {text}"
            if text not in texts:
                texts.append(text)
        return "; ".join(texts)

    def _settle_failed(self, reason: str) -> None:
        self.state, self.error = "failed", reason
        self.settled.set()
        command = ""
        if self.config.transport == "stdio":
            where = ", run in the sandbox" if self.config.sandbox and self.sandbox.active else ""
            if where and not self.sandbox.network:  # the likeliest reason a download or a fetch never answered
                where += " without a network (sandbox.network is off)"
            command = f" Its command{where}: {command_text(self.config)}."
        self._on_failed(self, f"MCP server {self.name!r} did not start: {reason}.{command} "
                               "The session goes on without its tools.")

    def _lost(self, reason: str) -> None:
        if self.state == "failed":
            return
        self.state, self.error = "failed", reason
        self._client = None
        self._on_failed(self, f"MCP server {self.name!r} stopped: {reason}. "
                               "Its tools answer with an error for the rest of this session.")


class McpServers:
    """A session's MCP servers: one :class:`McpServer` actor each, in the session's nursery.

    Notices about servers that fail to start are held until the session's first work item
    begins (:meth:`release`), then published as part of it: a client that follows its first
    prompt from the prompt's own cursor, or an ACP client that knows the session only once
    ``session/new`` has answered, still sees them. Later ones are published at once.
    """

    def __init__(self, session_id: str, registry: Any, *, cwd: Callable[[], str], sandbox: Sandbox,
                 publish: Callable[[str, str | None], None], current_prompt: Callable[[], str | None]) -> None:
        self.session_id = session_id
        self.registry = registry  # the session's ToolRegistry
        self.servers: dict[str, McpServer] = {}
        self._cwd = cwd
        self._sandbox = sandbox
        self._publish = publish  # (text, prompt id): the session's notice
        self._current_prompt = current_prompt
        self._held: list[str] | None = []  # None once released
        self._nursery: trio.Nursery | None = None
        self._waiting: list[ServerConfig] = []

    def start(self, nursery: trio.Nursery, configs: Iterable[ServerConfig] = ()) -> None:
        """Start the servers (and any added before) in ``nursery``, the session's."""
        self._nursery = nursery
        waiting, self._waiting = self._waiting, []
        self.add([*waiting, *configs])

    def add(self, configs: Iterable[ServerConfig]) -> list[str]:
        """Start the servers whose names are not running yet; the names started."""
        started = []
        for config in configs:
            if config.name in self.servers or any(c.name == config.name for c in self._waiting):
                log.info("session %s: MCP server %r is already configured; kept as it is",
                         self.session_id, config.name)
                continue
            if self._nursery is None:
                self._waiting.append(config)
                continue
            server = McpServer(config, self._cwd(), self._sandbox, on_ready=self._ready, on_failed=self._failed)
            self.servers[config.name] = server
            self._nursery.start_soon(server.run, name=f"mcp:{self.session_id}:{config.name}")
            started.append(config.name)
        return started

    def release(self, prompt_id: str) -> None:
        """The session's first work item began: publish the held notices as part of it."""
        held, self._held = self._held, None
        for text in held or ():
            self._notify(text, prompt_id)

    async def wait_settled(self) -> None:
        """Until every server started so far is ready or has failed (each within its start timeout)."""
        for server in list(self.servers.values()):
            await server.settled.wait()

    def _ready(self, server: McpServer) -> None:
        names = register_tools(self.registry, server)
        log.info("session %s: MCP server %r ready with %d tool(s): %s", self.session_id, server.name,
                 len(names), ", ".join(names))

    def _failed(self, server: McpServer, text: str) -> None:
        log.warning("session %s: %s", self.session_id, text,
                    extra={"session": self.session_id, "mcpServer": server.name})
        if self._held is not None:
            self._held.append(text)
        else:
            self._notify(text, self._current_prompt())

    def _notify(self, text: str, prompt_id: str | None) -> None:
        try:
            self._publish(text, prompt_id)
        except Exception:  # a notice must never take a server's actor (or the session) down
            log.exception("session %s: a notice about its MCP servers was not published", self.session_id)


__all__ = ["CallOutcome", "CallTool", "McpServer", "McpServers", "available", "expand"]
