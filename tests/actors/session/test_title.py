"""A session's automatic title: the first prompt's first line, collapsed and cut short."""

from __future__ import annotations

from actors.session.title import AUTOMATIC_TITLE_CHARS, title_from_prompt


def test_the_first_non_blank_line_collapsed():
    assert title_from_prompt("\n  \n  Fix  the\tbuild \nthen the docs") == "Fix the build"


def test_a_long_line_is_cut_to_80_characters_with_an_ellipsis():
    title = title_from_prompt("word " * 40)
    assert len(title) == AUTOMATIC_TITLE_CHARS == 80 and title.endswith("…") and not title.endswith(" …")
    assert title_from_prompt("x" * 80) == "x" * 80  # exactly 80: kept whole


def test_no_text_or_a_slash_command_gives_no_title():
    assert title_from_prompt("") is None and title_from_prompt(" \n\t") is None
    assert title_from_prompt("/compact") is None and title_from_prompt("/model qwen3") is None
    assert title_from_prompt("/not-a-command here") == "/not-a-command here"
