"""``trellis attach`` answers a permission only with an explicit choice (issue 35: a typed keystroke approved a command).

The user is typing a sentence full of answer keys (``a``, ``A``, ``r``,
``R``, digits) when a permission request arrives: none of those keys votes —
the request stays pending on the daemon and the command does not run — and
the text stays in the line. Then a key on an empty line answers it, and the
sentence set aside meanwhile comes back and is sent whole.
"""

from __future__ import annotations

import time

import pytest

from tests.trellis.terminal import PTY_PROBLEM, world  # noqa: F401 - world: the fixture
from trellis.attach.screen import GRACE

pytestmark = pytest.mark.skipif(PTY_PROBLEM is not None, reason=PTY_PROBLEM or "")
BEFORE = "please wait "  # typed before the request arrives
AFTER = "and say yes: a A r R 1 2, then dance"  # typed while it is on screen, every key of it a vote before


def pending_permissions(d, sid: str) -> list[str]:
    with d.client() as client:
        return client.get(f"/session/{sid}/status").json()["pendingPermissions"]


def type_slowly(child, text: str, pause: float = 0.03) -> None:
    for char in text:  # one key at a time, as a person types (a paste would arrive as one bracketed event)
        child.send(char)
        time.sleep(pause)


def test_keys_typed_into_a_line_with_text_are_text_and_a_key_on_an_empty_line_answers(world):
    d = world["daemon"]().start([
        [{"text": "working on it\n"}, {"sleep": 1.0},
         {"tool_call": {"name": "shell", "arguments": {"command": "echo the-command-ran"}}}],
        [{"text": "after the vote\n"}],
        [{"text": "got the sentence\n"}],
    ])
    screen = world["attach"](d)
    sid = screen.session_id()
    screen.line("start")
    screen.expect("working on it")
    type_slowly(screen.child, BEFORE)
    screen.expect("? permission: execute: echo the-command-ran")
    time.sleep(GRACE + 0.3)  # well past the time a single key needs to count: only the line's text protects
    type_slowly(screen.child, AFTER)
    screen.settle(1.0)
    requests = pending_permissions(d, sid)
    assert len(requests) == 1, "a key typed into the sentence answered the permission request"
    shown = screen.screen()
    assert "→ Allow" not in shown and "→ Reject" not in shown
    assert "    the-command-ran" not in shown  # its output: it did not run
    # The line is set aside (Ctrl-U), the now empty line takes one key as the choice, the text comes back (Ctrl-Y).
    screen.child.sendcontrol("u")
    time.sleep(0.3)
    screen.child.send("a")
    screen.expect("→ Allow")
    screen.expect("    the-command-ran")
    screen.expect("after the vote")
    screen.expect("✓ turn complete")
    assert pending_permissions(d, sid) == []
    screen.child.sendcontrol("y")
    time.sleep(0.2)
    screen.child.send("\r")
    screen.expect(f"› {BEFORE}{AFTER}")  # the whole sentence, nothing taken out of it, sent as the next prompt
    screen.expect("got the sentence")
    screen.child.sendcontrol("d")
    assert screen.exit_code() == 0
