"""Opt-in follow-up suggestions after a completed foreground turn (``ui.enableFollowupSuggestions``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from .. import wire
from ..model import ChatMessage, ChatRequest
from . import fifo as f
from .system_prompt import with_system_prompt
from .usage import read_text

if TYPE_CHECKING:
    from .session import Session

SUGGESTION_DEADLINE = 30.0  # seconds a follow-up suggestion call may take


async def suggest_followups(session: Session, prompt_id: str) -> None:
    """Opt-in follow-up suggestions after a completed foreground turn.

    Suppressed while the work chain can still resume or a queued prompt waits; the call runs
    as a work item of its own (cancellable, shown as busy) under :data:`SUGGESTION_DEADLINE`.
    """
    if not session.runtime.settings.followup_suggestions or not session.chain.suggestions_allowed:
        return
    assert session.fifo_ref is not None
    if (await session.fifo_ref.ask(f.Statistics))["queuedCount"]:
        return
    # The system prompt first, as the turn's requests have it: a server's prefix cache then covers the history.
    request = ChatRequest(with_system_prompt(session, session.history, (ChatMessage(
        "user", "Suggest up to three short follow-up prompts, one per line."),)),
                          purpose="suggestion", model=session.model_name)
    text = ""
    async with session.work_item(prompt_id, "suggestion"):
        with trio.move_on_after(SUGGESTION_DEADLINE):
            try:
                text = await read_text(session.usage, session.provider, request, prompt_id)
            except Exception:
                return  # suggestions are a nicety; their failure is not the turn's
    suggestions = [line.strip(" -*\t") for line in text.splitlines() if line.strip(" -*\t")][:3]
    if suggestions:
        session.bus.publish("followup_suggestion", wire.followup_suggestion(session.session_id, prompt_id, suggestions),
                         prompt_id)
