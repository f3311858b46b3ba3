"""Whether one tool call may run: permission rules, the approval mode, the user's "always" answers, and
asking the client.

The session's permission rules (:mod:`actors.permission_rules`) and approval mode live here, with the code
that applies them. The turn asks :meth:`Authorizer.verdict` before a call runs: a deny rule refuses it
without asking, an ask rule makes it ask in every mode, an allow rule lets it run unasked (as a PreToolUse
hook's ``allow`` does; ``plan`` still refuses execution). Without a rule the mode decides:
``default`` asks the client, ``auto-edit`` and ``yolo`` allow, ``plan`` refuses
execution. A PreToolUse hook's ``allow`` skips the question, its ``ask`` forces
it; a user's "always reject" outranks both. Pending questions are the
:class:`~.permissions.PermissionBroker`'s; when every client has left, they
are cancelled after ``limits.client_grace_seconds`` unless one comes back (a
client that left approves nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from ..events import EventBus
from ..ids import IdSource
from ..permission_rules import RuleSet, Verdict, decide
from ..settings import APPROVAL_MODES
from .outcomes import PermissionCancelled
from .permissions import DEFAULT_OPTIONS, PermissionBroker
from .tools import ToolContext


class Authorizer:
    """One session's permission decisions."""

    def __init__(self, session_id: str, bus: EventBus, ids: IdSource, *, mode: str, grace_seconds: float,
                 nursery: Callable[[], trio.Nursery | None], rules: RuleSet | None = None) -> None:
        self.mode = mode
        self.rules = rules or RuleSet()
        self.broker = PermissionBroker(session_id, bus, ids)
        self.always_allowed: set[str] = set()  # tool kinds the user allowed for the rest of the session
        self.always_denied: set[str] = set()  # ... or rejected for the rest of the session
        self._bus = bus
        self.grace_seconds = grace_seconds  # how long a question outlives every client
        self._nursery = nursery  # the session's, while it runs
        bus.on_last_unsubscribe = self.clients_left

    def set_mode(self, mode: str) -> bool:
        """``False`` for a mode that does not exist (the handle checks; a bad message must change nothing)."""
        if mode not in APPROVAL_MODES:
            return False
        self.mode = mode
        return True

    def verdict(self, tool: str, arguments: Any, cwd: str) -> Verdict:
        """What the session's permission rules say about calling ``tool`` with ``arguments``."""
        return decide(self.rules, tool, arguments, cwd)

    async def authorize(self, context: ToolContext, *, title: str, kind: str, raw_input: Any,
                        plan_refuses: bool = True, details: dict[str, Any] | None = None,
                        rule: str | None = None, always_ask: str | None = None) -> str | None:
        """Apply the approval mode to one tool call; ask the client in ``default`` mode.

        ``details`` are more ACP tool-call fields for the request to show (an edit's diff ``content``,
        its ``locations``). An "always" answer is remembered for ``rule`` (an MCP tool's own
        name), else for ``kind``. ``always_ask`` (why) asks in every mode, ``yolo`` included, whatever
        a hook or an earlier "always" allowed, and offers no "always" answer: a write that can make
        code run later (under ``.git/``, a file a hook runs) is the user's call each time."""
        mode = self.mode
        rule = rule or kind
        if mode == "plan" and plan_refuses:
            return "plan mode: execution is refused until the plan is approved"
        if rule in self.always_denied:  # a user's rule, as Claude's deny rules: a hook's allow does not lift it
            return "the user denied such calls for the rest of this session"
        if always_ask is None:
            if context.permission == "allow":  # a PreToolUse hook allowed it
                return None
            if context.permission != "ask" and (mode in ("auto-edit", "yolo") or rule in self.always_allowed):
                return None
        tool_call = {"toolCallId": context.tool_call_id, "status": "pending", "title": title, "kind": kind,
                     "rawInput": raw_input, **(details or {})}
        if context.rule is not None and context.permission == "ask":
            tool_call["_meta"] = {"rule": context.rule}  # the ask rule that made it ask
        options = DEFAULT_OPTIONS
        if always_ask is not None:
            tool_call["title"] = f"{title} (asked in every mode: {always_ask})"
            options = tuple(o for o in DEFAULT_OPTIONS if o.kind in ("allow_once", "reject_once"))
        if self._bus.subscriber_count == 0 and self._bus.had_subscribers:
            # The clients already left: the grace starts now. (A prompt admitted before anyone ever
            # subscribed still waits: its client may connect later and vote from the replay.)
            self._start_grace()
        decision = await self.broker.request(tool_call, options, prompt_id=context.prompt_id)
        if decision.outcome == "cancelled":
            raise PermissionCancelled(title)
        if not decision.allowed:
            if decision.option is not None and decision.option.kind == "reject_always":
                self.always_denied.add(rule)
            return "the user denied this call"
        if decision.option is not None and decision.option.kind == "allow_always":
            self.always_allowed.add(rule)
        return None

    def clients_left(self) -> None:
        """The last subscriber went away: pending permissions are cancelled unless one returns in time."""
        if self.broker.pending_ids:
            self._start_grace()

    def _start_grace(self) -> None:
        nursery = self._nursery()
        if nursery is not None:
            nursery.start_soon(self.cancel_after_grace)

    async def cancel_after_grace(self) -> None:
        await trio.sleep(self.grace_seconds)
        if self._bus.subscriber_count == 0:
            self.broker.cancel_all()  # a client that left approves nothing


__all__ = ["Authorizer"]
