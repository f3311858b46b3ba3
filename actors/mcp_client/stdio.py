"""A stdio MCP server as a process of its session: started sandboxed, spoken to in JSON lines, killed.

Why not ``mcp.client.stdio.stdio_client``: it starts the server with
``anyio.open_process``, which on Trio forks from a worker thread, and the
sandbox's ``--die-with-parent`` fires when *that thread* exits (Trio retires
idle workers after a few seconds; see :mod:`actors.process.spawn`); and it
would start the command without the sandbox and without the markers that
let the daemon (and its lifeline) find every process the server starts. So
the process is started here the way model-run commands are — from the Trio
thread, in its own process group, inside :class:`~actors.process.Sandbox`,
with a marked environment — and :func:`open_streams` bridges its pipes to
the two memory streams the official :class:`mcp.ClientSession` reads and
writes, parsing and serializing messages with the SDK's own types.

The environment is **not** the daemon's: a minimal base (:data:`BASE_ENV`,
what the SDK itself passes through) plus the configured ``env``, then the
run and task markers. stderr is kept (the last :data:`STDERR_KEPT`
characters) to say why a server that exited did.
"""

from __future__ import annotations

import codecs
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from ..telemetry import count_process
from ..process import Child, Sandbox, kill_task, marked_environment, require_executable

log = logging.getLogger("trellis.mcp")

# What a server inherits from the daemon's environment: the SDK's own default list, plus the locale.
BASE_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
STDERR_KEPT = 4000  # characters of a server's stderr kept for the failure message
MAX_LINE = 16 * 1024 * 1024  # bytes of one JSON-RPC line; a longer one ends the connection
EXIT_GRACE = 1.0  # seconds a server may take to exit once its stdin closed, before it is killed
# Changes into the configured cwd inside the sandbox, whose own --chdir is the session's cwd (the writable one).
_CD = 'cd -- "$0" && exec "$@"'


def base_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The few variables a server inherits (never the daemon's credentials: none of them is in the list)."""
    source = os.environ if environ is None else environ
    return {k: source[k] for k in BASE_ENV if k in source and not source[k].startswith("()")}


class StdioProcess:
    """One started server process: its pipes, its exit, the tail of its stderr."""

    def __init__(self, argv: Sequence[str], cwd: str, env: Mapping[str, str], *, sandbox: Sandbox,
                 session_cwd: str) -> None:
        self.argv = list(argv)
        self.cwd = cwd
        self.env = dict(env)
        self.sandbox = sandbox
        self.session_cwd = session_cwd
        self.child: Child | None = None
        self.task: str | None = None  # the TRELLIS_TASK marker
        self.stdin: trio.lowlevel.FdStream | None = None
        self.stderr: trio.lowlevel.FdStream | None = None
        self._stderr_tail = ""
        self.stderr_done = trio.Event()  # its stderr reached its end (or could not be read further)
        self._reaped = False

    @property
    def returncode(self) -> int | None:
        return self.child.returncode if self.child is not None else None

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail.strip()

    def start(self) -> None:
        """Start the process; ``OSError`` when it cannot start (a missing command, a refused cwd)."""
        # Its configured environment as it is (Sandbox.environment is the model-run commands' allowlist).
        env, self.task = marked_environment(self.sandbox.configured_environment(self.env))
        argv = self.argv
        if self.sandbox.active:
            require_executable(argv[0], self.cwd, env)  # "not found" stays an OSError, as without bwrap
            if os.path.realpath(self.cwd) != os.path.realpath(self.session_cwd):
                argv = ["/bin/sh", "-c", _CD, self.cwd, *argv]
            # The server's own files named on its command line (a script, a config) are visible read-only:
            # the configuration chose them, and one under /tmp is otherwise hidden by the sandbox's own /tmp.
            named = [a for a in self.argv if os.path.isabs(a) and os.path.isfile(a)]
            argv = self.sandbox.wrap(argv, self.session_cwd, expose=named)
        fds: list[int] = []
        try:
            in_read, in_write = os.pipe()
            fds += [in_read, in_write]
            out_read, out_write = os.pipe()
            fds += [out_read, out_write]
            err_read, err_write = os.pipe()
            fds += [err_read, err_write]
            # Forked here, from the Trio thread (see the module docstring), in a session of its own.
            popen = subprocess.Popen(argv, cwd=self.cwd, env=env, stdin=in_read, stdout=out_write,
                                     stderr=err_write, start_new_session=True, close_fds=True)
        except BaseException as exc:
            for fd in fds:
                os.close(fd)
            if isinstance(exc, OSError):
                count_process("sandbox_spawns", f"{'yes' if self.sandbox.active else 'no'}:failed")
            raise
        count_process("sandbox_spawns", f"{'yes' if self.sandbox.active else 'no'}:started")
        for fd in (in_read, out_write, err_write):
            os.close(fd)
        self.child = Child(popen, trio.lowlevel.FdStream(out_read))
        self.stdin = trio.lowlevel.FdStream(in_write)
        self.stderr = trio.lowlevel.FdStream(err_read)

    async def keep_stderr(self) -> None:
        """Read stderr to its end, keeping the tail (a server that fills the pipe must not block)."""
        assert self.stderr is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            async for chunk in self.stderr:
                self._stderr_tail = (self._stderr_tail + decoder.decode(chunk))[-STDERR_KEPT:]
        except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            pass
        self.stderr_done.set()

    async def wait(self) -> int:
        assert self.child is not None
        return await self.child.wait()

    async def stop(self) -> None:
        """Close stdin (the spec's way to ask a stdio server to exit), then kill what is left, and reap.

        Runs to its end from a cancelled scope too; the group is SIGKILLed and every process with
        the server's marker swept (what left the group with ``setsid``, a double fork).
        """
        if self.child is None or self._reaped:
            return
        with trio.CancelScope(shield=True):
            if self.stdin is not None:
                try:
                    await self.stdin.aclose()
                except (trio.ClosedResourceError, OSError):
                    pass
            with trio.move_on_after(EXIT_GRACE):
                await self.child.wait()
            try:
                os.killpg(self.child.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if self.task is not None:
                await kill_task(self.task)
            with trio.move_on_after(2):
                await self.child.wait()
            self._reaped = self.child.returncode is not None
            for stream in (self.child.stdout, self.stderr):
                if stream is not None:
                    try:
                        await stream.aclose()
                    except (trio.ClosedResourceError, OSError):
                        pass


@asynccontextmanager
async def open_streams(process: StdioProcess) -> AsyncIterator[tuple[Any, Any]]:
    """The ``(read_stream, write_stream)`` pair of :class:`mcp.ClientSession` over the process's pipes.

    The read stream ends when the server closes its stdout (it exited); a line that is not a
    JSON-RPC message reaches the session as an exception, as the SDK's own transport does it.
    """
    import anyio
    import mcp_types
    from mcp.shared.message import SessionMessage

    assert process.child is not None and process.stdin is not None
    read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_reader = anyio.create_memory_object_stream[Any](0)
    stdout, stdin = process.child.stdout, process.stdin

    async def reader() -> None:
        buffer = b""
        try:
            async with read_writer:
                async for chunk in stdout:
                    buffer += chunk
                    if len(buffer) > MAX_LINE and b"\n" not in buffer:
                        log.warning("an MCP server wrote a line longer than %d bytes; disconnecting", MAX_LINE)
                        return
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        try:
                            item: Any = SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(
                                line, by_name=False))
                        except ValueError as exc:
                            item = exc
                        await read_writer.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, trio.ClosedResourceError,
                trio.BrokenResourceError, OSError):
            pass  # the session or the process is gone: the read stream ends either way

    async def writer() -> None:
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                    await stdin.send_all(data.encode())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, trio.ClosedResourceError,
                trio.BrokenResourceError, OSError):
            await read_writer.aclose()  # nobody can answer now: let pending requests fail instead of hang

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                for stream in (read_stream, write_stream, read_writer, write_reader):
                    await stream.aclose()
