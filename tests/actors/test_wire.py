"""Strict decoding of request bodies in actors/wire/bodies.py: valid bodies, and each bad one named by path."""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest

from actors import wire
from actors.wire import (
    CancelledOutcome,
    CreateSessionBody,
    MidTurnMessageBody,
    PermissionVoteBody,
    PromptBody,
    ResourceBlock,
    ResourceLinkBlock,
    SelectedOutcome,
    TextBlock,
    WireError,
    decode,
)


def body(value: Any) -> bytes:
    return orjson.dumps(value)


def bad(value: Any, cls: type) -> WireError:
    raw = value if isinstance(value, bytes) else body(value)
    with pytest.raises(WireError) as info:
        decode(raw, cls)
    err = info.value
    assert isinstance(err.message, str) and err.message
    assert err.path in str(err) and err.message in str(err)
    return err


TEXT = {"type": "text", "text": "hello"}


# ----------------------------------------------------------------- valid bodies


def test_prompt_body_with_every_block_type() -> None:
    value = {
        "prompt": [
            TEXT,
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "size": 12},
            {"type": "resource", "resource": {"uri": "file:///b.txt", "text": "bee"}},
        ],
        "_meta": {"retry": True},
    }
    decoded = decode(body(value), PromptBody)
    assert decoded.prompt[0] == TextBlock(type="text", text="hello")
    assert [b.type for b in decoded.prompt] == ["text", "image", "audio", "resource_link", "resource"]
    assert isinstance(decoded.prompt[3], ResourceLinkBlock) and decoded.prompt[3].size == 12
    assert isinstance(decoded.prompt[4], ResourceBlock) and decoded.prompt[4].resource.text == "bee"
    assert decoded.meta == {"retry": True}
    assert decoded.text == "hello\n[image]\n[audio]\n[a.txt](file:///a.txt)\nbee"


def test_create_session_body() -> None:
    assert decode(b"{}", CreateSessionBody) == CreateSessionBody()
    decoded = decode(body({"cwd": "/tmp", "sessionId": "s-1", "_meta": {"k": 1}}), CreateSessionBody)
    assert decoded == CreateSessionBody(cwd="/tmp", sessionId="s-1", meta={"k": 1})


def test_mid_turn_message_body() -> None:
    assert decode(body({"message": "hi"}), MidTurnMessageBody) == MidTurnMessageBody(message="hi")
    assert decode(body({"message": "hi", "messageId": "m-1"}), MidTurnMessageBody).messageId == "m-1"


def test_permission_vote_bodies() -> None:
    selected = decode(body({"outcome": {"outcome": "selected", "optionId": "proceed_once"}}), PermissionVoteBody)
    assert selected.outcome == SelectedOutcome(outcome="selected", optionId="proceed_once")
    cancelled = decode(body({"outcome": {"outcome": "cancelled"}}), PermissionVoteBody)
    assert cancelled.outcome == CancelledOutcome(outcome="cancelled")


def test_meta_round_trips_under_its_wire_name() -> None:
    value = {"prompt": [{"type": "text", "text": "a", "_meta": {"k": 1}}], "_meta": {"continueLastTurn": True}}
    decoded = decode(body(value), PromptBody)
    assert decoded.meta == {"continueLastTurn": True}
    assert decoded.prompt[0].meta == {"k": 1}
    assert wire.unstructure(decoded) == value
    assert decode(wire.dumps(wire.unstructure(decoded)), PromptBody) == decoded
    session = decode(body({"cwd": "/x", "_meta": {"a": [1]}}), CreateSessionBody)
    assert wire.unstructure(session) == {"cwd": "/x", "_meta": {"a": [1]}}


def test_python_name_meta_is_not_accepted_on_the_wire() -> None:
    err = bad({"prompt": [TEXT], "meta": {}}, PromptBody)
    assert err.path == "$.meta" and "meta" in err.message


# ----------------------------------------------------------------- malformed input


def test_malformed_json() -> None:
    err = bad(b'{"prompt": [', PromptBody)
    assert err.code == "invalid_json"
    assert err.path == "$"
    assert "invalid JSON" in err.message


@pytest.mark.parametrize("value", [[TEXT], "text", 3, None, True])
def test_top_level_must_be_an_object(value: Any) -> None:
    err = bad(value, PromptBody)
    assert err.path == "$"
    assert err.code == "invalid_request"
    assert "expected a JSON object" in err.message


@pytest.mark.parametrize(
    ("cls", "value", "path", "expected"),
    [
        (PromptBody, {"prompt": [{"type": "text", "text": 3}]}, "$.prompt[0].text", "expected a string"),
        (PromptBody, {"prompt": [TEXT, {"type": "text", "text": True}]}, "$.prompt[1].text", "expected a string"),
        (MidTurnMessageBody, {"message": "hi", "messageId": 5}, "$.messageId", "expected a string"),
        (MidTurnMessageBody, {"message": True}, "$.message", "expected a string"),
        (PromptBody, {"prompt": [TEXT], "_meta": 3}, "$._meta", "expected a JSON object"),
        (PromptBody, {"prompt": [TEXT], "_meta": "retry"}, "$._meta", "expected a JSON object"),
        (PromptBody, {"prompt": [{"type": "text", "text": "a", "_meta": []}]}, "$.prompt[0]._meta",
         "expected a JSON object"),
        (CreateSessionBody, {"cwd": 3}, "$.cwd", "expected a string"),
        (CreateSessionBody, {"_meta": 3}, "$._meta", "expected a JSON object"),
        (PromptBody, {"prompt": [{"type": "resource_link", "uri": "u", "name": "n", "size": "3"}]},
         "$.prompt[0].size", "expected an integer"),
        (PromptBody, {"prompt": [{"type": "resource_link", "uri": "u", "name": "n", "size": True}]},
         "$.prompt[0].size", "expected an integer"),
        (PromptBody, {"prompt": [{"type": "resource_link", "uri": "u", "name": "n", "size": 1.5}]},
         "$.prompt[0].size", "expected an integer"),
        (PromptBody, {"prompt": [{"type": "resource", "resource": {"uri": "u", "text": 5}}]},
         "$.prompt[0].resource.text", "expected a string"),
        (PermissionVoteBody, {"outcome": {"outcome": "selected", "optionId": 1}}, "$.outcome.optionId",
         "expected a string"),
    ],
)
def test_wrong_scalar_types_are_not_coerced(cls: type, value: Any, path: str, expected: str) -> None:
    err = bad(value, cls)
    assert err.path == path
    assert err.message == expected


@attrs.frozen(kw_only=True)
class Flags:
    on: bool
    ratio: float = 0.0


def test_a_bool_given_as_a_string_is_refused() -> None:
    with pytest.raises(WireError) as info:
        wire.structure({"on": "true"}, Flags)
    assert (info.value.path, info.value.message) == ("$.on", "expected a boolean")
    with pytest.raises(WireError) as info:
        wire.structure({"on": 1}, Flags)
    assert info.value.path == "$.on"
    assert wire.structure({"on": False, "ratio": 2}, Flags) == Flags(on=False, ratio=2)  # an int is a number
    with pytest.raises(WireError) as info:
        wire.structure({"on": False, "ratio": "2"}, Flags)
    assert (info.value.path, info.value.message) == ("$.ratio", "expected a number")


@pytest.mark.parametrize(
    ("cls", "value", "path", "field"),
    [
        (PromptBody, {"prompt": [TEXT], "bogus": 1}, "$.bogus", "bogus"),
        (CreateSessionBody, {"cwd": "/x", "extra": 1}, "$.extra", "extra"),
        (MidTurnMessageBody, {"message": "m", "priority": 1}, "$.priority", "priority"),
        (PermissionVoteBody, {"outcome": {"outcome": "cancelled"}, "why": "x"}, "$.why", "why"),
        (PromptBody, {"prompt": [{"type": "text", "text": "a", "bogus": 1}]}, "$.prompt[0].bogus", "bogus"),
        (PromptBody, {"prompt": [TEXT, {"type": "image", "data": "A", "mimeType": "m", "alt": "x"}]},
         "$.prompt[1].alt", "alt"),
        (PromptBody, {"prompt": [{"type": "resource", "resource": {"uri": "u", "etag": "x"}}]},
         "$.prompt[0].resource.etag", "etag"),
        (PermissionVoteBody, {"outcome": {"outcome": "cancelled", "x": 1}}, "$.outcome.x", "x"),
        (PromptBody, {"prompt": [TEXT], "a b": 1}, '$["a b"]', "a b"),
    ],
)
def test_unknown_fields_are_refused(cls: type, value: Any, path: str, field: str) -> None:
    err = bad(value, cls)
    assert err.path == path
    assert field in err.message
    assert "extra" in err.message or "unknown" in err.message


def test_unknown_content_block_type() -> None:
    err = bad({"prompt": [TEXT, {"type": "video", "uri": "x"}]}, PromptBody)
    assert err.path == "$.prompt[1]"
    assert "'video'" in err.message
    assert "text" in err.message  # says what would have been accepted


def test_content_block_without_type() -> None:
    err = bad({"prompt": [{"text": "no type"}]}, PromptBody)
    assert err.path == "$.prompt[0]"
    assert "content block" in err.message


def test_content_block_that_is_not_an_object() -> None:
    err = bad({"prompt": ["just text"]}, PromptBody)
    assert err.path == "$.prompt[0]"
    assert "object" in err.message


def test_unknown_permission_outcome() -> None:
    err = bad({"outcome": {"outcome": "maybe"}}, PermissionVoteBody)
    assert err.path == "$.outcome"
    assert "'maybe'" in err.message


@pytest.mark.parametrize(
    ("cls", "value", "path"),
    [
        (PromptBody, {}, "$.prompt"),
        (PromptBody, {"_meta": {}}, "$.prompt"),
        (PromptBody, {"prompt": [{"type": "text"}]}, "$.prompt[0].text"),
        (PromptBody, {"prompt": [{"type": "image", "data": "A"}]}, "$.prompt[0].mimeType"),
        (MidTurnMessageBody, {"messageId": "m"}, "$.message"),
        (PermissionVoteBody, {}, "$.outcome"),
        (PermissionVoteBody, {"outcome": {"outcome": "selected"}}, "$.outcome.optionId"),
    ],
)
def test_missing_required_field(cls: type, value: Any, path: str) -> None:
    err = bad(value, cls)
    assert err.path == path
    assert err.message == "required field missing"


@pytest.mark.parametrize("prompt", ["hello", TEXT, 3, None])
def test_prompt_must_be_an_array(prompt: Any) -> None:
    err = bad({"prompt": prompt}, PromptBody)
    assert err.path == "$.prompt"
    assert err.message == "expected a JSON array"


def test_wire_error_defaults() -> None:
    err = WireError("nope")
    assert (err.message, err.path, err.code) == ("nope", "$", "invalid_request")
    assert isinstance(err, ValueError)


def test_an_encoded_event_kept_in_the_ring_holds_its_size_not_orjsons_buffer():
    import tracemalloc

    from actors.wire import Event

    events = [Event("session_update", {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                                                                      "content": {"type": "text", "text": f"w{i}"}}})
              for i in range(2000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        frames = [e.json() for e in events]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    size = sum(len(f) for f in frames)
    assert size < 2000 * 150
    assert held < 2 * size + 2000 * 64  # orjson's own output would hold at least 1 KiB each (2 MB here)
