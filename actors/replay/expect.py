"""A scenario's expectations: what this scenario must show, checked on the trace of every seed.

``expect`` fields (all optional):

- ``model_calls``: the number of model requests (every purpose; each is in the trace);
- ``prompts``: prompt label -> terminal state: ``"completed"``, ``"cancelled"``,
  ``"error"``, ``"rejected"`` (queue full) or ``"none"`` (no terminal event), or
  an object ``{state, stop_reason?, code?}``;
- ``events``: event patterns that must occur in this order (a subsequence of all events);
- ``model_requests``: per call (``call`` from 1): ``role``, ``content`` and ``origin``
  of the last message, ``contains`` (a substring of it), ``roles`` (of every message),
  ``messages`` (their number), ``refused`` (the error code of a request refused
  before a stream was returned), ``purpose`` (``primary``, ``suggestion``, ``compaction``);
- ``settled_by``: the virtual time by which all work had finished;
- ``guard_attempts``: the ``_meta.attempt`` of the Todo Stop Guard's updates
  (continuations and the exhaustion report), in order: a list for the whole
  trace, or an object from prompt label (or ``"@auto"``, every automatic turn)
  to a list;
- ``status``: session label -> a subset its final status must match (e.g.
  ``{"todoStopGuard": {"suspended": true}}``);
- ``absent``: event patterns no event may match;
- ``counts``: ``[{match, count}]``: how many events match an event pattern;
- ``hook_runs``: scripted hook command -> how many times it ran;
- ``subagent``: subagent run label -> what the run shows when the replay settled:
  ``end_reason``, ``state``, ``turn``, ``max_turns``, ``status`` (a subset of the
  registry's status), ``text_contains`` (texts its readable status contains),
  ``report_contains`` (texts the report file, read back from disk, contains) and
  ``report_lines`` (the report file's number of lines).

A timeline step's own ``expect`` is checked against that step's result.
"""

from __future__ import annotations

from typing import Any

import attrs

from ..subagents import END_REASONS
from . import fields as F
from .patterns import EventPattern, pattern, subset_match
from .trace import STATUS_KEYS, TERMINAL_TYPES, Trace, guard_update, terminal_state

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
    "origin": F.Field(F.string),
    "content": F.Field(F.string),
    "contains": F.Field(F.string),
    "roles": F.Field(F.list_of(F.one_of("system", "user", "assistant", "tool"))),
    "messages": F.Field(F.count),
    "refused": F.Field(F.string),
    "purpose": F.Field(F.string),
}


def _request(value: Any, where: str, ctx: F.ParseContext) -> dict[str, Any]:
    return {k: v for k, v in F.parse_fields(value, _REQUEST_FIELDS, where, ctx).items() if v is not None}


AUTO = "@auto"


def _attempt_list(value: Any, where: str, ctx: F.ParseContext) -> list[int]:
    return F.list_of(_positive)(value, where, ctx)


def _guard_attempts(value: Any, where: str, ctx: F.ParseContext) -> dict[str | None, list[int]]:
    """A list (the whole trace: key ``None``) or prompt label / ``@auto`` -> list."""
    if isinstance(value, list):
        return {None: _attempt_list(value, where, ctx)}
    if not isinstance(value, dict):
        raise ctx.fail(where, "a list of attempts, or an object from prompt label (or \"@auto\") to a list", value)
    out: dict[str | None, list[int]] = {}
    for label, attempts in value.items():
        here = f"{where}.{label}"
        key = AUTO if label == AUTO else F.prompt_label(label, here, ctx)
        out[key] = _attempt_list(attempts, here, ctx)
    return out


def _status_specs(value: Any, where: str, ctx: F.ParseContext) -> dict[str, dict[str, Any]]:
    F.obj(value, where, ctx)
    out = {}
    for label, spec in value.items():
        here = f"{where}.{label}"
        F.session_label(label, here, ctx)
        F.obj(spec, here, ctx)
        for key in spec:
            if key not in STATUS_KEYS:
                raise ctx.fail(f"{here}.{key}", f"one of the recorded status fields {list(STATUS_KEYS)}")
        out[label] = spec
    return out


def _count_spec(value: Any, where: str, ctx: F.ParseContext) -> tuple[EventPattern, int]:
    spec = F.parse_fields(value, {"match": F.Field(pattern, required=True), "count": F.Field(F.count, required=True)},
                          where, ctx)
    return spec["match"], spec["count"]


def _hook_runs(value: Any, where: str, ctx: F.ParseContext) -> dict[str, int]:
    F.obj(value, where, ctx)
    return {command: F.count(n, f"{where}.{command}", ctx) for command, n in value.items()}


_SUBAGENT_FIELDS = {
    "end_reason": F.Field(F.one_of(*END_REASONS)),
    "state": F.Field(F.one_of("starting", "running", "idle", "needs_help")),
    "turn": F.Field(F.count),
    "max_turns": F.Field(F.count),
    "status": F.Field(F.obj, default={}),
    "text_contains": F.Field(F.string_list, default=[]),
    "report_contains": F.Field(F.string_list, default=[]),
    "report_lines": F.Field(F.count),
}
_SUBAGENT_STATUS_KEYS = {"end_reason": "endReason", "state": "state", "turn": "turn", "max_turns": "maxTurns"}


def _subagent_specs(value: Any, where: str, ctx: F.ParseContext) -> dict[str, dict[str, Any]]:
    F.obj(value, where, ctx)
    known = F.label_of(F.SUBAGENT, "subagent run")
    return {known(label, f"{where}.{label}", ctx): F.parse_fields(spec, _SUBAGENT_FIELDS, f"{where}.{label}", ctx)
            for label, spec in value.items()}


EXPECT_FIELDS = {
    "model_calls": F.Field(F.count),
    "prompts": F.Field(_prompt_states, default={}),
    "events": F.Field(F.list_of(pattern), default=[]),
    "model_requests": F.Field(F.list_of(_request), default=[]),
    "settled_by": F.Field(F.number),
    "guard_attempts": F.Field(_guard_attempts, default={}),
    "status": F.Field(_status_specs, default={}),
    "absent": F.Field(F.list_of(pattern), default=[]),
    "counts": F.Field(F.list_of(_count_spec), default=[]),
    "hook_runs": F.Field(_hook_runs, default={}),
    "subagent": F.Field(_subagent_specs, default={}),
}


@attrs.frozen
class Expectations:
    model_calls: int | None = None
    prompts: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    events: list[EventPattern] = attrs.field(factory=list)
    model_requests: list[dict[str, Any]] = attrs.field(factory=list)
    settled_by: float | None = None
    guard_attempts: dict[str | None, list[int]] = attrs.field(factory=dict)
    status: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    absent: list[EventPattern] = attrs.field(factory=list)
    counts: list[tuple[EventPattern, int]] = attrs.field(factory=list)
    hook_runs: dict[str, int] = attrs.field(factory=dict)
    subagent: dict[str, dict[str, Any]] = attrs.field(factory=dict)


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
    if "origin" in spec and last.get("origin") != spec["origin"]:
        out.append(f"{where}: last message origin {last.get('origin')!r}, expected {spec['origin']!r}")
    if "content" in spec and last["content"] != spec["content"]:
        out.append(f"{where}: last message content {last['content']!r}, expected {spec['content']!r}")
    if "contains" in spec and spec["contains"] not in last["content"]:
        out.append(f"{where}: last message {last['content']!r} does not contain {spec['contains']!r}")
    roles = [m["role"] for m in messages]
    if "roles" in spec and roles != spec["roles"]:
        out.append(f"{where}: roles {roles}, expected {spec['roles']}")
    if "messages" in spec and len(messages) != spec["messages"]:
        out.append(f"{where}: {len(messages)} messages, expected {spec['messages']}")
    if "purpose" in spec and calls[n - 1]["purpose"] != spec["purpose"]:
        out.append(f"{where}: purpose {calls[n - 1]['purpose']!r}, expected {spec['purpose']!r}")
    if "refused" in spec and calls[n - 1].get("refused") != spec["refused"]:
        out.append(f"{where}: refused {calls[n - 1].get('refused')!r}, expected {spec['refused']!r}")
    return out


def guard_attempts(trace: Trace, key: str | None) -> list[int]:
    """The attempts of the guard updates of prompt label ``key`` (``@auto``: automatic turns; ``None``: all)."""
    ids = trace.prompt_ids()
    out = []
    for e in trace.events():
        meta = guard_update(e)
        if meta is None:
            continue
        pid = e["promptId"] or ""
        if key is None or (key == AUTO and pid.startswith("auto-")) or (key != AUTO and pid == ids.get(key)):
            out.append(meta.get("attempt"))
    return out


def _check_guard(expect: Expectations, trace: Trace) -> list[str]:
    out = []
    for key, expected in expect.guard_attempts.items():
        got = guard_attempts(trace, key)
        if got != expected:
            where = "expect.guard_attempts" + ("" if key is None else f".{key}")
            out.append(f"{where}: guard updates with attempts {got}, expected {expected}")
    return out


def _check_status(expect: Expectations, trace: Trace) -> list[str]:
    out = []
    for label, spec in expect.status.items():
        got = trace.final_status(label)
        if got is None:
            out.append(f"expect.status.{label}: the session was not live when the replay settled")
            continue
        for key, value in spec.items():
            if not subset_match(value, got.get(key)):
                out.append(f"expect.status.{label}.{key}: got {got.get(key)!r}, expected {value!r}")
    return out


def _check_counts(expect: Expectations, trace: Trace) -> list[str]:
    ids = trace.prompt_ids()
    events = trace.events()
    out = []
    for n, p in enumerate(expect.absent):
        hit = next((e for e in events if p.matches(e, ids)), None)
        if hit is not None:
            out.append(f"expect.absent[{n}]: event {hit['session']}#{hit['id']} matches {p}")
    for n, (p, count) in enumerate(expect.counts):
        got = sum(1 for e in events if p.matches(e, ids))
        if got != count:
            out.append(f"expect.counts[{n}]: {got} events match {p}, expected {count}")
    runs: dict[str, int] = {}
    for r in trace.of_kind("hook"):
        runs[r["command"]] = max(runs.get(r["command"], 0), r["n"])
    for command, count in expect.hook_runs.items():
        if runs.get(command, 0) != count:
            out.append(f"expect.hook_runs.{command}: ran {runs.get(command, 0)} times, expected {count}")
    return out


def _check_subagents(expect: Expectations, trace: Trace) -> list[str]:
    out = []
    for label, spec in expect.subagent.items():
        where = f"expect.subagent.{label}"
        record = trace.subagent_final(label)
        if record is None:
            out.append(f"{where}: no such run when the replay settled (its start failed, or it never settled)")
            continue
        status, text, report = record["status"], record["text"], record["report"]
        for key, field in _SUBAGENT_STATUS_KEYS.items():
            if spec[key] is not None and status.get(field) != spec[key]:
                out.append(f"{where}.{key}: got {status.get(field)!r}, expected {spec[key]!r}")
        for key, value in spec["status"].items():
            if not subset_match(value, status.get(key)):
                out.append(f"{where}.status.{key}: got {status.get(key)!r}, expected {value!r}")
        out += [f"{where}.text_contains: {wanted!r} is not in the status text {text!r}"
                for wanted in spec["text_contains"] if wanted not in text]
        if report is None and (spec["report_contains"] or spec["report_lines"] is not None):
            out.append(f"{where}: the run has no report file on disk")
            continue
        out += [f"{where}.report_contains: {wanted!r} is not in the report file {report!r}"
                for wanted in spec["report_contains"] if wanted not in report]
        if spec["report_lines"] is not None and len(report.splitlines()) != spec["report_lines"]:
            out.append(f"{where}.report_lines: {len(report.splitlines())} lines, expected {spec['report_lines']}")
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
    out += _check_guard(expect, trace)
    out += _check_status(expect, trace)
    out += _check_counts(expect, trace)
    out += _check_subagents(expect, trace)
    results = {r["step"]: r["value"] for r in trace.of_kind("result")}
    for step in steps:
        if step.expect is not attrs.NOTHING:
            got = results.get(step.index, "(step did not run)")
            if not subset_match(step.expect, got):
                out.append(f"{step.where or f'timeline[{step.index}]'}.expect: {step.do} returned {got}, "
                           f"expected {step.expect}")
    return out
