"""Typed outcomes of a turn that are not a natural stop.

Every :class:`HardStop` suspends the Todo Stop Guard's work chain, in one place
(:meth:`Turn.run`); API and network failures are :class:`~actors.model.ModelError`
instead, which pause the chain for a trusted retry.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from ..guard import Continue


def only_cancelled(exc: BaseException) -> bool:
    """A cancellation, also when a nursery wrapped it in an exception group (a shell reading its
    output, a provider's stream): every leaf is ``trio.Cancelled``."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return isinstance(exc, trio.Cancelled)


class HardStop(Exception):
    """A hard terminal path: the turn ends with ``reason`` and the work chain is suspended."""

    reason = "end_turn"


class PermissionCancelled(HardStop):
    """A permission request was cancelled (by the user or a departing client)."""

    reason = "cancelled"


class PostToolUseStop(HardStop):
    """A PostToolUse hook answered ``{"continue": false}``."""

    reason = "end_turn"


class PromptBlocked(HardStop):
    """A UserPromptSubmit hook blocked the prompt before it reached the model."""

    reason = "end_turn"


class LoopDetected(HardStop):
    """Too many tool calls in one turn, or the same call repeated."""

    reason = "max_turn_requests"


class TokenLimit(HardStop):
    """The answer was cut short, or a continuation did not fit the context window and was not sent.

    ``detail`` is the ``tokenLimit`` of its ``turn_complete`` (:func:`actors.wire.token_limit`).
    """

    reason = "max_tokens"

    def __init__(self, detail: dict[str, Any] | None = None) -> None:
        super().__init__(detail["message"] if detail else "max_tokens")
        self.detail = detail


class StopHookCapReached(HardStop):
    """An external Stop hook blocked too many consecutive stops; it is overridden."""

    reason = "end_turn"


@attrs.frozen
class Send:
    """What sponsors the next model stream, and the user parts it adds to the conversation first.

    ``guard`` makes the stream guard-attributable (its attempt is committed when the
    stream is returned); ``hook`` marks an external Stop hook's continuation, whose
    tool loop goes on even when the guard's part ends.
    """

    parts: tuple[tuple[str, str], ...] = ()  # (origin, text): origin is mid_turn, hook or guard
    guard: Continue | None = None
    hook: bool = False

    def without_guard(self) -> Send:
        return Send(tuple(p for p in self.parts if p[0] != "guard"), None, self.hook)


ORDINARY = Send()


MID_TURN_PREFIX = "[User message received during tool execution]: "


def mid_turn_parts(messages: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """Mid-turn user messages as the parts of the next send."""
    return tuple(("mid_turn", MID_TURN_PREFIX + m) for m in messages)
