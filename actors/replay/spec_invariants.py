"""Spec properties as invariants: what the Todo Stop Guard (spec 000) promises in every interleaving.

They read the model's requests — whose session and work item made each one, and the origin of
each user message (``trace.py``) — rather than the guard's own telemetry, so a runtime that opens
a stream it does not announce still fails them. Each stream of a session is classified against
the last stream of that session that was really opened (a request refused before a stream is
no stream):

- **user input**: the first stream of a work item (a prompt — a retry too — or an automatic
  turn), or one that carries new mid-turn input;
- **guard-attributable**: it carries a new guard continuation prompt, or it only sends tool
  results of a guard-attributable stream that no Stop hook sponsored;
- **hook**: it carries a Stop hook's reason, or only tool results of such a stream (a hook's tool
  loop is the hook's, even after a combined hook + guard continuation).

The bound counts guard-attributable streams between two pieces of user input, against the
spec's own number (two), not the runtime's constant.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import attrs
import orjson

from .registry import register_invariant
from .trace import (
    TERMINAL_TYPES,
    Trace,
    fingerprint,
    guard_update,
    is_turn_start,
    mid_turn_ids,
    update_kind,
)

SPEC_BOUND = 2  # "at most two extra primary-model streams" per stage (spec 000): the spec's number
USER_ORIGINS = frozenset({"prompt", "mid_turn", "automatic"})
HARD_STOP_REASONS = frozenset({"cancelled", "max_tokens", "max_turn_requests"})
HOOK_CAP_NOTICE = "overriding and ending the turn"  # the daemon's notice when the Stop-hook cap ends a turn
UNFINISHED_REMINDER = "remain unfinished"  # what a trusted todo_write result with open items says


@attrs.frozen
class Stream:
    """One primary-model request of a session, classified (see the module docstring)."""

    record: dict[str, Any]
    index: int  # its position in the trace's records
    opened: bool  # a stream came back (not refused before one)
    new_turn: bool
    user_input: bool
    guard: bool
    hook: bool
    count: int  # guard-attributable streams since the last user input, this one included
    added: tuple[dict[str, Any], ...]  # the messages it added to the last opened stream's


def _key(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message, option=orjson.OPT_SORT_KEYS)


def added_messages(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of ``after`` that ``before`` does not have (a multiset difference, in order):
    robust to compaction, which replaces older messages but keeps the recent ones."""
    left = Counter(_key(m) for m in before)
    out = []
    for m in after:
        k = _key(m)
        if left[k]:
            left[k] -= 1
        else:
            out.append(m)
    return out


def streams(trace: Trace) -> dict[tuple[str, int], list[Stream]]:
    """Each session incarnation's primary-model requests, classified, in order."""
    out: dict[tuple[str, int], list[Stream]] = defaultdict(list)
    last: dict[tuple[str, int], Stream] = {}
    for n, r in enumerate(trace.records):
        if r["kind"] != "model" or r["purpose"] != "primary" or r.get("session") is None:
            continue
        key = (r["session"], r["gen"])
        prev = last.get(key)
        new_turn = prev is None or prev.record["promptId"] != r["promptId"]
        added = added_messages(prev.record["messages"] if prev else [], r["messages"])
        origins = {m.get("origin") for m in added if m["role"] == "user"}
        user_input = new_turn or bool(origins & USER_ORIGINS)
        tools_only = not origins
        hook = not user_input and ("hook" in origins or (tools_only and prev is not None and prev.hook))
        guard = not user_input and ("guard" in origins or (
            tools_only and prev is not None and prev.guard and not prev.hook))
        opened = "refused" not in r
        before = 0 if user_input or prev is None else prev.count
        stream = Stream(r, n, opened, new_turn, user_input, guard, hook, before + (1 if guard and opened else 0),
                        tuple(added))
        out[key].append(stream)
        if opened:
            last[key] = stream
    return out


def _where(stream: Stream) -> str:
    r = stream.record
    return f"session {r['session']}/{r['gen']}: model call {r['call']} [{r['promptId']}]"


@register_invariant("guard_streams_bounded")
def guard_streams_bounded(trace: Trace) -> list[str]:
    """At most two guard-attributable streams between two pieces of user input (from the requests)."""
    return [f"{_where(s)} is guard-attributable stream {s.count} since the last user input "
            f"(the spec allows {SPEC_BOUND})"
            for per in streams(trace).values() for s in per if s.opened and s.count > SPEC_BOUND]


def _rearms(stream: Stream) -> bool:
    """It sends the result of a trusted todo_write that left items unfinished."""
    calls = {c["id"]: c["name"] for m in stream.record["messages"] for c in m.get("tool_calls", ())}
    return any(m["role"] == "tool" and calls.get(m.get("tool_call_id")) == "todo_write"
               and not m["content"].startswith("Error") and UNFINISHED_REMINDER in m["content"]
               for m in stream.added)


def _hard_stop(event: dict[str, Any], started: set[str]) -> str | None:
    """What hard-stopped a chain at this event, if anything (a turn that really ran)."""
    if event["type"] in TERMINAL_TYPES and event["promptId"] in started:
        reason = event["data"].get("stopReason")
        if reason in HARD_STOP_REASONS:
            return f"{event['promptId']} ended {reason}"
    meta = guard_update(event)
    if meta is not None and "stopped after" in event["data"]["update"].get("content", {}).get("text", ""):
        return "the guard reported exhaustion"
    if update_kind(event) == "agent_message_chunk":
        update = event["data"]["update"]
        if (update.get("_meta") or {}).get("source") == "daemon" and HOOK_CAP_NOTICE in \
                update.get("content", {}).get("text", ""):
            return "the Stop-hook cap ended the turn"
    return None


@register_invariant("no_guard_after_hard_stop")
def no_guard_after_hard_stop(trace: Trace) -> list[str]:
    """After a hard stop (cancel, token limit, loop protection, the Stop-hook cap, exhaustion) no
    guard-attributable stream until a later work item has started and a trusted todo write in it
    armed a new chain; mid-turn input never revives the old one."""
    per_session = streams(trace)
    by_index = {s.index: (key, s) for key, per in per_session.items() for s in per}
    stopped: dict[tuple[str, int], tuple[str, bool, bool] | None] = {}  # why, new turn seen, re-armed
    started: set[str] = set()
    out = []
    for n, r in enumerate(trace.records):
        if r["kind"] == "event":
            key = (r["session"], r["gen"])
            if is_turn_start(r):
                started.add(r["promptId"])
            why = _hard_stop(r, started)
            if why is not None:
                stopped[key] = (why, False, False)
            continue
        if n not in by_index:
            continue
        key, s = by_index[n]
        state = stopped.get(key)
        if state is None:
            continue
        why, new_turn, rearmed = state
        if s.new_turn:
            new_turn, rearmed = True, False
        if s.guard and not (new_turn and rearmed):  # asking is the fault, whether or not a stream came back
            out.append(f"{_where(s)} is guard-attributable after a hard stop ({why}) with no new armed chain")
        if new_turn and _rearms(s):
            stopped[key] = None
        else:
            stopped[key] = (why, new_turn, rearmed)
    return out


@register_invariant("fifo_priority")
def fifo_priority(trace: Trace) -> list[str]:
    """No guard-attributable stream while a complete prompt waits that was queued before the turn's
    last event (so the stop's drain saw it). Not for a session whose drains a slow bridge answers."""
    out = []
    per_session = streams(trace)
    events = [(n, r) for n, r in enumerate(trace.records) if r["kind"] == "event"]
    messages = mid_turn_ids(trace)
    for (session, gen), per in per_session.items():
        mine = [(n, e) for n, e in events if e["session"] == session and e["gen"] == gen]
        for s in per:
            if not s.guard:  # asking is the fault, whether or not a stream came back
                continue
            turn = s.record["promptId"]
            last = max((n for n, e in mine if n < s.index and e["promptId"] == turn), default=None)
            if last is None:
                continue
            waiting = _queued_at(mine, last, s.index, messages)
            if waiting:
                out.append(f"{_where(s)} is guard-attributable while {sorted(waiting)[0]} waited "
                           f"(queued before the turn's event #{trace.records[last]['id']})")
    return out


def _queued_at(events: list[tuple[int, dict[str, Any]]], before: int, until: int,
               mid_turn: set[str] = frozenset()) -> set[str]:  # type: ignore[assignment]
    """Prompts added before record ``before`` and neither started nor removed before record ``until``. A mid-turn
    message (``mid_turn``: their ids) is listed pending while it waits; only its second listing, as a prompt of
    its own, is a prompt."""
    queued: set[str] = set()
    listed: dict[str, int] = {}
    for n, e in events:
        if n >= until:
            break
        pid = e["promptId"]
        if e["type"] == "pending_prompt_added":
            listed[pid] = listed.get(pid, 0) + 1
        if e["type"] == "pending_prompt_added" and n < before and (pid not in mid_turn or listed[pid] > 1):
            queued.add(pid)
        elif e["type"] in ("pending_prompt_started", "pending_prompt_completed") or is_turn_start(e):
            queued.discard(pid)
        elif e["type"] == "mid_turn_message_injected":  # waiting mid-turn input (pending under its id) taken
            queued.difference_update(e["data"].get("messageIds") or ())
    return queued


@register_invariant("mid_turn_first")
def mid_turn_first(trace: Trace) -> list[str]:
    """An accepted mid-turn message reaches the model exactly once, and before every prompt that was
    still queued when it was posted (it runs in the current turn, or as the next one)."""
    actions = {r["step"]: r for r in trace.of_kind("action")}
    requests = [r for r in trace.of_kind("model") if r["purpose"] == "primary"]
    out = []
    for n, r in enumerate(trace.records):
        if r["kind"] != "result" or r["do"] != "mid_turn" or not (r["value"] or {}).get("accepted"):
            continue
        args = actions[r["step"]]["args"]
        text, session = args["text"], args.get("session")
        mine = [q for q in requests if q.get("session") == session]
        first = next((q for q in mine if q["t"] >= r["t"] and _mentions(q, text) >= 1), None)
        if first is None:
            out.append(f"the mid-turn message {text!r} (step {r['step']}) never reached the model")
            continue
        for q in mine:
            if _mentions(q, text) > 1:
                out.append(f"model call {q['call']} carries the mid-turn message {text!r} {_mentions(q, text)} times")
                break
        for label, prompt_text in _queued_prompts(trace, n, session):
            seen = next((q for q in mine if any(m["role"] == "user" and m["content"] == prompt_text
                                                for m in q["messages"])), None)
            if seen is not None and seen["call"] <= first["call"]:
                out.append(f"prompt {label} (queued when {text!r} was posted) reached the model in call "
                           f"{seen['call']}, not after the message (call {first['call']})")
    return out


def _mentions(request: dict[str, Any], text: str) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "user" and text in m["content"])


def _queued_prompts(trace: Trace, before: int, session: str | None) -> list[tuple[str, str]]:
    """Timeline prompts of ``session`` admitted before record ``before`` whose turn had not started."""
    actions = {r["step"]: r for r in trace.of_kind("action")}
    admitted: dict[str, tuple[str, str]] = {}
    for r in trace.records[:before]:
        if r["kind"] == "result" and isinstance(r["value"], dict) and "promptId" in r["value"]:
            args = actions[r["step"]]["args"]
            if args.get("session") == session:
                admitted[r["value"]["promptId"]] = (args.get("label"), args.get("text"))
        elif r["kind"] == "event" and (is_turn_start(r) or r["type"] == "pending_prompt_completed"):
            admitted.pop(r["promptId"], None)
    return list(admitted.values())


@register_invariant("cursor_replay_equals_live")
def cursor_replay_equals_live(trace: Trace) -> list[str]:
    """Every cursor client's connection is the live stream from its cursor: contiguous ids, each event as
    published, one ``replay_complete`` after the replayed part, no resync while the cursor is in the ring;
    a connection still open when the replay settled has read through the last event."""
    live: dict[tuple[str, int], dict[int, str]] = defaultdict(dict)
    for e in trace.events():
        live[(e["session"], e["gen"])][e["id"]] = fingerprint(e["type"], e["promptId"], e["data"])
    out = []
    for r in trace.of_kind("client"):
        name = f"client {r['client']}"
        read_last: int | None = None
        for k, c in enumerate(r["connections"]):
            where = f"{name} connection {k + 1} (cursor {c['cursor']})"
            published = live[(r["session"], c["gen"])]
            ids = [f[0] for f in c["frames"] if f[0] is not None]
            start = (c["cursor"] if c["cursor"] is not None else c["head"]) + 1
            if ids != list(range(start, start + len(ids))):
                out.append(f"{where}: ids {_span(ids)} are not contiguous from #{start}")
            for frame in c["frames"]:
                if frame[0] is not None and published.get(frame[0]) != frame[1]:
                    out.append(f"{where}: event #{frame[0]} differs from the live one")
                    break
            synthetic = [f[1] for f in c["frames"] if f[0] is None]
            if "state_resync_required" in synthetic:
                out.append(f"{where}: asked to resync although its cursor was in the ring")
            if c["cursor"] is not None:
                done = [i for i, f in enumerate(c["frames"]) if f[0] is None and f[1] == "replay_complete"]
                if len(done) > 1 or (not done and not c["dropped"]):
                    out.append(f"{where}: {len(done)} replay_complete frames, expected one")
                elif done:
                    replayed = sum(1 for f in c["frames"][: done[0]] if f[0] is not None)
                    if replayed != c["head"] - c["cursor"]:
                        out.append(f"{where}: replayed {replayed} events; the ring held {c['head'] - c['cursor']} "
                                   f"after its cursor")
            if read_last is not None and c["cursor"] is not None and c["cursor"] > read_last:
                out.append(f"{where}: resumed after #{c['cursor']} but had read only through #{read_last}")
            read_last = ids[-1] if ids else read_last
        last = r["connections"][-1] if r["connections"] else None
        if last is not None and not last["dropped"] and (read_last or 0) < (r["live_last"] or 0):
            out.append(f"{name}: still connected but read only through #{read_last} of #{r['live_last']}")
    return out


def _span(ids: list[int]) -> str:
    return f"#{ids[0]}..#{ids[-1]} ({len(ids)})" if ids else "none"
