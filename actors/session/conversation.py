"""A session's conversation: the model-facing history and the transcript that keeps it on disk.

The one place that changes the history: a turn appends; a compaction, a cut, a
``/clear``, a rewind or a reload replaces it, and the transcript is rewritten
with it (a reload excepted: it was read from there).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..guard import is_continuation_prompt
from ..model import ChatMessage
from .history import History
from .transcript import Transcript


class Conversation:
    """The history a session's requests are built from, and its transcript."""

    def __init__(self, transcript: Transcript, messages: Iterable[ChatMessage] = ()) -> None:
        self.transcript = transcript
        self._history = History(messages)
        if self._history:
            transcript.rewrite(self._history)

    @property
    def history(self) -> History:
        return self._history

    def __len__(self) -> int:
        return len(self._history)

    def append(self, message: ChatMessage) -> None:
        self._history.append(message)
        self.transcript.append(message)

    def replace(self, messages: Iterable[ChatMessage]) -> None:
        """A compaction, a cut, ``/clear``, a rewind: a new :class:`History`, and the transcript rewritten."""
        self._history = History(messages)
        self.transcript.rewrite(self._history)

    def release(self) -> None:
        """Let go of what requests recorded on the first message (the requests' first message when there is
        no system prompt): those records hold tuples that hold the message, a cycle."""
        if self._history:
            self._history[0].memo.clear()

    def reload(self) -> list[ChatMessage]:
        """Take the conversation back from the transcript on disk; its messages."""
        messages = self.transcript.messages()
        self._history = History(messages)
        return messages

    def close_dangling_tool_calls(self) -> None:
        """Answer tool calls that a cancellation left unanswered, so the conversation stays valid."""
        for answer in self._history.dangling_answers():
            self.append(answer)

    def awaiting_answer(self) -> bool:
        """The conversation ends with input the model has not answered yet."""
        return bool(self._history) and self._history[-1].role in ("user", "tool")

    def user_turn_starts(self) -> list[int]:
        """Where each user turn starts (the index of its message), as a rewind counts them: a prompt's user
        message, not a guard's continuation, a mid-turn message, a hook's or a summary note."""
        return [i for i, m in enumerate(self._history) if _starts_a_turn(m)]

    def turn_texts(self) -> list[str]:
        """The user message of each turn, as a rewind counts them."""
        history = self._history
        return [history[i].content for i in self.user_turn_starts()]

    def turn_message_since(self, index: int) -> str | None:
        """The text of the first user turn's message at or after ``index`` (a turn that began there added it),
        or None; reads only what came since."""
        return next((m.content for m in self._history[index:] if _starts_a_turn(m)), None)

    def rewind(self, turn: int) -> int | str:
        """Drop user turn ``turn`` (from 0) and everything after it: the messages kept, or why not."""
        starts = self.user_turn_starts()
        if not 0 <= turn < len(starts):
            return f"turn must be from 0 to {len(starts) - 1}" if starts else "there is no user turn to rewind to"
        self.replace(self._history[: starts[turn]])
        return len(self._history)


def _starts_a_turn(message: ChatMessage) -> bool:
    return message.role == "user" and message.origin in ("prompt", None) and not is_continuation_prompt(message.content)


def shown_as_user_text(message: ChatMessage) -> bool:
    """A user message clients were shown as the user's when it was sent: a prompt, or an automatic turn's
    text. The guard's continuations, a hook's reasons and mid-turn input folded into tool results are the
    model's to read, never shown as a user's message."""
    return message.role == "user" and message.origin in ("prompt", "automatic", None) \
        and not is_continuation_prompt(message.content)


__all__ = ["Conversation"]
