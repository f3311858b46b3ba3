"""``trellis attach``'s checkpoint commands (``/checkpoints``, ``/rewind N [files [force]]``, ``/diff N``,
``/undo [ID]``) under a pseudo-terminal, against a real daemon that keeps checkpoints (its state directory).

The session works in a directory of its own (``work/``), not in the test's
directory, where the daemon writes its log: checkpoints cover the whole cwd.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.sync_daemon import text, wait_turn
from tests.trellis.terminal import WAIT, pytestmark, world  # noqa: F401 - world: the fixture


def call(name: str, **arguments: object) -> dict:
    return {"tool_call": {"name": name, "arguments": arguments}}


SCRIPT = [
    [call("write_file", path="notes.txt", content="by turn zero\n")], [{"text": "wrote-notes\n"}],
    [call("write_file", path="notes.txt", content="by turn one\n")], [{"text": "rewrote-notes\n"}],
    [call("write_file", path="extra.txt", content="new in turn two\n")], [{"text": "added-extra\n"}],
]


def session_with_three_turns(world, tmp_path: Path):
    """A daemon with a state directory, a yolo session in ``work/`` that ran three turns; (daemon, sid, work)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("original\n")
    d = world["daemon"]().start(SCRIPT)
    with d.client() as client:
        assert "checkpoints" in client.get("/capabilities").json()["features"]
        sid = client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"}).json()["sessionId"]
        for words in ("first turn", "second turn", "third turn"):
            pid = client.post(f"/session/{sid}/prompt", json=text(words)).json()["promptId"]
            assert wait_turn(client, sid, pid)["state"] == "completed"
        deadline = time.monotonic() + 30  # the end-of-work checkpoint is taken just after turn_complete
        while len(client.get(f"/session/{sid}/checkpoints").json()["checkpoints"]) < 3 \
                or client.get(f"/session/{sid}/status").json()["state"] != "idle":
            assert time.monotonic() < deadline, client.get(f"/session/{sid}/checkpoints").text
            time.sleep(0.1)
    assert (work / "notes.txt").read_text() == "by turn one\n"
    assert (work / "extra.txt").exists()
    return d, sid, work


def test_checkpoints_lists_turns_and_rewind_files_restores_them_and_undo_puts_them_back(world, tmp_path):
    d, sid, work = session_with_three_turns(world, tmp_path)
    screen = world["attach"](d, "--session", sid)
    screen.expect("Ctrl-D leaves")
    screen.expect("added-extra")  # the history replayed
    screen.line("/checkpoints")
    screen.expect("⎌ checkpoints (turns from 0, as /rewind N counts them):")
    screen.expect("0. “first turn”")
    screen.expect("~ notes.txt")
    screen.expect("1. “second turn”")
    screen.expect("~ notes.txt")
    screen.expect("2. “third turn”")
    screen.expect("+ extra.txt")

    screen.line("/diff 1")
    screen.expect("⎌ what turn 1 changed:")
    screen.expect("-by turn zero")
    screen.expect("+by turn one")
    assert "\x1b[" in screen.raw.getvalue()[-2000:]  # highlighted (the diff lexer's colours)

    screen.line("/rewind 1 files")
    screen.expect("✂ ── conversation rewound: turn 1 and everything after it were dropped")
    screen.expect("files restored: notes.txt")
    screen.expect("files deleted: extra.txt")
    screen.expect("/undo puts it back")
    assert (work / "notes.txt").read_text() == "by turn zero\n"
    assert not (work / "extra.txt").exists()
    with d.client() as client:
        users = [e["message"]["content"] for e in client.get(f"/session/{sid}/transcript").json()["entries"]
                 if e["message"]["role"] == "user"]
        assert users == ["first turn"]
        assert client.get(f"/session/{sid}/checkpoints").json()["undo"]

    screen.line("/checkpoints")
    screen.expect("⎌ undo entries")
    screen.expect("before the rewind to turn 1")

    screen.line("/undo")
    screen.expect("⎌ ── undone: the conversation is back as it was before that rewind")
    assert (work / "notes.txt").read_text() == "by turn one\n"
    assert (work / "extra.txt").read_text() == "new in turn two\n"
    with d.client() as client:
        users = [e["message"]["content"] for e in client.get(f"/session/{sid}/transcript").json()["entries"]
                 if e["message"]["role"] == "user"]
        assert users == ["first turn", "second turn", "third turn"]
    screen.child.sendcontrol("d")
    assert screen.exit_code() == 0


def test_a_file_changed_outside_refuses_the_rewind_until_forced(world, tmp_path):
    d, sid, work = session_with_three_turns(world, tmp_path)
    (work / "notes.txt").write_text("edited in my editor\n")  # after the session's last checkpoint
    screen = world["attach"](d, "--session", sid, "--no-history")
    screen.expect("Ctrl-D leaves")
    screen.line("/rewind 0 files")
    screen.expect("✗ refused: 1 file(s) it would change were changed outside the session")
    screen.expect("    notes.txt")
    screen.expect("`/rewind 0 files force` overrides")
    assert (work / "notes.txt").read_text() == "edited in my editor\n"  # nothing was done
    assert (work / "extra.txt").exists()
    assert "conversation rewound" not in screen.screen()

    screen.line("/rewind 0 files force")
    screen.expect("✂ ── conversation rewound: turn 0 and everything after it were dropped (0 message(s) kept)")
    assert (work / "notes.txt").read_text() == "original\n"
    assert not (work / "extra.txt").exists()

    screen.line("/undo")  # the edit made outside comes back with the undo
    screen.expect("⎌ ── undone")
    assert (work / "notes.txt").read_text() == "edited in my editor\n"
    screen.child.sendcontrol("d")
    assert screen.exit_code() == 0


def test_rewind_without_files_cuts_only_the_conversation_and_bad_usage_is_explained(world, tmp_path):
    d, sid, work = session_with_three_turns(world, tmp_path)
    screen = world["attach"](d, "--session", sid, "--no-history")
    screen.expect("Ctrl-D leaves")
    screen.line("/rewind")
    screen.expect("usage: /rewind N")
    screen.line("/rewind 2")
    screen.expect("✂ ── conversation rewound: turn 2 and everything after it were dropped")
    screen.expect("files left as they are")
    assert (work / "extra.txt").exists()  # the files stay
    with d.client() as client:
        users = [e["message"]["content"] for e in client.get(f"/session/{sid}/transcript").json()["entries"]
                 if e["message"]["role"] == "user"]
        assert users == ["first turn", "second turn"]
    screen.line("/rewind 9")
    screen.expect("the rewind refused:")
    screen.child.send("/chec\t")  # Tab completes the new commands
    screen.expect("/checkpoints")
    screen.child.send("\r")
    screen.expect("⎌ checkpoints")
    screen.child.sendcontrol("d")
    assert screen.exit_code() == 0
