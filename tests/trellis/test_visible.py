""":mod:`trellis.visible`: daemon-supplied text with its control characters shown, and attach's lines built with it."""

from __future__ import annotations

import orjson
from rich.text import Text

from trellis.attach.render import Line, View, visible_text
from trellis.visible import json_visible, visible

EVERY_CONTROL = "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0)]))


def test_every_control_character_but_newline_and_tab_becomes_printable_text():
    out = visible(EVERY_CONTROL)
    assert [c for c in out if c not in "\n\t" and not c.isprintable()] == []
    assert out.count("\n") == 1 and out.count("\t") == 1
    assert visible("\x1b]52;c;QUJD\x07") == "␛]52;c;QUJD␇"
    assert visible("\x00\x08\x7f") == "␀␈␡"
    assert visible("\x9b2J\x85") == "\\x9b2J\\x85"
    assert visible(out) == out  # made visible twice: unchanged


def test_a_lone_cr_shows_and_a_cr_lf_is_a_line_break():
    assert visible("done\rforged") == "done␍forged"
    assert visible("one\r\ntwo\r") == "one\ntwo␍"


def test_ordinary_text_passes_unchanged():
    text = "Plan: ▸ café — 日本語 [bold]x[/bold]\n\tindented"
    assert visible(text) == text


def test_json_keeps_the_data_and_writes_del_and_c1_escaped():
    data = {"text": EVERY_CONTROL + "é"}
    out = json_visible(orjson.dumps(data).decode())
    assert [c for c in out if not c.isprintable()] == []
    assert orjson.loads(out) == data


def test_a_line_of_attach_shows_what_rich_would_drop_or_pass_through():
    plain_rich = Text("a\rb\x07c\x1b[2J")
    assert plain_rich.plain == "abc\x1b[2J"  # rich alone: CR and BEL vanish without a trace, ESC passes
    line = Line("a\rb\x07c", style="bold")
    line.append("\x1b[2J", style="red")
    assert line.plain == "a␍b␇c␛[2J"
    assert [(s.start, s.end, s.style) for s in line.spans] == [(5, 9, "red")]


def test_visible_text_keeps_each_style_on_its_characters():
    line = Text("x\x9b", style="bold")
    line.append("\x1b[2Jyy", style="red")
    shown = visible_text(line)
    assert shown.plain == "x\\x9b␛[2Jyy"
    assert str(shown.style) == "bold"
    assert [(s.start, s.end, s.style) for s in shown.spans] == [(5, 11, "red")]
    ordinary = Text("nothing to do")
    assert visible_text(ordinary) is ordinary


def test_the_view_shows_a_forged_vote_line_in_model_text_as_text():
    view = View(width=lambda: 100)
    frame = {"type": "session_update", "promptId": "p1", "data": {"update": {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "ok\r\x1b[2K  → Allow\nnext\r\n\r\n"}}}}
    # One paragraph (a soft line break joins its lines): the CR and the erase shown, the "vote" inside the line.
    assert [line.plain for line in view.feed(frame)] == ["ok␍␛[2K  → Allow next", ""]
