"""Whether one tool call may run: permission rules, the approval mode, the user's "always" answers, and
asking the client.

The session's permission rules (:mod:`actors.permission_rules`) and approval mode live here, with the code
that applies them. The turn asks :meth:`Authorizer.verdict` before a call runs: a deny rule refuses it
without asking, an ask rule makes it ask in every mode, an allow rule lets it run unasked (as a PreToolUse
hook's ``allow`` does; ``plan`` still refuses execution). Without a rule the mode decides:
``default`` asks the client, ``auto-edit`` allows file edits and web fetches (qwen-code's ``autoEdit``:
its edit and info confirmations) and asks for the rest (commands, MCP tools, starting a subagent),
``yolo`` allows, ``plan`` refuses execution. A PreToolUse hook's ``allow`` skips the question, its ``ask`` forces
it; a user's "always reject" outranks both. Pending questions are the
:class:`~.permissions.PermissionBroker`'s; when every client has left, they
are cancelled after ``limits.client_grace_seconds`` unless one comes back (a
client that left approves nothing).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import trio

from ..events import EventBus
from ..ids import IdSource
import attrs

from ..permission_rules import EFFECTS, RuleLists, RuleSet, Verdict, anchored, answer_rules, decide, parse_rule
from ..settings import APPROVAL_MODES
from ..telemetry import span
from ..weak import weakly
from .outcomes import PermissionCancelled
from .permissions import DEFAULT_OPTIONS, PermissionBroker, PermissionOption
from .tools import ToolContext


_NO_RULES = RuleSet()
_NO_RULE_LISTS = RuleLists()
_NONE: frozenset[str] = frozenset()
_ONCE = tuple(o for o in DEFAULT_OPTIONS if o.kind in ("allow_once", "reject_once"))
RULES_SHOWN = 300  # characters of an "always" option's rules its name shows (the rest counted)

# What ``auto-edit`` runs without asking, by the kind a tool asks with (and, for ``explain``, the tools): file
# edits, and web fetches, which qwen-code's auto-edit also lets through. Commands, MCP tools and subagent
# starts ask, as in ``default``.
AUTO_EDIT_KINDS = frozenset({"edit", "fetch"})  # the kinds of call auto-edit runs unasked (qwen's)


def unasked(mode: str, kind: str) -> bool:
    """Whether the approval mode ``mode`` runs a call of ``kind`` that asks without asking (no rule deciding)."""
    return mode == "yolo" or (mode == "auto-edit" and kind in AUTO_EDIT_KINDS)


def options_for(always: tuple[str, ...]) -> tuple[PermissionOption, ...]:
    """The options of a request whose "always" answers become the rules ``always``, named in them ("Always
    allow in this session: Bash(git status:*)"); only "Allow" and "Reject" when no rule can say the call."""
    if not always:
        return _ONCE
    named = ", ".join(always)
    if len(named) > RULES_SHOWN:
        named = f"{named[:RULES_SHOWN]}… ({len(named) - RULES_SHOWN} more characters)"
    return tuple(attrs.evolve(o, name=f"{o.name}: {named}") if o.kind in ("allow_always", "reject_always") else o
                 for o in DEFAULT_OPTIONS)


class Authorizer:
    """One session's permission decisions."""

    def __init__(self, session_id: str, bus: EventBus, ids: IdSource, *, mode: str, grace_seconds: float,
                 nursery: Callable[[], trio.Nursery | None], rules: RuleSet | None = None,
                 session_rules: RuleLists | None = None, rules_changed: Callable[[], None] = lambda: None) -> None:
        self.mode = mode
        self.settings_rules = rules if rules is not None else _NO_RULES  # the settings file's
        # The session's own: given when it started, and every "always" answer; kept in its record.
        self.session_rules = session_rules if session_rules is not None else _NO_RULE_LISTS
        self.rules = self._in_force(self.session_rules)
        self._rules_changed = rules_changed
        self.broker = PermissionBroker(session_id, bus, ids)
        self._bus = bus
        self.grace_seconds = grace_seconds  # how long a question outlives every client
        self._nursery = nursery  # the session's, while it runs
        bus.on_last_unsubscribe = weakly(self.clients_left)  # the bus is the authorizer's: no cycle

    @property
    def always_denied(self) -> frozenset[str]:
        """The kinds of call an "always reject" refuses without a rule: none. Every "always" answer is a rule
        of the session's own (:func:`actors.permission_rules.answer_rules`); a call no rule can say offers no
        "always" answer."""
        return _NONE

    def set_mode(self, mode: str) -> bool:
        """``False`` for a mode that does not exist (the handle checks; a bad message must change nothing)."""
        if mode not in APPROVAL_MODES:
            return False
        self.mode = mode
        return True

    def verdict(self, tool: str, arguments: Any, cwd: str) -> Verdict:
        """What the session's permission rules say about calling ``tool`` with ``arguments``."""
        return decide(self.rules, tool, arguments, cwd)

    def refusal(self, verdict: Verdict) -> str:
        """What the model is told of a call a deny rule refused."""
        if all(rule in self.session_rules.deny for rule in verdict.rules):
            return f"the user denied such calls for the rest of this session ({verdict.reason})"
        return f"refused without asking: {verdict.reason} (permissions.deny)"

    def explain(self, tool: str, arguments: Any, cwd: str, *, asks: str | None) -> dict[str, Any]:
        """What would happen to a call of ``tool`` with ``arguments`` now, and why. ``asks``: the kind of call
        the tool asks as when no rule decides (a command, an edit, a fetch, an MCP tool), ``None`` if it never
        asks."""
        verdict = self.verdict(tool, arguments, cwd)
        out = verdict.to_dict() | {"approvalMode": self.mode}
        if verdict.effect == "deny":
            return out | {"outcome": "deny", "decidedBy": "rule"}
        if self.mode == "plan" and asks:
            return out | {"outcome": "deny", "decidedBy": "mode", "reason": "plan mode refuses execution"}
        if verdict.effect is not None:
            return out | {"outcome": verdict.effect, "decidedBy": "rule"}
        if asks is None:
            return out | {"outcome": "allow", "decidedBy": "tool", "reason": f"{tool} does not ask"}
        return out | {"outcome": "allow" if unasked(self.mode, asks) else "ask", "decidedBy": "mode"}

    def for_child(self, cwd: str, child_cwd: str) -> RuleLists:
        """The rules a child session this one starts (the ``agent`` tool's) takes as its own, so that it is never
        more permissive than this session: the session's own rules (its "always" answers among them) and, for a
        child in another cwd, the settings' rules that start from the cwd. Every path pattern that starts
        from the cwd is anchored at ``cwd``, this session's, as this session reads it (deny and ask rules at its
        real path too). A :class:`RuleError` when one cannot be carried (the child must then not start)."""
        real = os.path.realpath(cwd)
        out: dict[str, list[str]] = {effect: [] for effect in EFFECTS}
        for effect in EFFECTS:
            texts = [(text, None) for text in getattr(self.session_rules, effect)]
            if os.path.realpath(child_cwd) != real:  # the child reads the settings' own from its cwd
                texts += [(rule.text, rule.base) for rule in getattr(self.settings_rules, effect)
                          if rule.kind == "path" and rule.spec is not None and not rule.spec.startswith(("/", "~/"))]
            bases = (cwd,) if effect == "allow" or real == cwd else (cwd, real)
            out[effect] += [anchored(text, base, settings_dir) for text, settings_dir in texts for base in bases]
        return RuleLists(**{effect: tuple(dict.fromkeys(texts)) for effect, texts in out.items()})

    def listed_rules(self) -> dict[str, dict[str, list[str]]]:
        """The rules in force: the settings file's and the session's own."""
        return {"settings": self.settings_rules.listed(),
                "session": {effect: list(getattr(self.session_rules, effect)) for effect in EFFECTS}}

    def add_rule(self, effect: str, text: str) -> bool:
        """Add a rule of the session's own (a :class:`RuleError` when it cannot be read, and nothing changes);
        ``False`` when it is there already."""
        parse_rule(text)
        if effect not in EFFECTS:
            raise ValueError(f"effect must be one of {', '.join(EFFECTS)}, got {effect!r}")
        listed = getattr(self.session_rules, effect)
        if text in listed:
            return False
        self._set_session_rules(attrs.evolve(self.session_rules, **{effect: (*listed, text)}))
        return True

    def remove_rule(self, effect: str, text: str) -> bool:
        """Remove a rule of the session's own; ``False`` when it has no such rule."""
        listed = getattr(self.session_rules, effect, None)
        if listed is None or text not in listed:
            return False
        self._set_session_rules(attrs.evolve(self.session_rules,
                                             **{effect: tuple(t for t in listed if t != text)}))
        return True

    def _set_session_rules(self, lists: RuleLists) -> None:
        self.session_rules = lists
        self.rules = self._in_force(lists)
        self._rules_changed()

    def _in_force(self, lists: RuleLists) -> RuleSet:
        """The settings' rules and the session's own (the settings' alone, shared, while it has none)."""
        return self.settings_rules + RuleSet.of(lists) if lists else self.settings_rules

    def _remember(self, texts: tuple[str, ...], effect: str) -> None:
        """An "always" answer: the rules its option named, rules of the session's own."""
        listed = getattr(self.session_rules, effect)
        added = tuple(t for t in texts if t not in listed)
        if added:
            self._set_session_rules(attrs.evolve(self.session_rules, **{effect: (*listed, *added)}))

    async def authorize(self, context: ToolContext, *, title: str, kind: str, raw_input: Any,
                        plan_refuses: bool = True, details: dict[str, Any] | None = None,
                        rule: str | None = None, always_ask: str | None = None) -> str | None:
        """Apply the approval mode to one tool call; ask the client in ``default`` mode.

        ``details`` are more ACP tool-call fields for the request to show (an edit's diff ``content``,
        its ``locations``). An "always" answer becomes the rules :func:`answer_rules` makes of the call,
        which its option names; a call no rule can say offers none (``rule``, an MCP tool's own name, is
        the tool's: its rule is its name). ``always_ask`` (why) asks in every mode, ``yolo`` included,
        whatever a hook or an earlier "always" allowed, and offers no "always" answer: a write that can make
        code run later (under ``.git/``, a file a hook runs) is the user's call each time."""
        mode = self.mode
        if mode == "plan" and plan_refuses:
            return "plan mode: execution is refused until the plan is approved"
        if always_ask is None:
            if context.permission == "allow":  # a PreToolUse hook allowed it
                return None
            if context.permission != "ask" and unasked(mode, kind):
                return None
        tool_call = {"toolCallId": context.tool_call_id, "status": "pending", "title": title, "kind": kind,
                     "rawInput": raw_input, **(details or {})}
        if context.rule is not None and context.permission == "ask":
            tool_call["_meta"] = {"rule": context.rule}  # the ask rule that made it ask
        # What an "always" answer would become: rules the user can see (named in the option, then listed by
        # GET /session/:id/permissions) covering this call narrowly; never the call's whole kind.
        always = answer_rules(context.tool_name, raw_input, kind) if always_ask is None else ()
        options = options_for(always)
        if always_ask is not None:
            tool_call["title"] = f"{title} (asked in every mode: {always_ask})"
        if self._bus.subscriber_count == 0 and self._bus.had_subscribers:
            # The clients already left: the grace starts now. (A prompt admitted before anyone ever
            # subscribed still waits: its client may connect later and vote from the replay.)
            self._start_grace()
        tool = context.tool_name or kind  # never the title: it may be the call's arguments (a shell command)
        with span(f"permission_wait {tool}") as s:  # how long the user took to answer
            if s.is_recording():
                s.set_attributes({"gen_ai.tool.name": tool, "gen_ai.tool.call.id": context.tool_call_id,
                                  "trellis.approval_mode": mode})
            decision = await self.broker.request(tool_call, options, prompt_id=context.prompt_id)
            if s.is_recording():
                s.set_attribute("trellis.permission.outcome", decision.outcome if not decision.allowed
                                else "allowed")
        if decision.outcome == "cancelled":
            raise PermissionCancelled(title)
        if not decision.allowed:
            if decision.option is not None and decision.option.kind == "reject_always":
                self._remember(always, "deny")
            return "the user denied this call"
        if decision.option is not None and decision.option.kind == "allow_always":
            self._remember(always, "allow")
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
            # A client that left approves nothing.
            self.broker.cancel_all("it was cancelled: no client was connected for limits.clientGraceSeconds")


__all__ = ["AUTO_EDIT_KINDS", "Authorizer", "unasked"]
