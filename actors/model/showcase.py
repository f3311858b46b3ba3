"""The showcase: the demo ``trellis serve`` plays by default, so the quick start shows every feature.

Its first answer in a session plans four todos, runs a shell command (a
permission request in the ``default`` approval mode), starts a background
check (``sleep 4; echo ...``, also asked for), streams a slow markdown answer
(a heading, a code block, a table, over a few seconds) and stops with one todo
open. When the background check ends, its notification starts an automatic
turn that reads its output, reports it and stops with the last todo still open:
with the Todo Stop Guard on (``experimental.todoStopGuard``) the guard
continues that turn and the model closes the todo (the guard yields to
background work, so it cannot act before). Later prompts get a shorter streamed answer. Deterministic: each response
is read off the conversation (the origin of the last user message, the last
todo list, how many answers since), never off a counter.

``python -m transport`` and :class:`~.scripted.ScriptedModel` keep the quick
todo demo (:func:`~.scripted.demo_response`), which tests and embedders rely on;
``trellis serve`` passes ``--demo showcase``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .base import ChatMessage, ChatRequest, TextDelta, ToolCall
from .scripted import Response, ScriptedModel, Sleep

BACKGROUND_COMMAND = "sleep 4; echo 'background check: all good'"
CHUNK_CHARS = 12  # a streamed answer comes in pieces this long
ANSWER_SECONDS = 3.0  # how long the markdown answer takes to stream

ANSWER = """## What you just saw

This answer is **streamed**: it arrives a few characters at a time, and a client draws it as it comes.
Before it, the daemon asked you to approve a shell command (approval mode `default`), and a check
started in the background; it reports itself when it ends.

```python
async with open_daemon() as daemon:
    session, _ = await daemon.create_session()
    await session.prompt("Plan a picnic")  # queued; the turn runs on its own
```

| Feature | Where it showed |
| --- | --- |
| Todos | the plan at the start |
| Permission request | `ls -la`, before it ran |
| Background task | `sleep 4; echo ...` |
| Streaming | this answer |

Send another prompt while one runs: it waits its turn (`trellis sessions` shows it queued).
"""

FOLLOW_UP = """## {topic}

This is the demo model: it does not read prompts, but it streams like a real one.
Try `trellis sessions` in another terminal, `trellis status ID`, or `trellis open` for the browser.
"""

PLAN = [
    {"id": "1", "content": "Look at the workspace", "status": "in_progress"},
    {"id": "2", "content": "Start a background check", "status": "pending"},
    {"id": "3", "content": "Write the answer", "status": "pending"},
    {"id": "4", "content": "Report the background check", "status": "pending"},
]


def streamed(text: str, seconds: float) -> tuple[Any, ...]:
    """``text`` in small chunks spread over about ``seconds``."""
    chunks = [text[i:i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
    pause = seconds / max(len(chunks), 1)
    steps: list[Any] = []
    for chunk in chunks:
        steps += [TextDelta(chunk), Sleep(pause)]
    return tuple(steps)


def _latest_todos(messages: tuple[ChatMessage, ...]) -> list[dict[str, Any]]:
    """The last todo list the model wrote in this session (not only this turn)."""
    for m in reversed(messages):
        for call in reversed(m.tool_calls):
            if call.name == "todo_write" and isinstance(call.arguments, dict):
                todos = call.arguments.get("todos")
                if isinstance(todos, list):
                    return [dict(t) for t in todos]
    return []


def _with_status(todos: list[dict[str, Any]], statuses: dict[str, str]) -> list[dict[str, Any]]:
    return [{**t, "status": statuses.get(t.get("id"), t.get("status"))} for t in todos]


def _all_done(todos: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**t, "status": "completed"} for t in todos]


def showcase_response(request: ChatRequest, next_id: Callable[[], str], *, answer_seconds: float = ANSWER_SECONDS,
                      background_command: str = BACKGROUND_COMMAND) -> Response:
    """The showcase's next response to ``request`` (the module doc); tests pass a quicker pace."""
    if request.purpose != "primary":
        return Response((TextDelta("Summary of the conversation so far."),))
    messages = request.messages
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    if not users:
        return Response((TextDelta("Hello from the demo model."),))
    last = messages[users[-1]]
    answered = sum(1 for m in messages[users[-1] + 1:] if m.role == "assistant")  # in this stage so far
    tools = {t.name for t in request.tools}
    todos = _latest_todos(messages)
    open_todos = [t for t in todos if t.get("status") != "completed"]

    def call(name: str, arguments: dict[str, Any]) -> ToolCall:
        return ToolCall(next_id(), name, arguments)

    if last.origin == "automatic":
        # The background check's notification: read what it printed, report it, and stop with the last
        # todo open — the Todo Stop Guard's cue (it yields to background work, so only now can it act).
        task = re.search(r'task_id="([^"]+)"', last.content)
        if answered == 0 and task is not None and "shell_output" in tools:
            return Response((TextDelta("The background check finished; reading what it printed. "),
                             call("shell_output", {"task_id": task.group(1)})))
        if answered <= 1:
            tool_text = next((m.content for m in reversed(messages) if m.role == "tool"), "")
            output = next((line.strip() for line in tool_text.splitlines() if "check:" in line), "it finished")
            steps = streamed(f"Background check: {output}. ", answer_seconds / 6)
            if open_todos and "todo_write" in tools:
                steps += (call("todo_write", {"todos": _with_status(todos, {"4": "in_progress"})}),)
            return Response(steps)
        return Response((TextDelta("I stop here with the last todo open: with the Todo Stop Guard on "
                                   "(experimental.todoStopGuard) the daemon continues me to finish it."),))
    if last.origin == "guard":
        if answered == 0 and open_todos and "todo_write" in tools:
            return Response((TextDelta("The Todo Stop Guard continued this turn: one todo was still open. "),
                             call("todo_write", {"todos": _all_done(todos)})))
        return Response((TextDelta("All todos are done."),))

    first_prompt = sum(1 for i in users if messages[i].origin in ("prompt", None)) == 1
    if not first_prompt or not {"todo_write", "shell"} <= tools:
        topic = " ".join(last.content.split())[:60] or "Your prompt"
        return Response(streamed(FOLLOW_UP.format(topic=topic), answer_seconds / 3))
    if answered == 0:
        return Response((TextDelta("I'll plan this first, then show what a session can do. "),
                         call("todo_write", {"todos": PLAN})))
    if answered == 1:
        return Response((TextDelta("First a look at the workspace: a shell command, so you are asked to "
                                   "approve it. "),
                         call("shell", {"command": "ls -la", "description": "list the workspace"})))
    if answered == 2:
        return Response((TextDelta("Now a check that runs in the background while I write. "),
                         call("todo_write", {"todos": _with_status(todos, {"1": "completed", "2": "in_progress"})}),
                         call("shell", {"command": background_command, "run_in_background": True,
                                        "description": "a background check"})))
    if answered == 3:
        return Response((*streamed(ANSWER, answer_seconds),
                         call("todo_write", {"todos": _with_status(todos, {"2": "completed", "3": "completed"})})))
    return Response((TextDelta("That is the answer. One todo is left: the background check reports when it ends."),))


class ShowcaseModel(ScriptedModel):
    """The scripted model playing :func:`showcase_response` (after any scripted responses)."""

    def __init__(self, *, answer_seconds: float = ANSWER_SECONDS, background_command: str = BACKGROUND_COMMAND,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answer_seconds = answer_seconds
        self.background_command = background_command

    def _take(self, request: ChatRequest) -> Response:
        if self.remaining:
            return super()._take(request)
        return showcase_response(request, self._next_id, answer_seconds=self.answer_seconds,
                                 background_command=self.background_command)


__all__ = ["ShowcaseModel", "showcase_response"]
