"""Opt-in follow-up suggestions after a completed foreground turn (``ui.enableFollowupSuggestions``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import trio

from .. import wire
from ..model import ChatMessage, ChatRequest
from .ports import TurnPorts
from .usage import read_text

SUGGESTION_DEADLINE = 30.0  # seconds a follow-up suggestion call may take


async def suggest_followups(ports: TurnPorts, prompt_id: str, *, queued_count: Callable[[], Awaitable[int]],
                            work_item: Callable[[str, str], AbstractAsyncContextManager[Any]]) -> None:
    """Opt-in follow-up suggestions after a completed foreground turn.

    Suppressed while the work chain can still resume or a queued prompt waits; the call runs
    as a work item of its own (cancellable, shown as busy) under :data:`SUGGESTION_DEADLINE`.
    """
    if not ports.settings.followup_suggestions or not ports.chain.suggestions_allowed:
        return
    if await queued_count():
        return
    context = ports.context
    # The system prompt first, as the turn's requests have it: a server's prefix cache then covers the history.
    request = ChatRequest(context.system_prompt.before(ports.conversation.history, (ChatMessage(
        "user", "Suggest up to three short follow-up prompts, one per line."),)),
                          purpose="suggestion", model=context.model_name)
    text = ""
    async with work_item(prompt_id, "suggestion"):
        with trio.move_on_after(SUGGESTION_DEADLINE):
            try:
                text = await read_text(ports.usage, context.provider, request, prompt_id)
            except Exception:
                return  # suggestions are a nicety; their failure is not the turn's
    suggestions = [line.strip(" -*\t") for line in text.splitlines() if line.strip(" -*\t")][:3]
    if suggestions:
        ports.publisher.event("followup_suggestion", wire.followup_suggestion(ports.session_id, prompt_id, suggestions),
                              prompt_id)
