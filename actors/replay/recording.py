"""The recording format: one JSON object a line, versioned (``docs/how-to/record-and-replay.md``).

A recording is everything that entered one session from outside, with when, plus what the
session published, so :mod:`.playback` can run the real session again on virtual time and
compare. The first line is a :class:`Header`; every other line an :class:`Entry`::

    {"format": "trellis-recording", "version": 2, "sessionId": "...", "cwd": "...", ...}
    {"n": 1, "t": 0.0, "kind": "action", "data": {"do": "prompt", "args": {...}, "result": {...}}}
    {"n": 2, "t": 0.0012, "kind": "event", "data": {"id": 1, "type": "session_update", ...}}
    {"n": 3, "t": 0.0031, "kind": "model", "data": {"purpose": "primary", "request": {...}, "delay": 0.2, ...}}

``t`` is seconds since the session started (the recorder's clock: Trio's, real or virtual).
Entry kinds (their ``data``):

- ``action`` — a client call on the session's handle: ``do`` (:data:`ACTIONS`), ``args``,
  ``result`` and ``after`` (how many events had been published when the call began);
- ``model`` — one model call as streamed: ``purpose``, ``model``, ``request`` (what the session sent:
  :func:`request_record`, version 2), ``delay`` (seconds until the
  stream was returned), ``items`` (``{dt, text | thought | tool_call | usage | finish}``, ``dt`` seconds
  since the previous item or the stream's return), and ``error`` ``{code, message, committed, retryAfter,
  context?}`` when it failed (``committed: false``: refused before a stream), ``cancelled: true`` when
  the session cancelled it, ``end`` (seconds until it ended);
- ``tool`` — a tool's execution: ``toolCallId``, ``name``, ``arguments``, ``duration``, ``result``
  ``{content, display, error, locations, acpContent}`` and ``asks`` (each permission the tool asked
  for itself: ``{dt, request, answer | raised}``), ``updates`` (``{dt, update}``: progress it published)
  and ``events`` (``[before, after]``: how many events the session had published when it began and ended);
- ``hook`` — a hook command's run: ``command``, ``event``, ``duration``, ``outcome``
  (``[exit, stdout, stderr]`` or a failure text);
- ``background`` — a background task's notification to the model (a shell's, a monitor's, a subagent
  run's end): ``taskId``, ``kind``, ``state``, ``exitCode``, ``text``, ``merge``;
- ``event`` — a published event: ``id``, ``type``, ``promptId``, ``data`` (as published; a replay drops
  the wall-clock fields when it compares);
- ``restored`` — the session was restored from the state directory (a daemon's restart, version 2): what it
  was restored from — ``record``, ``journal``, ``transcript``, ``replay`` (the stored event segments) —
  its new event bus ``epoch``, its ``cwd`` and ``after`` (events recorded before it). A restored session's
  recording goes on in the same file (the newest of that session in the directory), its ``t`` by the wall
  clock since the header's ``startedAt``; how the daemon before ended shows in the events before it
  (``session_closed`` ``closed`` or ``daemon_shutdown``, or none: it was killed).

Version 1 (no ``request``, no ``restored``, no ``record``/``now``/``os``/``sandbox`` in the header) is
still read: its model requests are not compared.

Nothing secret is written: every string of the recorder's secrets (the settings' ``model.apiKey``,
the bearer token, the ``env`` values) is replaced with ``[redacted]`` in every line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs
import cattrs

FORMAT = "trellis-recording"
VERSION = 2
READABLE = (1, 2)  # the versions this module reads
REDACTED = "[redacted]"

# The settings a replay needs to run the session as it ran (none of them carries a secret).
REPLAYED_SETTINGS = (
    "todo_stop_guard", "followup_suggestions", "disable_all_hooks", "safe_mode", "bare", "approval_mode",
    "hooks", "stop_hook_block_cap", "max_tool_calls_per_turn", "max_repeated_failures", "system_prompt",
    "append_system_prompt", "web_fetch", "paths_outside_cwd",
)
WALL_CLOCK_KEYS = frozenset({"serverTimestamp", "timestamp", "createdAt", "updatedAt", "startedAt", "endedAt",
                             "durationMs", "elapsedMs", "latencyMs", "firstTokenMs", "at", "nextFireAt"})


@attrs.frozen(kw_only=True)
class Header:
    """The first line: what the session was, and the settings it ran with."""

    format: str = FORMAT
    version: int = VERSION
    sessionId: str
    cwd: str
    stateDir: str | None = None
    epoch: str | None = None  # the event bus's epoch (random: replaced when events are compared)
    startedAt: str = ""  # wall-clock ISO time, for people; replays never read it
    model: str | None = None  # the provider's name
    settings: dict[str, Any] = attrs.field(factory=dict)  # REPLAYED_SETTINGS, by their actors.Settings names
    limits: dict[str, Any] = attrs.field(factory=dict)  # actors.Limits fields by name
    tools: list[str] = attrs.field(factory=list)
    # Version 2: the session record when it started (title, its own permission rules and system-prompt layers,
    # approval mode, model), the daemon's wall clock then (ISO, with its offset: the session's "today" and its
    # timers), the operating system's name and the sandbox kind, as the system prompt states them.
    record: dict[str, Any] = attrs.field(factory=dict)
    now: str | None = None
    os: str | None = None
    sandbox: str | None = None


# The client calls an ``action`` entry names (``do``), by the SessionHandle method each records.
ACTIONS = {
    "prompt": "prompt", "mid_turn": "post_mid_turn_message", "remove_mid_turn": "remove_mid_turn_message",
    "abort": "abort_prompt", "cancel": "cancel",
    "vote": "vote", "approval_mode": "set_approval_mode", "model": "set_model", "kill_task": "kill_task",
    "title": "set_title", "cwd": "change_cwd", "rewind": "rewind", "checkpoints": "checkpoints",
    "add_rule": "add_permission_rule", "remove_rule": "remove_permission_rule", "load": "load",
    "snapshot": "snapshot", "release_queue": "release_queued_prompt_wait", "guard_off": "turn_off_todo_stop_guard",
    "add_tools": "add_tools", "mcp_servers": "add_mcp_servers", "take_inbox": "take_inbox",
    "drain_source": "set_drain_source", "client_services": "set_client_services",
    "attach": "subscribe", "detach": "subscribe",
}


@attrs.frozen(kw_only=True)
class Entry:
    n: int
    t: float
    kind: str
    data: dict[str, Any]


KINDS = ("action", "model", "tool", "hook", "background", "event", "restored")
_converter = cattrs.Converter(forbid_extra_keys=False)


class RecordingError(ValueError):
    """A file that is not a recording this version reads."""


@attrs.frozen
class Recording:
    header: Header
    entries: tuple[Entry, ...]
    path: Path | None = None

    def of_kind(self, kind: str) -> list[Entry]:
        return [e for e in self.entries if e.kind == kind]


def dump_line(value: Header | Entry) -> str:
    return json.dumps(_converter.unstructure(value), sort_keys=True, ensure_ascii=False, default=_default)


def _default(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value, filter=lambda a, _: a.name != "memo")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)


def read_recording(path: str | Path) -> Recording:
    """Read and check a recording file; :class:`RecordingError` names the line of the first problem."""
    path = Path(path)
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordingError(f"{path}: cannot read ({exc})") from None
    if not lines:
        raise RecordingError(f"{path}: empty (expected a header line)")
    try:
        first = json.loads(lines[0])
        if not isinstance(first, dict) or first.get("format") != FORMAT:
            raise RecordingError(f"{path}:1: expected a {FORMAT} header")
        if first.get("version") not in READABLE:
            raise RecordingError(f"{path}:1: version {first.get('version')!r}; this reads versions "
                                 f"{', '.join(map(str, READABLE))}")
        header = _converter.structure(first, Header)
    except (ValueError, cattrs.BaseValidationError) as exc:
        raise RecordingError(f"{path}:1: not a header ({exc})") from None
    entries = []
    for i, line in enumerate(lines[1:], 2):
        try:
            entry = _converter.structure(json.loads(line), Entry)
        except (ValueError, cattrs.BaseValidationError) as exc:
            raise RecordingError(f"{path}:{i}: not an entry ({exc})") from None
        if entry.kind not in KINDS:
            raise RecordingError(f"{path}:{i}: unknown kind {entry.kind!r} (one of {KINDS})")
        entries.append(entry)
    return Recording(header, tuple(entries), path)


# ----------------------------------------------------------------- redaction


class Redactor:
    """Replaces every known secret (at least 4 characters long) in text."""

    def __init__(self, secrets: Iterable[str | None] = (), *, live: Iterable[str] | None = None) -> None:
        self.secrets: set[str] = set()
        for s in secrets:
            self.add(s)
        self.live = live  # a collection that grows as secrets become known (a process's log redactor's)

    def add(self, secret: str | None) -> None:
        if isinstance(secret, str) and len(secret) >= 4:
            self.secrets.add(secret)

    def __call__(self, text: str) -> str:
        known = self.secrets | {s for s in (self.live or ()) if isinstance(s, str) and len(s) >= 4}
        for secret in sorted(known, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, REDACTED)
            quoted = json.dumps(secret)[1:-1]  # as it appears inside a JSON string
            if quoted != secret and quoted in text:
                text = text.replace(quoted, REDACTED)
        return text


def settings_secrets(settings: Any) -> list[str]:
    """The secrets a settings object holds: ``model.apiKey`` and the values of ``env`` (when it has one)."""
    out: list[str] = []
    model = getattr(settings, "model", None) or {}
    if isinstance(model.get("apiKey"), str):
        out.append(model["apiKey"])
    env = getattr(settings, "env", None) or {}
    if isinstance(env, dict):
        out += [v for v in env.values() if isinstance(v, str)]
    for server in (getattr(settings, "mcp_servers", None) or {}).values():
        if isinstance(server, dict):
            for key in ("env", "headers"):
                values = server.get(key) or {}
                if isinstance(values, dict):
                    out += [v for v in values.values() if isinstance(v, str)]
    return out


# ----------------------------------------------------------------- normalizing events for comparison

_ID = re.compile(r"\b([a-z][a-z_]*)-([0-9a-f]{16})\b")


def wall_clock(key: str) -> bool:
    """A field that holds a time of the wall clock or a duration measured on it (``queuedAt``, ``durationMs``)."""
    return key in WALL_CLOCK_KEYS or key.endswith(("At", "Ms", "Timestamp"))


class IdNames:
    """Gives each daemon-made id (``prefix-<16 hex>``) a stable name by its order of first appearance per
    prefix (``prompt#1``), so a live run's random ids and a replay's counted ones compare."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.ids: dict[str, str] = {}
        self._counts: dict[str, int] = {}

    def name(self, match: re.Match[str]) -> str:
        raw = match.group(0)
        found = self.names.get(raw)
        if found is None:
            prefix = match.group(1)
            self._counts[prefix] = self._counts.get(prefix, 0) + 1
            found = self.names[raw] = f"{prefix}#{self._counts[prefix]}"
            self.ids[found] = raw
        return found


def normalize(value: Any, names: IdNames, paths: tuple[tuple[str, str], ...] = ()) -> Any:
    """An event's data as compared: wall-clock keys dropped, ids named, known paths replaced."""
    if isinstance(value, dict):
        return {k: normalize(v, names, paths) for k, v in value.items() if not wall_clock(k)}
    if isinstance(value, (list, tuple)):
        return [normalize(v, names, paths) for v in value]
    if isinstance(value, str):
        for path, name in paths:
            if path and path in value:
                value = value.replace(path, name)
        return _ID.sub(names.name, value)
    return value


class HexCountingIds:
    """Counted ids shaped like a live daemon's (``prefix-<16 hex>``), for replays: they normalize alike."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def new(self, prefix: str) -> str:
        n = self._counts.get(prefix, 0) + 1
        self._counts[prefix] = n
        return f"{prefix}-{n:016x}"


# ----------------------------------------------------------------- model requests (version 2)

# The handle's public calls that only read the session (nothing they do reaches its events): not recorded.
READS = ("status", "record", "pending_prompts", "turn", "permission_rules", "explain_permission",
         "has_permission_request", "permission_ended", "mid_turn_messages")


def answer_record(answer: Any) -> Any:
    """A call's answer as a recording keeps it: a plain value as it is, an attrs one (a refusal such as
    ``StorageUnavailable``) as its fields and ``type``."""
    return {"type": type(answer).__name__, **attrs.asdict(answer)} if attrs.has(type(answer)) else answer


def message_record(message: Any) -> dict[str, Any]:
    """One message of a model request as recorded and compared: what is sent (not its ``origin``); an image
    by its type, size and SHA-256 (not its data)."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["toolCalls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
    if message.tool_call_id is not None:
        out["toolCallId"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    if message.images:
        out["images"] = [{"mimeType": i.mime_type, "size": len(i.data),
                          "sha256": hashlib.sha256(i.data.encode()).hexdigest()} for i in message.images]
    return out


def request_record(request: Any) -> dict[str, Any]:
    """A model request as a replay compares it: ``messages``, ``tools`` (name, description, parameters) and the
    parameters sent (``maxTokens``, ``model``, ``purpose``). The session's token estimate is not sent: left out."""
    return {"messages": [message_record(m) for m in request.messages],
            "tools": [{"name": t.name, "description": t.description, "parameters": t.parameters}
                      for t in request.tools],
            "maxTokens": request.max_tokens, "model": request.model, "purpose": request.purpose}


class RequestEncoder:
    """Writes each request of a recording against the one before it: ``keep`` (how many messages of the
    previous request it starts with), ``messages`` (the rest), and ``tools`` only when they changed."""

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] | None = None

    def encode(self, request: Any) -> dict[str, Any]:
        full = request_record(request)
        messages, tools = full.pop("messages"), full.pop("tools")
        keep = 0
        for old, new in zip(self._messages, messages):
            if old != new:
                break
            keep += 1
        out: dict[str, Any] = {"keep": keep, "messages": messages[keep:], **full}
        if tools != self._tools:
            out["tools"] = tools
        self._messages, self._tools = messages, tools
        return out


class RequestDecoder:
    """The whole requests back from a recording's ``model`` entries, in their order."""

    def __init__(self) -> None:
        self._messages: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] = []

    def decode(self, data: dict[str, Any]) -> dict[str, Any]:
        messages = self._messages[:data.get("keep", 0)] + list(data.get("messages", []))
        tools = data["tools"] if "tools" in data else self._tools
        self._messages, self._tools = messages, tools
        return {"messages": messages, "tools": tools,
                **{k: data.get(k) for k in ("maxTokens", "model", "purpose")}}
