"""Invariants catch what they claim to, on hand-made traces; registering a new one is one decorator."""

from __future__ import annotations

from typing import Any

from actors.replay import INVARIANTS, Trace, parse_scenario, register_invariant, replay


def event(n: int, type: str, prompt: str | None = None, *, session: str = "main", gen: int = 1,
          **data: Any) -> dict[str, Any]:
    return {"kind": "event", "t": 0.0, "session": session, "gen": gen, "id": n, "type": type, "promptId": prompt,
            "data": data}


def start(n: int, prompt: str, **kw: Any) -> dict[str, Any]:
    return event(n, "session_update", prompt,
                 update={"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "x"}}, **kw)


def done(n: int, prompt: str, **kw: Any) -> dict[str, Any]:
    return event(n, "turn_complete", prompt, stopReason="end_turn", **kw)


def admitted(step: int, prompt: str, label: str) -> list[dict[str, Any]]:
    return [{"kind": "action", "t": 0.0, "step": step, "do": "prompt", "args": {"session": "main", "label": label}},
            {"kind": "result", "t": 0.0, "step": step, "do": "prompt", "value": {"promptId": prompt}}]


def trace_of(*records: dict[str, Any] | list[dict[str, Any]]) -> Trace:
    trace = Trace()
    for r in records:
        trace.records.extend(r if isinstance(r, list) else [r])
    return trace


def check(name: str, trace: Trace, **params: Any) -> list[str]:
    return list(INVARIANTS[name].check(trace, **params))


def test_a_clean_trace_passes_them_all() -> None:
    trace = trace_of(admitted(1, "p1", "a"), admitted(2, "p2", "b"),
                     start(1, "p1"), done(2, "p1"), start(3, "p2"), done(4, "p2"), event(5, "session_closed"))
    for name in ("fifo_order", "one_terminal_per_prompt", "ids_rise", "no_overlap", "no_events_after_close"):
        assert check(name, trace) == [], name


def test_fifo_order() -> None:
    trace = trace_of(admitted(1, "p1", "a"), admitted(2, "p2", "b"), start(1, "p2"), done(2, "p2"),
                     start(3, "p1"), done(4, "p1"))
    assert check("fifo_order", trace) == ["session main: p2 (b) started before p1 (a), which was admitted first"]


def test_one_terminal_per_prompt() -> None:
    twice = trace_of(admitted(1, "p1", "a"), start(1, "p1"), done(2, "p1"), done(3, "p1"))
    assert check("one_terminal_per_prompt", twice) == ["p1 got 2 terminal events"]
    never = trace_of(admitted(1, "p1", "a"), start(1, "p1"))
    assert check("one_terminal_per_prompt", never) == ["p1 got no terminal event"]
    closed = trace_of(admitted(1, "p1", "a"), start(1, "p1"), event(2, "session_closed"))
    assert check("one_terminal_per_prompt", closed) == []


def test_ids_rise_per_incarnation() -> None:
    assert check("ids_rise", trace_of(start(1, "p1"), done(1, "p1"))) == ["session main/1: event id 1 follows 1"]
    restarted = trace_of(start(1, "p1"), done(2, "p1"), start(1, "p2", gen=2), done(2, "p2", gen=2))
    assert check("ids_rise", restarted) == []


def test_no_overlap() -> None:
    trace = trace_of(start(1, "p1"), start(2, "p2"), done(3, "p1"), done(4, "p2"))
    assert check("no_overlap", trace) == ["session main/1: p2 started (event #2) while p1 was running"]


def test_no_events_after_close() -> None:
    trace = trace_of(event(1, "session_closed"), start(2, "p1"))
    assert check("no_events_after_close", trace) == ["session main/1: event #2 (session_update) after session_closed"]


def test_registering_an_invariant_makes_it_usable_by_name() -> None:
    @register_invariant("test_no_errors")
    def no_errors(trace: Trace) -> list[str]:
        """No turn ends in an error."""
        return [f"{e['promptId']} errored" for e in trace.events() if e["type"] == "turn_error"]

    try:
        scenario = parse_scenario({
            "name": "errors",
            "model": [{"refuse": {"code": "server_error"}}],
            "timeline": [{"at": 0, "do": "create_session"}, {"at": 0, "do": "prompt", "text": "hi"}],
            "invariants": ["test_no_errors"],
        })
        assert replay(scenario).failures == ["invariant test_no_errors: prompt-1 errored"]
    finally:
        del INVARIANTS["test_no_errors"]
