"""What a reloaded session shows its clients of the conversation.

Restored after a restart without a compacted replay on disk, it replays the transcript: the user's own
messages and the model's answers, never the texts only the model reads (the guard's continuations, a Stop
hook's reasons, mid-turn input folded into tool results). Before, each was shown as a message the user typed.

A live session reloading (``POST /session/:id/load``) publishes nothing: it used to publish its transcript
again on its bus, spliced into every open stream (a running turn's too) and kept in the bus's compacted
replay. The loading client alone is shown the bus's own replay (:func:`load_replay`, transport/load_replay.py).
"""

from __future__ import annotations

from actors.events import EventBus
from actors.guard import continuation_prompt
from actors.model import ChatMessage
from actors.session.conversation import Conversation
from actors.session.outcomes import MID_TURN_PREFIX
from actors.session.persistence import load_replay, replay_segments, restore_conversation
from actors.session.publisher import Publisher
from actors.session.transcript import Transcript

CONVERSATION = [
    ChatMessage("user", "build the report", origin="prompt"),
    ChatMessage("assistant", "Planned; stopping."),
    ChatMessage("user", continuation_prompt(1, 2), origin="guard"),
    ChatMessage("assistant", "Building."),
    ChatMessage("user", "The report is not sent yet.", origin="hook"),
    ChatMessage("user", MID_TURN_PREFIX + "also the chart", origin="mid_turn"),
    ChatMessage("assistant", "Sent."),
    ChatMessage("user", "Background task t1 finished.", origin="automatic"),
    ChatMessage("user", continuation_prompt(2, 1)),  # a transcript from before origins were kept
    ChatMessage("user", "older prompt"),
]
SHOWN = [("user_message_chunk", "build the report"), ("agent_message_chunk", "Planned; stopping."),
         ("agent_message_chunk", "Building."), ("agent_message_chunk", "Sent."),
         ("user_message_chunk", "Background task t1 finished."), ("user_message_chunk", "older prompt")]


def shown(events) -> list[tuple[str, str]]:
    return [(e.data["update"]["sessionUpdate"], e.data["update"]["content"]["text"]) for e in events
            if e.type == "session_update" and "content" in e.data["update"]]


def written(tmp_path) -> Conversation:
    transcript = Transcript(tmp_path, "s1")
    for message in CONVERSATION:
        transcript.append(message)
    return Conversation(transcript)


def test_a_live_reload_publishes_nothing(tmp_path) -> None:
    bus = EventBus()
    bus.publish("session_update", {"sessionId": "s1", "update": {"sessionUpdate": "current_mode_update",
                                                                 "currentModeId": "default"}})  # live: not seedable
    subscription = bus.subscribe()
    conversation = written(tmp_path)
    assert restore_conversation(conversation, Publisher("s1", bus), None) == len(CONVERSATION)
    assert len(conversation) == len(CONVERSATION)  # taken from the transcript
    assert bus.last_event_id == 1 and subscription.get_nowait() is None


def update(bus: EventBus, kind: str, text: str, prompt_id: str) -> None:
    bus.publish("session_update", {"sessionId": "s1", "update": {"sessionUpdate": kind,
                                                                 "content": {"type": "text", "text": text}}}, prompt_id)


def test_a_loading_client_is_shown_the_earlier_turns_compacted_then_the_running_turn_as_it_streamed() -> None:
    bus = EventBus()
    update(bus, "user_message_chunk", "plan a picnic", "p1")
    update(bus, "agent_message_chunk", "Bring the ", "p1")
    update(bus, "agent_message_chunk", "blanket.", "p1")
    bus.publish("turn_complete", {"sessionId": "s1", "stopReason": "end_turn", "promptId": "p1"}, "p1")
    update(bus, "user_message_chunk", "run echo hi", "p2")
    bus.publish("permission_request", {"sessionId": "s1", "requestId": "r1"}, "p2")

    events, last = load_replay(bus, turn_active=False)
    assert last == bus.last_event_id == 6
    assert [(e.type, e.id) for e in events] == [("session_update", 1), ("session_update", 3), ("turn_complete", 4),
                                               ("session_update", 5), ("permission_request", 6)]
    assert shown(events) == [("user_message_chunk", "plan a picnic"), ("agent_message_chunk", "Bring the blanket."),
                             ("user_message_chunk", "run echo hi")]
    # While a prompt is active, no earlier turn's end: qwen's Web Shell would take it for the active one's.
    events, _ = load_replay(bus, turn_active=True)
    assert [e.type for e in events] == ["session_update", "session_update", "session_update", "permission_request"]
    assert bus.last_event_id == 6  # nothing published


def test_a_restart_without_a_compacted_replay_shows_the_same(tmp_path) -> None:
    segments = replay_segments(None, "s1", written(tmp_path).reload())
    assert shown(e for segment in segments for e in segment) == SHOWN
