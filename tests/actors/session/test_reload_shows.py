"""What a live session's reload (``POST /session/:id/load``) shows its clients of the conversation: the user's
own messages and the model's answers, never the texts only the model reads (the guard's continuations, a Stop
hook's reasons, mid-turn input folded into tool results). Before, each was shown as a message the user typed."""

from __future__ import annotations

from actors.events import EventBus
from actors.guard import continuation_prompt
from actors.model import ChatMessage
from actors.session.conversation import Conversation
from actors.session.outcomes import MID_TURN_PREFIX
from actors.session.persistence import replay_segments, restore_conversation
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


def test_a_live_reload_shows_what_the_user_said_and_the_model_answered(tmp_path) -> None:
    bus = EventBus()
    bus.publish("session_update", {"sessionId": "s1", "update": {"sessionUpdate": "current_mode_update",
                                                                 "currentModeId": "default"}})  # live: not seedable
    assert restore_conversation(written(tmp_path), Publisher("s1", bus), None) == len(CONVERSATION)
    assert shown(bus.ring) == SHOWN


def test_a_restart_without_a_compacted_replay_shows_the_same(tmp_path) -> None:
    segments = replay_segments(None, "s1", written(tmp_path).reload())
    assert shown(e for segment in segments for e in segment) == SHOWN
