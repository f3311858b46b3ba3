"""Every event builder of actors/wire/events.py makes data its class in event_data.py describes.

The builders stay dict-making functions; the classes are what the OpenAPI document's event schemas
are generated from (actors/wire/schema.py). A builder that gains a field its class lacks fails here.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from actors import wire
from actors.wire import event_data
from actors.wire.schema import REF_PREFIX, schemas_of

DEFS = schemas_of(*event_data.EVENT_DATA.values(), event_data.EventEnvelope)
REGISTRY = Registry().with_resource("urn:wire", DRAFT202012.create_resource({"components": {"schemas": DEFS}}))
USAGE = wire.usage_summary(wire.usage_tally(2, 10, 5, 0, 15), {"primary": wire.usage_tally(2, 10, 5, 0, 15)})


def check(kind: str, data: dict[str, Any]) -> None:
    name = event_data.EVENT_DATA[kind].__name__
    schema = {"$ref": "urn:wire#" + REF_PREFIX[1:] + name}
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(data)


BUILT = [
    ("session_update", wire.session_update("s", wire.text_update("agent_message_chunk", "hi"))),
    ("session_update", wire.session_update("s", wire.usage_update(wire.call_usage(1, 2, 3, None), "primary", 40))),
    ("session_update", wire.session_update("s", wire.content_update("user_message_chunk", {"type": "text", "text": "x"},
                                                                    {"replay": True}))),
    ("session_update", wire.session_update("s", wire.plan_update([{"id": "t1", "content": "do",
                                                                   "status": "pending"}]))),
    ("session_update", wire.session_update("s", wire.tool_call_update(
        "tool_call", "c1", title="read a.py", status="in_progress", raw_input={"path": "a.py"}, tool_kind="read",
        locations=[{"path": "/w/a.py", "line": 3}]))),
    ("session_update", wire.session_update("s", wire.tool_call_update(
        "tool_call_update", "c1", status="completed",
        content=[{"type": "content", "content": {"type": "text", "text": "ok"}}]))),
    ("session_update", wire.session_update("s", wire.mode_update("plan"))),
    ("session_update", wire.session_update("s", wire.session_info_update("A title", 1_719_000_000_000))),
    ("session_update", wire.session_update("s", wire.session_info_update(None, 1_719_000_000_000))),
    ("pending_prompt_added", wire.pending_prompt_added("s", "p", "text", 1)),
    ("pending_prompt_started", wire.pending_prompt_started("s", "p", "text")),
    ("pending_prompt_completed", wire.pending_prompt_completed("s", "p", "removed")),
    ("turn_complete", wire.turn_complete("s", "p", "end_turn")),
    ("turn_complete", wire.turn_complete("s", "p", "max_tokens", USAGE, wire.token_limit(
        "max_tokens", answer_cut=True, message="cut", limit=100, finish_reason="length"), hook_stop_reason="hook")),
    ("turn_error", wire.turn_error("s", "p", "boom", "timeout", USAGE)),
    ("mid_turn_message_injected", wire.mid_turn_message_injected("s", [
        {"messageId": "m", "displayText": "also", "content": [{"type": "text", "text": "also"}]}])),
    ("permission_request", wire.permission_request(
        "s", "r", {"toolCallId": "c", "status": "pending"},
        [{"optionId": "proceed_once", "name": "Allow", "kind": "allow_once"}])),
    ("permission_resolved", wire.permission_resolved("s", "r", {"outcome": "selected", "optionId": "cancel"})),
    ("permission_resolved", wire.permission_resolved("s", "r", {"outcome": "cancelled"})),
    ("background_task", wire.background_task("s", "t", "output", kind="shell", label="ls", text="x", truncated=0)),
    ("hook_result", wire.hook_result("s", "Stop", ["m"], [], "stopped")),
    ("followup_suggestion", wire.followup_suggestion("s", "p", ["next"])),
    ("session_metadata_updated", wire.session_metadata_updated("s", "A title", automatic=True)),
    ("session_metadata_updated", wire.session_metadata_updated("s", None, automatic=False)),
    ("approval_mode_changed", wire.approval_mode_changed("s", "default", "yolo")),
    ("model_switched", wire.model_switched("s", "qwen3-coder")),
    ("conversation_rewound", wire.conversation_rewound("s", 1, 4, None)),
    ("conversation_rewound", wire.conversation_rewound("s", 0, 0, "u1")),
    ("rewind_undone", wire.rewind_undone("s", "u1", 6, "u2")),
    ("session_closed", wire.session_closed("s", "closed")),
    ("state_resync_required", wire.state_resync_required("ring_evicted", 3, 9).data),
    ("replay_complete", wire.replay_complete(3, 57, 57).data),
    ("history_truncated", wire.history_truncated(5, 7, max_bytes=10, truncated_turns=2).data),
    ("history_truncated", wire.history_truncated(5, 7, max_bytes=8 * 2**20, max_events=8000,
                                                 scope="live_journal").data),
    ("slow_client_warning", wire.slow_client_warning(192, 256, 10, 20, 57, "frames").data),
    ("client_evicted", wire.client_evicted("queue_overflow", 256, 256, 10, 20, 58, event_bytes=4).data),
]


@pytest.mark.parametrize("kind, data", BUILT, ids=[f"{i}-{kind}" for i, (kind, _) in enumerate(BUILT)])
def test_each_builder_makes_what_its_class_describes(kind: str, data: dict[str, Any]):
    check(kind, data)


def test_every_event_type_has_a_built_example_here():
    assert {kind for kind, _ in BUILT} == set(event_data.EVENT_DATA)


def test_an_envelope_is_what_event_to_dict_writes():
    schema = {"$ref": "urn:wire#" + REF_PREFIX[1:] + "EventEnvelope"}
    validator = jsonschema.Draft202012Validator(schema, registry=REGISTRY)
    validator.validate(wire.Event("turn_complete", {}, "p", 5, 1_719_000_000_000, "client").to_dict())
    validator.validate(wire.replay_complete(0, 0, 0).to_dict())  # synthetic: no id, no _meta
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"v": 1, "type": "x", "data": {}, "bogus": 1})


def test_a_field_the_class_lacks_is_refused():
    with pytest.raises(jsonschema.ValidationError):
        check("session_closed", {**wire.session_closed("s", "closed"), "extra": 1})
