"""Token estimates of a whole request, and their calibration from what the server counted.

Without the model's tokenizer the count is a guess, so it errs on the high
side where text is not prose. Text is read as runs of one character class,
each with its own cost:

- a word of letters costs one token up to eight letters (most dictionary
  words are one token) and one per four letters beyond; a mixed-case run is
  split where the case changes first (``camelCase`` is two words), so
  base64-like text costs more than prose;
- a run of letters and digits that holds a digit (hex, ids, numbers, base64)
  costs one token per character: tokenizers that split digits one by one
  (Qwen, Llama 2) come close to that — 12,000 random hex characters were
  11,787 Qwen tokens;
- punctuation costs one token per two characters, whitespace nothing after a
  word (a single space) and otherwise one per newline plus one per four other
  characters, and other characters (accents, CJK, emoji) one per two bytes of
  their UTF-8.

Prose comes out somewhat above the truth (English lorem ipsum: about 1,000
estimated for 739 real tokens) and hex or base64 at or above it. A request
counts everything it sends: each message with its role markers, tool calls
with their arguments, tool results, the system prompt (a system message of the
request) and the tool schemas as the chat template renders them.

:class:`Calibration` then corrects the guess with the server's own count (the
``prompt_tokens`` of a call's usage): a request that extends the one the
server last counted is that count plus the estimate of what was added, so only
new text is guessed; any other request is the estimate scaled by the last
call's ratio of real to estimated tokens when that is above 1 (never below:
the next request may be hex where the last was prose).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
import trio

from .base import ChatMessage, ChatRequest, ToolSpec
from .prefix import shared_prefix

MESSAGE_OVERHEAD = 4  # role markers around each message (<|im_start|>user ... <|im_end|>)
CALL_OVERHEAD = 8  # a tool call's wrapping ({"name": ..., "arguments": ...} or the server's own tags)
TOOL_OVERHEAD = 8  # each tool schema's wrapping in the template
TOOLS_PREAMBLE = 100  # the template's instructions around the tool list (Qwen's is about 90 tokens)
IMAGE_TOKENS = 1500  # an image part: vision models charge a few hundred to a few thousand tokens by size

_RUNS = re.compile(r"[A-Za-z0-9]+|[ \t\r\n\f\v]+|[!-/:-@\[-`{-~]+|[^\x00-\x7f]+|[\x00-\x1f\x7f]+")
_CASE_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def _word(run: str) -> int:
    if not run.isalpha():
        return len(run)  # a digit among them: hex, numbers, ids, base64
    tokens = 0
    for word in _CASE_WORDS.findall(run):
        n = len(word)
        tokens += 1 if n <= 8 else 2 + (n - 9) // 4
    return tokens


def _cost(run: str) -> int:
    first = run[0]
    if first.isascii() and first.isalnum():
        return _word(run)
    if first in " \t\r\n\f\v":
        if run == " ":
            return 0
        newlines = run.count("\n")
        return newlines + -(-(len(run) - newlines) // 4)
    if first < " " or first == "\x7f":
        return len(run)  # control characters
    if first.isascii():
        return -(-len(run) // 2)  # punctuation
    return -(-len(run.encode()) // 2)


# Estimates by (length, hash) of the text: a history's messages are estimated again for every request,
# and a str caches its hash, so a repeat costs a lookup. Keyed so, the cache holds no text alive.
_CACHE: dict[tuple[int, int], int] = {}
_CACHE_LIMIT = 65536
_CACHE_FROM = 64  # shorter texts are estimated afresh (cheaper than the key)


def runs_tokens(text: str) -> int:
    """The estimate run by run, as the module doc says it (the definition :func:`text_tokens` keeps)."""
    return sum(_cost(run) for run in _RUNS.findall(text))


_ALNUM = re.compile(r"[A-Za-z0-9]+")
_PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]+")
_SPACE_THAT_COSTS = re.compile(r"[ \t\r\n\f\v]{2,}|[\t\r\n\f\v]")  # every whitespace run but a lone space
_OTHER = re.compile(r"[^\x00-\x7f]+")
# A control character's run takes in the whitespace after it (the run regex's classes overlap there).
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")


def _class_tokens(text: str) -> int:
    """:func:`runs_tokens` of a text without control characters, a character class at a time.

    Run by run a long text costs a Python call per word (a 120 KB answer held
    the event loop for 25 ms); here each class is found by one regex pass, and
    only whitespace other than single spaces, punctuation runs and words over
    eight letters are visited one by one.
    """
    alnum = _ALNUM.findall(text)
    letters = list(filter(str.isalpha, alnum))
    tokens = sum(map(len, alnum)) - sum(map(len, letters))  # a run with a digit: one a character
    words = list(map(len, _CASE_WORDS.findall(" ".join(letters))))
    tokens += len(words) + sum(1 + (n - 9) // 4 for n in words if n > 8)
    tokens += sum(-(-n // 2) for n in map(len, _PUNCTUATION.findall(text)))
    for run in _SPACE_THAT_COSTS.findall(text):
        newlines = run.count("\n")
        tokens += newlines + -(-(len(run) - newlines) // 4)
    if not text.isascii():
        tokens += sum(-(-len(run.encode()) // 2) for run in _OTHER.findall(text))
    return tokens


def _tokens(text: str) -> int:
    return runs_tokens(text) if _CONTROL.search(text) else _class_tokens(text)


def text_tokens(text: str) -> int:
    """The estimated tokens of ``text``."""
    if len(text) < _CACHE_FROM:
        return runs_tokens(text)
    key = (len(text), hash(text))
    tokens = _CACHE.get(key)
    if tokens is None:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        tokens = _CACHE[key] = _tokens(text)
    return tokens


SLICE = 16 * 1024  # what one task step estimates of a long text (about 2 ms here)
# A whole whitespace run between two printable characters: a run of its own, whatever is cut around it (a
# control character before it would take it into its own run).
_CUT = re.compile(r"(?<=[^\x00-\x20\x7f])[ \t\r\n\f\v]+(?=[^\x00-\x20\x7f])")


def slices(text: str, size: int = SLICE) -> Iterator[tuple[str, str]]:
    """``text`` as pieces of at least ``size`` characters (the last may be shorter), each with the whitespace
    run it was cut at after it (the last with ``""``): pieces and runs joined are the text, and their estimates
    add up to its estimate. A piece ends at the first whitespace run between two printable characters past
    ``size``; a text with none there (base64, one long token) is one piece. ``ValueError`` for a ``size``
    under 1."""
    if size < 1:
        raise ValueError(f"size must be at least 1, got {size}")
    start, n = 0, len(text)
    while n - start > size:
        cut = _CUT.search(text, start + size)  # C-speed, and never the same characters twice
        if cut is None:
            break
        yield text[start:cut.start()], cut.group()
        start = cut.end()
    yield text[start:], ""


async def estimate_long_texts(messages: Sequence[ChatMessage]) -> None:
    """Estimate the long texts of the messages at the end of ``messages`` that have no estimate yet, a
    :data:`SLICE` a task step, so the synchronous estimate of the request that holds them finds them known.

    A 120 KB answer estimated at once held the event loop for 17-25 ms; it is
    the next request that first needs its estimate.
    """
    for message in reversed(messages):
        if "tokens" in message.memo:
            break  # estimated for an earlier request, and everything before it too
        for text in (message.content, *(_arguments_text(c.arguments) for c in message.tool_calls)):
            if len(text) > SLICE and (len(text), hash(text)) not in _CACHE:
                tokens = 0
                for piece, cut in slices(text):
                    tokens += _tokens(piece) + (_cost(cut) if cut else 0)
                    await trio.lowlevel.checkpoint()
                if len(_CACHE) >= _CACHE_LIMIT:
                    _CACHE.clear()
                _CACHE[len(text), hash(text)] = tokens


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def message_tokens(message: ChatMessage) -> int:
    """One message as sent: its content, tool calls and role markers (estimated once per message)."""
    tokens = message.memo.get("tokens")
    if tokens is None:
        tokens = message.memo["tokens"] = _message_tokens(message)
    return tokens


def _message_tokens(message: ChatMessage) -> int:
    tokens = MESSAGE_OVERHEAD + text_tokens(message.content) + IMAGE_TOKENS * len(message.images)
    for call in message.tool_calls:
        tokens += CALL_OVERHEAD + text_tokens(call.name) + text_tokens(_arguments_text(call.arguments))
    if message.name:
        tokens += text_tokens(message.name)
    return tokens


def messages_tokens(messages: Iterable[ChatMessage]) -> int:
    return sum(message_tokens(m) for m in messages)


def tools_tokens(tools: Iterable[ToolSpec]) -> int:
    """The tool schemas as a chat template renders them (JSON in the system turn)."""
    tokens = 0
    for tool in tools:
        cost = tool.memo.get("tokens")
        if cost is None:
            schema = {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                       "parameters": tool.parameters}}
            cost = tool.memo["tokens"] = TOOL_OVERHEAD + text_tokens(json.dumps(schema, ensure_ascii=False))
        tokens += cost
    return tokens + TOOLS_PREAMBLE if tokens else 0


def estimate_request(request: ChatRequest) -> int:
    """The prompt tokens of ``request`` (not its answer), by the rules of the module doc."""
    return messages_tokens(request.messages) + tools_tokens(request.tools)


def _extends(request: ChatRequest, counted: ChatRequest) -> bool:
    """``request`` sends what ``counted`` sent, and more after it (compared by identity first: cheap)."""
    n = len(counted.messages)
    return len(request.messages) >= n and request.tools == counted.tools \
        and shared_prefix(counted.messages, request.messages) == n


@attrs.define
class Calibration:
    """The server's count of the last request it reported usage for, and what that says of our guess."""

    counted: ChatRequest | None = None  # the last request the server counted
    reported: int = 0  # its prompt_tokens
    raw: int = 0  # our raw estimate of it
    last_estimate: int | None = None  # the estimate of the last request sent (calibrated)
    last_reported: int | None = None  # what the server said of that one (None: nothing yet)
    _last: tuple[ChatRequest, int] | None = attrs.field(default=None, repr=False)  # last raw estimate, to extend

    @property
    def ratio(self) -> float | None:
        """Real over estimated tokens of the counted request (``None`` before one)."""
        return self.reported / self.raw if self.counted is not None and self.raw else None

    def estimate(self, request: ChatRequest) -> int:
        """The calibrated estimate of ``request``'s prompt tokens."""
        counted = self.counted
        if counted is None:
            return self._raw(request)
        if _extends(request, counted):
            return self.reported + messages_tokens(request.messages[len(counted.messages):])
        raw = self._raw(request)
        ratio = self.ratio or 1.0
        return round(raw * ratio) if ratio > 1.0 else raw

    def _raw(self, request: ChatRequest) -> int:
        """:func:`estimate_request`, counting only what was added when ``request`` extends the last one asked."""
        last = self._last
        if last is not None and _extends(request, last[0]):
            raw = last[1] + messages_tokens(request.messages[len(last[0].messages):])
        else:
            raw = estimate_request(request)
        self._last = (request, raw)
        return raw

    def sent(self, estimate: int) -> None:
        """A request with this (calibrated) estimate went out; the server's count comes with its usage."""
        self.last_estimate = estimate
        self.last_reported = None

    def observe(self, request: ChatRequest, prompt_tokens: int) -> None:
        """The server counted ``prompt_tokens`` for ``request`` (its usage, or an overflow answer)."""
        if prompt_tokens <= 0:
            return
        self.raw = self._raw(request)
        self.counted = request
        self.reported = prompt_tokens
        self.last_reported = prompt_tokens

    def reset(self) -> None:
        """Another model: its tokenizer counts differently."""
        self.counted = None
        self._last = None
        self.reported = self.raw = 0
        self.last_estimate = self.last_reported = None


__all__ = ["Calibration", "estimate_request", "message_tokens", "messages_tokens", "text_tokens", "tools_tokens"]
