"""What two requests' message tuples share at their start, without visiting a long history.

Every request of a conversation is a new tuple of the whole history, and
two steps compare it with an earlier one: the token estimate (does it extend
the request the server last counted?) and the encoded body (how much of the
last array can be kept?). Compared item by item, a 1,500-message history
costs a pass over 1,500 objects scattered in a large heap, twice per slice
(taking the references, then dropping them); a few such passes a call were
most of what a call cost more at turn 500 than at turn 10.

So a tuple built from an append-only source says so: :func:`note_build`
records, on its first message's memo, that ``messages[offset:offset+count]``
were the first ``count`` items of ``source`` when it had been rewritten
``version`` times. Two tuples built from the same source at the same
version share those items up to the shorter count, as the same objects
(only appends happened in between); :func:`shared_prefix` takes that as
given and compares only what lies outside it. Anything it cannot vouch for
(another source, a rewrite, a tuple built elsewhere) is compared as before,
so the answer is the same; only its cost differs.
"""

from __future__ import annotations

from typing import Any

MEMO_KEY = "built_from"
KEPT = 4  # builds remembered per first message: a fit check, the send, a suggestion, the one before


def note_build(messages: tuple[Any, ...], source: Any, version: int, offset: int, count: int) -> None:
    """``messages[offset:offset + count]`` are ``source[:count]`` while ``source`` is at ``version``.

    ``source`` must only ever be appended to while its ``version`` holds (a
    session's :class:`~actors.session.history.History`); the record keeps
    ``messages`` and ``source`` alive, so an ``id`` is never reused under it.
    """
    if not messages:
        return
    memo = messages[0].memo
    builds: dict[int, tuple[Any, ...]] | None = memo.get(MEMO_KEY)
    if builds is None:
        builds = memo[MEMO_KEY] = {}
    builds.pop(id(messages), None)
    builds[id(messages)] = (messages, source, version, offset, count)
    while len(builds) > KEPT:
        del builds[next(iter(builds))]  # the oldest build first (dicts keep insertion order)


def vouched(old: tuple[Any, ...], new: tuple[Any, ...]) -> int:
    """How many leading items of ``old`` and ``new`` their build records vouch are the same (0: none)."""
    builds = new[0].memo.get(MEMO_KEY) if old and new and old[0] is new[0] else None
    if not builds:
        return 0
    a, b = builds.get(id(old)), builds.get(id(new))
    if a is None or b is None or a[0] is not old or b[0] is not new:
        return 0
    if a[1] is not b[1] or a[2] != b[2] or a[3] != b[3]:  # another source, a rewrite between, another layout
        return 0
    offset = a[3]
    if old[:offset] != new[:offset]:  # what precedes the source's items (the system message) is compared
        return 0
    return offset + min(a[4], b[4])


def shared_prefix(old: tuple[Any, ...], new: tuple[Any, ...]) -> int:
    """How many leading messages ``old`` and ``new`` share (equal by identity first, then by value)."""
    n = min(len(old), len(new))
    low = min(vouched(old, new), n)
    if old[low:n] == new[low:n]:
        return n
    high = n - 1  # the answer is in [low, high]: they differ somewhere in [low, n)
    while low < high:
        mid = (low + high + 1) // 2
        if old[low:mid] == new[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


__all__ = ["note_build", "shared_prefix", "vouched"]
