"""The Agent Client Protocol (ACP) surface of the daemon, over stdio and over HTTP at ``/acp``.

The protocol logic lives apart from its transports:

- :mod:`.jsonrpc` — the JSON-RPC peer: dispatch and calls to the client (messages and error codes
  are :mod:`actors.wire.jsonrpc`'s, shared with MCP);
- :mod:`.agent` — the ACP methods on top of the daemon's actors;
- :mod:`.binding` — one connection's hold on one session: event pump, prompt answers, permissions;
- :mod:`.bridge` — bridge mode (``craft/drainMidTurnQueue``), for a client that owns the prompt queue;
- :mod:`.connection` — one client connection, whatever its transport;
- :mod:`.stdio` — newline-delimited JSON-RPC on stdin/stdout (:func:`run_stdio`);
- :mod:`.http` — ``/acp`` on the daemon's HTTP app (:func:`register`), with a grace period for dropped streams.

Bridge mode is opt-in: a client that owns the prompt queue sends
``clientCapabilities._meta["craft/drainMidTurnQueue"]: true`` in ``initialize``;
the agent confirms with ``_meta["craft/drainMidTurnQueue"]: true`` in its result.
"""

from .connection import AcpConnection
from .http import register
from .stdio import run_stdio, serve_stdio

__all__ = ["AcpConnection", "register", "run_stdio", "serve_stdio"]
