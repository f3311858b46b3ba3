"""MCP servers as tool sources of a session, through the official ``mcp`` client package.

- :mod:`.config` — which servers: the settings key ``mcpServers`` and ACP's ``mcpServers``;
- :mod:`.server` — one actor per server in the session's nursery, and the session's set of them;
- :mod:`.stdio` — a stdio server as a sandboxed, marked process of the session;
- :mod:`.tools` — their tools offered to the model as ``mcp__<server>__<tool>``.

The ``mcp`` package is imported only once a session has a server to start (it is the
optional extra ``trellis[mcp]``); :func:`available` says whether it is installed.
"""

from .config import McpConfigError, ServerConfig, parse_acp, parse_settings
from .server import McpServer, McpServers, available

__all__ = ["McpConfigError", "McpServer", "McpServers", "ServerConfig", "available", "parse_acp", "parse_settings"]
