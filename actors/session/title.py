"""A session's title: what a listing shows of it, given by a client or taken from its first prompt."""

from __future__ import annotations

from . import commands

AUTOMATIC_TITLE_CHARS = 80  # a listing's column, not a paragraph


def title_from_prompt(text: str) -> str | None:
    """The first non-blank line of ``text``, whitespace collapsed, cut to 80 characters with an ellipsis;
    ``None`` for a prompt with no text (an image alone) or a slash command (``/compact`` names nothing)."""
    if commands.parse(text) is not None:
        return None
    line = next((" ".join(line.split()) for line in text.splitlines() if line.strip()), "")
    if len(line) > AUTOMATIC_TITLE_CHARS:
        line = line[:AUTOMATIC_TITLE_CHARS - 1].rstrip() + "…"
    return line or None


__all__ = ["AUTOMATIC_TITLE_CHARS", "title_from_prompt"]
