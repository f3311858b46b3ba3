"""A small SSE reader for tests: parses frames from an httpx streaming response."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx


async def frames(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Yield each frame's JSON data plus its SSE ``id``/``event`` fields (as ``_sse_id``/``_sse_event``)."""
    fields: dict[str, str] = {}
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                frame = json.loads("\n".join(data))
                frame["_sse_id"] = fields.get("id")
                frame["_sse_event"] = fields.get("event")
                yield frame
            fields, data = {}, []
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                data.append(value)
            else:
                fields[name] = value


async def collect(client: httpx.AsyncClient, session_id: str, *, until: str | None = "turn_complete",
                  count: int | None = None, headers: dict[str, str] | None = None,
                  params: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Subscribe and gather frames until one of type ``until`` (or ``count`` frames)."""
    out: list[dict[str, Any]] = []
    async with client.stream("GET", f"/session/{session_id}/events", headers=headers or {}, params=params) as r:
        assert r.status_code == 200, r.status_code
        assert r.headers["content-type"].startswith("text/event-stream")
        async for frame in frames(r):
            out.append(frame)
            if (until and frame["type"] == until) or (count and len(out) >= count):
                break
    return out
