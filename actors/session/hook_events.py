"""What the Claude Code hook events mean to a turn: PreToolUse, PostToolUse, UserPromptSubmit.

:mod:`.hooks` parses settings and runs commands; this module turns their folded
:class:`~.hooks.HookResult` into what the turn does (``docs/how-to/hooks.md``):

- **PreToolUse**: ``permissionDecision: deny`` (or ``decision: block``, or exit 2) refuses the
  call, the reason its tool result; ``ask`` routes the call through the permission flow even in
  ``auto-edit``/``yolo``; ``allow`` skips the prompt (never in ``plan``); ``updatedInput`` replaces
  the call's arguments; ``continue: false`` ends the turn.
- **PostToolUse**: a block reason (``decision: block`` or exit 2 with stderr) and
  ``additionalContext`` are appended to the tool result the model reads next;
  ``continue: false`` is the hard terminal path (:class:`~.outcomes.PostToolUseStop`).
- **SessionStart** / **SessionEnd**: the first's context goes with the session's next prompt; the
  second runs when the session actor ends (closed, deleted, daemon shutdown), for cleanup.
- **UserPromptSubmit**: a block rejects the prompt before it reaches the model and tells the
  client why (:class:`~.outcomes.PromptBlocked`); context (``additionalContext`` or plain stdout)
  is added to the prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from .. import wire
from ..telemetry import span
from .hooks import HookFiles, HookResult, HooksConfig, command_name, hook_files_for, run_hooks
from .outcomes import PostToolUseStop, PromptBlocked
from .publisher import Publisher

if TYPE_CHECKING:
    from ..model import ToolCall
    from ..process.sandbox import Sandbox
    from .tools import ToolResult
    from .turn_state import TurnState

log = logging.getLogger("trellis.hooks")

SESSION_END_BUDGET = 30.0  # seconds all SessionEnd hooks of one session may take, shutdown included


class SessionHooks:
    """One session's hooks: its configuration, the files its unsandboxed hooks run as the user vouched for
    them, SessionStart's context waiting for the next prompt, and what each event means to a turn."""

    def __init__(self, config: HooksConfig, publisher: Publisher, *, runner: Any, sandbox: Sandbox,
                 vouched: dict[str, HookFiles], cwd: Callable[[], str], mode: Callable[[], str],
                 transcript_path: Callable[[], Any]) -> None:
        self.config = config
        self.publisher = publisher
        self.runner = runner
        self.sandbox = sandbox
        self._vouched = vouched
        self._cwd = cwd
        self._mode = mode
        self._transcript_path = transcript_path
        self.files = hook_files_for(vouched, config, cwd())
        self.start_context: list[tuple[str, str]] = []  # SessionStart hooks' context, for the next prompt

    def moved_to(self, cwd: str) -> None:
        """A cwd set through the API is the user's own doing: what its hooks run now is vouched for."""
        self.files = hook_files_for(self._vouched, self.config, cwd)
        self.files.vouch_all(cwd)

    def vouch_for(self, path: str) -> None:
        """A write to ``path`` the user approved: its hooks may run what it holds now (:class:`HookFiles`)."""
        self.files.vouch(path)

    def payload(self, event: str, **fields: Any) -> dict[str, Any]:
        """The input every event gets, as Claude Code sends it, plus the event's own fields."""
        path = self._transcript_path()
        return {"session_id": self.publisher.session_id, "transcript_path": str(path) if path else None,
                "cwd": self._cwd(), "hook_event_name": event, "permission_mode": self._mode(), **fields}

    async def run(self, event: str, groups: tuple[Any, ...], prompt_id: str | None, matched: str | None = None, *,
                  plain_context: bool = False, refused_blocks: bool = False, **fields: Any) -> HookResult:
        """Run ``groups`` of ``event`` (``matched``: what their matchers see) and report what the user should see."""
        if not any(group.matches(matched) for group in groups):  # nothing to run: neither traced nor counted
            outcome = await run_hooks(groups, self.payload(event, **fields), self._cwd(), matched, self.runner,
                                      plain_context=plain_context, sandbox=self.sandbox, files=self.files,
                                      refused_blocks=refused_blocks)
            self.report(event, outcome, prompt_id)
            return outcome
        with span(f"hook {event}") as s:  # a child of the turn's span (or of nothing: SessionStart, SessionEnd)
            if s.is_recording():
                s.set_attributes({"trellis.hook.event": event, "trellis.hook.groups": len(groups)})
            outcome = await run_hooks(groups, self.payload(event, **fields), self._cwd(), matched, self.runner,
                                      plain_context=plain_context, sandbox=self.sandbox, files=self.files,
                                      refused_blocks=refused_blocks)
            result = "failed" if outcome.failed else "blocked" if outcome.blocked or outcome.stop_chain else "ok"
            if s.is_recording():
                s.set_attribute("trellis.hook.outcome", result)
        self.publisher.telemetry.hook_ran(event, result)
        self.report(event, outcome, prompt_id)
        return outcome

    def report(self, event: str, outcome: HookResult, prompt_id: str | None) -> None:
        """A ``hook_result`` event for what the user should see: messages, failures, a stop reason.

        Each failure is also a warning in the daemon's log, naming the event and the command's program
        (:func:`~.hooks.command_name`) and what went wrong — never the hook's output, which may hold
        anything; the ``hook_result`` event carries that (stderr, cut to 500 characters).
        """
        session_id = self.publisher.session_id
        for command, why in outcome.failed:
            name = command_name(command)
            log.warning("hook failed session=%s event=%s command=%s: %s", session_id, event, name, why,
                        extra={"session": session_id, "prompt": prompt_id, "event": event, "command": name,
                               "why": why})
        if outcome.system_messages or outcome.failures or outcome.stop_chain:
            self.publisher.event("hook_result", wire.hook_result(
                session_id, event, list(outcome.system_messages), list(outcome.failures),
                stop_reason=outcome.stop_reason if outcome.stop_chain else None), prompt_id)

    # ------------------------------------------------------------- the events

    async def pre_tool_use(self, turn: TurnState, call: ToolCall, arguments: Any) -> tuple[Any, str | None, str | None]:
        """(the arguments to run with, the hook's permission decision, a refusal reason or ``None``)."""
        groups = self.config.pre_tool_use
        if not groups:
            return arguments, None, None
        outcome = await self.run("PreToolUse", groups, turn.prompt_id, call.name, refused_blocks=True,
                                 tool_name=call.name, tool_input=arguments, tool_use_id=call.id)
        if outcome.contexts:
            turn.pre_tool_contexts[call.id] = outcome.contexts  # shown to the model with the call's result
        if outcome.stop_chain:
            raise _stop(turn, "PreToolUse", outcome)
        if outcome.permission == "deny" or (outcome.blocked and outcome.permission is None):
            reasons = [r for r in (outcome.permission_reason, *outcome.block_reasons) if r]
            return arguments, "deny", "\n".join(reasons) or "denied by a PreToolUse hook"
        if outcome.updated_input is not None:
            arguments = outcome.updated_input
        return arguments, outcome.permission, None

    async def post_tool_use(self, turn: TurnState, call: ToolCall, result: ToolResult) -> HookResult | None:
        """What the PostToolUse hooks said of this call's result (``None``: no hooks configured)."""
        groups = self.config.post_tool_use
        if not groups:
            return None
        return await self.run("PostToolUse", groups, turn.prompt_id, call.name, tool_name=call.name,
                              tool_input=call.arguments,
                              tool_response={"content": result.content, "error": result.error}, tool_use_id=call.id)

    async def user_prompt_submit(self, turn: TurnState, text: str) -> str:
        """The prompt as the model gets it (with any added context); raises :class:`PromptBlocked`."""
        contexts, self.start_context = self.start_context, []  # SessionStart's context goes with it
        groups = self.config.user_prompt_submit
        if groups:
            outcome = await self.run("UserPromptSubmit", groups, turn.prompt_id, plain_context=True, prompt=text)
            if outcome.stop_chain or outcome.blocked:
                reason = "\n".join(outcome.block_reasons) or outcome.stop_reason or "blocked by a UserPromptSubmit hook"
                turn.hook_stop_reason = reason
                self.publisher.notice(f"Prompt blocked by a UserPromptSubmit hook: {reason}", turn.prompt_id)
                raise PromptBlocked(reason)
            contexts = [*contexts, *(("UserPromptSubmit", c) for c in outcome.contexts)]
        for event, context in contexts:
            text += f"\n\n[{event} hook context: {context}]"
        return text

    async def session_start(self, resumed: bool) -> None:
        """SessionStart (matcher over ``source``): its context is added to the session's next prompt."""
        groups = self.config.session_start
        if not groups:
            return
        source = "resume" if resumed else "startup"
        outcome = await self.run("SessionStart", groups, None, source, plain_context=True, source=source)
        self.start_context.extend(("SessionStart", c) for c in outcome.contexts)

    async def session_end(self, reason: str) -> None:
        """SessionEnd (matcher over ``reason``): cleanup only; it runs also while the session is cancelled."""
        groups = self.config.session_end
        if not groups:
            return
        with trio.CancelScope(shield=True), trio.move_on_after(SESSION_END_BUDGET):
            await self.run("SessionEnd", groups, None, reason, reason=reason)


def _stop(turn: TurnState, event: str, outcome: HookResult) -> PostToolUseStop:
    turn.hook_stop_reason = outcome.stop_reason or f"a {event} hook stopped the chain"
    return PostToolUseStop(turn.hook_stop_reason)


def tool_content(content: str, outcome: HookResult | None, before: tuple[str, ...] = ()) -> str:
    """The tool result as the model reads it: with the hooks' block reasons and added context
    (``before``: what PreToolUse hooks added for this call)."""
    for context in before:
        content += f"\n\n[PreToolUse hook context: {context}]"
    if outcome is None:
        return content
    for reason in outcome.block_reasons:
        content += f"\n\n[PostToolUse hook feedback: {reason}]"
    for context in outcome.contexts:
        content += f"\n\n[PostToolUse hook context: {context}]"
    return content


def stop_after_post_tool_use(turn: TurnState, outcome: HookResult | None) -> None:
    if outcome is not None and outcome.stop_chain:
        raise _stop(turn, "PostToolUse", outcome)


__all__ = ["SESSION_END_BUDGET", "SessionHooks", "stop_after_post_tool_use", "tool_content"]
