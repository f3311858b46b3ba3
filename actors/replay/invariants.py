"""Named invariants: checks over a whole trace that must hold in every interleaving.

A scenario lists the ones that apply (``"invariants": ["fifo_order", ...]``);
one with parameters is written as an object (``{"name": "precedes", "first":
..., "then": ...}``). An invariant is a function of the trace (and its
parameters) returning a list of violations, registered with
:func:`~.registry.register_invariant`::

    @register_invariant("no_errors")
    def no_errors(trace):
        return [f"event #{e['id']} is a turn_error" for e in trace.events() if e["type"] == "turn_error"]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import attrs

from . import fields as F
# The spec's properties (guard bound, hard stops, FIFO priority, mid-turn order, cursor replay) read the
# model's requests and live in a module of their own, which registers them on import.
from . import spec_invariants  # noqa: F401
from .patterns import EventPattern, pattern
from .registry import INVARIANTS, InvariantSpec, register_invariant
from .trace import TERMINAL_TYPES, Trace, guard_update, is_turn_start, mid_turn_ids, update_kind


def _by_incarnation(trace: Trace) -> dict[tuple[str, int], list[dict[str, Any]]]:
    out: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for e in trace.events():
        out[(e["session"], e["gen"])].append(e)
    return out


# ----------------------------------------------------------------- built-ins


@register_invariant("fifo_order")
def fifo_order(trace: Trace) -> list[str]:
    """Prompts admitted by the timeline start their turns in admission order, per session."""
    starts: dict[str, int] = {}
    for n, e in enumerate(trace.events()):
        if is_turn_start(e):
            starts.setdefault(e["promptId"], n)
    out = []
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in trace.admissions():
        if a["promptId"] in starts:
            by_session[a["session"]].append(a)
    for session, admitted in by_session.items():
        for before, after in zip(admitted, admitted[1:]):
            if starts[after["promptId"]] < starts[before["promptId"]]:
                out.append(f"session {session}: {after['promptId']} ({after['label']}) started before "
                           f"{before['promptId']} ({before['label']}), which was admitted first")
    return out


@register_invariant("one_terminal_per_prompt")
def one_terminal_per_prompt(trace: Trace) -> list[str]:
    """Every admitted prompt gets exactly one terminal event (none only if its session closed first). Waiting
    mid-turn input is listed as a pending prompt under its message id: one a turn took, or taken back while it
    waited, needs none (one promoted to a prompt of its own is listed again, and needs its one)."""
    admitted_at: dict[str, tuple[int, str]] = {}  # prompt id -> (record index, session label)
    terminals: dict[str, int] = defaultdict(int)
    closed_after: dict[str, list[int]] = defaultdict(list)
    steps = {r["step"]: r for r in trace.of_kind("action")}
    for n, r in enumerate(trace.records):
        if r["kind"] == "result" and isinstance(r["value"], dict) and "promptId" in r["value"]:
            admitted_at.setdefault(r["value"]["promptId"], (n, steps[r["step"]]["args"].get("session")))
        elif r["kind"] == "event":
            if r["type"] == "mid_turn_message_injected":
                for message_id in r["data"].get("messageIds") or ():
                    admitted_at.pop(message_id, None)
            elif r["type"] == "pending_prompt_completed" and r["data"].get("state") == "removed" \
                    and r["promptId"] in admitted_at and _waiting_mid_turn(trace, r["promptId"], n):
                admitted_at.pop(r["promptId"])
            elif r["type"] == "pending_prompt_added" and r["promptId"]:
                admitted_at.setdefault(r["promptId"], (n, r["session"]))
            elif r["type"] in TERMINAL_TYPES and r["promptId"]:
                terminals[r["promptId"]] += 1
            elif r["type"] == "session_closed":
                closed_after[r["session"]].append(n)
    out = []
    for prompt_id, (n, session) in admitted_at.items():
        count = terminals[prompt_id]
        if count > 1:
            out.append(f"{prompt_id} got {count} terminal events")
        elif count == 0 and not any(c > n for c in closed_after[session]):
            out.append(f"{prompt_id} got no terminal event")
    return out


def _waiting_mid_turn(trace: Trace, message_id: str, before: int) -> bool:
    """``message_id`` is a mid-turn message's that was not promoted (listed once) before record ``before``."""
    listed = sum(1 for r in trace.records[:before]
                 if r["kind"] == "event" and r["type"] == "pending_prompt_added" and r["promptId"] == message_id)
    return message_id in mid_turn_ids(trace) and listed == 1



@register_invariant("ids_rise")
def ids_rise(trace: Trace) -> list[str]:
    """Event ids strictly rise within each session incarnation."""
    out = []
    for (session, gen), events in _by_incarnation(trace).items():
        for before, after in zip(events, events[1:]):
            if after["id"] is None or before["id"] is None or after["id"] <= before["id"]:
                out.append(f"session {session}/{gen}: event id {after['id']} follows {before['id']}")
    return out


@register_invariant("no_overlap")
def no_overlap(trace: Trace) -> list[str]:
    """No two turns of a session run at once: a turn starts only after the previous one's terminal event."""
    out = []
    for (session, gen), events in _by_incarnation(trace).items():
        running: str | None = None
        for e in events:
            if is_turn_start(e):
                if running is not None and running != e["promptId"]:
                    out.append(f"session {session}/{gen}: {e['promptId']} started (event #{e['id']}) "
                               f"while {running} was running")
                running = e["promptId"]
            elif e["type"] in TERMINAL_TYPES and e["promptId"] == running:
                running = None
    return out


@register_invariant("no_events_after_close")
def no_events_after_close(trace: Trace) -> list[str]:
    """Nothing is published on a session's bus after its ``session_closed``."""
    out = []
    for (session, gen), events in _by_incarnation(trace).items():
        closed = next((n for n, e in enumerate(events) if e["type"] == "session_closed"), None)
        if closed is not None and closed < len(events) - 1:
            out.append(f"session {session}/{gen}: event #{events[closed + 1]['id']} "
                       f"({events[closed + 1]['type']}) after session_closed")
    return out


@register_invariant("precedes", first=F.Field(pattern, required=True), then=F.Field(pattern, required=True))
def precedes(trace: Trace, first: EventPattern, then: EventPattern) -> list[str]:
    """The first event matching ``first`` comes before the first event matching ``then``; both occur."""
    ids = trace.prompt_ids()
    events = trace.events()
    a = next((n for n, e in enumerate(events) if first.matches(e, ids)), None)
    b = next((n for n, e in enumerate(events) if then.matches(e, ids)), None)
    if a is None:
        return [f"no event matches {first}"]
    if b is None:
        return [f"no event matches {then}"]
    if a > b:
        return [f"{then} (event {events[b]['session']}#{events[b]['id']}) came before "
                f"{first} (event {events[a]['session']}#{events[a]['id']})"]
    return []


@register_invariant("guard_bounded")
def guard_bounded(trace: Trace) -> list[str]:
    """Guard continuations never go past ``maxAttempts``, and within a turn each stage counts 1, 2, ...
    (a new stage starts again at 1 only after user input); exhaustion repeats the last attempt."""
    out = []
    last: dict[str, int] = {}
    for e in trace.events():
        meta = guard_update(e)
        if meta is None:
            continue
        attempt, most = meta.get("attempt"), meta.get("maxAttempts")
        text = e["data"]["update"].get("content", {}).get("text", "")
        where = f"event {e['session']}#{e['id']}"
        if not isinstance(attempt, int) or not isinstance(most, int) or not 1 <= attempt <= most:
            out.append(f"{where}: attempt {attempt!r} outside 1..{most!r}")
            continue
        before = last.get(e["promptId"] or "")
        exhausted = "stopped after" in text
        if exhausted and before is not None and attempt != before:
            out.append(f"{where}: exhaustion reported at attempt {attempt} after attempt {before}")
        elif not exhausted and before is not None and attempt not in (1, before + 1):
            out.append(f"{where}: attempt {attempt} follows attempt {before}")
        last[e["promptId"] or ""] = attempt
    return out


@register_invariant("no_todo_text_in_guard")
def no_todo_text_in_guard(trace: Trace) -> list[str]:
    """Guard telemetry never carries todo text (any plan entry's content written in the replay)."""
    texts: set[str] = set()
    for e in trace.events():
        if update_kind(e) == "plan":
            texts |= {entry.get("content") for entry in e["data"]["update"].get("entries", [])
                      if isinstance(entry.get("content"), str) and entry.get("content")}
    out = []
    for e in trace.events():
        if guard_update(e) is None:
            continue
        shown = str(e["data"]["update"])
        for text in sorted(texts):
            if text in shown:
                out.append(f"event {e['session']}#{e['id']}: guard update contains todo text {text!r}")
    return out


# ----------------------------------------------------------------- parsing and checking


@attrs.frozen
class InvariantUse:
    """An invariant as a scenario names it: the spec and its parsed parameters."""

    spec: InvariantSpec
    params: dict[str, Any]

    def __str__(self) -> str:
        return self.spec.name


def invariant_use(value: Any, where: str, ctx: F.ParseContext) -> InvariantUse:
    """Parse ``"name"`` or ``{"name": ..., **params}`` (a field check)."""
    if isinstance(value, str):
        name, raw = value, {}
    elif isinstance(value, dict) and isinstance(value.get("name"), str):
        name, raw = value["name"], {k: v for k, v in value.items() if k != "name"}
    else:
        raise ctx.fail(where, "an invariant name or an object {name, ...parameters}", value)
    spec = INVARIANTS.get(name)
    if spec is None:
        raise ctx.fail(where if isinstance(value, str) else f"{where}.name",
                       f"one of the invariants {sorted(INVARIANTS)}", name)
    return InvariantUse(spec, F.parse_fields(raw, spec.params, where, ctx, reserved=frozenset({"name"})))


def check_invariants(uses: Iterable[InvariantUse], trace: Trace) -> list[str]:
    return [f"invariant {use}: {v}" for use in uses for v in use.spec.check(trace, **use.params)]
