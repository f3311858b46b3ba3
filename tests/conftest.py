"""Shared fixtures: an in-process daemon, and a real daemon served on loopback port 0."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from actors import CountingIds, Settings, open_daemon
from actors.model import ScriptedModel
from transport import serve


@asynccontextmanager
async def live_daemon(
    *, model: Any = None, settings: Settings | None = None, state_dir: Any = None, token: str | None = None,
    tools: Callable[[], Any] | None = None,
) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """The real HTTP daemon on 127.0.0.1:0 and an httpx client pointed at it."""
    async with open_daemon(settings, model=model or ScriptedModel(), state_dir=state_dir, ids=CountingIds(),
                           tools=tools) as daemon:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, daemon, host="127.0.0.1", port=0, token=token))
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=10) as client:
                yield daemon, client
            nursery.cancel_scope.cancel()


@pytest.fixture
def scripted() -> Callable[..., ScriptedModel]:
    from actors import load_script

    def make(*responses: Any, then: str = "error") -> ScriptedModel:
        return load_script({"responses": list(responses), "then": then})

    return make
