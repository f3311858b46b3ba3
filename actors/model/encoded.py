"""A conversation's messages as a JSON array, encoded once and extended.

Each request of a conversation sends the whole history again. Encoding it
again is wasted work, and so is even visiting each message: in a daemon's
large heap the messages of a long conversation lie far apart, and touching
1,200 of them costs half a millisecond in cache misses alone.
:func:`messages_json` therefore keeps, on the conversation's first message
(the session's system message, which the session keeps while its text
holds), the encoded array of the last request with the end offset of each
message in it. The next request:

1. finds how many of its leading messages equal the kept ones: what
   :mod:`.prefix` vouches for (both built from the same session history
   while it only grew) is taken as equal, the rest compared (a pointer
   comparison per message while they are the same objects);
2. cuts the kept array after them and appends the rest, each encoded by
   ``encode``.

A request that extends the last costs only its new messages; one that
branches (a follow-up suggestion's instruction, then the next prompt)
re-encodes from where it branched; a new first message (another system
prompt, a rewound history) starts afresh. The kept array is about the size
of the conversation's JSON, once per conversation.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any

from .prefix import shared_prefix

MEMO_KEY = "encoded_conversation"


class _Kept:
    __slots__ = ("messages", "data", "ends")

    def __init__(self) -> None:
        self.messages: tuple[Any, ...] = ()
        self.data = bytearray(b"[")
        self.ends = array("Q")  # ends[i]: the offset just after message i in data


def messages_json(messages: Sequence[Any], encode: Callable[[Any], bytes], memo_key: str = MEMO_KEY) -> bytes:
    """The JSON array of ``messages`` (each encoded by ``encode``), reusing what the last request encoded."""
    messages = tuple(messages)
    if not messages:
        return b"[]"
    data = _extended(messages, encode, memo_key)
    data += b"]"
    try:
        return bytes(data)
    finally:
        del data[-1:]


def messages_json_between(before: bytes, messages: Sequence[Any], encode: Callable[[Any], bytes], after: bytes,
                          memo_key: str = MEMO_KEY) -> bytes:
    """``before``, the JSON array of :func:`messages_json`, then ``after``: one new bytes object.

    A request body with the array spliced in (``{"model":…,"messages":[…],…}``):
    the kept array is copied once, straight into the body. Through
    :func:`messages_json` and an ``orjson.Fragment`` it was copied twice, and
    each copy of a long conversation's array is a fresh allocation of its size
    (about 110 page faults for 440 KB; the cost that grew with the history).
    """
    messages = tuple(messages)
    if not messages:
        return b"".join((before, b"[]", after))
    return b"".join((before, _extended(messages, encode, memo_key), b"]", after))


def _extended(messages: tuple[Any, ...], encode: Callable[[Any], bytes], memo_key: str) -> bytearray:
    """The kept array for ``messages`` (non-empty), extended or cut to them; without its closing ``]``."""
    memo = messages[0].memo
    kept = memo.get(memo_key)
    if kept is None:
        kept = memo[memo_key] = _Kept()
    shared = shared_prefix(kept.messages, messages)
    if shared < len(kept.ends):  # cut back to what is shared
        del kept.data[kept.ends[shared - 1] if shared else 1:]
        del kept.ends[shared:]
    data, ends = kept.data, kept.ends
    for message in messages[shared:]:
        if len(data) > 1:
            data += b","
        data += encode(message)
        ends.append(len(data))
    kept.messages = messages
    return data


__all__ = ["messages_json", "messages_json_between"]
