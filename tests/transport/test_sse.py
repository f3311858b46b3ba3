"""SSE framing and cursors."""

from __future__ import annotations

from actors import EventBus
from actors import wire
from transport.sse import encode, parse_cursor


def test_an_event_frame_has_its_id_type_and_json() -> None:
    bus = EventBus(clock_ms=lambda: 1)
    for _ in range(56):
        bus.publish("session_update", {"x": 0})
    event = bus.publish("session_update", {"x": 1}, "P")
    assert encode(event) == b"id: 57\nevent: session_update\ndata: " + event.json() + b"\n\n"


def test_a_synthetic_frame_has_no_id_line() -> None:
    frame = encode(wire.replay_complete(0, 0, 0))
    assert frame.startswith(b"event: replay_complete\ndata: ") and b"id:" not in frame.split(b"data:")[0]


def test_cursors_are_plain_decimals_up_to_2_to_the_53() -> None:
    assert parse_cursor("42") == 42
    assert [parse_cursor(v) for v in (None, "", "-1", "4.2", "١٢", " 3", str(2**53))] == [None] * 7
