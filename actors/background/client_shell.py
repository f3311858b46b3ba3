"""The foreground ``shell`` in the client's terminal (an ACP editor's ``terminal/*``).

When the session's client lent a :class:`~actors.session.client.ClientTerminal`,
a foreground ``shell`` call runs there instead of in a local subprocess: the
editor creates the terminal and shows it live, embedded in the tool call
(``{type: "terminal", terminalId}`` content on a ``tool_call_update``), and
the tool's result is the terminal's output and exit status. The command then
runs on the editor's side, with the editor's rights and environment, outside
Trellis's sandbox: the editor chose to offer that. Approval is asked before
(by the ``shell`` tool), exactly as for a local command.
"""

from __future__ import annotations

from typing import Any

from .. import wire
from ..session.client import ClientTerminal, ClientTerminalError, TerminalRun
from ..session.tools import ToolContext, ToolResult


def terminal_of(services: Any) -> ClientTerminal | None:
    """The terminal a session's client lent its tools (``services.terminal``), else ``None`` (local shells)."""
    return getattr(services, "terminal", None)


def terminal_content(terminal_id: str) -> dict[str, Any]:
    """ACP tool call content that embeds a client terminal."""
    return {"type": "terminal", "terminalId": terminal_id}


async def run_in_client_terminal(terminal: ClientTerminal, context: ToolContext, command: str,
                                 timeout: float, tool_name: str | None = None) -> ToolResult:
    """Run ``command`` in the client's terminal; the result reads as a local foreground shell's. ``tool_name``:
    the calling tool's, named in the update that embeds the terminal as in every other of the call's."""

    def embed(terminal_id: str) -> None:
        # The tool_call went out before the tool ran: this update adds the live terminal to it.
        publish = getattr(context.services, "publish_update", None)
        if publish is not None:
            publish(wire.tool_call_update("tool_call_update", context.tool_call_id, status="in_progress",
                                          content=[terminal_content(terminal_id)], tool_name=tool_name),
                    context.prompt_id)

    try:
        run = await terminal.run(command, cwd=context.cwd, timeout=timeout, on_created=embed)
    except ClientTerminalError as exc:
        return ToolResult.failure(f"the editor's terminal could not run the command: {exc}")
    return result_of(run, timeout)


def result_of(run: TerminalRun, timeout: float) -> ToolResult:
    """The tool result of a finished terminal run (the terminal stays embedded in the final update)."""
    note = "[the beginning of the output was dropped: over the terminal's byte limit]\n" if run.truncated else ""
    body = f"{note}{run.output}"
    embedded = (terminal_content(run.terminal_id),)
    display: dict[str, Any] = {"exitCode": run.exit_code, "terminalId": run.terminal_id}
    if run.timed_out:
        display["timedOut"] = True
        return ToolResult(f"{body}\n[timed out after {timeout:g} s; the command was killed]", display,
                          error=f"timed out after {timeout:g} s", acp_content=embedded)
    if run.exit_code is None:
        display["signal"] = run.signal
        why = f"killed by signal {run.signal}" if run.signal else "ended without an exit status"
        return ToolResult(f"{body}\n[{why}]", display, error=why, acp_content=embedded)
    return ToolResult(f"{body}\n[exit code {run.exit_code}]", display,
                      error=None if run.exit_code == 0 else f"exit code {run.exit_code}", acp_content=embedded)


__all__ = ["result_of", "run_in_client_terminal", "terminal_content", "terminal_of"]
