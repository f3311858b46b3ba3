"""A finished turn's events keep only their encoded frames in the ring, and read back the same data.

The dicts of every kept event were most of what CPython's cyclic collector walks on a full pass (a pause of
the event loop that grows with the sessions' rings: bench/README.md, "Scale").
"""

from __future__ import annotations

import gc

from actors.events import EventBus


def chunk(text: str) -> dict:
    return {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                                         "content": {"type": "text", "text": text}}}


def holds_a_dict(obj: object) -> bool:
    return any(isinstance(r, dict) for r in gc.get_referents(obj))


def test_a_folded_turns_events_keep_their_frames_and_read_back_the_same_data() -> None:
    bus = EventBus(clock_ms=lambda: 7)
    events = [bus.publish("session_update", chunk(f"part {i} "), "p1") for i in range(3)]
    expected = [(e.json(), e.data) for e in events]
    assert all(holds_a_dict(e) for e in events)  # the running turn's events keep their data as it was given

    end = bus.publish("turn_complete", {"sessionId": "s", "promptId": "p1", "stopReason": "end_turn"}, "p1")

    for event, (frame, data) in zip(events, expected, strict=True):
        assert not holds_a_dict(event)
        assert event.json() == frame and event.data == data and event.update == data["update"]
    assert not holds_a_dict(end) and end.data["stopReason"] == "end_turn"
    replayed = bus.events_after(0)
    assert [e.json() for e in replayed] == [frame for frame, _ in expected] + [end.json()]


def test_a_running_turns_events_are_left_whole_after_an_earlier_turn_folds() -> None:
    bus = EventBus(clock_ms=lambda: 7)
    bus.publish("session_update", chunk("first "), "p1")
    bus.publish("turn_complete", {"sessionId": "s", "promptId": "p1", "stopReason": "end_turn"}, "p1")
    running = bus.publish("session_update", chunk("second "), "p2")
    assert holds_a_dict(running) and running.data == chunk("second ")
