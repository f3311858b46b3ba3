"""What the Claude Code hook events mean to a turn: PreToolUse, PostToolUse, UserPromptSubmit.

:mod:`.hooks` parses settings and runs commands; this module turns their folded
:class:`~.hooks.HookResult` into what the turn does (``README.md``, *Hooks*):

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
from typing import TYPE_CHECKING, Any

import trio

from .. import wire
from .hooks import HookResult, command_name, run_hooks
from .outcomes import PostToolUseStop, PromptBlocked

if TYPE_CHECKING:
    from ..model import ToolCall
    from .session import Session
    from .tools import ToolResult
    from .turn import Turn

log = logging.getLogger("trellis.hooks")


def payload(session: Session, event: str, **fields: Any) -> dict[str, Any]:
    """The input every event gets, as Claude Code sends it, plus the event's own fields."""
    transcript = str(session.transcript.path) if session.transcript.path else None
    return {"session_id": session.session_id, "transcript_path": transcript, "cwd": session.cwd,
            "hook_event_name": event, "permission_mode": session.approval_mode, **fields}


def report(session: Session, event: str, outcome: HookResult, prompt_id: str | None) -> None:
    """A ``hook_result`` event for what the user should see: messages, failures, a stop reason.

    Each failure is also a warning in the daemon's log, naming the event and the command's program
    (:func:`~.hooks.command_name`) and what went wrong — never the hook's output, which may hold
    anything; the ``hook_result`` event carries that (stderr, cut to 500 characters).
    """
    for command, why in outcome.failed:
        name = command_name(command)
        log.warning("hook failed session=%s event=%s command=%s: %s", session.session_id, event, name, why,
                    extra={"session": session.session_id, "prompt": prompt_id, "event": event, "command": name,
                           "why": why})
    if outcome.system_messages or outcome.failures or outcome.stop_chain:
        session.bus.publish("hook_result", wire.hook_result(
            session.session_id, event, list(outcome.system_messages), list(outcome.failures),
            stop_reason=outcome.stop_reason if outcome.stop_chain else None), prompt_id)


def _stop(turn: Turn, event: str, outcome: HookResult) -> PostToolUseStop:
    turn.hook_stop_reason = outcome.stop_reason or f"a {event} hook stopped the chain"
    return PostToolUseStop(turn.hook_stop_reason)


async def pre_tool_use(turn: Turn, call: ToolCall, arguments: Any) -> tuple[Any, str | None, str | None]:
    """(the arguments to run with, the hook's permission decision, a refusal reason or ``None``)."""
    session = turn.session
    groups = session.hooks.pre_tool_use
    if not groups:
        return arguments, None, None
    data = payload(session, "PreToolUse", tool_name=call.name, tool_input=arguments, tool_use_id=call.id)
    outcome = await run_hooks(groups, data, session.cwd, call.name, session.runtime.hook_runner,
                              sandbox=session.sandbox, files=session.hook_files, refused_blocks=True)
    report(session, "PreToolUse", outcome, turn.prompt_id)
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


async def post_tool_use(turn: Turn, call: ToolCall, result: ToolResult) -> HookResult | None:
    """What the PostToolUse hooks said of this call's result (``None``: no hooks configured)."""
    session = turn.session
    groups = session.hooks.post_tool_use
    if not groups:
        return None
    data = payload(session, "PostToolUse", tool_name=call.name, tool_input=call.arguments,
                   tool_response={"content": result.content, "error": result.error}, tool_use_id=call.id)
    outcome = await run_hooks(groups, data, session.cwd, call.name, session.runtime.hook_runner,
                              sandbox=session.sandbox, files=session.hook_files)
    report(session, "PostToolUse", outcome, turn.prompt_id)
    return outcome


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


def stop_after_post_tool_use(turn: Turn, outcome: HookResult | None) -> None:
    if outcome is not None and outcome.stop_chain:
        raise _stop(turn, "PostToolUse", outcome)


async def user_prompt_submit(turn: Turn, text: str) -> str:
    """The prompt as the model gets it (with any added context); raises :class:`PromptBlocked`."""
    session = turn.session
    contexts, session.start_context = session.start_context, []  # SessionStart's context goes with it
    groups = session.hooks.user_prompt_submit
    if groups:
        data = payload(session, "UserPromptSubmit", prompt=text)
        outcome = await run_hooks(groups, data, session.cwd, runner=session.runtime.hook_runner, plain_context=True,
                                  sandbox=session.sandbox, files=session.hook_files)
        report(session, "UserPromptSubmit", outcome, turn.prompt_id)
        if outcome.stop_chain or outcome.blocked:
            reason = "\n".join(outcome.block_reasons) or outcome.stop_reason or "blocked by a UserPromptSubmit hook"
            turn.hook_stop_reason = reason
            session.publish_notice(f"Prompt blocked by a UserPromptSubmit hook: {reason}", turn.prompt_id)
            raise PromptBlocked(reason)
        contexts = [*contexts, *(("UserPromptSubmit", c) for c in outcome.contexts)]
    for event, context in contexts:
        text += f"\n\n[{event} hook context: {context}]"
    return text


async def session_start(session: Session) -> None:
    """SessionStart (matcher over ``source``): its context is added to the session's next prompt."""
    groups = session.hooks.session_start
    if not groups:
        return
    source = "resume" if session.history else "startup"
    data = payload(session, "SessionStart", source=source)
    outcome = await run_hooks(groups, data, session.cwd, source, session.runtime.hook_runner, plain_context=True,
                              sandbox=session.sandbox, files=session.hook_files)
    report(session, "SessionStart", outcome, None)
    session.start_context.extend(("SessionStart", c) for c in outcome.contexts)


async def session_end(session: Session, reason: str) -> None:
    """SessionEnd (matcher over ``reason``): cleanup only; it runs also while the session is cancelled."""
    groups = session.hooks.session_end
    if not groups:
        return
    data = payload(session, "SessionEnd", reason=reason)
    with trio.CancelScope(shield=True), trio.move_on_after(SESSION_END_BUDGET):
        outcome = await run_hooks(groups, data, session.cwd, reason, session.runtime.hook_runner,
                                  sandbox=session.sandbox, files=session.hook_files)
        report(session, "SessionEnd", outcome, None)


SESSION_END_BUDGET = 30.0  # seconds all SessionEnd hooks of one session may take, shutdown included


__all__ = ["payload", "post_tool_use", "pre_tool_use", "report", "session_end", "session_start",
           "stop_after_post_tool_use", "tool_content", "user_prompt_submit"]
