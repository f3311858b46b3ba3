"""ACP over stdio: newline-delimited JSON-RPC on stdin/stdout, for editors that spawn the agent.

``python -m transport acp`` (until that is wired: ``python -m transport.acp``)
takes the daemon's flags, serves one client on stdin/stdout until stdin closes,
and logs to stderr only. stdout carries nothing but protocol: at start the
process moves its own fd 1 to stderr (and fd 0 to /dev/null), keeping private
copies for the protocol, so a stray print or a child process can never corrupt
the stream.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import trio

from actors import Daemon, SandboxUnavailable
from actors.storage import StorageError
from actors.wire import jsonrpc
from transport.daemon_lock import StateDirInUse, hold_state_dir
from transport.process_image import Secrets
from transport.signals import Shutdown, shutdown_signals

from . import bridge
from .connection import AcpConnection

log = logging.getLogger("trellis.acp.stdio")

MAX_LINE = 10 * 1024 * 1024  # the REST surface's body limit
OUT_QUEUE = 256  # messages waiting for stdout; a full queue holds the senders back


async def read_lines(stream: trio.abc.ReceiveStream, *, max_line: int = MAX_LINE) -> AsyncIterator[bytes | None]:
    """Lines without their newline; ``None`` for a line longer than ``max_line`` (it is skipped)."""
    buffer = bytearray()
    skipping = False
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            if buffer.strip() and not skipping:
                yield bytes(buffer)
            return
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                if not skipping:
                    buffer += chunk[start:]
                    if len(buffer) > max_line:
                        buffer.clear()
                        skipping = True  # the rest of this line is dropped up to its newline
                        yield None
                break
            if skipping:
                skipping = False
            else:
                buffer += chunk[start:end]
                if len(buffer) > max_line:
                    yield None
                elif buffer.strip():
                    yield bytes(buffer)
            buffer.clear()
            start = end + 1


async def serve_stdio(daemon: Daemon, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream, *,
                      drain_deadline: float = bridge.DEADLINE, drain_late_limit: float = bridge.LATE_LIMIT) -> None:
    """Serve one ACP client over a byte stream pair until its input ends; then tear its sessions down."""
    out_send, out_receive = trio.open_memory_channel[bytes](OUT_QUEUE)

    async def writer() -> None:
        async with out_receive:
            async for data in out_receive:
                try:
                    await send.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    log.info("stdout closed; the client is gone")
                    return

    async def send_message(message: dict[str, Any], session_id: str | None, event_id: int | None) -> None:
        await out_send.send(jsonrpc.encode(message) + b"\n")

    async with trio.open_nursery() as outer:
        outer.start_soon(writer)
        async with trio.open_nursery() as nursery:
            conn = AcpConnection(daemon, nursery, send_message, drain_deadline=drain_deadline,
                                 drain_late_limit=drain_late_limit)
            try:
                async for line in read_lines(receive):
                    if line is None:
                        await send_message(jsonrpc.error_response(None, jsonrpc.parse_error("line too long")),
                                           None, None)
                    else:
                        await conn.receive(line)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # stdin went away: same as its end
            finally:
                await conn.close()
                nursery.cancel_scope.cancel()
        out_send.close()  # the writer flushes what is queued, then ends


def _claim_stdio() -> tuple[int, int]:
    """Private copies of fds 0 and 1 for the protocol; fd 1 then points at stderr, fd 0 at /dev/null."""
    protocol_in, protocol_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return protocol_in, protocol_out


def run_stdio(argv: list[str] | None = None, *, secrets: Secrets | None = None, prog: str | None = None) -> int:
    """``python -m transport acp``: parse the daemon's flags, serve ACP on stdin/stdout until stdin closes.

    ``secrets`` (or ``--secrets-fd``) bring back what :mod:`transport.process_image`
    withheld from the process image, such as ``OPENAI_API_KEY`` for the model.
    """
    # Imported here: transport.bootstrap imports transport.server, whose app imports this package.
    from transport.bootstrap import UsageError, configure_logging, load_daemon_config, recover_secrets
    from transport.cli import build_parser

    parser = build_parser(stdio=True)
    parser.prog = prog or "python -m transport acp"
    args = parser.parse_args(argv)
    try:
        environ = recover_secrets(args, secrets)
    except UsageError as exc:
        parser.error(str(exc))
    configure_logging(args, environ)  # stderr: stdout is the protocol's
    config = load_daemon_config(args, environ)
    if config is None:
        return 2
    protocol_in, protocol_out = _claim_stdio()

    # SIGTERM/SIGINT: the daemon's graceful shutdown (transport.signals), then the end of serving;
    # a second signal, or limits.shutdownSeconds running out, forces it (exit 1).
    shutdown = Shutdown(config.settings.limits.shutdown_seconds)
    shutdown.served.set()  # no HTTP server to wait for

    async def main() -> None:
        receive, send = trio.lowlevel.FdStream(protocol_in), trio.lowlevel.FdStream(protocol_out)
        with trio.open_signal_receiver(*shutdown_signals()) as signals, shutdown.root:
            async with config.open() as daemon:
                shutdown.daemon = daemon
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(shutdown.watch, signals, nursery)
                    await serve_stdio(daemon, receive, send)
                    nursery.cancel_scope.cancel()  # stdin ended: the daemon's exit stops the rest in order

    try:
        # Held before the daemon opens (it restores sessions from there), as trellis serve does.
        with hold_state_dir(config.state_dir, role="the ACP agent on stdio"):
            trio.run(main)
    except KeyboardInterrupt:
        return 0
    except (StateDirInUse, StorageError) as exc:
        print(f"error: cannot start: {exc}", file=sys.stderr)
        return 2
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        shutdown.finished()
    return shutdown.exit_code()
