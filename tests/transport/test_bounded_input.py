"""Cursors and error messages never choke on, or echo back, huge input."""

from __future__ import annotations

import pytest

from actors import wire
from actors.wire import PromptBody, WireError
from transport.errors import HttpError, not_found_session
from transport.sse import parse_cursor

TEXT = {"type": "text", "text": "x"}


@pytest.mark.parametrize("raw", ["7" * 5000, "9" * 17, "-1", "1e3", "abc", "", "0x10", "+5", "5 "])
def test_a_cursor_that_is_not_a_safe_decimal_is_ignored(raw: str) -> None:
    assert parse_cursor(raw) is None


def test_a_safe_decimal_cursor_is_kept() -> None:
    assert [parse_cursor(v) for v in ("0", "007", str(2**53 - 1))] == [0, 7, 2**53 - 1]


def test_wire_errors_quote_only_an_excerpt() -> None:
    huge = "v" * 1_000_000
    for value in ({"prompt": [{"type": huge}]}, {"prompt": [TEXT], huge: 1},
                  {"prompt": [{**TEXT, huge: 1}]}):
        with pytest.raises(WireError) as info:
            wire.structure(value, PromptBody)
        assert len(str(info.value)) < 700 and "…" in str(info.value)


def test_an_unknown_field_path_names_the_field() -> None:
    with pytest.raises(WireError) as info:
        wire.structure({"prompt": [{**TEXT, "zz": 1, "bogus": 2}]}, PromptBody)
    assert info.value.path == "$.prompt[0].bogus"
    assert info.value.message == "unknown field 'bogus' (and 1 more)"


def test_http_errors_are_bounded_and_keep_head_and_tail() -> None:
    err = HttpError(400, "bad id '" + "x" * 5_000_000 + "': use letters", "invalid", "$.id")
    assert len(err.message) <= 300 and err.message.startswith("bad id 'xxx") and err.message.endswith("use letters")
    assert len(not_found_session("s" * 5000).message) < 120
    assert HttpError(404, "gone", "not_found").response().status_code == 404
