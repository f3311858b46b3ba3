"""Shared by the MCP and subagent tests: a real daemon with the MCP routes on loopback, the official client.

The app is built exactly as the daemon will build it once wired: ``create_app(daemon)`` plus
``transport.mcp.register(app, daemon)``, served by hypercorn on 127.0.0.1:0, with
``daemon.subagents.base_url`` set from the bound address.
"""

from __future__ import annotations

import json
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from actors import CountingIds, Settings, load_script, open_daemon
from actors.model import ScriptedModel
from transport.app import create_app
from transport.mcp import base_url_from_bind, register


class RoutedModel:
    """Plays a separate script per conversation, chosen by a marker in its first user message.

    One provider serves every session of a daemon; routing by the brief keeps a parent's and each
    child's scripts apart however their calls interleave.
    """

    name = "routed"

    def __init__(self, routes: dict[str, ScriptedModel], default: ScriptedModel | None = None) -> None:
        self.routes = routes
        self.default = default or ScriptedModel()

    def stream(self, request: Any) -> Any:
        first = next((m.content for m in request.messages if m.role == "user"), "")
        for marker, model in self.routes.items():
            if marker in first:
                return model.stream(request)
        return self.default.stream(request)


def script(*responses: Any) -> ScriptedModel:
    return load_script({"responses": list(responses), "then": "error"})


def routed(**routes: list[Any]) -> RoutedModel:
    """``routed(marker=[response, ...])``: a script per marker."""
    return RoutedModel({marker: script(*responses) for marker, responses in routes.items()})


# Scripted turns of a child session.
def signal(tool: str, **arguments: Any) -> list[list[dict[str, Any]]]:
    """A turn that calls a signal tool, then says goodbye."""
    return [[{"tool_call": {"name": tool, "arguments": arguments}}], [{"text": f"{tool} sent"}]]


def plain(text: str = "still working") -> list[list[dict[str, Any]]]:
    """A turn that ends without any signal."""
    return [[{"text": text}]]


def wedged(seconds: float = 60) -> list[Any]:
    """A turn whose model call hangs."""
    return [{"delay": seconds, "steps": [{"text": "late"}]}]


@asynccontextmanager
async def mcp_daemon(*, model: Any = None, settings: Settings | None = None, state_dir: Any = None,
                     tools: Any = None, workspace: str | None = None) -> AsyncIterator[tuple[Any, str]]:
    """A daemon served on loopback with the MCP routes; ``(daemon, base_url)``."""
    async with open_daemon(settings, model=model or ScriptedModel(), state_dir=state_dir, ids=CountingIds(),
                           tools=tools, workspace=workspace) as daemon:
        app = create_app(daemon)
        register(app, daemon)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.graceful_timeout = 1.0
        config.accesslog = None
        config.errorlog = None
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(hypercorn_serve, app, config, shutdown_trigger=trio.sleep_forever))
            base = base_url_from_bind(binds[0])
            daemon.subagents.base_url = base
            yield daemon, base
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def mcp_session(url: str) -> AsyncIterator[ClientSession]:
    """The official client over streamable HTTP, initialized."""
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    return await session.call_tool(tool, arguments)


async def start(session: ClientSession, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool("start", arguments)
    assert not result.is_error, text_of(result)
    return result.structured_content


async def status(session: ClientSession, name: str) -> tuple[dict[str, Any], str]:
    result = await session.call_tool("status", {"name": name})
    assert not result.is_error, text_of(result)
    return result.structured_content, text_of(result)


async def await_end(session: ClientSession, name: str, timeout: float = 20) -> dict[str, Any]:
    result = await session.call_tool("await_resume", {"name": name, "timeout_s": timeout})
    assert not result.is_error, text_of(result)
    return result.structured_content


def config_url(path: str | Path) -> str:
    return json.loads(Path(path).read_text())["mcpServers"]["trellis"]["url"]


def mode(path: str | Path) -> int:
    return stat.S_IMODE(Path(path).stat().st_mode)
