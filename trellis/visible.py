"""Daemon-supplied text made safe to print on a terminal: control characters become visible.

Everything a client prints that came from the daemon — the model's text and
thoughts, tool titles and output, file paths, error messages, session fields —
may come from a hostile model or a hostile file. A terminal obeys the control
characters in it: ESC starts sequences that write the clipboard (OSC 52),
clear the screen or move the cursor, and so can forge the client's own lines;
the C1 byte CSI (U+009B) does the same without an ESC; BEL rings, BS and a
lone CR overwrite what is already on the line. :func:`visible` turns each of
them into ordinary printable text, so the user sees that it was there and the
terminal does nothing with it:

- C0 controls (U+0000–U+001F) other than newline and tab, and DEL, become
  their Unicode control pictures (U+2400–U+241F, U+2421): ESC ``␛``, CR
  ``␍``, BEL ``␇``, BS ``␈``;
- C1 controls (U+0080–U+009F) become ``\\x9b``-style text;
- CR LF stays a line break (``\\n``): only a CR that could overwrite is shown.

Newline and tab pass: they cannot rewrite what is on the screen. The
transformation is idempotent (its output has no control character left), so
text made visible twice is unchanged. ``--json`` output is not made visible
(it is for programs, and must keep the daemon's data): :func:`json_visible`
only writes the control characters JSON lets through raw (DEL, C1) as
``\\u`` escapes, which decode to the same string.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_JSON_RAW = re.compile(r"[\x7f-\x9f]")


def _picture(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r\n":
        return "\n"
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    return f"\\x{code:02x}"


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab shown as visible text (the module doc)."""
    return _CONTROL.sub(_picture, text)


def json_visible(text: str) -> str:
    """Serialized JSON with DEL and C1 controls as ``\\u`` escapes: the same data, nothing a terminal obeys.

    JSON requires C0 controls escaped in strings (orjson does), but not these; outside strings JSON is ASCII.
    """
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


__all__ = ["json_visible", "visible"]
