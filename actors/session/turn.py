"""The model-turn loop: stream, publish, run tools, repeat until a natural stop.

A :class:`Turn` is one piece of work — a foreground prompt or an automatic turn
— as seen by the model: it appends to the session's conversation, streams each
model call (entering the provider's stream is the commit point), executes the
tool calls it gets back, drains mid-turn user input at every tool boundary, and
ends at the first natural stop (a model response without tool calls).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .. import wire
from ..model import (
    ChatMessage,
    ChatRequest,
    TextDelta,
    ThoughtDelta,
    ToolCall,
)
from .fifo import MID_TURN_PREFIX, DrainResult
from .todo import TODO_WRITE, parse_todo_envelope
from .tools import ToolContext, ToolResult

if TYPE_CHECKING:
    from .session import Session


class Turn:
    """One foreground prompt or automatic turn on a session's conversation."""

    def __init__(self, session: Session, prompt_id: str) -> None:
        self.session = session
        self.prompt_id = prompt_id
        self.model_calls = 0
        self._seen_call_ids: set[str] = set()

    # ------------------------------------------------------------- the loop

    async def run(self, user_text: str | None) -> str:
        """Run to a stop; returns the ACP stop reason (``end_turn``, ...)."""
        if user_text is not None:
            self.session.append_message(ChatMessage("user", user_text))
        try:
            while True:
                calls = await self.stream_once()
                if calls:
                    await self.run_tools(calls)
                    await self.inject_mid_turn_input()
                    continue
                return "end_turn"
        finally:
            self.session.close_dangling_tool_calls()

    async def stream_once(self) -> list[ToolCall]:
        """One primary-model call; returns the tool calls it asked for."""
        session = self.session
        request = ChatRequest(tuple(session.history), session.tools.specs())
        publish = session.publish_update
        text: list[str] = []
        calls: list[ToolCall] = []
        self.model_calls += 1
        async with session.provider.stream(request) as stream:  # commit point
            async for item in stream:
                kind = type(item)
                if kind is TextDelta:
                    text.append(item.text)
                    publish(wire.text_update("agent_message_chunk", item.text), self.prompt_id)
                elif kind is ThoughtDelta:
                    publish(wire.text_update("agent_thought_chunk", item.text), self.prompt_id)
                elif kind is ToolCall:
                    calls.append(item)
        session.append_message(ChatMessage("assistant", "".join(text), tuple(calls)))
        return calls

    # ------------------------------------------------------------- tools

    async def run_tools(self, calls: list[ToolCall]) -> None:
        for call in calls:
            result = await self.run_tool(call)
            self.session.append_message(ChatMessage("tool", result.content, tool_call_id=call.id, name=call.name))

    async def run_tool(self, call: ToolCall) -> ToolResult:
        session = self.session
        if call.id in self._seen_call_ids:
            # A provider that repeats a call id gets no second execution.
            return ToolResult.failure(f"duplicate tool call id {call.id!r}; not executed again")
        self._seen_call_ids.add(call.id)
        tool = session.tools.get(call.name)
        arguments = call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as exc:
                return self._publish_failure(call, f"arguments are not valid JSON: {exc}")
        if tool is None:
            return self._publish_failure(call, f"unknown tool {call.name!r}")
        trusted_todo = tool.builtin and tool.name == TODO_WRITE
        if not trusted_todo:
            session.publish_update(
                wire.tool_call_update("tool_call", call.id, title=call.name, status="in_progress",
                                      raw_input=arguments, tool_kind=tool.kind),
                self.prompt_id,
            )
        context = ToolContext(session.session_id, session.cwd, self.prompt_id, call.id, session)
        result = await tool.execute(context, arguments)
        if trusted_todo:
            todos = parse_todo_envelope(result.display) if result.error is None else None
            if todos is not None:
                session.publish_update(wire.plan_update([t.to_dict() for t in todos]), self.prompt_id)
                self.observe_todo_write(todos)
            return result
        status = "failed" if result.error else "completed"
        session.publish_update(
            wire.tool_call_update("tool_call_update", call.id, status=status,
                                  content=[{"type": "content", "content": {"type": "text", "text": result.content}}]),
            self.prompt_id,
        )
        return result

    def _publish_failure(self, call: ToolCall, message: str) -> ToolResult:
        self.session.publish_update(
            wire.tool_call_update("tool_call", call.id, title=call.name, status="failed",
                                  content=[{"type": "content", "content": {"type": "text", "text": message}}]),
            self.prompt_id,
        )
        return ToolResult.failure(message)

    def observe_todo_write(self, todos: Any) -> None:
        """A trusted todo list was written (the Todo Stop Guard observes it here)."""

    # ------------------------------------------------------------- mid-turn input

    async def inject_mid_turn_input(self) -> DrainResult:
        """Drain mid-turn user messages into the conversation before the next model call."""
        drained = await self.session.drain_mid_turn()
        if drained.messages:
            text = "\n".join(MID_TURN_PREFIX + m for m in drained.messages)
            self.session.append_message(ChatMessage("user", text))
        return drained


TurnFactory = Callable[["Session", str], Turn]
Runner = Callable[[Turn], Awaitable[str]]
