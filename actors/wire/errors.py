"""Errors about input: bounded excerpts of what a client sent, and WireError with its JSON path."""

from __future__ import annotations

from typing import Any


# --------------------------------------------------------------------------- errors


EXCERPT_CHARS = 64  # at most this much of a client's value is quoted back in an error
MAX_MESSAGE_CHARS = 300  # and an error sentence (or path) is at most about this long


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A bounded ``repr`` of ``value``: an error never echoes more than a short excerpt of the input."""
    if isinstance(value, str) and len(value) > limit:
        return repr(value[:limit]) + f"… ({len(value)} chars)"
    if isinstance(value, (str, int, float, bool)) or value is None:
        text = repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "<a huge integer>"
    elif isinstance(value, (dict, list, tuple)):
        text = f"<{type(value).__name__} of {len(value)} items>"
    else:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "…"


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail around an ellipsis."""
    if len(text) <= limit:
        return text
    tail = limit // 3
    return text[: limit - tail - 1] + "…" + text[-tail:]


class WireError(ValueError):
    """Input that does not have the expected wire form."""

    def __init__(self, message: str, path: str = "$", code: str = "invalid_request") -> None:
        message, path = shorten(message), shorten(path)
        super().__init__(f"{message} @ {path}")
        self.message = message
        self.path = path
        self.code = code
