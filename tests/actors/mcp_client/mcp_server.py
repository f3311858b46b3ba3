"""An MCP server for the tests, written with the official ``mcp`` server package (``MCPServer``).

Run it as ``python mcp_server.py [--http|--sse] [--marker WORD] [--fail-start]``:

- over stdio by default (the daemon starts it as a process of a session);
- with ``--http`` (Streamable HTTP at ``/mcp``) or ``--sse`` (SSE at ``/sse``) it binds
  127.0.0.1 on a free port, prints that port on a line of its own, then serves;
- ``--marker WORD`` is ignored by the server: it puts a unique word into its command line,
  so a test can find the process from the host (``tests/processes.py``);
- ``--fail-start`` writes a message to stderr and exits 3 before speaking MCP.

Tools: ``add(a, b)``, ``fail()`` (a tool error), ``slow(seconds)``, ``crash()`` (the process
exits mid-call), ``env(name)``, ``cwd()`` and ``peek()`` (annotated read-only).
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

app = MCPServer("test-server", log_level="WARNING")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def fail() -> str:
    """Always fails with a tool error."""
    raise ToolError("deliberate failure")


@app.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    import anyio

    await anyio.sleep(seconds)
    return f"slept {seconds}"


@app.tool()
def crash() -> str:
    """Exit the whole server process in the middle of the call."""
    sys.stdout.flush()
    os._exit(7)


@app.tool()
def env(name: str) -> str:
    """The value of an environment variable, or <unset>."""
    return os.environ.get(name, "<unset>")


@app.tool()
def cwd() -> str:
    """The server's working directory."""
    return os.getcwd()


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def peek() -> str:
    """A tool that says it only reads."""
    return "peeked"


def _serve_http(kind: str) -> None:
    import socket

    import anyio
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    print(sock.getsockname()[1], flush=True)
    asgi = app.streamable_http_app() if kind == "http" else app.sse_app()
    server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning"))
    anyio.run(lambda: server.serve(sockets=[sock]))


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--fail-start" in args:
        print("test server: refusing to start on purpose", file=sys.stderr, flush=True)
        time.sleep(0.05)
        sys.exit(3)
    if "--http" in args:
        _serve_http("http")
    elif "--sse" in args:
        _serve_http("sse")
    else:
        app.run()
