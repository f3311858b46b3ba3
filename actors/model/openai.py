"""The OpenAI-compatible model: ``POST {base_url}/chat/completions`` with ``stream: true``.

One client code path for OpenAI, vLLM, Ollama, llama.cpp, LiteLLM and the
loopback fake (:mod:`transport.fake_openai`). The stream is parsed by our own
accumulator because servers disagree on the details of tool-call deltas:

- tool-call fragments are keyed by ``index`` when present; a new ``id`` at a
  used index opens a new call (parallel calls all sent at index 0); a fragment
  without ``index`` opens a new call when it carries an ``id`` that differs from
  the last call's, and otherwise continues the last call;
- ``arguments`` may be string fragments (joined, parsed once at the end; a
  result that is not JSON is passed on as the raw string) or a JSON object;
- whether the model asked for tools is decided by what was accumulated, not by
  ``finish_reason`` (several servers send ``"stop"`` for tool calls): with calls,
  a missing or ``"stop"`` finish reason is reported as ``"tool_calls"``;
- the stream ends at ``data: [DONE]`` or at a clean EOF after at least one chunk
  (servers that forget ``[DONE]`` are common, and a clean EOF is not a cut: a cut
  shows up as an incomplete chunked body, i.e. ``stream_interrupted``). A clean
  EOF before any chunk is ``malformed_stream``;
- each ``data:`` line is one JSON chunk; comment lines (``:``), ``event:``,
  ``id:``, ``retry:`` and blank lines are ignored. A chunk carrying ``error`` is
  a ``server_error``.

Tool calls and usage (the last one reported, with ``prompt_tokens_details.cached_tokens``
when the server gives it) are yielded after the stream ends, then :class:`Finish`.

A request that offers tools says ``tool_choice: "auto"``. With ``text_tool_calls``
(settings ``model.textToolCalls``: ``"hermes"`` or ``"json"``), calls the model
wrote as text are taken out of the content and yielded with the others
(:mod:`.text_tools`); text that may still be a call is held back until decided.

Error codes — before the commit point (``committed=False``): ``connection_error``,
``timeout``, ``rate_limited`` (with ``retry_after``), ``http_<status>`` for other
non-2xx statuses below 500, ``server_error`` (5xx), ``context_overflow`` (a
:class:`~.overflow.ContextOverflow`: the server's answer that the request is longer than its
context, in OpenAI's, vLLM's or llama-server's words). After it (``committed=True``):
``timeout``, ``stream_interrupted``, ``malformed_stream`` (:class:`~.overflow.EmptyResponse` when
no chunk came at all), ``server_error``, ``context_overflow`` (an ``error`` first chunk saying so),
``response_too_large``. Either side, ``timeout`` also when the call ran past ``request_timeout``
(``model.requestTimeout``), the most one call may take in all, retries and the stream included
(:meth:`OpenAIModel.stream`); its message names the bound.

One response is bounded (``docs/reference/limits.md``): at most :data:`MAX_RESPONSE_CHARS` characters
of text, thought and tool-call arguments together, :data:`MAX_RESPONSE_TOOL_CALLS` tool calls, SSE
lines of eight bytes a character of that, :data:`MAX_RESPONSE_BYTES` bytes of stream in all (chunks
that carry no text still cost their parse), :data:`MAX_CHUNK_VALUES` JSON values in one chunk (told by
its separators before it is parsed: a line of ``{},{},...`` would take thirty times its size as Python
objects) and :data:`MAX_CHOICES` choices in one chunk; past any of them the stream is closed and the
call ends with ``response_too_large`` naming the bound.
"""

from __future__ import annotations

import email.utils
import logging
import os
import secrets
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import httpx
import orjson
import trio

from .base import (
    ChatMessage,
    ChatRequest,
    ContextWindowExceeded,
    Finish,
    ModelError,
    StreamItem,
    TextDelta,
    ThoughtDelta,
    ToolSpec,
    Usage,
)
from ..wire.events import kept_json
from .tool_calls import ToolCallAccumulator, encode_json
from .encoded import messages_json, messages_json_between
from .estimate import estimate_request
from .http import Response, Target, Transport, prepare
from .sse import Body, BodyTooLong, LineTooLong, Proxied as _Proxied, data_payloads as _data_payloads
from .overflow import EmptyResponse, overflow_from_chunk, overflow_from_response
from .text_tools import STYLES as TEXT_TOOL_STYLES
from .text_tools import TextToolCalls
from .. import checked
from ..checked import Count, HttpUrl, PositiveInt, PositiveNumber

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
MAX_BACKOFF = 30.0
DEFAULT_REQUEST_TIMEOUT = 600.0  # seconds one call may take in all (model.requestTimeout), as OpenAI's own client
# One response's text, thought and tool-call arguments together, in characters (about a million tokens, far past
# any model's answer): a server looping without end, or a hostile one, must not fill the daemon's memory.
MAX_RESPONSE_CHARS = 4 * 2**20
MAX_ERROR_BODY = 64 * 1024  # bytes of an error response read to quote it (it is cut to 300 characters)
MAX_REPORTED_TOKENS = 2**40  # a token count at or past this, from one call, is taken as none
MAX_RESPONSE_TOOL_CALLS = 128  # calls in one response (loop protection ends a turn at 64 by default)
# One response's bytes as read, every line whatever it carries: chunks with no text (a role, an empty delta) or
# comments count against nothing else, and a server sending them without end kept a turn parsing. A chunk is
# 150 to 400 bytes a token, so this is some 200,000 tokens, past any model's longest answer.
MAX_RESPONSE_BYTES = 64 * 2**20
# JSON values in one stream chunk: orjson makes an object of each (some 90 bytes for the three of "{},"), so a
# line within its byte bound could take a gigabyte. A chunk is a few dozen; a whole answer in one, far below this.
MAX_CHUNK_VALUES = 2**20
MAX_CHOICES = 8  # choices read of one chunk: we ask for one (n is not sent), and each is a pass of the loop
CONVERSATION_MEMO = "openai_conversation"  # the message memo key of the kept messages array (actors.model.encoded)
TextToolStyle = Literal[TEXT_TOOL_STYLES]  # type: ignore[valid-type]


@attrs.frozen(kw_only=True)
class OpenAIConfig:
    """Where and how to reach an OpenAI-compatible server. The key is never shown in reprs."""

    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = attrs.field(default=None, repr=False)
    model: str = DEFAULT_MODEL
    connect_timeout: float = 10.0
    read_timeout: float = 120.0  # the longest silence tolerated between two reads
    # The longest one call may take in all, from sending the request (retries included) to the stream's end: a
    # server that sends a byte just within the read timeout, again and again, must not hold a turn forever.
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    context_window: int | None = None
    max_tokens: int | None = None
    max_retries: int = 0  # retries before the commit point (429, 5xx, connection errors)
    # Tool calls the model writes as text, for servers that don't parse them: "off", "hermes" or "json"
    # (actors.model.text_tools).
    text_tool_calls: str = attrs.field(default="off", validator=attrs.validators.in_(TEXT_TOOL_STYLES))
    # Whether the model reads images: prompts' image blocks are then sent as image_url parts (data URLs);
    # off, such prompts are refused at admission. Many OpenAI-compatible servers serve text-only models.
    supports_images: bool = False
    # Not settings: the bounds on one response (MAX_RESPONSE_CHARS, MAX_RESPONSE_BYTES), smaller in tests.
    max_response_chars: int = MAX_RESPONSE_CHARS
    max_response_bytes: int = MAX_RESPONSE_BYTES

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> OpenAIConfig:
        """Read ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and ``OPENAI_MODEL``; overrides that are not None win."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            "base_url": env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
            "api_key": env.get("OPENAI_API_KEY") or None,
            "model": env.get("OPENAI_MODEL") or DEFAULT_MODEL,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    @classmethod
    def from_sources(
        cls, environ: Mapping[str, str] | None, settings: Mapping[str, Any], **flags: Any
    ) -> OpenAIConfig:
        """Environment, then the settings file's ``model`` object, then command-line flags.

        Raises a ``ValueError`` (:class:`actors.checked.CheckError`) naming the settings key (``model.<key>``)
        of a value of the wrong type; an ``apiKey`` is never shown.
        """
        given = checked.structure(dict(settings), ModelSettings, "model")
        from_settings = {f.name: getattr(given, f.name) for f in attrs.fields(ModelSettings)
                         if f.name != "provider" and getattr(given, f.name) is not None}
        return cls.from_env(environ, **{**from_settings, **{k: v for k, v in flags.items() if v is not None}})


@checked.form("The primary model. The members other than provider configure the openai provider. Other members "
              "are ignored with a warning (a misspelt provider would otherwise silently run the demo model).")
@attrs.frozen(kw_only=True)
class ModelSettings:
    """The settings file's ``model`` object, as written; its fields other than ``provider`` are
    :class:`OpenAIConfig`'s of the same name (None: not given)."""

    provider: Literal["scripted", "openai"] = checked.field(
        "scripted", "scripted: the embedded demo model; openai: an OpenAI-compatible chat-completions server. "
                    "--model overrides it.")
    base_url: HttpUrl | None = checked.field(
        None, "The endpoint, an http:// or https:// URL with a host (e.g. http://127.0.0.1:8080/v1). It wins over "
              "$OPENAI_BASE_URL; --openai-base-url wins over both. The openai provider needs one of the three.",
        secret=True)  # a URL may carry credentials (user:password@host)
    api_key: str | None = checked.field(
        None, "The API key; it wins over $OPENAI_API_KEY, --openai-api-key over both. The settings file is hidden "
              "from sandboxed commands; prefer the environment.", secret=True)
    model: str | None = checked.field(
        None, "The model name sent, as the server serves it. It wins over $OPENAI_MODEL; --openai-model wins over "
              "both. The openai provider needs one of the three.", key="name")
    connect_timeout: PositiveNumber | None = checked.field(None, "Seconds (--model-connect-timeout; default 10).")
    read_timeout: PositiveNumber | None = checked.field(
        None, "The longest silence between two reads of a stream, in seconds (--model-read-timeout; default 120).")
    request_timeout: PositiveNumber | None = checked.field(
        None, "The longest one model call may take in all, in seconds, from sending the request (retries included) "
              "to the stream's end; past it the call ends with a timeout error naming this setting "
              "(--model-request-timeout; default 600).")
    context_window: PositiveInt | None = checked.field(
        None, "Tokens; a request that would not fit is compacted or refused before it is sent (--context-window).")
    max_tokens: PositiveInt | None = checked.field(None, "max_tokens of each call (--max-tokens).")
    max_retries: Count | None = checked.field(
        None, "Retries of 429, 5xx and connection errors before a stream is returned (--model-retries; default 0).")
    text_tool_calls: TextToolStyle | None = checked.field(
        None, "Read tool calls the model writes as text, for servers without a tool-call parser (--text-tool-calls; "
              "default off).")
    supports_images: bool | None = checked.field(
        None, "The model reads images: prompts' image blocks are sent as image_url parts; off (the default), they "
              "are refused.")


# ----------------------------------------------------------------- request


def _arguments_json(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    try:
        return orjson.dumps(arguments).decode()
    except orjson.JSONEncodeError:
        # Deeper than orjson writes (a call kept from elsewhere: a provider bounds its own, see .tool_calls):
        # one such call in the history must not fail every later request of the session.
        return encode_json(arguments)


def _encode_message(m: ChatMessage) -> bytes:
    return orjson.dumps(message_to_wire(m))


def tool_fragment(t: ToolSpec) -> orjson.Fragment:
    """A tool schema in the chat-completions shape, encoded once per spec."""
    fragment = t.memo.get("openai")
    if fragment is None:
        fragment = t.memo["openai"] = orjson.Fragment(kept_json(
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
    return fragment


def message_to_wire(m: ChatMessage) -> dict[str, Any]:
    """One :class:`ChatMessage` in the chat-completions shape."""
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.images and m.role == "user":
        out["content"] = [{"type": "text", "text": m.content},
                          *({"type": "image_url", "image_url": {"url": i.data_url()}} for i in m.images)]
    if m.role == "assistant" and m.tool_calls:
        out["content"] = m.content or None
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments_json(c.arguments)}}
            for c in m.tool_calls
        ]
    elif m.name and m.role != "assistant":
        out["name"] = m.name
    return out


# ----------------------------------------------------------------- stream parsing


def _token_count(value: Any) -> int | None:
    """A token count as the server reported it, or None: not a number, negative, NaN, or past
    :data:`MAX_REPORTED_TOKENS` (a figure the journal and the metrics could not hold is no count)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if 0 <= value < MAX_REPORTED_TOKENS else None


def _usage(raw: dict[str, Any]) -> Usage:
    def num(key: str) -> int:
        return _token_count(raw.get(key)) or 0

    prompt, completion = num("prompt_tokens"), num("completion_tokens")
    # OpenAI (and vLLM with prefix caching) report cache hits inside the prompt count's details;
    # a server that says nothing of caching gets None, not a claimed 0.
    details = raw.get("prompt_tokens_details")
    cached = _token_count(details.get("cached_tokens")) if isinstance(details, dict) else None
    return Usage(prompt, completion, num("total_tokens") or prompt + completion, cached)


async def _error_body(response: Body) -> bytes:
    """At most :data:`MAX_ERROR_BODY` bytes of an error response, to quote it; the rest is not read (the
    connection is given up by the caller's ``aclose``)."""
    parts: list[bytes] = []
    size = 0
    while size < MAX_ERROR_BODY and (data := await response.receive()):
        parts.append(data)
        size += len(data)
    return b"".join(parts)[:MAX_ERROR_BODY]


def _proxied(url: str) -> bool:
    """Whether the environment names a proxy for ``url`` (``HTTPS_PROXY``, ``ALL_PROXY``, not ``NO_PROXY``)."""
    proxies = urllib.request.getproxies_environment()
    parts = urllib.parse.urlsplit(url)
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(parts.hostname or "", proxies)



def _content_parts(parts: list[dict[str, Any]]) -> tuple[str, str]:
    """``(text, thought)`` of content given as parts: ``{"type": "text", "text"}``, and ``{"type": "thinking",
    "thinking": [parts] | str}`` as a thought; other parts (an image, a reference) are not text and say nothing."""
    text: list[str] = []
    thought: list[str] = []
    for part in parts:
        if part.get("type") == "text" and isinstance(part.get("text"), str):
            text.append(part["text"])
        elif part.get("type") == "thinking":
            inner = part.get("thinking")
            if isinstance(inner, str):
                thought.append(inner)
            elif isinstance(inner, list):
                thought += [p["text"] for p in inner if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "".join(text), "".join(thought)


def _fragment_problem(fragment: Any) -> bool:
    """Whether a tool-call fragment is not of the wire's shape (the parts the accumulator reads)."""
    if fragment.__class__ is not dict:
        return True
    index, call_id, function = fragment.get("index"), fragment.get("id"), fragment.get("function")
    if (index is not None and index.__class__ is not int) or (call_id is not None and call_id.__class__ is not str):
        return True
    if function is None:
        return False
    name = function.get("name") if function.__class__ is dict else 0
    return name is not None and name.__class__ is not str


def _chunk_problem(chunk: dict[str, Any]) -> str | None:
    """What in a stream chunk is not of the shape the OpenAI wire gives it (the parts this provider reads), or
    None. A string where a list belongs would be read a character at a time; a number as text would end the
    turn with a TypeError far from here."""
    choices = chunk.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list):
        return "choices is not an array"
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            return f"choices[{i}] is not an object"
        delta = choice.get("delta")
        if delta is not None and not isinstance(delta, dict):
            return f"choices[{i}].delta is not an object"
        finish = choice.get("finish_reason")
        if finish is not None and not isinstance(finish, str):
            return f"choices[{i}].finish_reason is not a string"
        for key in ("content", "reasoning_content", "reasoning"):
            value = (delta or {}).get(key)
            if key == "content" and isinstance(value, list):
                if not all(isinstance(part, dict) for part in value):
                    return f"choices[{i}].delta.content is not a string or an array of objects"
            elif value is not None and not isinstance(value, str):
                return f"choices[{i}].delta.{key} is not a string"
        calls = (delta or {}).get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            return f"choices[{i}].delta.tool_calls is not an array"
        for j, call in enumerate(calls or ()):
            where = f"choices[{i}].delta.tool_calls[{j}]"
            if not isinstance(call, dict):
                return f"{where} is not an object"
            index, call_id, function = call.get("index"), call.get("id"), call.get("function")
            if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
                return f"{where}.index is not an integer"
            if call_id is not None and not isinstance(call_id, str):
                return f"{where}.id is not a string"
            if function is not None and not isinstance(function, dict):
                return f"{where}.function is not an object"
            if function and function.get("name") is not None and not isinstance(function["name"], str):
                return f"{where}.function.name is not a string"
    return None


def _most_values(payload: bytes) -> int:
    """At most how many values (keys among them) parsing ``payload`` makes: each but the first follows a ``[``,
    ``{``, ``,`` or ``:``. Those in strings count too, so this can only overestimate; four passes at C speed."""
    return 1 + sum(map(payload.count, (b",", b":", b"[", b"{")))


def _shown(payload: bytes) -> str:
    return repr(payload[:120].decode("utf-8", "replace"))


# ----------------------------------------------------------------- errors


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_detail(body: bytes) -> str:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:300]
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:300]
    if isinstance(error, str):
        return error[:300]
    return body.decode("utf-8", "replace").strip()[:300]


def _status_code(status: int) -> str:
    if status == 429:
        return "rate_limited"
    if status >= 500:
        return "server_error"
    return f"http_{status}"


# ----------------------------------------------------------------- the model


class OpenAIModel:
    """A :class:`~actors.model.base.ModelProvider` for OpenAI-compatible chat completions.

    Pass ``client`` to share an :class:`httpx.AsyncClient` (its timeouts are
    overridden per request by the config's); otherwise one is created and
    closed by :meth:`aclose`.

    Without a shared client, and with no proxy named in the environment for the
    base URL, requests go straight to our own :class:`~.http.Transport` (HTTP/1.1
    over Trio sockets, with keep-alive), with no httpx object per call: the
    request head is encoded once (:func:`~.http.prepare`, on the first call, from
    that call's headers: they depend on the config alone) and the body's bytes
    come from :meth:`~.http.Response.receive` straight to the SSE splitter. The
    client's URL and header merging, cookie jar, auth and redirect layers, then
    httpx's request and response models and body generators, did nothing for
    this one POST but cost a third of a call's CPU. With a proxy in the
    environment the full client (and httpcore) handles it, as before, its
    response read through :class:`_Proxied`.
    """

    name = "openai"

    def __init__(self, config: OpenAIConfig, *, client: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._owns_client = client is None
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._timeout = httpx.Timeout(
            connect=config.connect_timeout, read=config.read_timeout,
            write=config.read_timeout, pool=config.connect_timeout,
        )
        direct = client is None and not _proxied(self._url)
        self._transport = Transport() if direct else None
        self._client = client if client is not None else None if direct else httpx.AsyncClient()
        self._url_parsed = httpx.URL(self._url)  # a bad base URL fails here, as it always did
        self._target: Target | None = None  # the direct path's request head, encoded on first use

    @property
    def model(self) -> str:
        """The model requests name unless a session overrides it (``--openai-model``)."""
        return self.config.model

    @property
    def supports_images(self) -> bool:
        """Whether prompts may carry images (``model.supportsImages``)."""
        return self.config.supports_images

    def __repr__(self) -> str:
        return f"OpenAIModel(url={self._url!r}, model={self.config.model!r})"

    @property
    def context_window(self) -> int | None:
        """The configured window; the session compacts history before a request would exceed it."""
        return self.config.context_window

    @property
    def max_tokens(self) -> int | None:
        """The configured answer budget; the session counts it into what a request needs."""
        return self.config.max_tokens

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()
        elif self._owns_client and self._client is not None:
            await self._client.aclose()

    def _scrub(self, text: str) -> str:
        key = self.config.api_key
        return text.replace(key, "***") if key else text

    def _error(self, code: str, message: str, *, committed: bool, retry_after: float | None = None) -> ModelError:
        return ModelError(code, self._scrub(message), committed=committed, retry_after=retry_after)

    def request_body(self, request: ChatRequest) -> dict[str, Any]:
        """The JSON body for ``request``, its messages and tools as fragments encoded before
        (``orjson.dumps`` splices them); raises :class:`ContextWindowExceeded` if it cannot fit."""
        model, rest = self._fields(request)
        # The history as encoded for the last request, extended by what is new (actors.model.encoded).
        return {"model": model,
                "messages": orjson.Fragment(messages_json(request.messages, _encode_message, CONVERSATION_MEMO)),
                **rest}

    def request_content(self, request: ChatRequest) -> bytes:
        """``orjson.dumps(self.request_body(request))``, byte for byte, with the kept messages array copied
        once, straight into the body (see :func:`~actors.model.encoded.messages_json_between`)."""
        model, rest = self._fields(request)
        return messages_json_between(b'{"model":' + orjson.dumps(model) + b',"messages":', request.messages,
                                     _encode_message, b"," + orjson.dumps(rest)[1:], CONVERSATION_MEMO)

    def _fields(self, request: ChatRequest) -> tuple[str, dict[str, Any]]:
        """The body's model, and its fields after the messages; :class:`ContextWindowExceeded` if it cannot fit."""
        max_tokens = request.max_tokens if request.max_tokens is not None else self.config.max_tokens
        window = self.config.context_window
        if window is not None:
            # The caller's calibrated estimate when it gives one, so both judge a request alike.
            prompt = request.estimated_tokens if request.estimated_tokens is not None else estimate_request(request)
            needed = prompt + (max_tokens or 0)
            if needed > window:
                raise ContextWindowExceeded(needed, window)
        body: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
        if request.tools:
            body["tools"] = [tool_fragment(t) for t in request.tools]
            # Said explicitly: some servers (llama-cpp-python's function-calling formats) drop the tools without it.
            body["tool_choice"] = "auto"
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return request.model or self.config.model, body

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[StreamItem]]:
        """Send ``request``; entering returns once a 2xx status and headers are read.

        The whole call — sending (retries and their waits included), the head, every read of the stream —
        runs within ``request_timeout`` (``model.requestTimeout``): one deadline, kept by one cancel scope
        round the caller's reading too (it only takes the items in), so a server that sends a byte just
        within the read timeout, again and again, cannot hold the call open. Past it the call ends with a
        ``timeout`` :class:`ModelError` naming the bound (``committed`` once the stream was returned).
        """
        content = self.request_content(request)
        committed = False
        with trio.CancelScope(deadline=trio.current_time() + self.config.request_timeout) as bound:
            response = await self._open(content)
            committed = True
            items = self._items(response, self._text_tool_calls(request))
            try:
                yield items
            finally:
                if items.ag_frame is None and type(response) is Response:  # type: ignore[attr-defined]
                    # Finished (read to its end, the usual case, or ended by an error): closing awaits nothing
                    # (see Response.aclose), so no shield to enter and leave.
                    await response.aclose()
                else:
                    with trio.CancelScope(shield=True):
                        await items.aclose()
                        await response.aclose()
        if bound.cancelled_caught:
            raise self._error("timeout", f"the model call ran past {self.config.request_timeout:g} s, the most "
                              f"one call may take (model.requestTimeout), so it was ended there "
                              f"({'mid-stream' if committed else 'before a response'} from {self._url})",
                              committed=committed)

    async def _open(self, content: bytes) -> Body:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        attempt = 0
        while True:
            try:
                return await self._attempt(content, headers)
            except ModelError as exc:
                retryable = exc.code in ("rate_limited", "server_error", "connection_error")
                if not retryable or attempt >= self.config.max_retries:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else 0.5 * 2**attempt
                delay = min(delay, MAX_BACKOFF)
                attempt += 1
                log.warning("openai: %s; retry %d/%d in %.1fs", exc.code, attempt, self.config.max_retries, delay)
                await trio.sleep(delay)

    async def _attempt(self, content: bytes, headers: dict[str, str]) -> Body:
        log.debug("openai: POST %s model=%s", self._url, self.config.model)
        try:
            response = await self._send(content, headers)
        except httpx.TimeoutException as exc:
            raise self._error("timeout", f"no response from {self._url}: {type(exc).__name__}",
                              committed=False) from None
        except httpx.HTTPError as exc:
            raise self._error("connection_error", f"cannot reach {self._url}: {type(exc).__name__}: {exc}",
                              committed=False) from None
        if response.is_success:
            return response
        try:
            body = await _error_body(response)
        except httpx.HTTPError:
            body = b""
        finally:
            await response.aclose()
        status = response.status_code
        retry_after = _retry_after(response.headers.get("retry-after"))
        detail = _error_detail(body) or response.reason_phrase
        message = self._scrub(f"HTTP {status} from {self._url}: {detail}")
        overflow = overflow_from_response(status, body, message)
        if overflow is not None:
            raise overflow
        raise self._error(_status_code(status), message, committed=False, retry_after=retry_after)

    async def _send(self, content: bytes, headers: dict[str, str]) -> Body:
        if self._transport is None:
            assert self._client is not None
            # As the direct path: nothing compressed is asked for (what comes compressed all the same is
            # decoded by _Proxied within its bound).
            request = self._client.build_request("POST", self._url, content=content,
                                                 headers={"Accept-Encoding": "identity", **headers},
                                                 timeout=self._timeout)
            return _Proxied(await self._client.send(request, stream=True))
        target = self._target
        if target is None:  # the same headers on every call: encoded and validated once
            target = self._target = prepare("POST", self._url_parsed, headers)
        config = self.config
        return await self._transport.send(target, content, connect=config.connect_timeout,
                                          write=config.read_timeout, read=config.read_timeout)

    def _text_tool_calls(self, request: ChatRequest) -> TextToolCalls | None:
        """The text tool-call parser for this request, when the setting asks for one and tools are offered."""
        style = self.config.text_tool_calls
        if style == "off" or not request.tools:
            return None
        # Ids unique across a turn's streams: the turn loop refuses a repeated call id.
        return TextToolCalls(style, [t.name for t in request.tools], lambda: f"call_text_{secrets.token_hex(6)}")

    def _malformed(self, chunk: dict[str, Any], payload: bytes) -> ModelError:
        problem = _chunk_problem(chunk) or "a stream chunk of the wrong shape"
        return self._error("malformed_stream", f"{problem}: {_shown(payload)}", committed=True)

    def _too_large(self, what: str) -> ModelError:
        return self._error("response_too_large", f"the model's response ran past {what}, the most one response "
                           "may hold, so it was ended there", committed=True)

    async def _items(self, response: Body, text_calls: TextToolCalls | None = None) -> AsyncIterator[StreamItem]:
        calls = ToolCallAccumulator()
        usage: Usage | None = None
        finish: str | None = None
        chunks = 0
        said = False  # any content (text, thought, tool call) yet
        budget = self.config.max_response_chars
        kept = 0  # characters of text, thought and tool-call arguments, against the budget
        over_budget = f"{budget:,} characters of text, thought and tool-call arguments"
        # A line may carry a whole answer, escaped (\uXXXX is 6 bytes a character).
        lines = _data_payloads(response, max(64 * 1024, 8 * budget), self.config.max_response_bytes)
        try:
            async for payload in lines:
                if payload == b"[DONE]":
                    # Let the body end (it does right away) so the connection can be reused.
                    if response.complete:  # it has: the rest is what the last read left
                        async for _ in lines:
                            pass
                    else:
                        with trio.move_on_after(1.0):
                            async for _ in lines:
                                pass
                    break
                # A line can hold at most as many values as bytes: only a long one is counted.
                if len(payload) > MAX_CHUNK_VALUES and (values := _most_values(payload)) > MAX_CHUNK_VALUES:
                    raise self._error("response_too_large", f"the model server sent a stream chunk of up to "
                                      f"{values:,} JSON values (at most {MAX_CHUNK_VALUES:,} are parsed), so the "
                                      "response was ended there", committed=True)
                try:
                    chunk = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    raise self._error("malformed_stream", f"a stream chunk is not JSON: {_shown(payload)}",
                                      committed=True) from None
                if not isinstance(chunk, dict):
                    raise self._error("malformed_stream", f"a stream chunk is not an object: {_shown(payload)}",
                                      committed=True)
                chunks += 1
                if chunk.get("error"):
                    detail = _error_detail(orjson.dumps({"error": chunk["error"]}))
                    # Before any content it can only be about the request: an overflow, when it says so.
                    overflow = None if said else overflow_from_chunk(chunk["error"], self._scrub(
                        f"the server reported a context overflow: {detail}"))
                    if overflow is not None:
                        raise overflow
                    raise self._error("server_error", f"the server reported an error mid-stream: {detail}",
                                      committed=True)
                choices = chunk.get("choices") or ()
                if choices and choices.__class__ is not list:
                    raise self._malformed(chunk, payload)
                if len(choices) > MAX_CHOICES:
                    raise self._error("response_too_large", f"the model server sent a chunk with {len(choices):,} "
                                      f"choices (at most {MAX_CHOICES} are read), so the response was ended there",
                                      committed=True)
                # The shapes are checked where the values are taken, cheaply: a hostile or broken server's chunk
                # ends the call malformed_stream naming the part, never an internal error far from here.
                for choice in choices:
                    delta = choice.get("delta") or {} if choice.__class__ is dict else None
                    if delta.__class__ is not dict:
                        raise self._malformed(chunk, payload)
                    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                    text = delta.get("content")
                    if text is not None and text.__class__ is not str:
                        if text.__class__ is not list or _chunk_problem(chunk) is not None:
                            raise self._malformed(chunk, payload)
                        text, thought = _content_parts(text)  # content as parts (Mistral's reasoning models)
                        reasoning = (reasoning or "") + thought
                    if reasoning is not None and reasoning.__class__ is not str:
                        raise self._malformed(chunk, payload)
                    # Counted before anything of the chunk is passed on: past the budget nothing more is kept.
                    kept += (len(reasoning) if isinstance(reasoning, str) else 0) + (
                        len(text) if isinstance(text, str) else 0)
                    if kept > budget:
                        raise self._too_large(over_budget)
                    if reasoning and isinstance(reasoning, str):
                        yield ThoughtDelta(reasoning)
                    if text and text_calls is not None and isinstance(text, str):
                        text = text_calls.feed(text)  # what may be a call is held back until decided
                    if text:
                        yield TextDelta(text)
                    fragments = delta.get("tool_calls") or ()
                    if fragments and fragments.__class__ is not list:
                        raise self._malformed(chunk, payload)
                    for fragment in fragments:
                        if _fragment_problem(fragment):
                            raise self._malformed(chunk, payload)
                        kept += calls.add(fragment)
                        if kept > budget:
                            raise self._too_large(over_budget)
                        if len(calls.slots) > MAX_RESPONSE_TOOL_CALLS:
                            raise self._too_large(f"{MAX_RESPONSE_TOOL_CALLS} tool calls")
                    said = said or bool(reasoning or delta.get("content") or delta.get("tool_calls"))
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                        if finish.__class__ is not str:
                            raise self._malformed(chunk, payload)
                if chunk.get("usage") and chunk["usage"].__class__ is dict:  # anything else says nothing
                    usage = _usage(chunk["usage"])
            else:
                if not chunks:
                    kind = response.headers.get("content-type", "?")
                    raise EmptyResponse(f"the response ended before any chunk ({kind})")
        except httpx.TimeoutException as exc:
            raise self._error("timeout", f"the stream stalled: {type(exc).__name__}", committed=True) from None
        except httpx.DecodingError as exc:
            raise self._error("malformed_stream", f"cannot decode the stream: {exc}", committed=True) from None
        except httpx.HTTPError as exc:
            raise self._error("stream_interrupted", f"the stream was cut: {type(exc).__name__}: {exc}",
                              committed=True) from None
        except LineTooLong as exc:
            raise self._too_large(f"{exc.limit:,} bytes in one stream line") from None
        except BodyTooLong as exc:
            raise self._too_large(f"{exc.limit:,} bytes of event stream") from None
        accumulated = calls.calls()
        if text_calls is not None:
            rest = text_calls.finish()
            if rest:
                yield TextDelta(rest)
            accumulated += text_calls.calls
        for call in accumulated:
            yield call
        if usage is not None:
            yield usage
        if accumulated and finish in (None, "stop"):
            finish = "tool_calls"
        yield Finish(finish)
