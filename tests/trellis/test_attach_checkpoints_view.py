"""What ``trellis attach`` shows for checkpoints (:class:`trellis.attach.render.View`), without a terminal: the
listing numbered as a rewind counts turns, the rewind's note, a bounded diff whose escapes are shown, and
Tab completion of the commands."""

from __future__ import annotations

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from trellis.attach.render import View, diff_lines
from trellis.attach.screen import HELP, Commands


def plain(lines) -> list[str]:
    return [line.plain for line in lines]


def test_the_listing_numbers_turns_from_zero_names_their_prompts_and_files_and_the_undo_entries():
    view = View(width=lambda: 100)
    update = {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "fix it"}}
    view.feed({"type": "session_update", "promptId": "p-1", "data": {"update": update}})
    listed = {"checkpoints": [
        {"turn": 0, "promptId": "p-1", "at": 1, "files": [{"path": "a.py", "change": "modified", "kind": "file"},
                                                          {"path": "new", "change": "added", "kind": "dir"}],
         "notCovered": ["big.bin"]},
        {"turn": 1, "promptId": "p-2", "at": 2, "files": [], "notCovered": []}],
        "undo": [{"undoId": "ck-1", "at": 3, "kind": "rewind", "turn": 1}]}
    shown = plain(view.checkpoint_lines(listed))
    assert shown[0].startswith("⎌ checkpoints (turns from 0")
    assert shown[1] == "  0. “fix it” (p-1): 2 file(s) changed"
    assert "       ~ a.py" in shown and "       + new (dir)" in shown
    assert "       ! not covered: big.bin" in shown
    assert "  1. (p-2): no file changed" in shown
    assert "  ck-1  before the rewind to turn 1" in shown


def test_a_rewind_is_a_note_of_the_cut_with_what_happened_to_the_files():
    view = View()
    shown = plain(view.rewound_lines("rewind", 2, {"historyLength": 4, "restored": ["a"], "deleted": ["b"],
                                                   "skipped": [{"path": "c", "reason": "ignored"}],
                                                   "undoId": "ck-9"}))
    assert shown[0].startswith("✂ ── conversation rewound: turn 2 and everything after it were dropped (4 mess")
    assert "  files restored: a" in shown and "  files deleted: b" in shown
    assert "  left alone: c (ignored)" in shown
    assert shown[-1] == "  /undo puts it back (ck-9)"
    only = plain(view.rewound_lines("rewind", 0, {"historyLength": 0}))
    assert "files left as they are" in only[-1]
    refused = plain(view.outside_lines(["x.txt"], "/rewind 0 files force"))
    assert "    x.txt" in refused and "`/rewind 0 files force` overrides" in refused[-1]


def rewound_event(turn: int, kept: int, undo_id: str | None) -> dict:
    return {"type": "conversation_rewound", "data": {"sessionId": "s", "turn": turn, "historyLength": kept,
                                                     "undoId": undo_id}}


def headlines(lines) -> list[str]:
    return [line.plain for line in lines if line.plain.startswith(("✂ ──", "⎌ ──"))]


def test_a_rewind_heard_by_answer_and_event_is_told_once_in_either_order():
    view = View()
    answer = {"historyLength": 2, "restored": ["a"], "undoId": "ck-1"}
    assert len(headlines(view.rewound_lines("rewind", 1, answer))) == 1
    assert view.feed(rewound_event(1, 2, "ck-1")) == []  # the answer told it
    assert len(headlines(view.feed(rewound_event(1, 2, "ck-1")))) == 1  # the same cut again: another rewind
    view = View()
    assert len(headlines(view.feed(rewound_event(1, 2, None)))) == 1
    shown = view.rewound_lines("rewind", 1, {"historyLength": 2})
    assert headlines(shown) == [] and "files left as they are" in shown[-1].plain  # the event told the cut


def test_another_clients_rewind_and_undo_are_told_by_their_events():
    view = View()
    cut = headlines(view.feed(rewound_event(3, 6, None)))
    assert cut == ["✂ ── conversation rewound: turn 3 and everything after it were dropped (6 message(s) kept); "
                   "what is shown above it is no longer in the session ──"]
    undone = {"type": "rewind_undone", "data": {"sessionId": "s", "undoId": "ck-1", "historyLength": 9,
                                                "newUndoId": "ck-2"}}
    assert headlines(view.feed(undone)) == [
        "⎌ ── undone: the conversation is back as it was before that rewind (9 message(s)) ──"]
    mine = View()
    assert len(headlines(mine.rewound_lines("undo", None, {"historyLength": 9, "undoId": "ck-2"}))) == 1
    assert mine.feed(undone) == []


def test_a_diff_is_bounded_and_its_escapes_are_shown_not_obeyed():
    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-\x1b[31mred\n+plain\n" + "".join(f"+{i}\n" for i in range(500))
    lines = diff_lines(diff, 80, limit=10)
    assert len(lines) == 11
    assert lines[-1].plain.startswith("… 495 more lines of the diff")
    assert all("\x1b" not in line.plain for line in lines)
    assert "-␛[31mred" in lines[3].plain
    assert lines[3].spans  # coloured by the diff lexer


def test_tab_completes_the_checkpoint_commands_and_help_lists_them():
    def complete(text: str) -> list[str]:
        return [c.text for c in Commands().get_completions(Document(text), CompleteEvent())]

    assert complete("/che") == ["checkpoints "]
    assert complete("/rew") == ["rewind "]
    assert complete("/und") == ["undo "]
    assert complete("/dif") == ["diff "]
    assert complete("/rewind 2 f") == ["files"]
    assert complete("/rewind 2 files f") == ["force"]
    for command in ("/checkpoints", "/rewind N [files [force]]", "/diff N", "/undo [ID]"):
        assert command in HELP
