"""messages_json: the kept, extended array is always what encoding the request afresh gives."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.model.base import ChatMessage
from actors.model.encoded import messages_json, messages_json_between


def encode(m: ChatMessage) -> bytes:
    return orjson.dumps({"role": m.role, "content": m.content})


def fresh(messages) -> bytes:
    return orjson.dumps([{"role": m.role, "content": m.content} for m in messages])


def test_a_request_that_extends_the_last_encodes_only_its_new_messages():
    encoded: list[str] = []

    def counting(m: ChatMessage) -> bytes:
        encoded.append(m.content)
        return encode(m)

    system = ChatMessage("system", "be brief")
    history = [system, ChatMessage("user", "one"), ChatMessage("assistant", "two")]
    assert messages_json(history, counting) == fresh(history)
    history.append(ChatMessage("user", "three"))
    assert messages_json(history, counting) == fresh(history)
    assert encoded == ["be brief", "one", "two", "three"]
    # A branch (a suggestion's instruction), then the conversation going on past it.
    branch = [*history, ChatMessage("user", "suggest the next prompt")]
    assert messages_json(branch, counting) == fresh(branch)
    history.append(ChatMessage("assistant", "four"))
    assert messages_json(history, counting) == fresh(history)
    assert encoded[4:] == ["suggest the next prompt", "four"]


texts = st.lists(st.sampled_from(["x", "y", "z", "üñí", "a\nb"]), max_size=12)


@settings(max_examples=300, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 12), texts), min_size=1, max_size=8))
def test_any_sequence_of_requests_gives_what_a_fresh_encoding_gives(steps):
    first = ChatMessage("system", "s")
    history: list[ChatMessage] = [first]
    for keep, added in steps:
        history = history[: max(1, keep)] + [ChatMessage("user", t) for t in added]
        assert messages_json(history, encode) == fresh(history)


@settings(max_examples=200, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 12), texts), min_size=1, max_size=8))
def test_the_array_spliced_between_a_prefix_and_a_suffix_is_the_same_array(steps):
    first = ChatMessage("system", "s")
    history: list[ChatMessage] = [first]
    for keep, added in steps:
        history = history[: max(1, keep)] + [ChatMessage("user", t) for t in added]
        body = messages_json_between(b'{"messages":', history, encode, b',"stream":true}')
        assert body == orjson.dumps({"messages": orjson.Fragment(fresh(history)), "stream": True})
        assert messages_json(history, encode) == fresh(history)  # the kept array is left as it was


def test_no_messages_splice_an_empty_array():
    assert messages_json_between(b"<", [], encode, b">") == b"<[]>"
