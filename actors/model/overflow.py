"""Context overflow as servers say it, read into one typed error.

A request longer than the model's context is answered differently by each
server; these are recognised (HTTP 400, 413 or 422, or an ``error`` chunk at
the start of a stream):

- OpenAI: ``code: "context_length_exceeded"``, "This model's maximum context
  length is N tokens. However, your messages resulted in M tokens...";
- vLLM: "This model's maximum context length is N tokens. However, you
  requested M tokens (P in the messages, C in the completion)..." (up to
  0.5), "...However, your request has P input tokens..." and "'max_tokens'
  ... is too large: C. This model's maximum context length is N tokens and
  your request has P input tokens" (0.6 to 0.10), "...However, you requested C
  output tokens and your prompt contains at least P input tokens, for a total
  of at least T tokens..." (later);
- llama.cpp's ``llama-server``: ``type: "exceed_context_size_error"``,
  "request (P tokens) exceeds the available context size (N tokens), try
  increasing it", with ``n_prompt_tokens`` and ``n_ctx`` beside it (older
  builds: "the request exceeds the available context size", no numbers).

:class:`ContextOverflow` carries the server's context size (``limit``) and its
count of the prompt (``prompt_tokens``) when it gave them. The
``llama-cpp-python`` server says nothing: it answers 200 and ends the stream
before any chunk (:class:`EmptyResponse`), which only the session can judge,
by how full its request was.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from .base import ModelError

OVERFLOW_STATUSES = (400, 413, 422)

_MARKERS = (
    "context_length_exceeded",          # OpenAI's code
    "exceed_context_size_error",        # llama-server's type
    "maximum context length",           # OpenAI, vLLM and their proxies (LiteLLM)
    "exceeds the available context size",
    "exceeds context size",
    "larger than the max context size",
    "context window of",                # OpenAI Responses: "exceeds the context window of this model"
    "exceeds the context window",
)
_LIMIT = (
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"context size \((\d+) tokens\)"),
    re.compile(r'"n_ctx"\s*:\s*(\d+)'),
)
_PROMPT = (
    re.compile(r"messages resulted in (\d+) tokens"),                  # OpenAI
    re.compile(r"\((\d+) in the messages"),                             # vLLM, up to 0.5
    re.compile(r"you requested (\d+) tokens in the messages"),
    re.compile(r"your request has (\d+) input tokens"),                # vLLM 0.6-0.10
    re.compile(r"prompt contains (?:at least )?(\d+) input tokens"),   # vLLM later (a lower bound)
    re.compile(r'"n_prompt_tokens"\s*:\s*(\d+)'),                       # llama-server
    re.compile(r"request \((\d+) tokens\)"),
    re.compile(r"input \((\d+) tokens\) is larger"),
)


class ContextOverflow(ModelError):
    """The request did not fit the model's context (code ``context_overflow``).

    ``limit`` is the context size and ``prompt_tokens`` the server's count of the
    prompt, each when known. Raised by the provider for a server's answer, and by
    the session for an input it refuses because it cannot fit even alone.
    """

    def __init__(self, message: str, *, committed: bool, limit: int | None = None,
                 prompt_tokens: int | None = None) -> None:
        super().__init__("context_overflow", message, committed=committed)
        self.limit = limit
        self.prompt_tokens = prompt_tokens


class EmptyResponse(ModelError):
    """A 2xx stream that ended before any chunk (``malformed_stream``): a broken server, or the
    llama-cpp-python server refusing a request longer than its context."""

    def __init__(self, message: str) -> None:
        super().__init__("malformed_stream", message, committed=True)


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


def is_overflow_text(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in _MARKERS)


def overflow_from_text(text: str, message: str, *, committed: bool) -> ContextOverflow | None:
    """A :class:`ContextOverflow` when ``text`` (an error body or chunk) says the context overflowed."""
    if not is_overflow_text(text):
        return None
    lowered = text.lower()
    return ContextOverflow(message, committed=committed, limit=_first(_LIMIT, lowered),
                           prompt_tokens=_first(_PROMPT, lowered))


def overflow_from_response(status: int, body: bytes, message: str) -> ContextOverflow | None:
    """The overflow an HTTP error answer reports, if it is one (read before the commit point)."""
    if status not in OVERFLOW_STATUSES:
        return None
    return overflow_from_text(body.decode("utf-8", "replace"), message, committed=False)


def overflow_from_chunk(error: Any, message: str) -> ContextOverflow | None:
    """The overflow a stream's ``error`` chunk reports, if it is one (after the commit point)."""
    return overflow_from_text(orjson.dumps(error).decode(), message, committed=True)


__all__ = ["ContextOverflow", "EmptyResponse", "is_overflow_text", "overflow_from_chunk", "overflow_from_response",
           "overflow_from_text"]
