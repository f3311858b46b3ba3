"""The spec-property invariants catch what they claim to, on hand-made traces (actors/replay/spec_invariants.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.replay import INVARIANTS, Trace
from actors.replay.trace import fingerprint

SYSTEM = {"role": "system", "content": "[system prompt]", "origin": "system_prompt"}


def user(text: str, origin: str = "prompt") -> dict[str, Any]:
    return {"role": "user", "content": text, "origin": origin}


def assistant(text: str = "ok", *calls: tuple[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        out["tool_calls"] = [{"id": i, "name": n} for i, n in calls]
    return out


def tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "content": content, "tool_call_id": call_id}


def guard(n: int = 1) -> dict[str, Any]:
    return user(f"[Todo Stop Guard] 2 todo item(s) are still pending (attempt text {n}).", "guard")


class Build:
    """A trace built record by record; ``ask`` adds a request that extends the conversation so far."""

    def __init__(self) -> None:
        self.trace = Trace()
        self.calls = 0
        self.history: dict[str, list[dict[str, Any]]] = {}
        self.ids: dict[str, int] = {}

    def ask(self, prompt: str, *added: dict[str, Any], session: str = "main", refused: str | None = None) -> None:
        history = self.history.setdefault(session, [SYSTEM])
        self.calls += 1
        record: dict[str, Any] = {"kind": "model", "t": 0.0, "call": self.calls, "purpose": "primary",
                                  "session": session, "gen": 1, "promptId": prompt, "messages": [*history, *added]}
        if refused:
            record["refused"] = refused
        else:
            history.extend(added)
        self.trace.records.append(record)

    def event(self, type: str, prompt: str | None = None, session: str = "main", **data: Any) -> dict[str, Any]:
        self.ids[session] = self.ids.get(session, 0) + 1
        record = {"kind": "event", "t": 0.0, "session": session, "gen": 1, "id": self.ids[session], "type": type,
                  "promptId": prompt, "data": data}
        self.trace.records.append(record)
        return record

    def start(self, prompt: str, text: str = "go") -> None:
        self.event("session_update", prompt, update={"sessionUpdate": "user_message_chunk",
                                                     "content": {"type": "text", "text": text}})

    def say(self, prompt: str, text: str = "...") -> None:
        self.event("session_update", prompt, update={"sessionUpdate": "agent_message_chunk",
                                                     "content": {"type": "text", "text": text}})

    def step(self, step: int, do: str, args: dict[str, Any], value: Any) -> None:
        self.trace.records += [{"kind": "action", "t": 0.0, "step": step, "do": do, "args": args},
                               {"kind": "result", "t": 0.0, "step": step, "do": do, "value": value}]


def check(name: str, trace: Trace) -> list[str]:
    return list(INVARIANTS[name].check(trace))


WRITE = tool("w1", '[{"id": "1"}]\n<system-reminder>2 todo item(s) remain unfinished.</system-reminder>')


def canonical(b: Build, prompt: str = "p1", guards: int = 2) -> None:
    """A prompt, a trusted write, a natural stop, then ``guards`` guard streams."""
    b.start(prompt)
    b.ask(prompt, user("do it"))
    b.ask(prompt, assistant("", ("w1", "todo_write")), WRITE)
    for n in range(guards):
        b.say(prompt)
        b.ask(prompt, assistant(f"stop {n}"), guard(n))


# ----------------------------------------------------------------- guard_streams_bounded


def test_two_guard_streams_pass_and_a_third_fails() -> None:
    b = Build()
    canonical(b, guards=2)
    assert check("guard_streams_bounded", b.trace) == []
    b.ask("p1", assistant("stop 2"), guard(3))
    assert check("guard_streams_bounded", b.trace) == [
        "session main/1: model call 5 [p1] is guard-attributable stream 3 since the last user input "
        "(the spec allows 2)"]


def test_tool_results_of_a_guard_stream_count_those_of_a_hook_stream_do_not() -> None:
    b = Build()
    canonical(b, guards=2)
    b.ask("p1", assistant("", ("c9", "shell")), tool("c9", "done"))  # results of guard stream 2: a third
    assert len(check("guard_streams_bounded", b.trace)) == 1
    hooked = Build()
    canonical(hooked, guards=1)
    hooked.ask("p1", assistant("stop"), user("HOOK: go on", "hook"), guard(2))  # hook and guard combined: 2
    hooked.ask("p1", assistant("", ("c9", "shell")), tool("c9", "done"))  # the hook's tool loop goes on
    hooked.ask("p1", assistant("", ("c8", "shell")), tool("c8", "done"))
    assert check("guard_streams_bounded", hooked.trace) == []


def test_user_input_opens_a_new_stage_and_a_refused_request_is_no_stream() -> None:
    b = Build()
    canonical(b, guards=2)
    b.ask("p1", assistant("x"), user("[User message received during tool execution]: more", "mid_turn"))
    b.ask("p1", assistant("y"), guard(1))
    b.ask("p1", assistant("z"), guard(2), refused="server_error")
    b.ask("p1", guard(2))  # the same attempt again, once a stream comes back
    assert check("guard_streams_bounded", b.trace) == []
    b.ask("p2", user("next"))  # a new work item
    b.ask("p2", assistant("a"), guard(1))
    b.ask("p2", assistant("b"), guard(2))
    assert check("guard_streams_bounded", b.trace) == []


# ----------------------------------------------------------------- no_guard_after_hard_stop


def test_no_guard_stream_after_a_cancel_until_a_new_chain_is_armed() -> None:
    b = Build()
    canonical(b, guards=1)
    b.event("turn_complete", "p1", stopReason="cancelled")
    b.start("p2", "retry")
    b.ask("p2", assistant("stop"))  # a retry: no new message at all
    b.ask("p2", assistant("again"), guard(2))
    assert check("no_guard_after_hard_stop", b.trace) == [
        "session main/1: model call 5 [p2] is guard-attributable after a hard stop (p1 ended cancelled) "
        "with no new armed chain"]
    rearmed = Build()
    canonical(rearmed, guards=1)
    rearmed.event("turn_complete", "p1", stopReason="cancelled")
    rearmed.start("p2")
    rearmed.ask("p2", assistant("stop"), user("new work"))
    rearmed.ask("p2", assistant("", ("w2", "todo_write")), {**WRITE, "tool_call_id": "w2"})
    rearmed.ask("p2", assistant("stop"), guard(1))
    assert check("no_guard_after_hard_stop", rearmed.trace) == []


def test_exhaustion_is_a_hard_stop_that_mid_turn_input_cannot_lift() -> None:
    b = Build()
    canonical(b, guards=2)
    b.event("session_update", "p1", update={
        "sessionUpdate": "agent_message_chunk", "_meta": {"source": "todo_stop_guard", "attempt": 2},
        "content": {"type": "text", "text": "[Todo Stop Guard] Automatic continuation stopped after 2 attempts"}})
    b.ask("p1", assistant("x"), user("[User message received during tool execution]: more", "mid_turn"))
    b.ask("p1", assistant("y"), guard(1))
    assert check("no_guard_after_hard_stop", b.trace) == [
        "session main/1: model call 6 [p1] is guard-attributable after a hard stop (the guard reported "
        "exhaustion) with no new armed chain"]


def test_an_aborted_queued_prompt_is_no_hard_stop() -> None:
    b = Build()
    b.event("turn_complete", "p9", stopReason="cancelled")  # it never ran: the FIFO removed it
    canonical(b, guards=2)
    assert check("no_guard_after_hard_stop", b.trace) == []


# ----------------------------------------------------------------- fifo_priority


def test_no_guard_stream_while_a_prompt_queued_before_the_stop_waits() -> None:
    b = Build()
    b.start("p1")
    b.ask("p1", user("do it"))
    b.ask("p1", assistant("", ("w1", "todo_write")), WRITE)
    b.event("pending_prompt_added", "p2")
    b.say("p1")
    b.ask("p1", assistant("stop"), guard(1))
    assert check("fifo_priority", b.trace) == [
        "session main/1: model call 3 [p1] is guard-attributable while p2 waited (queued before the turn's event #3)"]
    late = Build()
    late.start("p1")
    late.ask("p1", user("do it"))
    late.ask("p1", assistant("", ("w1", "todo_write")), WRITE)
    late.say("p1")
    late.event("pending_prompt_added", "p2")  # after the turn's last event: the drain may have missed it
    late.ask("p1", assistant("stop"), guard(1))
    assert check("fifo_priority", late.trace) == []


# ----------------------------------------------------------------- mid_turn_first


def test_an_accepted_mid_turn_message_reaches_the_model_once_and_before_a_queued_prompt() -> None:
    def build(order: list[str]) -> Build:
        b = Build()
        b.step(0, "prompt", {"session": "main", "label": "work", "text": "work"}, {"promptId": "p1"})
        b.start("p1", "work")
        b.ask("p1", user("work"))
        b.step(1, "prompt", {"session": "main", "label": "next", "text": "next?"}, {"promptId": "p2"})
        b.step(2, "mid_turn", {"session": "main", "text": "also this"}, {"accepted": True})
        for what in order:
            if what == "mid":
                b.ask("p1", assistant("a"), user("[User message received during tool execution]: also this",
                                                 "mid_turn"))
            elif what == "twice":
                b.ask("p1", assistant("b"), user("also this", "prompt"))
            else:
                b.start("p2", "next?")
                b.ask("p2", assistant("c"), user("next?"))
        return b

    assert check("mid_turn_first", build(["mid", "next"]).trace) == []
    assert check("mid_turn_first", build(["next", "mid"]).trace) == [
        "prompt next (queued when 'also this' was posted) reached the model in call 2, not after the message (call 3)"]
    assert check("mid_turn_first", build(["next"]).trace) == [
        "the mid-turn message 'also this' (step 2) never reached the model"]
    assert check("mid_turn_first", build(["mid", "twice"]).trace) == [
        "model call 3 carries the mid-turn message 'also this' 2 times"]


# ----------------------------------------------------------------- cursor_replay_equals_live


def test_a_connection_must_be_the_live_stream_from_its_cursor() -> None:
    def build(reconnected: Callable[[list[list[Any]]], list[list[Any]]]) -> Build:
        """Five live events; the client reads #1..#2 live, drops, and reconnects from #2 when the bus
        is at #4: ``reconnected(live frames)`` is what it reads then."""
        b = Build()
        events = [b.event("session_update", "p1", n=n) for n in range(5)]
        live = [[e["id"], fingerprint(e["type"], e["promptId"], e["data"])] for e in events]
        b.trace.records.append({"kind": "client", "t": 0.0, "client": "c", "session": "main", "live_last": 5,
                                "connections": [
                                    {"gen": 1, "cursor": None, "head": 0, "dropped": True, "frames": live[:2]},
                                    {"gen": 1, "cursor": 2, "head": 4, "dropped": False,
                                     "frames": reconnected(live)}]})
        return b

    done = [None, "replay_complete"]
    assert check("cursor_replay_equals_live", build(lambda live: [*live[2:4], done, live[4]]).trace) == []
    assert check("cursor_replay_equals_live", build(lambda live: [live[3], done, live[4]]).trace) == [
        "client c connection 2 (cursor 2): ids #4..#5 (2) are not contiguous from #3",
        "client c connection 2 (cursor 2): replayed 1 events; the ring held 2 after its cursor"]
    assert check("cursor_replay_equals_live",
                 build(lambda live: [[3, "0" * 12], live[3], done, live[4]]).trace) == [
        "client c connection 2 (cursor 2): event #3 differs from the live one"]
    assert check("cursor_replay_equals_live", build(lambda live: [*live[2:4], done]).trace) == [
        "client c: still connected but read only through #4 of #5"]
    assert check("cursor_replay_equals_live",
                 build(lambda live: [[None, "state_resync_required"], *live[2:4], done, live[4]]).trace) == [
        "client c connection 2 (cursor 2): asked to resync although its cursor was in the ring"]
