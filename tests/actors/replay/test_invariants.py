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


def guard(n: int, prompt: str, attempt: int, *, text: str = "[Todo Stop Guard] Automatic continuation started",
          most: int = 2) -> dict[str, Any]:
    return event(n, "session_update", prompt, update={
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text},
        "_meta": {"source": "todo_stop_guard", "qwenDiscreteMessage": True, "attempt": attempt, "maxAttempts": most,
                  "unfinishedCount": 2}})


def plan(n: int, prompt: str, *contents: str) -> dict[str, Any]:
    return event(n, "session_update", prompt, update={
        "sessionUpdate": "plan", "entries": [{"content": c, "status": "pending"} for c in contents]})


def test_guard_bounded() -> None:
    stopped = "[Todo Stop Guard] Automatic continuation stopped after 2 attempts"
    fine = trace_of(guard(1, "p1", 1), guard(2, "p1", 2), guard(3, "p1", 1), guard(4, "p1", 2),
                    guard(5, "p1", 2, text=stopped), guard(6, "p2", 1))
    assert check("guard_bounded", fine) == []
    assert check("guard_bounded", trace_of(guard(1, "p1", 3))) == ["event main#1: attempt 3 outside 1..2"]
    assert check("guard_bounded", trace_of(guard(1, "p1", 2), guard(2, "p1", 2))) == [
        "event main#2: attempt 2 follows attempt 2"]
    assert check("guard_bounded", trace_of(guard(1, "p1", 1), guard(2, "p1", 2, text=stopped))) == [
        "event main#2: exhaustion reported at attempt 2 after attempt 1"]


def test_no_todo_text_in_guard() -> None:
    clean = trace_of(plan(1, "p1", "Write the parser"), guard(2, "p1", 1))
    assert check("no_todo_text_in_guard", clean) == []
    leaky = trace_of(plan(1, "p1", "Write the parser"), guard(2, "p1", 1, text="still open: Write the parser"))
    assert check("no_todo_text_in_guard", leaky) == [
        "event main#2: guard update contains todo text 'Write the parser'"]
