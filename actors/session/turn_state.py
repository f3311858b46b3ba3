"""What one turn carries from its start to its terminal event, besides its loop (:mod:`.turn`).

The stop path, the hooks, the context keeper and the slash commands read and
set it; they take it, and the session's ports (:mod:`.ports`), instead of the
turn itself.
"""

from __future__ import annotations

from typing import Any

import attrs

from .usage import UsageLedger


@attrs.define
class TurnState:
    prompt_id: str
    foreground: bool = True  # a prompt's turn (False: an automatic turn)
    images: tuple[Any, ...] = ()  # the prompt's images (checked at admission), sent with its user message
    hook_blocks: int = 0  # consecutive Stop-hook blocks in this turn
    last_text: str = ""  # the text of the last answer
    usage: UsageLedger = attrs.field(factory=UsageLedger)  # its model calls (its terminal event carries them)
    token_limit: dict[str, Any] | None = None  # why the turn stopped max_tokens (its turn_complete carries it)
    hook_stop_reason: str | None = None  # why a hook ended the turn (its turn_complete carries it)
    pre_tool_contexts: dict[str, tuple[str, ...]] = attrs.field(factory=dict)  # call id -> PreToolUse context


__all__ = ["TurnState"]
