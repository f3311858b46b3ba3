"""Long texts: estimated a character class at a time (the same figure as run by run), and, when a request
first needs them, a slice per task step (actors/model/estimate.py ``_class_tokens``, ``slices``,
``estimate_long_texts``)."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.model import estimate
from actors.model.base import ChatMessage, ToolCall
from actors.model.estimate import estimate_long_texts, runs_tokens, slices, text_tokens

# Every class the estimate tells apart, and the characters where they meet (a control character takes in
# the whitespace after it; mixed case splits a word).
ALPHABET = st.sampled_from(list("aZbYc09 \t\n\r\f\v.,;!{}-_") + ["é", "中", "😀", "\x01", "\x7f", "  ", "\n\n"])
TEXTS = st.lists(ALPHABET, max_size=200).map("".join)


@settings(max_examples=400, deadline=None)
@given(TEXTS)
def test_a_class_at_a_time_is_the_same_estimate_as_run_by_run(text: str) -> None:
    assert estimate._tokens(text) == runs_tokens(text)
    assert estimate._class_tokens(text.replace("\x01", "").replace("\x7f", "")) == \
        runs_tokens(text.replace("\x01", "").replace("\x7f", ""))


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.integers(min_value=1, max_value=50))
def test_slices_and_the_runs_cut_at_add_up_to_the_whole(text: str, size: int) -> None:
    pieces = list(slices(text, size))
    assert "".join(piece + cut for piece, cut in pieces) == text
    assert sum(estimate._tokens(piece) + (runs_tokens(cut) if cut else 0) for piece, cut in pieces) == \
        runs_tokens(text)
    assert all(len(piece) >= size for piece, _ in pieces[:-1])


def test_a_text_with_nowhere_to_cut_is_one_slice() -> None:
    assert list(slices("x" * 100, 10)) == [("x" * 100, "")]


def test_a_slice_size_under_one_is_refused() -> None:
    with pytest.raises(ValueError, match="size must be at least 1, got 0"):
        next(slices("a b c", 0))


def test_text_without_single_spaces_is_cut_at_its_newlines_and_wider_whitespace() -> None:
    paths = "\n".join(f"/srv/data/file-{i:05d}.json" for i in range(20_000))  # ls output: no space at all
    cjk = "\n\n".join("中文段落" * 50 for _ in range(400))  # paragraphs without spaces
    columns = "ab  " * 250_000  # fixed-width columns: no single space between two words
    for text in (paths, cjk, columns):
        pieces = list(slices(text))
        assert len(pieces) > len(text) // (2 * estimate.SLICE)
        assert max(len(piece) for piece, _ in pieces) < 2 * estimate.SLICE


async def test_a_long_answer_is_estimated_a_slice_a_task_step_and_then_known() -> None:
    answer = "".join(f"token {i:05d} of a long streamed answer " for i in range(3000))  # ~120 KB
    call = ToolCall("t1", "write", {"text": answer.upper()})
    messages = [ChatMessage("user", "go"), ChatMessage("assistant", answer, tool_calls=(call,))]
    estimate.message_tokens(messages[0])  # estimated for an earlier request
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    estimate._CACHE.clear()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()
        before = ticks
        await estimate_long_texts(messages)
        nursery.cancel_scope.cancel()
    slices_each = len(list(slices(answer)))
    assert slices_each > 4
    assert ticks - before >= 2 * slices_each - 1  # the ticker ran between slices of both texts
    arguments = estimate._arguments_text(call.arguments)
    assert estimate._CACHE[len(arguments), hash(arguments)] == runs_tokens(arguments)
    assert estimate._CACHE[len(answer), hash(answer)] == runs_tokens(answer) == text_tokens(answer)


async def test_messages_estimated_for_an_earlier_request_are_not_visited_again() -> None:
    old = ChatMessage("assistant", "word " * 10_000)
    estimate.message_tokens(old)
    estimate._CACHE.clear()
    await estimate_long_texts([old, ChatMessage("user", "short")])
    assert not estimate._CACHE  # stopped at the first message with an estimate; the short one needs no slices
