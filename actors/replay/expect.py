"""A scenario's expectations: what this scenario must show, checked on the trace of every seed.

``expect`` fields (all optional):

- ``model_calls``: the number of model requests (every purpose; each is in the trace);
- ``prompts``: prompt label -> terminal state: ``"completed"``, ``"cancelled"``,
  ``"error"``, ``"rejected"`` (queue full) or ``"none"`` (no terminal event), or
  an object ``{state, stop_reason?, code?}``;
- ``events``: event patterns that must occur in this order (a subsequence of all events);
- ``model_requests``: per call (``call`` from 1): ``role`` and ``content`` of the
  last message, ``contains`` (a substring of it), ``roles`` (of every message),
  ``messages`` (their number);
- ``settled_by``: the virtual time by which all work had finished.

A timeline step's own ``expect`` is checked against that step's result.
"""

from __future__ import annotations

from typing import Any

import attrs

from . import fields as F
from .patterns import EventPattern, pattern, subset_match
from .trace import TERMINAL_TYPES, Trace, terminal_state

STATES = ("completed", "cancelled", "error", "rejected", "none")


def _state_spec(value: Any, where: str, ctx: F.ParseContext) -> dict[str, Any]:
    if isinstance(value, str):
        return {"state": F.one_of(*STATES)(value, where, ctx)}
    spec = F.parse_fields(value, {"state": F.Field(F.one_of(*STATES), required=True),
                                  "stop_reason": F.Field(F.string), "code": F.Field(F.string)}, where, ctx)
    return {k: v for k, v in spec.items() if v is not None}


def _prompt_states(value: Any, where: str, ctx: F.ParseContext) -> dict[str, dict[str, Any]]:
    F.obj(value, where, ctx)
    return {F.prompt_label(label, f"{where}.{label}", ctx): _state_spec(v, f"{where}.{label}", ctx)
            for label, v in value.items()}


def _positive(value: Any, where: str, ctx: F.ParseContext) -> int:
    if type(value) is not int or value < 1:
        raise ctx.fail(where, "a positive integer", value)
    return value


_REQUEST_FIELDS = {
    "call": F.Field(_positive, required=True),
    "role": F.Field(F.one_of("system", "user", "assistant", "tool")),
    "content": F.Field(F.string),
    "contains": F.Field(F.string),
    "roles": F.Field(F.list_of(F.one_of("system", "user", "assistant", "tool"))),
    "messages": F.Field(F.count),
}


def _request(value: Any, where: str, ctx: F.ParseContext) -> dict[str, Any]:
    return {k: v for k, v in F.parse_fields(value, _REQUEST_FIELDS, where, ctx).items() if v is not None}


EXPECT_FIELDS = {
    "model_calls": F.Field(F.count),
    "prompts": F.Field(_prompt_states, default={}),
    "events": F.Field(F.list_of(pattern), default=[]),
    "model_requests": F.Field(F.list_of(_request), default=[]),
    "settled_by": F.Field(F.number),
}


@attrs.frozen
class Expectations:
    model_calls: int | None = None
    prompts: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    events: list[EventPattern] = attrs.field(factory=list)
    model_requests: list[dict[str, Any]] = attrs.field(factory=list)
    settled_by: float | None = None


def parse_expectations(value: Any, where: str, ctx: F.ParseContext) -> Expectations:
    return Expectations(**F.parse_fields(value, EXPECT_FIELDS, where, ctx))


# ----------------------------------------------------------------- checking


def prompt_outcome(trace: Trace, label: str) -> dict[str, Any]:
    """The terminal state of the prompt the timeline gave ``label``."""
    admission = next((a for a in trace.admissions() if a["label"] == label), None)
    if admission is None:
        return {"state": "rejected"}
    pid = admission["promptId"]
    terminal = next((e for e in trace.events() if e["type"] in TERMINAL_TYPES and e["promptId"] == pid), None)
    return {"state": "none"} if terminal is None else terminal_state(terminal)


def _check_events(patterns: list[EventPattern], trace: Trace) -> list[str]:
    ids = trace.prompt_ids()
    events = iter(trace.events())
    for n, p in enumerate(patterns):
        if not any(p.matches(e, ids) for e in events):  # consumes up to the match: a subsequence
            return [f"expect.events[{n}]: no {p} after the events matched by expect.events[0..{n - 1}]"
                    if n else f"expect.events[0]: no event matches {p}"]
    return []


def _check_request(spec: dict[str, Any], calls: list[dict[str, Any]]) -> list[str]:
    n = spec["call"]
    where = f"expect.model_requests (call {n})"
    if n > len(calls):
        return [f"{where}: there were only {len(calls)} model calls"]
    messages = calls[n - 1]["messages"]
    last = messages[-1] if messages else {"role": None, "content": ""}
    out = []
    if "role" in spec and last["role"] != spec["role"]:
        out.append(f"{where}: last message role {last['role']!r}, expected {spec['role']!r}")
    if "content" in spec and last["content"] != spec["content"]:
        out.append(f"{where}: last message content {last['content']!r}, expected {spec['content']!r}")
    if "contains" in spec and spec["contains"] not in last["content"]:
        out.append(f"{where}: last message {last['content']!r} does not contain {spec['contains']!r}")
    roles = [m["role"] for m in messages]
    if "roles" in spec and roles != spec["roles"]:
        out.append(f"{where}: roles {roles}, expected {spec['roles']}")
    if "messages" in spec and len(messages) != spec["messages"]:
        out.append(f"{where}: {len(messages)} messages, expected {spec['messages']}")
    return out


def check_expectations(expect: Expectations, steps: Any, trace: Trace) -> list[str]:
    """Every expectation that does not hold, as a message naming it."""
    out: list[str] = []
    calls = trace.model_calls()
    if expect.model_calls is not None and len(calls) != expect.model_calls:
        out.append(f"expect.model_calls: {len(calls)} model calls, expected {expect.model_calls}")
    for label, spec in expect.prompts.items():
        got = prompt_outcome(trace, label)
        if not subset_match(spec, got):
            out.append(f"expect.prompts.{label}: got {got}, expected {spec}")
    out += _check_events(expect.events, trace)
    for spec in expect.model_requests:
        out += _check_request(spec, calls)
    if expect.settled_by is not None:
        settled = next((r["t"] for r in trace.of_kind("settled")), None)
        if settled is None or settled > expect.settled_by:
            out.append(f"expect.settled_by: settled at {settled}, expected by {expect.settled_by}")
    results = {r["step"]: r["value"] for r in trace.of_kind("result")}
    for step in steps:
        if step.expect is not attrs.NOTHING:
            got = results.get(step.index, "(step did not run)")
            if not subset_match(step.expect, got):
                out.append(f"timeline[{step.index}].expect: {step.do} returned {got}, expected {step.expect}")
    return out
