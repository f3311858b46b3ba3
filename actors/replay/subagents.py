"""Subagent runs in a replay: the in-process signal endpoint, and what the trace keeps of each run.

A replay serves no HTTP, so the world fills two seams of ``actors.subagents`` when it opens a daemon:

- ``registry.base_url`` is :data:`BASE_URL`: signal URLs and each run's private MCP config file
  are made exactly as in a served daemon, but nothing listens there;
- ``registry.signal_client`` is a :class:`SignalEndpoint`. A child session's ``goal_reached`` /
  ``need_help`` tool — called by the scripted model like any tool — still reads the URL from its
  run's own MCP config file; the endpoint takes the token from that URL and resolves it with
  ``registry.resolve`` exactly as ``/signal/mcp/<token>`` does (an unminted or revoked token is
  refused as the route's 404 is), then delivers the call with ``registry.signal``.

Only the HTTP and JSON-RPC hop is left out (with the MCP layer's schema validation of the
arguments): a socket is real time, and under the autojump clock virtual time would jump to the
next deadline while it was in flight. Each call is in the trace (kind ``signal``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..subagents import SubagentRun, status_text
from ..subagents.client import SignalRefused
from .trace import Trace

BASE_URL = "http://replay.invalid"
SIGNAL_PREFIX = f"{BASE_URL}/signal/mcp/"
SIGNAL_TOOLS = ("goal_reached", "need_help")
REFUSED = "the signal endpoint refused this run's token; the run has ended"  # the client's words for a 404


class SignalEndpoint:
    """``/signal/mcp/<token>`` in process: ``(url, tool, arguments) -> (is_error, text)``, like the HTTP client."""

    def __init__(self, registry: Any, trace: Trace) -> None:
        self.registry = registry
        self.trace = trace

    async def __call__(self, url: str, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        token = url[len(SIGNAL_PREFIX):] if url.startswith(SIGNAL_PREFIX) else None
        run: SubagentRun | None = self.registry.resolve(token) if token else None
        if run is None:
            self.trace.signal(None, tool, arguments, {"refused": REFUSED})
            raise SignalRefused(REFUSED)
        if tool not in SIGNAL_TOOLS:  # the route carries those two tools and nothing else
            answer: tuple[bool, str] = (True, f"unknown tool {tool!r}")
        else:
            delivered = await self.registry.signal(run, tool, dict(arguments))
            # What the route answers when the run went away between resolving and delivering.
            answer = delivered if delivered is not None else (True, "this run has ended; nothing was recorded")
        self.trace.signal(run.name, tool, arguments, {"isError": answer[0], "text": answer[1]})
        return answer


def read_report(run: SubagentRun) -> str | None:
    """The run's report file as it is on disk now (``None``: it has none, or it is not there)."""
    path: Path | None = run.done.path
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def record_runs(runs: dict[str, SubagentRun], trace: Trace) -> None:
    """Each run's final status, its readable form and its report file read back from disk."""
    for label, run in runs.items():
        status = run.status()
        trace.subagent(label, status, status_text(status), read_report(run))
