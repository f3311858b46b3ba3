"""The primary model behind one streaming interface.

``async with provider.stream(request) as stream`` is the commit point: entering
the block means a response stream exists (for HTTP: status and headers read).
Errors raised while entering are :class:`ModelError` with ``committed=False``;
errors while iterating have ``committed=True``. The Todo Stop Guard counts an
attempt only for a committed stream, so the distinction is part of the contract.
A request that would not fit the context window is refused before sending with
:class:`ContextWindowExceeded`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, Protocol

import attrs

# ----------------------------------------------------------------- conversation


@attrs.frozen
class ToolCall:
    id: str
    name: str
    arguments: Any  # parsed JSON (a dict for well-formed calls), or the raw string when it is not JSON


@attrs.frozen
class ImagePart:
    """An image a user message carries (a prompt's image block): sent to a model that accepts images."""

    mime_type: str
    data: str  # base64, as the prompt gave it

    def data_url(self) -> str:
        return f"data:{self.mime_type};base64,{self.data}"


@attrs.frozen
class ChatMessage:
    """One message of the model-facing conversation (OpenAI chat shape)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    # Never sent. User messages: prompt, mid_turn, hook, guard, automatic; the session's system prompt: system_prompt.
    origin: str | None = None
    # Images of a prompt's user message, after its text. Sent only to a provider that accepts images
    # (``supports_images``); the transcript keeps the text, whose ``[image]`` placeholder says one was there.
    images: tuple[ImagePart, ...] = ()
    # What is derived from the message once and reused by every request that sends it again (its token
    # estimate, its encoded wire form): a long conversation then costs a request what is new, not all of it.
    # Never compared, hashed or written.
    memo: dict[str, Any] = attrs.field(factory=dict, init=False, eq=False, repr=False)


@attrs.frozen
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]
    memo: dict[str, Any] = attrs.field(factory=dict, init=False, eq=False, repr=False)  # as ChatMessage.memo


@attrs.frozen
class ChatRequest:
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    purpose: str = "primary"  # "primary", "compaction" or "suggestion"
    model: str | None = None  # a per-session model name, for providers that serve several
    # The caller's (calibrated) estimate of the prompt's tokens; a provider that checks a context window
    # uses it rather than its own, so both judge the request alike (actors.model.estimate).
    estimated_tokens: int | None = None


# ----------------------------------------------------------------- stream items


@attrs.frozen
class TextDelta:
    text: str


@attrs.frozen
class ThoughtDelta:
    text: str


@attrs.frozen
class Usage:
    """What the server says one call cost. ``cached_tokens`` is ``None`` when it said nothing of
    caching (OpenAI: ``prompt_tokens_details.cached_tokens``), which is not the same as 0."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int | None = None


@attrs.frozen
class Finish:
    reason: str | None


StreamItem = TextDelta | ThoughtDelta | ToolCall | Usage | Finish


# ----------------------------------------------------------------- errors


class ModelError(Exception):
    """A typed model failure. ``code`` is what ``turn_error`` carries."""

    def __init__(self, code: str, message: str, *, committed: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.committed = committed
        self.retry_after = retry_after


class ContextWindowExceeded(Exception):
    """The request does not fit the model's context window; it was never sent."""

    def __init__(self, needed: int, window: int) -> None:
        super().__init__(f"request needs about {needed} tokens; the context window is {window}")
        self.needed = needed
        self.window = window


class ModelProvider(Protocol):
    """A model server's client. Optional attributes read where present: ``model`` (the model requests name
    unless a session overrides it), ``context_window``, ``max_tokens``, ``supports_images``."""

    name: str

    def stream(self, request: ChatRequest) -> AbstractAsyncContextManager[AsyncIterator[StreamItem]]: ...


def configured_model(provider: ModelProvider) -> str:
    """The model a provider's requests name unless a session overrides it: its ``model`` (an OpenAI-compatible
    server's ``--openai-model``), else the provider's own name."""
    return getattr(provider, "model", None) or provider.name
