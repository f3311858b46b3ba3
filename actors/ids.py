"""Where ids come from: random in a daemon, counted in a deterministic replay."""

from __future__ import annotations

import secrets


class IdSource:
    """Random ids (``prefix-<hex>``)."""

    def new(self, prefix: str) -> str:
        return f"{prefix}-{secrets.token_hex(8)}"


class CountingIds(IdSource):
    """Deterministic ids (``prefix-1``, ``prefix-2``, ...) for replays and tests."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def new(self, prefix: str) -> str:
        n = self._counts.get(prefix, 0) + 1
        self._counts[prefix] = n
        return f"{prefix}-{n}"
