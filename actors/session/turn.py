"""The model-turn loop: stream, publish, run tools, repeat until the stop path says stop.

A :class:`Turn` is one piece of work — a foreground prompt or an automatic turn —
as the model sees it. Each model stream has a *sponsor* (:class:`Send`): the
user's prompt or mid-turn input, an external Stop hook's continuation, the
Todo Stop Guard (an attempt, committed when the provider returns the stream),
or both of the last two at once. Tool results continue the same sponsor's loop,
subject to the guard's tool-closure rules. At a natural stop the stop path
(:mod:`.stop`) decides whether anything continues the turn.
"""

from __future__ import annotations

import json
from typing import Any

from .. import wire
from ..checkpoints.manifest import LEAVES_FILES_ALONE
from ..guard import Continue, Exhausted, continuation_prompt, continuation_update
from ..model import (
    ChatMessage, ContextWindowExceeded, Finish, ModelError, TextDelta, ThoughtDelta, ToolCall, Usage,
)
from ..model.estimate import estimate_long_texts
from ..model.overflow import ContextOverflow
from ..model.tool_calls import arguments_problem
from ..telemetry import ModelCall, current_ids, include_content, span, turn_ids
from .context import CUT_REASONS, keep_unsent, pending_messages
from . import commands
from .hook_events import stop_after_post_tool_use, tool_content
from .hooks import HookResult
from .outcomes import ORDINARY, HardStop, LoopDetected, Send, TokenLimit, mid_turn_parts, only_cancelled
from .ports import TurnPorts
from .stop import at_natural_stop, report_exhaustion
from .todo import TODO_WRITE, parse_todo_envelope, unfinished_count
from .tools import ToolContext, ToolResult
from .turn_state import TurnState


class Turn:
    """One foreground prompt or automatic turn on a session's conversation."""

    def __init__(self, ports: TurnPorts, state: TurnState) -> None:
        self.ports = ports
        self.state = state
        self.prompt_id = state.prompt_id
        self.seen_call_ids: set[str] = set()  # a provider that repeats a call id gets no second run
        self._tool_calls = 0
        self._repeated_failure = ("", 0)
        self._refused = False  # the running tool call was refused (not run): a metric's outcome

    # ------------------------------------------------------------- the loop

    async def run(self, user_text: str | None, origin: str = "prompt") -> str:
        """Run to a stop; returns the ACP stop reason (``end_turn``, ``cancelled``, ...).

        In a span of its own, the root of the turn's trace (``invoke_agent``, GenAI's name for an agent's run):
        its model calls, tools, hooks, permission waits and guard continuations are its children."""
        with span("invoke_agent trellis", root=True) as s:
            if s.is_recording():
                s.set_attributes({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "trellis",
                                  "gen_ai.conversation.id": self.ports.session_id, "trellis.prompt_id": self.prompt_id,
                                  "trellis.origin": origin, "trellis.foreground": self.state.foreground})
                model = self.ports.context.model_name
                if model:
                    s.set_attribute("gen_ai.request.model", model)
                if user_text is not None and include_content():
                    s.set_attribute("trellis.prompt", user_text)
                turn_ids(current_ids())  # for its "turn ended" log line
            reason = await self._run(user_text, origin)
            if s.is_recording():
                s.set_attribute("trellis.stop_reason", reason)
            return reason

    async def _run(self, user_text: str | None, origin: str) -> str:
        send: Send | None = ORDINARY
        try:
            if user_text is not None:
                command = commands.parse(user_text) if self.state.foreground and origin == "prompt" else None
                if command is not None:
                    await commands.run(self.ports, self.state, command)  # instead of a model call (see .commands)
                    return "end_turn"
                if self.state.foreground and origin == "prompt":
                    user_text = await self.ports.hooks.user_prompt_submit(self.state, user_text)
                self.ports.conversation.append(ChatMessage("user", user_text, origin=origin, images=self.state.images))
            while send is not None:
                streamed = await self.stream(send)
                if streamed is None:
                    return "end_turn"
                sent, calls = streamed  # what really went out: a pre-send check may have changed it
                if calls:
                    await self.run_tools(calls)
                    send = await self.after_tools(sent)
                else:
                    send = await at_natural_stop(self.ports, self.state)
            return "end_turn"
        except HardStop as stop:
            self.ports.chain.guard.suspend()  # every hard terminal path suspends the chain, here
            if isinstance(stop, TokenLimit) and stop.detail is not None:
                self.state.token_limit = stop.detail
                self.ports.publisher.notice(stop.detail["message"], self.prompt_id)
            return stop.reason
        finally:
            self.ports.conversation.close_dangling_tool_calls()

    # ------------------------------------------------------------- one stream

    async def stream(self, send: Send) -> tuple[Send, list[ToolCall]] | None:
        """One primary-model stream for ``send``: what was sent and the tool calls it asked for.

        ``None`` when a pre-send check ended the turn instead (FIFO priority, a dropped guard send).
        """
        ports = self.ports
        await estimate_long_texts(ports.conversation.history)  # a long new answer or tool result: a slice a task step
        fitted = await self.fit_context(send)  # compaction first: the re-checks must see what it let happen
        if fitted is None:
            return None
        send = fitted
        if send.guard is not None:
            checked = await self.before_guard_send(send)
            if checked is None:
                return None
            send = checked
            if send.guard is not None:
                with span("guard_continuation") as s:
                    if s.is_recording():
                        s.set_attributes({"trellis.guard.attempt": send.guard.attempt,
                                          "trellis.guard.unfinished_count": send.guard.unfinished_count,
                                          "trellis.guard.tool_closure": send.guard.tool_closure})
                    return await self.send(send)
        return await self.send(send)

    async def send(self, send: Send) -> tuple[Send, list[ToolCall]]:
        """:meth:`stream_once`, once more after an overflow was learnt from and compacted."""
        ports = self.ports
        try:
            return await self.stream_once(send)
        except ContextOverflow as overflow:
            send = await ports.context.recover(self.state, send, overflow)  # learnt, compacted: one more try
        try:
            return await self.stream_once(send)
        except ContextOverflow as overflow:
            raise ports.context.refuse(None, overflow.message) from None

    async def stream_once(self, send: Send) -> tuple[Send, list[ToolCall]]:
        """Send ``send`` once; a :class:`ContextOverflow` answer leaves the conversation as it was."""
        ports = self.ports
        pending = pending_messages(send)
        request = ports.context.stamp(ports.context.primary_request(ports.conversation.history, pending))
        # Decided on the send as it goes out: a pre-send check may have handed it to mid-turn input.
        source = "todo_stop_guard" if send.guard is not None else "primary"
        started = ports.usage.clock_ms()
        with span(f"chat {request.model or 'model'}") as s:  # GenAI's name: the operation, then the model
            if s.is_recording():
                s.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": request.model or "",
                                  "trellis.model_call.source": source})
            call = ports.usage.telemetry.model_call(source, s)
            return await self._stream_once(send, request, pending, source, started, call)

    async def _stream_once(self, send: Send, request: Any, pending: Any, source: str, started: int,
                           call: ModelCall) -> tuple[Send, list[ToolCall]]:
        ports = self.ports
        finish: str | None = None
        text: list[str] = []
        calls: list[ToolCall] = []
        committed = False
        usage: Usage | None = None
        outcome = "cancelled"
        try:
            async with ports.context.provider.stream(request) as stream:  # the commit point
                committed = True
                ports.context.sent(request)
                for message in pending:
                    ports.conversation.append(message)
                if send.guard is not None:
                    self.commit(send.guard)
                async for item in stream:
                    if call.first_at is None:
                        call.first()
                    kind = type(item)
                    if kind is TextDelta:
                        text.append(item.text)
                        ports.publisher.update(wire.text_update("agent_message_chunk", item.text), self.prompt_id)
                    elif kind is ThoughtDelta:
                        ports.publisher.update(wire.text_update("agent_thought_chunk", item.text), self.prompt_id)
                    elif kind is ToolCall:
                        calls.append(item)
                    elif kind is Usage:
                        usage = item
                    elif kind is Finish:
                        finish = item.reason
            outcome = "ok"
        except (ContextWindowExceeded, ModelError) as exc:
            outcome = "error"
            overflow = ports.context.take_overflow(exc, request)
            if overflow is not None:
                if committed:
                    ports.context.take_back(len(pending))  # the stream carried nothing: the input goes again
                raise overflow from None
            if not committed:
                keep_unsent(ports.conversation, pending)
            ports.chain.guard.pause_for_trusted_retry()  # API/network errors keep state for a trusted retry
            raise
        except BaseException as exc:
            # A cancellation, also as a group of them (a provider's stream that runs a nursery).
            cancelled = only_cancelled(exc)
            if not committed and cancelled:
                keep_unsent(ports.conversation, pending)
            outcome = "cancelled" if cancelled else "error"
            raise
        finally:
            if committed:  # a committed stream is a call, also when it failed or was cancelled
                ports.usage.record(self.prompt_id, source, usage, started, self.state.usage)
                call.end(outcome, usage, finish)
        ports.context.observe(request, usage)
        self.state.last_text = "".join(text)
        if finish in CUT_REASONS:
            # Cut short: the text stays for the user to see continued; calls it may have cut are not run.
            ports.conversation.append(ChatMessage("assistant", self.state.last_text))
            raise TokenLimit(ports.context.answer_cut(request, usage, self.state.last_text, finish))
        ports.conversation.append(ChatMessage("assistant", self.state.last_text, tuple(calls)))
        return send, calls

    def commit(self, decision: Continue) -> None:
        """The guard stream exists: count the attempt and say so (never with todo text)."""
        if self.ports.chain.guard.commit_continuation(decision.attempt):
            self.ports.publisher.update(continuation_update(decision), self.prompt_id)
            self.ports.publisher.telemetry.guard_continued()

    async def before_guard_send(self, send: Send) -> Send | None:
        """Re-check a guard-sponsored send just before it goes out (mid-turn input, FIFO, plan mode)."""
        ports = self.ports
        guard = ports.chain.guard
        drained = await ports.mid_turn.drain(watch_queued_prompt=True)
        if drained.messages:
            ports.chain.yield_to_queued_prompt(drained.has_queued_prompt)  # the input runs first, then the FIFO
            guard.accept_mid_turn_user_input()  # new user input sponsors the send; no attempt is used
            return Send(send.without_guard().parts + mid_turn_parts(drained.messages), None, send.hook)
        if ports.chain.yield_to_queued_prompt(drained.has_queued_prompt):
            return None  # FIFO priority: end the request, use no attempt
        if ports.plan_mode:
            guard.clear_trust()
        assert send.guard is not None
        if send.guard.tool_closure:
            again = guard.decide_tool_closure(send.guard.attempt - 1, ports.chain.has_relevant_background_input())
        else:
            again = guard.decide(ports.chain.has_relevant_background_input())
        if again != send.guard:
            rest = send.without_guard()
            return rest if rest.hook else None
        return send

    async def fit_context(self, send: Send) -> Send | None:
        """Compact (and cut) history when the next request would not fit (:mod:`.context`); a failed
        compaction before a guard send suspends the chain; input that cannot fit is refused."""
        return await self.ports.context.fit(self.state, send)

    # ------------------------------------------------------------- tools

    async def run_tools(self, calls: list[ToolCall]) -> None:
        settings = self.ports.settings
        for call in calls:
            self._tool_calls += 1
            if self._tool_calls > settings.max_tool_calls_per_turn:
                raise LoopDetected(f"more than {settings.max_tool_calls_per_turn} tool calls in one turn")
            result = await self.run_tool(call)
            hooks = await self.post_tool_use(call, result)  # after the todo observation, before the model reads it
            content = tool_content(result.content, hooks, self.state.pre_tool_contexts.pop(call.id, ()))
            self.ports.conversation.append(ChatMessage("tool", content, tool_call_id=call.id, name=call.name))
            self.note_failure(call, result)
            stop_after_post_tool_use(self.state, hooks)

    def note_failure(self, call: ToolCall, result: ToolResult) -> None:
        """The same call failing again and again (say, with the same invalid arguments) is a loop."""
        if result.error is None:
            self._repeated_failure = ("", 0)
            return
        signature = f"{call.name}:{json.dumps(call.arguments, sort_keys=True, default=str)}"
        last, count = self._repeated_failure
        count = count + 1 if last == signature else 1
        self._repeated_failure = (signature, count)
        if count >= self.ports.settings.max_repeated_failures:
            raise LoopDetected(f"{call.name} failed {count} times in a row with the same arguments")

    async def run_tool(self, call: ToolCall) -> ToolResult:
        """:meth:`execute_tool` in a span (GenAI's ``execute_tool``), counted by tool and outcome."""
        self._refused = False
        with span(f"execute_tool {call.name}") as s:
            if s.is_recording():
                s.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                                  "gen_ai.tool.call.id": call.id})
                if include_content():
                    s.set_attribute("gen_ai.tool.call.arguments",
                                    call.arguments if isinstance(call.arguments, str)
                                    else json.dumps(call.arguments, default=str))
            result = await self.execute_tool(call)
            outcome = "refused" if self._refused else "failed" if result.error else "completed"
            if s.is_recording():
                s.set_attribute("trellis.tool.outcome", outcome)
            tool = self.ports.tools.get(call.name)
            self.ports.publisher.telemetry.tool_called(call.name, tool is not None and tool.builtin, outcome)
            return result

    async def execute_tool(self, call: ToolCall) -> ToolResult:
        ports = self.ports
        if call.id in self.seen_call_ids:
            # A provider that repeats a call id gets no second execution.
            return ToolResult.failure(f"duplicate tool call id {call.id!r}; not executed again")
        self.seen_call_ids.add(call.id)
        tool = ports.tools.get(call.name)
        arguments = call.arguments
        problem = arguments_problem(arguments)  # too deep to parse, encode or check safely
        if problem is not None:
            return self._publish_failure(call, problem)
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return self._publish_failure(call, f"arguments are not valid JSON: {exc}")
        if tool is None:
            return self._publish_failure(call, f"unknown tool {call.name!r}")
        arguments, permission, refusal = await ports.hooks.pre_tool_use(self.state, call, arguments)
        if refusal is not None:
            return self._publish_failure(call, refusal)
        verdict = ports.authorizer.verdict(call.name, arguments, ports.cwd())
        if verdict.effect == "deny":
            return self._publish_failure(call, ports.authorizer.refusal(verdict), rule=verdict.rule)
        if verdict.effect == "ask" or (verdict.effect == "allow" and permission is None):
            permission = verdict.effect  # an ask rule outranks a hook's allow; a hook's ask, an allow rule
        trusted_todo = tool.builtin and tool.name == TODO_WRITE
        if not trusted_todo:
            locate = getattr(tool, "locate", None)  # where it will look, when its arguments say
            ports.publisher.update(
                wire.tool_call_update("tool_call", call.id, title=call.name, status="in_progress",
                                      raw_input=arguments, tool_kind=tool.kind, tool_name=call.name,
                                      locations=locate(ports.cwd(), arguments) if locate is not None else None),
                self.prompt_id,
            )
        context = ToolContext(ports.session_id, ports.cwd(), self.prompt_id, call.id, ports.services, permission,
                              verdict.rule if verdict.effect == permission else None, call.name)
        try:
            if permission == "ask" and not getattr(tool, "asks_permission", False):
                # A PreToolUse "ask" on a tool that never asks by itself: the user decides here, in any mode.
                denied = await ports.authorizer.authorize(context, title=call.name, kind=tool.kind,
                                                          raw_input=arguments, plan_refuses=False)
                if denied is not None:
                    return self._publish_failure(call, denied)
            if tool.name not in LEAVES_FILES_ALONE:
                await ports.before_change()  # the user turn's checkpoint, taken before its first change
            result = await ports.tools.execute(tool, context, arguments)  # its arguments checked first
        except BaseException as exc:
            if not trusted_todo:  # its in_progress was published: a client would show it running for good
                self._publish_unfinished(call, exc)
            raise
        if trusted_todo:
            # Observed after execution and status, before PostToolUse hooks; only a strict envelope counts.
            todos = parse_todo_envelope(result.display) if result.error is None else None
            if todos is not None:
                ports.publisher.update(wire.plan_update([t.to_dict() for t in todos]), self.prompt_id)
                ports.chain.guard.observe_todo_write(unfinished_count(todos), allow_arm=not ports.plan_mode)
            return result
        status = "failed" if result.error else "completed"
        ports.publisher.update(
            wire.tool_call_update("tool_call_update", call.id, status=status, tool_name=call.name,
                                  content=[{"type": "content", "content": {"type": "text", "text": result.content}},
                                           *result.acp_content],  # a diff, say
                                  locations=list(result.locations)),
            self.prompt_id,
        )
        return result

    async def post_tool_use(self, call: ToolCall, result: ToolResult) -> HookResult | None:
        return await self.ports.hooks.post_tool_use(self.state, call, result)

    def _publish_failure(self, call: ToolCall, message: str, *, rule: str | None = None) -> ToolResult:
        update = wire.tool_call_update("tool_call", call.id, title=call.name, status="failed", tool_name=call.name,
                                       content=[{"type": "content", "content": {"type": "text", "text": message}}],
                                       rule=rule)  # the deny rule that refused it
        self.ports.publisher.update(update, self.prompt_id)
        self._refused = True
        return ToolResult.failure(message)

    def _publish_unfinished(self, call: ToolCall, exc: BaseException) -> None:
        """The call's last word when the turn ends under it (a cancel, while it waits for a vote or runs): ACP has
        no ``cancelled`` status for a tool call, so ``failed``, saying why."""
        why = "cancelled" if only_cancelled(exc) else "not finished: the turn failed"
        self.ports.publisher.update(
            wire.tool_call_update("tool_call_update", call.id, status="failed", tool_name=call.name,
                                  content=[{"type": "content", "content": {"type": "text", "text": why}}]),
            self.prompt_id,
        )

    async def after_tools(self, previous: Send) -> Send | None:
        """Who sponsors the send of these tool results: mid-turn input, the guard, a hook, or nobody."""
        ports = self.ports
        drained = await ports.mid_turn.drain()
        if drained.messages:
            ports.chain.guard.accept_mid_turn_user_input()
            return Send(mid_turn_parts(drained.messages))
        if previous.guard is None:
            return Send(hook=previous.hook)  # an ordinary tool loop goes on
        decision = ports.chain.guard.decide_tool_closure(previous.guard.attempt,
                                                     ports.chain.has_relevant_background_input())
        if isinstance(decision, Continue):
            parts = () if decision.tool_closure else (("guard", continuation_prompt(decision.attempt,
                                                                                    decision.unfinished_count)),)
            return Send(parts, decision, previous.hook)
        if isinstance(decision, Exhausted):
            report_exhaustion(ports, self.state, decision)
        # No third guard stream: the results stay in the conversation; a hook's own loop goes on.
        return Send(hook=True) if previous.hook else None


__all__ = ["Turn"]
