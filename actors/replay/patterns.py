"""Event patterns: how scenarios point at events (in ``expect.events`` and in invariants).

A pattern is a string — ``"turn_complete"``, or ``"session_update:plan"`` for a
``session_update`` of that kind — or an object with ``type`` and optional
``update`` (the ``sessionUpdate`` kind), ``prompt`` (a prompt label from the
timeline), ``session`` (a session label) and ``data`` (a subset the event data
must contain).
"""

from __future__ import annotations

from typing import Any

import attrs

from . import fields as F
from .trace import update_kind


CONTAINS = "$contains"


def subset_match(expected: Any, actual: Any) -> bool:
    """Objects match when every expected key matches; lists element by element; else equality.

    ``{"$contains": text}`` (or a list of texts) matches a string that contains each text.
    """
    if isinstance(expected, dict) and set(expected) == {CONTAINS}:
        wanted = expected[CONTAINS]
        wanted = wanted if isinstance(wanted, list) else [wanted]
        return isinstance(actual, str) and all(isinstance(w, str) and w in actual for w in wanted)
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and subset_match(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(subset_match(e, a) for e, a in zip(expected, actual)))
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual  # true is not 1
    return expected == actual


@attrs.frozen
class EventPattern:
    type: str
    update: str | None = None
    prompt: str | None = None
    session: str | None = None
    data: dict[str, Any] | None = None

    def matches(self, event: dict[str, Any], prompt_ids: dict[str, str]) -> bool:
        if event["type"] != self.type:
            return False
        if self.update is not None and update_kind(event) != self.update:
            return False
        if self.prompt is not None and (event["promptId"] is None or event["promptId"] != prompt_ids.get(self.prompt)):
            return False
        if self.session is not None and event["session"] != self.session:
            return False
        return self.data is None or subset_match(self.data, event["data"])

    def __str__(self) -> str:
        text = self.type + (f":{self.update}" if self.update else "")
        extra = [f"{k}={v!r}" for k, v in (("prompt", self.prompt), ("session", self.session), ("data", self.data))
                 if v is not None]
        return text + (f" ({', '.join(extra)})" if extra else "")


_PATTERN_FIELDS = {
    "type": F.Field(F.string, required=True),
    "update": F.Field(F.string),
    "prompt": F.Field(F.prompt_label),
    "session": F.Field(F.event_session_label),
    "data": F.Field(F.obj),
}


def pattern(value: Any, where: str, ctx: F.ParseContext) -> EventPattern:
    """Parse an event pattern (a field check)."""
    if isinstance(value, str) and value:
        kind, _, update = value.partition(":")
        return EventPattern(kind, update or None)
    if isinstance(value, dict):
        return EventPattern(**F.parse_fields(value, _PATTERN_FIELDS, where, ctx))
    raise ctx.fail(where, "an event pattern: \"type\", \"session_update:<kind>\" or {type, update?, prompt?, session?, data?}",
                   value)
