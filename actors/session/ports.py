"""The session's parts a turn works with: narrow objects, each owning its own state.

The actor shell (:mod:`.session`) builds them once per session; the turn, the
stop path, the slash commands and the follow-up suggestions take
:class:`TurnPorts` instead of the session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from .authorizer import Authorizer
from .chain import WorkChain
from .context import ContextKeeper
from .conversation import Conversation
from .drains import MidTurnInput
from .hook_events import SessionHooks
from .publisher import Publisher
from .services import SessionServices
from .tools import ToolRegistry
from .usage import UsageMeter


@attrs.frozen
class TurnPorts:
    session_id: str
    conversation: Conversation
    publisher: Publisher
    authorizer: Authorizer  # the approval mode and the user's answers
    mid_turn: MidTurnInput
    chain: WorkChain  # the Todo Stop Guard's work chain
    context: ContextKeeper  # which model, its window, requests
    usage: UsageMeter
    tools: ToolRegistry
    hooks: SessionHooks
    services: SessionServices  # what tools are lent
    settings: Any  # the daemon's Settings
    cwd: Callable[[], str]
    save_record: Callable[[], Awaitable[None]]  # the session record, after a slash command's change
    # Before a tool that may change files runs: the running user turn's checkpoint (actors.checkpoints).
    before_change: Callable[[], Awaitable[None]] = attrs.field(default=None, converter=lambda f: f or _nothing)

    @property
    def plan_mode(self) -> bool:
        return self.authorizer.mode == "plan"


async def _nothing() -> None:
    pass


__all__ = ["TurnPorts"]
