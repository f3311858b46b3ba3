"""The foreground ``shell`` in an ACP client's terminal: ``terminal/create`` .. ``terminal/release``.

A client that advertises ``clientCapabilities.terminal: true`` gets a
:class:`ClientTerminal` lent to each session it binds. One run is: create
(``/bin/sh -c <command>`` in the session's cwd), embed the terminal in the
tool call, ``terminal/wait_for_exit`` for at most the tool's timeout (then
``terminal/kill``), ``terminal/output``, and always ``terminal/release`` —
also when the turn is cancelled (after a ``terminal/kill``) or the client
fails. The command runs on the editor's side, outside Trellis's sandbox.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import trio

from actors.session.client import ClientTerminalError, TerminalRun

from .jsonrpc import ConnectionClosed, Peer, RpcError

log = logging.getLogger("trellis.acp")

CALL_TIMEOUT = 30.0  # seconds the client may take to answer one terminal request (not the command's run)
CLEANUP_TIMEOUT = 5.0  # seconds for each of kill and release once the run is over (cancelled, say)
OUTPUT_BYTE_LIMIT = 1_000_000  # the client keeps at most this much output (it drops the beginning)
SHELL = "/bin/sh"


def offers_terminal(capabilities: dict[str, Any]) -> bool:
    """Whether a client's ``clientCapabilities`` offer ``terminal/*`` (only ``true`` counts)."""
    return capabilities.get("terminal") is True


class ClientTerminal:
    """A :class:`~actors.session.client.ClientTerminal` over one client's ``terminal/*`` methods."""

    def __init__(self, peer: Peer, session_id: str, nursery: trio.Nursery | None = None, *,
                 call_timeout: float = CALL_TIMEOUT, output_byte_limit: int = OUTPUT_BYTE_LIMIT) -> None:
        self._peer = peer
        self._nursery = nursery  # the connection's: where a late terminal/create answer is cleaned up
        self._session_id = session_id
        self._call_timeout = call_timeout
        self._output_byte_limit = output_byte_limit

    async def run(self, command: str, *, cwd: str, timeout: float,
                  on_created: Callable[[str], None]) -> TerminalRun:
        terminal_id = await self._create(command, cwd)
        finished = False
        try:
            on_created(terminal_id)
            status: Any = None
            with trio.move_on_after(timeout):
                status = await self._call("terminal/wait_for_exit", terminal_id, math.inf)
            timed_out = status is None
            if timed_out:
                await self._quietly("terminal/kill", terminal_id, self._call_timeout)
            output = await self._call("terminal/output", terminal_id, self._call_timeout)
            finished = True
        finally:
            # Cancelled (the turn was), or the client failed: the command must not go on running.
            with trio.CancelScope(shield=True):
                if not finished:
                    await self._quietly("terminal/kill", terminal_id, CLEANUP_TIMEOUT)
                await self._quietly("terminal/release", terminal_id, CLEANUP_TIMEOUT)
        return _run_of(terminal_id, status, output, timed_out)

    async def _create(self, command: str, cwd: str) -> str:
        params = {"sessionId": self._session_id, "command": SHELL, "args": ["-c", command], "cwd": cwd,
                  "outputByteLimit": self._output_byte_limit}
        call = await self._peer.call("terminal/create", params, session_id=self._session_id)
        try:
            try:
                answer = await call.wait(self._call_timeout)
            except trio.Cancelled:
                # Cancelled while the client creates it: if it still answers, that terminal is ours to end.
                self._nursery_cleanup(call)
                raise
        except trio.TooSlowError:
            self._nursery_cleanup(call)
            raise ClientTerminalError(f"the editor did not answer terminal/create within {self._call_timeout:g} s") \
                from None
        except (RpcError, ConnectionClosed) as exc:
            self._peer.forget(call)
            raise ClientTerminalError(_said(exc)) from None
        self._peer.forget(call)
        terminal_id = answer.get("terminalId") if isinstance(answer, dict) else None
        if not isinstance(terminal_id, str) or not terminal_id:
            raise ClientTerminalError("the editor answered terminal/create without a terminalId")
        return terminal_id

    def _nursery_cleanup(self, call: Any) -> None:
        """Release a terminal whose creation we stopped waiting for, should its id still arrive."""
        nursery = self._nursery
        if nursery is None:
            self._peer.forget(call)
            return

        async def later() -> None:
            try:
                answer = await call.wait(CLEANUP_TIMEOUT)
            except (trio.TooSlowError, RpcError, ConnectionClosed):
                return
            finally:
                self._peer.forget(call)
            terminal_id = answer.get("terminalId") if isinstance(answer, dict) else None
            if isinstance(terminal_id, str) and terminal_id:
                await self._quietly("terminal/kill", terminal_id, CLEANUP_TIMEOUT)
                await self._quietly("terminal/release", terminal_id, CLEANUP_TIMEOUT)

        nursery.start_soon(later)

    async def _call(self, method: str, terminal_id: str, timeout: float) -> Any:
        call = await self._peer.call(method, {"sessionId": self._session_id, "terminalId": terminal_id},
                                     session_id=self._session_id)
        try:
            return await call.wait(timeout)
        except trio.TooSlowError:
            raise ClientTerminalError(f"the editor did not answer {method} within {timeout:g} s") from None
        except (RpcError, ConnectionClosed) as exc:
            raise ClientTerminalError(f"{method}: {_said(exc)}") from None
        finally:
            self._peer.forget(call)

    async def _quietly(self, method: str, terminal_id: str, timeout: float) -> None:
        """Kill or release: a failure is logged (the run's own outcome, or error, is what the model reads)."""
        try:
            await self._call(method, terminal_id, timeout)
        except ClientTerminalError as exc:
            log.info("%s of terminal %s for session %s failed: %s", method, terminal_id, self._session_id, exc)


def _said(exc: RpcError | ConnectionClosed) -> str:
    if isinstance(exc, ConnectionClosed):
        return "the editor's connection closed"
    return f"the editor answered with an error: {exc.message or exc.code}"


def _run_of(terminal_id: str, status: Any, output: Any, timed_out: bool) -> TerminalRun:
    """The run from ``wait_for_exit``'s status (``None`` when it timed out) and ``terminal/output``'s answer."""
    if not isinstance(output, dict):
        output = {}
    if not isinstance(status, dict):
        status = output.get("exitStatus") if isinstance(output.get("exitStatus"), dict) else {}
    code, signal = status.get("exitCode"), status.get("signal")
    text = output.get("output")
    return TerminalRun(terminal_id, text if isinstance(text, str) else "", output.get("truncated") is True,
                       code if type(code) is int else None, signal if isinstance(signal, str) else None,
                       timed_out)


__all__ = ["CALL_TIMEOUT", "ClientTerminal", "OUTPUT_BYTE_LIMIT", "offers_terminal"]
