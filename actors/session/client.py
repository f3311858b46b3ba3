"""What a client (an editor) may lend a session: its view of the files, and its terminals.

A transport that speaks to an editor — ACP, when the client advertises
``clientCapabilities.fs`` or ``terminal`` — builds a :class:`ClientServices`
and lends it with :meth:`SessionHandle.set_client_services`; it takes it back
when the client goes away. The session then offers those to its tools as
``services.files`` (a :class:`~actors.tools.access.FileAccess`: the file tools
read the editor's buffers, unsaved edits included) and ``services.terminal``
(a :class:`ClientTerminal`: the foreground ``shell`` runs in the editor's
terminal, which the editor shows live). With nothing lent, the tools use the
daemon's own files and subprocesses, as always.

The protocols live here, in ``actors/``, so the transport implements them
without ``actors/`` ever importing a transport.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from ..tools.access import FileAccess


class ClientTerminalError(Exception):
    """The client could not run the command (it refused, failed, or went away); the message is for the model."""


@attrs.frozen
class TerminalRun:
    """How a command run in the client's terminal ended."""

    terminal_id: str
    output: str
    truncated: bool  # the client dropped the beginning of the output (its byte limit)
    exit_code: int | None
    signal: str | None
    timed_out: bool = False  # killed because it outlived the tool's timeout


class ClientTerminal(Protocol):
    """Runs one shell command in the client's terminal, from creation to release."""

    async def run(self, command: str, *, cwd: str, timeout: float,
                  on_created: Callable[[str], None]) -> TerminalRun:
        """Run ``command`` (a shell command line) in ``cwd`` and wait for it, at most ``timeout`` seconds.

        ``on_created(terminal_id)`` is called once the terminal exists, so the tool call can embed it.
        The terminal is killed on timeout or cancellation and always released. Raises
        :class:`ClientTerminalError`.
        """
        ...


@attrs.frozen
class ClientServices:
    """A client's stand-ins for the daemon's own files and shells; ``None`` keeps the local one."""

    files: FileAccess | None = None
    terminal: ClientTerminal | None = None
    owner: Any = None  # who lent them (a connection's binding), for the log and for tests

    @property
    def empty(self) -> bool:
        return self.files is None and self.terminal is None


__all__ = ["ClientServices", "ClientTerminal", "ClientTerminalError", "TerminalRun"]
