"""The canonical trace of a replay: what happened, at which virtual time, in which order.

A trace is a list of records (plain JSON objects), each with ``kind`` and ``t``
(virtual seconds, rounded to microseconds):

- ``action``: a timeline step as it starts (``step``, ``do``, ``args``);
- ``result``: what the step returned (``step``, ``do``, ``value``);
- ``event``: a bus event (``session`` label, ``gen`` — the session's incarnation,
  which a restart increments — ``id``, ``type``, ``promptId``, ``data``);
- ``schedule``: first, and only in a scenario with windows (``jitter.py``): the value the seed (or
  an override, listed in ``overridden``) gave each window, by key;
- ``model``: a model request (``call`` from 1, ``purpose``, ``messages`` — each with ``role``,
  ``content`` (the session's system prompt as ``[system prompt]``), tool call ids and ``origin``
  where the session set one: ``prompt``, ``mid_turn``, ``hook``, ``guard``, ``automatic``, ... —,
  the ``session`` label, ``gen`` and ``promptId`` of the work item that made it; ``refused``: the
  error code when the provider refused it before returning a stream);
- ``guard``: a session's Todo Stop Guard state changed (``session``, ``gen``, ``changed``:
  the summary fields, and ``queuedPromptPriority``, that differ from before); noticed when the
  session publishes its next event, and recorded right after that event;
- ``hook``: a scripted hook command ran (``command``, ``event``, ``n`` — its run count, ``output``);
- ``bridge``: a scripted bridge drain was asked (``asked``) or answered (``answered``);
- ``signal``: a subagent's signal call reached the in-process signal endpoint (``run`` — the run
  label its token resolved to, null when refused — ``tool``, ``arguments``, ``answer``);
- ``settled``: the moment all work had finished, after the last step;
- ``status``: each live session's final status (a stable subset; see ``STATUS_KEYS``);
- ``subagent``: each subagent run the timeline started, when the replay settled (``run`` label,
  ``status`` — the registry's answer —, ``text`` — its readable form with ``turn N of M`` —, and
  ``report``, the report file read back from disk, or null);
- ``client``: each cursor client (``connect``/``drop``, ``cursors.py``), when the replay settled:
  per connection the session ``gen``, the ``cursor`` it sent (``Last-Event-ID``; null: none), the
  bus's last id when it connected (``head``) and the frames it read, ``[id, fingerprint]`` for an
  event (:func:`fingerprint`) or ``[null, type]`` for a synthetic frame; ``live_last``: the bus's
  last id when the replay settled.

Serialised as compact JSON lines with sorted keys, after a format line; the
SHA-256 of that text is the trace's digest. Nothing wall-clock enters it: the
runner gives the daemon a virtual ``clock_ms`` and counted ids, event envelopes'
``_meta.serverTimestamp`` is not recorded, and the temporary state directory is
written as ``$STATE``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import attrs
import orjson
import trio

from ..model import ChatMessage, ChatRequest
from ..session.system_prompt import ORIGIN as SYSTEM_PROMPT_ORIGIN
from ..wire import Event

TRACE_FORMAT = 3  # 3: model records say whose call it was; messages carry their origin
# The status fields a trace records (the rest carry random epochs or say nothing stable).
STATUS_KEYS = ("state", "activeWorkState", "currentPromptId", "approvalMode", "model", "workspaceCwd", "historyLength",
               "backgroundTasks", "automaticQueue", "pendingPermissions", "subscribers", "todoStopGuard",
               "queuedPromptPriority", "pendingCount", "queuedCount", "midTurnQueued")
GUARD_SOURCE = "todo_stop_guard"
TERMINAL_TYPES = frozenset({"turn_complete", "turn_error"})
SYSTEM_PROMPT_MARK = "[system prompt]"  # what a model record shows for the session's system message
# Data keys that carry real time; dropped wherever they appear in event data.
WALL_CLOCK_KEYS = frozenset({"serverTimestamp"})


def _now() -> float:
    return round(trio.current_time(), 6)


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in WALL_CLOCK_KEYS}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    return value


def _default(value: Any) -> Any:
    if attrs.has(type(value)):
        return attrs.asdict(value, filter=lambda a, _: a.name != "memo")  # derived caches, not the value
    raise TypeError(f"{type(value).__name__} has no canonical JSON form")


def message_record(m: ChatMessage) -> dict[str, Any]:
    # The session's system prompt is recorded by its place, not its text: the text names the cwd, the
    # OS and the date, and a rewording of it is no concurrency change (its tests are elsewhere).
    content = SYSTEM_PROMPT_MARK if m.origin == SYSTEM_PROMPT_ORIGIN else m.content
    out: dict[str, Any] = {"role": m.role, "content": content}
    if m.origin is not None:  # who put it there: the invariants tell guard streams from user input by it
        out["origin"] = m.origin
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "name": c.name} for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


class Trace:
    """Records of one replay, in the order they happened."""

    def __init__(self, scrub_paths: tuple[str, ...] = ()) -> None:
        self.records: list[dict[str, Any]] = []
        self._scrub_paths = scrub_paths
        self._model_calls = 0

    # ------------------------------------------------------------- recording (inside trio.run)

    def action(self, step: int, do: str, args: dict[str, Any]) -> None:
        self.records.append({"kind": "action", "t": _now(), "step": step, "do": do, "args": args})

    def result(self, step: int, do: str, value: Any) -> None:
        self.records.append({"kind": "result", "t": _now(), "step": step, "do": do, "value": value})

    def event(self, session: str, gen: int, event: Event) -> None:
        self.records.append({"kind": "event", "t": _now(), "session": session, "gen": gen, "id": event.id,
                             "type": event.type, "promptId": event.prompt_id, "data": _scrub(event.data)})

    def model_call(self, request: ChatRequest, session: str | None = None, gen: int | None = None,
                   prompt_id: str | None = None) -> dict[str, Any]:
        """Record a request (and whose work item made it); the caller adds ``refused`` (the error
        code) if no stream comes back."""
        self._model_calls += 1
        record = {"kind": "model", "t": _now(), "call": self._model_calls, "purpose": request.purpose,
                  "session": session, "gen": gen, "promptId": prompt_id,
                  "messages": [message_record(m) for m in request.messages]}
        self.records.append(record)
        return record

    def schedule(self, values: dict[str, float], overridden: list[str]) -> None:
        """The window values this replay runs with (recorded first)."""
        record: dict[str, Any] = {"kind": "schedule", "t": 0.0, "values": dict(values)}
        if overridden:
            record["overridden"] = list(overridden)
        self.records.append(record)

    def client(self, client: str, session: str, connections: list[dict[str, Any]], live_last: int | None) -> None:
        """A cursor client's connections: each ``{gen, cursor, head, frames}`` (``cursors.py``)."""
        self.records.append({"kind": "client", "t": _now(), "client": client, "session": session,
                             "connections": connections, "live_last": live_last})

    def settled(self) -> None:
        """Every session is idle with nothing pending: the timeline's consequences are over."""
        self.records.append({"kind": "settled", "t": _now()})

    def guard(self, session: str, gen: int, changed: dict[str, Any]) -> None:
        self.records.append({"kind": "guard", "t": _now(), "session": session, "gen": gen, "changed": changed})

    def hook(self, command: str, event: str | None, n: int, output: Any) -> None:
        self.records.append({"kind": "hook", "t": _now(), "command": command, "event": event, "n": n,
                             "output": output})

    def bridge(self, session: str, what: str, n: int, **data: Any) -> None:
        self.records.append({"kind": "bridge", "t": _now(), "session": session, "what": what, "n": n, **data})

    def signal(self, run: str | None, tool: str, arguments: Any, answer: dict[str, Any]) -> None:
        self.records.append({"kind": "signal", "t": _now(), "run": run, "tool": tool, "arguments": arguments,
                             "answer": answer})

    def subagent(self, run: str, status: dict[str, Any], text: str, report: str | None) -> None:
        self.records.append({"kind": "subagent", "t": _now(), "run": run, "status": status, "text": text,
                             "report": report})

    def status(self, session: str, gen: int, status: dict[str, Any]) -> None:
        self.records.append({"kind": "status", "t": _now(), "session": session, "gen": gen,
                             "status": {k: status[k] for k in STATUS_KEYS if k in status}})

    # ------------------------------------------------------------- canonical form

    def lines(self) -> list[str]:
        """The canonical text: a format line, then one sorted-key compact JSON line per record."""
        out = [f'{{"trace_format":{TRACE_FORMAT}}}']
        for record in self.records:
            line = orjson.dumps(record, option=orjson.OPT_SORT_KEYS, default=_default).decode()
            for path in self._scrub_paths:
                line = line.replace(path, "$STATE")
            out.append(line)
        return out

    def digest(self) -> str:
        return hashlib.sha256(("\n".join(self.lines()) + "\n").encode()).hexdigest()

    # ------------------------------------------------------------- queries (for expectations and invariants)

    def of_kind(self, kind: str) -> Iterator[dict[str, Any]]:
        return (r for r in self.records if r["kind"] == kind)

    def events(self) -> list[dict[str, Any]]:
        return list(self.of_kind("event"))

    def model_calls(self) -> list[dict[str, Any]]:
        return list(self.of_kind("model"))

    def admissions(self) -> list[dict[str, Any]]:
        """Prompts admitted by timeline steps, in admission order: ``{label, promptId, session, step}``."""
        steps = {r["step"]: r for r in self.of_kind("action")}
        out = []
        for r in self.of_kind("result"):
            value = r["value"]
            if isinstance(value, dict) and "promptId" in value:
                args = steps[r["step"]]["args"]
                out.append({"label": args.get("label"), "promptId": value["promptId"],
                            "session": args.get("session"), "step": r["step"]})
        return out

    def final_status(self, session: str) -> dict[str, Any] | None:
        """The status recorded for ``session`` when the replay settled (its last incarnation)."""
        found = None
        for r in self.of_kind("status"):
            if r["session"] == session:
                found = r["status"]
        return found

    def subagent_final(self, run: str) -> dict[str, Any] | None:
        """The record of subagent run ``run`` taken when the replay settled."""
        return next((r for r in self.of_kind("subagent") if r["run"] == run), None)

    def prompt_ids(self) -> dict[str, str]:
        """Prompt label -> prompt id, for the prompts the timeline got admitted."""
        return {a["label"]: a["promptId"] for a in self.admissions() if a["label"] is not None}


# ----------------------------------------------------------------- event helpers


def update_kind(event: dict[str, Any]) -> str | None:
    """The ``sessionUpdate`` of a ``session_update`` event, else ``None``."""
    if event["type"] != "session_update":
        return None
    update = event["data"].get("update") or {}
    return update.get("sessionUpdate")


def is_turn_start(event: dict[str, Any]) -> bool:
    """The first event of a turn: its user message echoed, or (an automatic turn's) the background result it
    runs for shown (not a transcript replay)."""
    kind = update_kind(event)
    if kind not in ("user_message_chunk", "agent_message_chunk") or event["promptId"] is None:
        return False
    meta = event["data"]["update"].get("_meta") or {}
    if kind == "agent_message_chunk" and meta.get("source") != "background_notification":
        return False
    return not meta.get("replay")


def mid_turn_ids(trace: Trace) -> set[str]:
    """The ids of the mid-turn messages the timeline got accepted (each listed pending while it waits)."""
    return {r["value"]["messageId"] for r in trace.records
            if r["kind"] == "result" and r["do"] == "mid_turn" and isinstance(r["value"], dict)
            and isinstance(r["value"].get("messageId"), str)}


def terminal_state(event: dict[str, Any]) -> dict[str, Any]:
    """``{state, stop_reason}`` of a ``turn_complete``; ``{state: "error", code}`` of a ``turn_error``."""
    if event["type"] == "turn_error":
        return {"state": "error", "code": event["data"].get("code")}
    stop = event["data"].get("stopReason")
    return {"state": "cancelled" if stop == "cancelled" else "completed", "stop_reason": stop}


def fingerprint(type: str, prompt_id: str | None, data: Any) -> str:
    """A short digest of an event as a client sees it (type, prompt id, data; wall-clock keys dropped)."""
    text = orjson.dumps([type, prompt_id, _scrub(data)], option=orjson.OPT_SORT_KEYS, default=_default)
    return hashlib.sha256(text).hexdigest()[:12]


def guard_update(event: dict[str, Any]) -> dict[str, Any] | None:
    """The ``_meta`` of a Todo Stop Guard telemetry update (continuation or exhaustion), else ``None``."""
    if update_kind(event) != "agent_message_chunk":
        return None
    meta = event["data"]["update"].get("_meta") or {}
    return meta if meta.get("source") == GUARD_SOURCE else None


# ----------------------------------------------------------------- readable form


def _clip(text: str, n: int = 70) -> str:
    text = text.replace("\n", "\\n")
    return repr(text if len(text) <= n else text[: n - 1] + "…")


def _describe_event(r: dict[str, Any]) -> str:
    data = r["data"]
    kind = update_kind(r)
    if kind is not None:
        update = data.get("update") or {}
        content = update.get("content")
        detail = ""
        if isinstance(content, dict) and content.get("type") == "text":
            detail = _clip(content.get("text", ""))
        elif "toolCallId" in update:
            detail = f"{update['toolCallId']} {update.get('title', '')} {update.get('status', '')}".strip()
        elif kind == "plan":
            detail = " ".join(f"[{e.get('status')}]" for e in update.get("entries", []))
        if (update.get("_meta") or {}).get("replay"):
            detail += " (replay)"
        return f"session_update {kind} {detail}".rstrip()
    rest = {k: v for k, v in data.items() if k not in ("sessionId", "promptId")}
    shown = orjson.dumps(rest, option=orjson.OPT_SORT_KEYS).decode() if rest else ""
    return f"{r['type']} {shown}".rstrip()


def format_record(r: dict[str, Any]) -> str:
    """One record as a line for people."""
    t = f"{r['t']:9.3f}"
    kind = r["kind"]
    if kind == "action":
        args = " ".join(f"{k}={v!r}" for k, v in r["args"].items() if v is not None)
        return f"{t}  step #{r['step']:<3} {r['do']} {args}".rstrip()
    if kind == "result":
        return f"{t}  step #{r['step']:<3} -> {orjson.dumps(r['value'], option=orjson.OPT_SORT_KEYS).decode()}"
    if kind == "event":
        prompt = f" [{r['promptId']}]" if r["promptId"] else ""
        return f"{t}  {r['session']}/{r['gen']} #{r['id']:<4}{prompt} {_describe_event(r)}"
    if kind == "model":
        messages = r["messages"]
        last = messages[-1] if messages else {"role": "-", "content": ""}
        refused = f" -> refused: {r['refused']}" if "refused" in r else ""
        whose = f" by {r['session']}/{r.get('gen')} [{r.get('promptId')}]" if r.get("session") else ""
        origin = f" ({last['origin']})" if "origin" in last else ""
        return (f"{t}  model call {r['call']} ({r['purpose']}, {len(messages)} messages){whose} "
                f"last {last['role']}{origin}: {_clip(last['content'])}{refused}")
    if kind == "schedule":
        values = " ".join(f"{k}={v:g}" for k, v in r["values"].items())
        overridden = f" (overridden: {', '.join(r['overridden'])})" if r.get("overridden") else ""
        return f"{t}  schedule {values}{overridden}"
    if kind == "client":
        parts = []
        for c in r["connections"]:
            ids = [f[0] for f in c["frames"] if f[0] is not None]
            synthetic = [f[1] for f in c["frames"] if f[0] is None]
            span = f"#{ids[0]}..#{ids[-1]}" if ids else "nothing"
            extra = f" + {', '.join(synthetic)}" if synthetic else ""
            parts.append(f"gen {c['gen']} from {c['cursor']}: {len(ids)} event(s) {span}{extra}")
        return f"{t}  {r['session']} client {r['client']}: " + "; ".join(parts)
    if kind == "settled":
        return f"{t}  settled: every session idle, nothing pending"
    if kind == "guard":
        changed = " ".join(f"{k}={v}" for k, v in r["changed"].items())
        return f"{t}  {r['session']}/{r['gen']} guard {changed}"
    if kind == "hook":
        return f"{t}  hook {r['event']} {r['command']!r} run {r['n']} -> {orjson.dumps(r['output']).decode()}"
    if kind == "bridge":
        rest = orjson.dumps({k: v for k, v in r.items() if k not in ("kind", "t", "session", "what", "n")},
                            option=orjson.OPT_SORT_KEYS).decode()
        return f"{t}  {r['session']} bridge drain {r['n']} {r['what']} {rest}"
    if kind == "status":
        status = orjson.dumps(r["status"], option=orjson.OPT_SORT_KEYS).decode()
        return f"{t}  {r['session']}/{r['gen']} status {status}"
    if kind == "signal":
        args = orjson.dumps(r["arguments"], option=orjson.OPT_SORT_KEYS).decode()
        answer = orjson.dumps(r["answer"], option=orjson.OPT_SORT_KEYS).decode()
        return f"{t}  subagent {r['run'] or '(refused)'} signal {r['tool']} {args} -> {answer}"
    if kind == "subagent":
        report = "no report file" if r["report"] is None else f"report ({len(r['report'].splitlines())} lines):\n" + \
            "\n".join(f"{'':11}| {line}" for line in r["report"].splitlines())
        text = "\n".join(f"{'':11}{line}" for line in r["text"].splitlines())
        return f"{t}  subagent {r['run']} final status:\n{text}\n{'':11}{report}"
    return f"{t}  {r}"


def format_trace(trace: Trace) -> str:
    text = "\n".join(format_record(r) for r in trace.records)
    for path in trace._scrub_paths:
        text = text.replace(path, "$STATE")
    return text
