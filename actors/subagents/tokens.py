"""Per-run signal tokens: minted from the OS CSPRNG, resolved to one run, revoked for good.

A token is the whole identity of a subagent on ``/signal/mcp/<token>``: no
signal tool takes a name, so a subagent can only ever speak for the run whose
token sits in its own MCP config file. Tokens are kept by their SHA-256 digest,
so a lookup's timing says nothing about how much of a guess was right, and a
revoked token is simply absent — it resolves exactly like one never minted.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Generic, TypeVar

T = TypeVar("T")

TOKEN_BYTES = 32  # 256 bits from secrets (the spec asks for at least 122)
MAX_TOKEN_CHARS = 256  # anything longer is not one of ours; refuse before hashing


def _key(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenRegistry(Generic[T]):
    """Tokens to the run each was minted for."""

    def __init__(self) -> None:
        self._runs: dict[bytes, T] = {}

    def __len__(self) -> int:
        return len(self._runs)

    def mint(self, run: T) -> str:
        """A fresh unguessable token bound to ``run`` (URL-safe, 43 characters)."""
        while True:
            token = secrets.token_urlsafe(TOKEN_BYTES)
            key = _key(token)
            if key not in self._runs:  # a collision is astronomically unlikely; never overwrite one anyway
                self._runs[key] = run
                return token

    def resolve(self, token: str) -> T | None:
        """The run ``token`` was minted for, or ``None`` (unminted and revoked alike)."""
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
            return None
        return self._runs.get(_key(token))

    def revoke(self, token: str) -> bool:
        """Forget ``token``; ``False`` if it was not live. Idempotent."""
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
            return False
        return self._runs.pop(_key(token), None) is not None
