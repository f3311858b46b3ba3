"""A pattern's size as regex compiles it, read from its text (actors/tools/regex_size.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.tools.regex_size import MAX_DEPTH, NestedTooDeeply, repeat_size


@pytest.mark.parametrize("pattern, size", [
    # A group's header counts as literals (the estimate errs large): (?:a|b) is 3.
    ("", 0), ("abc", 3), (r"a\.b", 3), ("[a-z]", 1), ("[]a]", 1), (r"[\]x]y", 2), ("a|bc", 3),
    ("a*", 1), ("a+", 2), ("a?b", 2), ("a{3}", 4), ("a{3,}", 4), ("a{,3}", 1), ("a{2,5}?", 3),
    ("(ab){10}", 22), ("(a{10}){10}", 121), ("(?:a|b){4}", 15), ("x{", 2), ("x{a}", 4),
    ("((a)", 1), ("a)", 2),
])
def test_sizes(pattern: str, size: int):
    assert repeat_size(pattern) == size


def test_a_pattern_that_would_freeze_the_compile_is_measured_at_once():
    assert repeat_size("(a{1000}){1000}") > 1_000_000
    assert repeat_size("((((x{99999}){99999}){99999}){99999})") > 10**19


def test_deep_nesting_is_refused_without_recursion():
    with pytest.raises(NestedTooDeeply):
        repeat_size("(" * 100_000 + "a" + ")" * 100_000)
    assert repeat_size("(" * MAX_DEPTH + "a" + ")" * MAX_DEPTH) == 1


@given(st.text(alphabet="ab|()[]{}*+?,0123\\^$.", max_size=40))
def test_any_text_is_measured_without_an_error(pattern: str):
    assert repeat_size(pattern) >= 0


@given(st.lists(st.sampled_from(["a", "b", ".", r"\d", "[xy]"]), max_size=30))
def test_a_pattern_of_plain_items_counts_each_once(items: list[str]):
    assert repeat_size("".join(items)) == len(items)
