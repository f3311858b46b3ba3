"""Compaction beside the ring (actors/events/compaction.py) and the replays it serves (actors/events/bus.py)."""

from __future__ import annotations

import time

import pytest
import trio

from actors.events import EventBus
from actors.events.compaction import TurnCompactor
from actors.wire import Event

P = "prompt-1"


def drain(sub) -> list[Event]:
    out = []
    while (event := sub.get_nowait()) is not None:
        out.append(event)
    return out


def text(bus: EventBus, s: str, kind: str = "agent_message_chunk", prompt: str = P, **meta) -> Event:
    update = {"sessionUpdate": kind, "content": {"type": "text", "text": s}}
    if meta:
        update["_meta"] = meta
    return bus.publish("session_update", {"sessionId": "s", "update": update}, prompt)


def guard_chunk(bus: EventBus, s: str, attempt: int) -> Event:
    return text(bus, s, qwenDiscreteMessage=True, source="todo_stop_guard", attempt=attempt)


def tool(bus: EventBus, kind: str, call: str, **fields) -> Event:
    return bus.publish("session_update", {"sessionId": "s", "update": {"sessionUpdate": kind, "toolCallId": call,
                                                                       **fields}}, P)


def end(bus: EventBus, prompt: str = P) -> Event:
    return bus.publish("turn_complete", {"sessionId": "s", "promptId": prompt, "stopReason": "end_turn"}, prompt)


def a_session(bus: EventBus, turns: int = 3) -> None:
    """Turns with text runs, thoughts, a tool call and its updates, a guard attempt and a mode change."""
    for t in range(turns):
        prompt = f"prompt-{t}"
        text(bus, f"ask {t}", kind="user_message_chunk", prompt=prompt)
        for word in ("think", "ing "):
            text(bus, word, kind="agent_thought_chunk", prompt=prompt)
        for word in ("A", "A", "A "):
            text(bus, word, prompt=prompt)
        tool(bus, "tool_call", f"call-{t}", title="shell", status="pending")
        tool(bus, "tool_call_update", f"call-{t}", status="in_progress")
        tool(bus, "tool_call_update", f"call-{t}", status="completed", content=[{"type": "text"}])
        bus.publish("session_update", {"update": {"sessionUpdate": "current_mode_update", "currentModeId": "plan"}})
        for word in ("B", "BB "):
            text(bus, word, prompt=prompt)
        guard_chunk(bus, "[Todo Stop Guard] continue", attempt=1)
        guard_chunk(bus, "[Todo Stop Guard] continue", attempt=2)
        text(bus, "CCC", prompt=prompt)
        end(bus, prompt)


def shown_text(events: list[Event]) -> str:
    return "".join(e.data["update"]["content"]["text"] for e in events
                   if e.type == "session_update" and e.data["update"]["sessionUpdate"] == "agent_message_chunk")


# ----------------------------------------------------------------- the ring stays raw


def test_replay_from_every_cursor_is_the_live_stream_from_there() -> None:
    bus = EventBus()
    live = bus.subscribe()
    a_session(bus)
    stream = drain(live)
    assert [e.id for e in stream] == list(range(1, bus.last_event_id + 1))
    for cursor in range(0, bus.last_event_id + 1):
        replayed = drain(bus.subscribe(last_event_id=cursor, epoch=bus.epoch))
        assert replayed[-1].type == "replay_complete"
        events = replayed[:-1]
        assert [e.id for e in events] == [e.id for e in stream[cursor:]], cursor
        assert [e.json() for e in events] == [e.json() for e in stream[cursor:]], cursor


def test_a_reconnect_inside_a_text_run_never_repeats_text() -> None:
    bus = EventBus()
    live = bus.subscribe()
    a_session(bus, turns=1)
    stream = drain(live)
    for cut in range(1, len(stream)):
        seen = stream[:cut]
        rest = drain(bus.subscribe(last_event_id=seen[-1].id, epoch=bus.epoch))[:-1]
        assert shown_text(seen) + shown_text(rest) == shown_text(stream)


def test_the_ring_is_never_rewritten_by_a_turn_end() -> None:
    bus = EventBus()
    a_session(bus, turns=1)
    assert [e.id for e in bus.ring] == list(range(1, bus.last_event_id + 1))
    assert len(bus.ring) == bus.last_event_id


# ----------------------------------------------------------------- the fold


def test_a_finished_turn_folds_into_one_segment() -> None:
    bus = EventBus()
    a_session(bus, turns=1)
    [(segment, _)] = bus.compactor.segments
    kinds = [(e.type, (e.data.get("update") or {}).get("sessionUpdate")) for e in segment]
    assert kinds == [
        ("session_update", "user_message_chunk"),
        ("session_update", "agent_thought_chunk"),
        ("session_update", "agent_message_chunk"),
        ("session_update", "tool_call"),
        ("session_update", "current_mode_update"),
        ("session_update", "agent_message_chunk"),
        ("session_update", "agent_message_chunk"),  # guard attempt 1, its own event
        ("session_update", "agent_message_chunk"),  # guard attempt 2
        ("session_update", "agent_message_chunk"),
        ("turn_complete", None),
    ]
    texts = [c.get("text") if isinstance(c := e.data["update"].get("content"), dict) else None
             for e in segment[:-1]]
    assert texts[1:3] == ["thinking ", "AAA "]
    assert texts[5:9] == ["BBB ", "[Todo Stop Guard] continue", "[Todo Stop Guard] continue", "CCC"]
    assert [segment[i].data["update"]["_meta"]["attempt"] for i in (6, 7)] == [1, 2]
    call = segment[3].data["update"]
    assert (call["status"], call["title"], call["content"]) == ("completed", "shell", [{"type": "text"}])


def test_a_daemon_notice_keeps_a_slot_of_its_own_between_the_models_texts() -> None:
    bus = EventBus()
    text(bus, "The tables are migrated.")
    text(bus, "Stop hook blocked continuation 1 consecutive time(s).", source="daemon", qwenDiscreteMessage=True)
    text(bus, "Checked them ")
    text(bus, "again.")
    end(bus)
    [(segment, _)] = bus.compactor.segments
    chunks = [(e.data["update"]["content"]["text"], (e.data["update"].get("_meta") or {}).get("source"))
              for e in segment[:-1]]
    # Before, the notice was merged into the model's text and its _meta labelled all of it a notice.
    assert chunks == [("The tables are migrated.", None),
                      ("Stop hook blocked continuation 1 consecutive time(s).", "daemon"),
                      ("Checked them again.", None)]


def test_folded_events_keep_the_id_of_their_last_event_and_ids_rise() -> None:
    bus = EventBus()
    live = bus.subscribe()
    a_session(bus, turns=2)
    stream = drain(live)
    folded = [e for segment, _ in bus.compactor.segments for e in segment]
    ids = [e.id for e in folded]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    by_id = {e.id: e for e in stream}
    tool_call = next(e for e in folded if e.data.get("update", {}).get("sessionUpdate") == "tool_call")
    assert by_id[tool_call.id].data["update"]["status"] == "completed"  # the id of the call's last update


def test_latest_wins_updates_keep_only_the_last_of_a_turn() -> None:
    bus = EventBus()
    for mode in ("plan", "default", "yolo"):
        bus.publish("session_update", {"update": {"sessionUpdate": "current_mode_update", "currentModeId": mode}})
    end(bus)
    [(segment, _)] = bus.compactor.segments
    assert [e.data["update"]["currentModeId"] for e in segment[:-1]] == ["yolo"]


def test_a_tool_call_update_without_its_call_becomes_a_tool_call() -> None:
    bus = EventBus()
    tool(bus, "tool_call_update", "orphan", status="failed")
    end(bus)
    [(segment, _)] = bus.compactor.segments
    assert segment[0].data["update"]["sessionUpdate"] == "tool_call"


# CPU time of this thread (time.thread_time), not the wall clock: another process on the machine (a parallel
# test worker) does not count, and a stall of the loop is its thread's work. Each figure is the best of three
# full-ring turns. The quadratic fold this replaced took seconds every time.
TRIES = 3


def test_the_fold_is_linear_a_full_ring_turn_end_is_one_short_step() -> None:
    """8,000 chunks of 400 characters: the turn end must not stall the loop (the old fold took 17 s)."""
    best = float("inf")
    for _ in range(TRIES):
        bus = EventBus()
        chunk = "x" * 400
        for _ in range(7999):
            text(bus, chunk)
        started = time.thread_time()
        end(bus)
        best = min(best, time.thread_time() - started)
        [(segment, _)] = bus.compactor.segments
        assert len(segment) == 2 and len(segment[0].data["update"]["content"]["text"]) == 7999 * 400
    assert best < 0.020, f"turn end took {best * 1000:.1f} ms"


async def full_ring_turn_end_lag(chunk: str) -> float:
    """The longest the loop went without running a probe task across one full-ring turn's end."""
    bus = EventBus()
    worst = 0.0

    async def probe() -> None:
        nonlocal worst
        while True:
            before = time.thread_time()
            await trio.sleep(0)
            worst = max(worst, time.thread_time() - before)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(probe)
        await trio.sleep(0)
        for i in range(7999):
            text(bus, chunk)
            if i % 500 == 0:
                await trio.sleep(0)  # a turn streams over many loop iterations
        worst = 0.0
        await trio.sleep(0)
        end(bus)
        await trio.sleep(0)
        nursery.cancel_scope.cancel()
    return worst


async def test_a_loop_lag_probe_sees_no_stall_at_a_full_ring_turn_end() -> None:
    with trio.fail_after(60):
        best = min([await full_ring_turn_end_lag("y" * 100) for _ in range(TRIES)])
    assert best < 0.020, f"loop stalled {best * 1000:.1f} ms"


# ----------------------------------------------------------------- bounded in bytes


def test_old_turns_are_dropped_past_the_byte_bound_behind_a_marker() -> None:
    bus = EventBus(replay_bytes=3000)
    for t in range(20):
        text(bus, "z" * 200, prompt=f"p{t}")
        end(bus, f"p{t}")
    assert bus.compactor.bytes <= 3000
    replay = bus.compactor.compacted()
    marker = replay[0]
    assert marker.type == "history_truncated" and marker.id is None
    assert marker.data["reason"] == "replay_window_exceeded" and marker.data["maxBytes"] == 3000
    kept_turns = sum(1 for e in replay if e.type == "turn_complete")
    assert marker.data["truncatedTurns"] == 20 - kept_turns and 0 < kept_turns < 20
    assert marker.data["truncatedEvents"] == 2 * (20 - kept_turns)
    assert replay[-1].prompt_id == "p19"


def test_a_turn_alone_over_the_bound_keeps_its_end() -> None:
    bus = EventBus(replay_bytes=2000)
    for _ in range(50):
        tool(bus, "tool_call", f"c{_}", title="t" * 100)
    end(bus)
    [(segment, size)] = bus.compactor.segments
    assert size <= 2000 and segment[-1].type == "turn_complete"
    assert bus.compactor.compacted()[0].type == "history_truncated"


def test_a_turn_that_never_ends_sheds_its_oldest_slots() -> None:
    compactor = TurnCompactor(max_bytes=5000)
    bus = EventBus(replay_bytes=5000)
    bus.compactor = compactor
    for i in range(2000):
        tool(bus, "tool_call", f"c{i}", title="t" * 50)
    assert compactor._slot_bytes <= 2 * 5000
    assert compactor.truncated_events > 0


# ----------------------------------------------------------------- serving a client that lost its place


def test_a_cursor_before_the_ring_gets_the_compacted_turns_then_the_running_turn_raw() -> None:
    bus = EventBus(ring_size=10)
    a_session(bus, turns=2)
    text(bus, "live ", prompt="p-running")
    text(bus, "run", prompt="p-running")
    frames = drain(bus.subscribe(last_event_id=0, epoch=bus.epoch))
    assert frames[0].type == "state_resync_required" and frames[0].data["reason"] == "ring_evicted"
    body = frames[1:-1]
    assert sum(1 for e in body if e.type == "turn_complete") == 2
    assert [e.data["update"]["content"]["text"] for e in body[-2:]] == ["live ", "run"]  # raw, not folded
    ids = [e.id for e in body]
    assert ids == sorted(ids) and ids[-1] == bus.last_event_id
    assert frames[-1].data["replayedCount"] == len(body)


def test_a_running_turn_longer_than_the_ring_is_marked_truncated() -> None:
    bus = EventBus(ring_size=4)
    for i in range(10):
        text(bus, str(i))
    frames = drain(bus.subscribe(last_event_id=0))
    assert [f.type for f in frames[:2]] == ["state_resync_required", "history_truncated"]
    assert frames[1].data["scope"] == "live_journal" and frames[1].data["truncatedEvents"] == 6
    assert [f.id for f in frames[2:-1]] == [7, 8, 9, 10]


def test_a_whole_ring_is_served_raw_after_a_resync() -> None:
    bus = EventBus()
    a_session(bus, turns=1)
    frames = drain(bus.subscribe(last_event_id=1, epoch="another"))
    assert frames[0].data["reason"] == "epoch_reset"
    assert [f.id for f in frames[1:-1]] == list(range(1, bus.last_event_id + 1))


# ----------------------------------------------------------------- seeded from disk


def test_a_seeded_bus_serves_its_restored_turns_and_then_its_own() -> None:
    old = EventBus()
    a_session(old, turns=2)
    restored = [[Event.from_dict(e.to_dict(), "test") for e in s] for s in old.compactor.kept()]
    bus = EventBus()
    assert bus.seed(restored) == sum(len(s) for s in restored)
    assert not bus.ring and bus.last_event_id == sum(len(s) for s in restored)
    text(bus, "after restart", prompt="p-new")
    frames = drain(bus.subscribe(last_event_id=0))
    assert frames[0].data["reason"] == "ring_evicted"  # the ring has a live event; its past is compacted
    body = frames[1:-1]
    assert [e.id for e in body] == list(range(1, bus.last_event_id + 1))
    guard = [e.data["update"]["_meta"] for e in body
             if e.type == "session_update" and (e.data["update"].get("_meta") or {}).get("source") == "todo_stop_guard"]
    assert [m["attempt"] for m in guard] == [1, 2, 1, 2]


def test_a_seeded_bus_with_nothing_live_says_the_replay_is_not_in_the_ring() -> None:
    old = EventBus()
    a_session(old, turns=1)
    bus = EventBus()
    bus.seed(old.compactor.kept())
    frames = drain(bus.subscribe(last_event_id=0))
    assert frames[0].data["reason"] == "seeded_replay_not_in_ring"
    assert frames[-2].type == "turn_complete"


def test_what_was_dropped_before_a_restart_is_still_said_after_it() -> None:
    old = EventBus(replay_bytes=1500)
    for t in range(10):
        text(old, "w" * 200, prompt=f"p{t}")
        end(old, f"p{t}")
    kept = old.compactor.kept()
    assert kept[0][0].type == "history_truncated"
    bus = EventBus(replay_bytes=1500)
    bus.seed(kept)
    marker = bus.compactor.compacted()[0]
    assert marker.type == "history_truncated"
    assert marker.data["truncatedTurns"] == old.compactor.truncated_turns


def test_seeding_a_bus_that_has_published_is_refused() -> None:
    bus = EventBus()
    text(bus, "x")
    with pytest.raises(RuntimeError):
        bus.seed([])


def test_an_event_that_is_not_one_is_named() -> None:
    with pytest.raises(ValueError, match="replay turn 3: not an event"):
        Event.from_dict({"type": 5}, "replay turn 3")


def test_a_usage_chunk_is_never_merged_into_the_text_around_it() -> None:
    bus = EventBus()
    text(bus, "before ")
    text(bus, "", usage={"inputTokens": 10, "outputTokens": 2, "totalTokens": 12})
    text(bus, "after")
    end(bus)
    [(segment, _)] = bus.compactor.segments
    assert [e.data["update"]["content"]["text"] for e in segment[:-1]] == ["before ", "", "after"]
    assert segment[1].data["update"]["_meta"]["usage"]["totalTokens"] == 12


# ----------------------------------------------------------------- continued after a takeover (cluster mode)


def test_a_bus_continues_a_stream_where_it_stopped() -> None:
    bus = EventBus()
    bus.continue_after(41)
    assert bus.last_event_id == 41
    text(bus, "first of the new owner", prompt="p1")
    assert bus.ring[0].id == 42
    frames = drain(bus.subscribe(last_event_id=41))  # the client saw 41: the rest, nothing twice
    assert frames[0].id == 42 and frames[-1].type == "replay_complete"
    older = drain(bus.subscribe(last_event_id=30))  # before the takeover, not in this ring: said so
    assert older[0].type == "state_resync_required"


def test_a_continued_bus_seeds_its_restored_turns_up_to_where_the_stream_stopped() -> None:
    old = EventBus()
    a_session(old, turns=1)
    kept = old.compactor.kept()
    count = sum(len(s) for s in kept)
    bus = EventBus()
    bus.continue_after(count + 50)
    assert bus.seedable
    bus.seed(kept)
    assert bus.last_event_id == count + 50  # the seeded turns end at the stream's last id
    assert [e.id for e in bus.compactor.compacted()][-1] == count + 50
    assert not bus.seedable
    with pytest.raises(RuntimeError):
        bus.continue_after(100)
    text(bus, "live", prompt="p-new")
    assert bus.ring[0].id == count + 51


def test_a_short_stream_never_numbers_seeded_turns_below_one() -> None:
    old = EventBus()
    a_session(old, turns=1)
    kept = old.compactor.kept()
    count = sum(len(s) for s in kept)
    bus = EventBus()
    bus.continue_after(2)  # fewer ids than seeded events: they take 1..count
    bus.seed(kept)
    assert [e.id for e in bus.compactor.compacted()][0] == 1 and bus.last_event_id == count
