"""The UI's "Rewind here" on a user turn (checkpoints): the page's own dialog, the files restored, the refusal
when a file was changed outside the session ("Rewind anyway"), and "Undo" — in headless chromium against a
real daemon subprocess that keeps checkpoints (its state directory).

The session works in a directory of its own (``work/``), not in the test's directory, where the daemon
writes its log: checkpoints cover the whole cwd.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.sync_daemon import Daemon, text, wait_turn

playwright = pytest.importorskip("playwright.sync_api", reason="playwright drives the browser tests")
expect = playwright.expect
expect.set_options(timeout=10_000)


def call(name: str, **arguments: object) -> dict:
    return {"tool_call": {"name": name, "arguments": arguments}}


EXTRA = "<img src=x onerror=\"document.title='owned'\"> new in turn two\n"  # shown as text, never markup
SCRIPT = [
    [call("write_file", path="notes.txt", content="by turn zero\n")], [{"text": "wrote-notes"}],
    [call("write_file", path="notes.txt", content="by turn one\n")], [{"text": "rewrote-notes"}],
    [call("write_file", path="extra.txt", content=EXTRA)], [{"text": "added-extra"}],
]


def users(client: Any, sid: str) -> list[str]:
    entries = client.get(f"/session/{sid}/transcript").json()["entries"]
    return [e["message"]["content"] for e in entries if e["message"]["role"] == "user"]


def three_turns(daemons: Any, tmp_path: Path) -> tuple[Daemon, str, Path]:
    """A daemon with a state directory and a yolo session in ``work/`` that ran three turns."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("original\n")
    d = daemons().start(SCRIPT)
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
    return d, sid, work


def open_session(page: Any, d: Daemon, sid: str) -> Any:
    token = (d.state / "token").read_text().strip()
    page.goto(f"{d.url}/#token={token}&session={sid}")
    log = page.get_by_role("log", name="Conversation")
    expect(log.get_by_text("added-extra")).to_be_visible()
    expect(log.get_by_role("button", name="Rewind here")).to_have_count(3)
    return log


def test_rewind_here_restores_the_files_with_the_conversation_and_undo_puts_them_back(page, daemons, tmp_path):
    d, sid, work = three_turns(daemons, tmp_path)
    log = open_session(page, d, sid)
    second = log.locator(".user-turn").nth(1)
    expect(second.locator(".msg.user")).to_have_text("second turn")
    button = second.get_by_role("button", name="Rewind here")
    button.focus()  # keyboard reachable: a button, Enter presses it
    page.keyboard.press("Enter")

    dialog = page.get_by_role("dialog", name="Rewind to this turn?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Turn 1 (“second turn”) and everything after it will be dropped")
    files = dialog.get_by_role("checkbox", name="Restore the files too")
    expect(files).to_be_checked()  # on: the daemon lists the checkpoints feature
    dialog.get_by_role("button", name="Rewind", exact=True).click()
    expect(dialog).to_be_hidden()

    banner = page.get_by_role("status", name="Rewind")
    expect(banner).to_contain_text("Rewound to the start of turn 1. Files: 1 restored, 1 deleted.")
    expect(log.locator(".rewind-cut")).to_contain_text("conversation rewound to the start of turn 1")
    expect(log.locator(".user-turn.rewound")).to_have_count(2)  # turns 1 and 2 are dimmed
    expect(log.get_by_role("button", name="Rewind here")).to_have_count(1)  # only turn 0's is left
    assert (work / "notes.txt").read_text() == "by turn zero\n"
    assert not (work / "extra.txt").exists()
    with d.client() as client:
        assert users(client, sid) == ["first turn"]

    banner.get_by_role("button", name="Undo").click()
    expect(banner).to_contain_text("Undone: the conversation and the files are back")
    expect(log.locator(".user-turn.rewound")).to_have_count(0)
    assert (work / "notes.txt").read_text() == "by turn one\n"
    assert (work / "extra.txt").read_text() == EXTRA
    with d.client() as client:
        assert users(client, sid) == ["first turn", "second turn", "third turn"]


def test_a_file_changed_outside_is_listed_and_rewind_anyway_restores_it(page, daemons, tmp_path):
    d, sid, work = three_turns(daemons, tmp_path)
    (work / "notes.txt").write_text("edited in my editor\n")  # after the session's last checkpoint
    log = open_session(page, d, sid)
    log.locator(".user-turn").nth(0).get_by_role("button", name="Rewind here").click()
    dialog = page.get_by_role("dialog", name="Rewind to this turn?")
    dialog.get_by_role("button", name="Rewind", exact=True).click()

    paths = dialog.get_by_role("list", name="Files changed outside the session")
    expect(paths).to_have_text("notes.txt")
    expect(dialog.get_by_role("button", name="Rewind", exact=True)).to_be_hidden()
    anyway = dialog.get_by_role("button", name="Rewind anyway")
    expect(anyway).to_be_focused()
    assert (work / "notes.txt").read_text() == "edited in my editor\n"  # nothing was done
    with d.client() as client:
        assert users(client, sid) == ["first turn", "second turn", "third turn"]

    anyway.click()
    expect(dialog).to_be_hidden()
    banner = page.get_by_role("status", name="Rewind")
    expect(banner).to_contain_text("Rewound to the start of turn 0.")
    assert (work / "notes.txt").read_text() == "original\n"
    assert not (work / "extra.txt").exists()

    (work / "notes.txt").write_text("changed after the rewind\n")  # the undo is refused the same way
    banner.get_by_role("button", name="Undo").click()
    expect(banner.get_by_role("list", name="Files changed outside the session")).to_have_text("notes.txt")
    assert (work / "notes.txt").read_text() == "changed after the rewind\n"
    banner.get_by_role("button", name="Undo anyway").click()
    expect(banner).to_contain_text("Undone")
    assert (work / "notes.txt").read_text() == "edited in my editor\n"


def test_without_files_only_the_conversation_is_rewound_and_cancel_does_nothing(page, daemons, tmp_path):
    d, sid, work = three_turns(daemons, tmp_path)
    log = open_session(page, d, sid)
    log.locator(".user-turn").nth(2).get_by_role("button", name="Rewind here").click()
    dialog = page.get_by_role("dialog", name="Rewind to this turn?")
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    with d.client() as client:
        assert len(users(client, sid)) == 3

    log.locator(".user-turn").nth(2).get_by_role("button", name="Rewind here").click()
    dialog.get_by_role("checkbox", name="Restore the files too").uncheck()
    dialog.get_by_role("button", name="Rewind", exact=True).click()
    banner = page.get_by_role("status", name="Rewind")
    expect(banner).to_contain_text("Rewound to the start of turn 2. The files were left as they are.")
    expect(banner.get_by_role("button", name="Undo")).to_be_hidden()
    assert (work / "extra.txt").exists()
    with d.client() as client:
        assert users(client, sid) == ["first turn", "second turn"]
    assert re.search(r"rewound", log.locator(".user-turn").nth(2).get_attribute("class") or "")


def test_the_checkpoints_panel_lists_the_turns_files_and_shows_a_diff_as_text(page, daemons, tmp_path):
    d, sid, work = three_turns(daemons, tmp_path)
    open_session(page, d, sid)
    panel = page.get_by_role("region", name="Checkpoints")
    items = panel.locator("#checkpoints > li")
    expect(items).to_have_count(3)
    expect(items.nth(0)).to_contain_text("Turn 0: 1 file changed")
    expect(items.nth(0)).to_contain_text("~ notes.txt")
    expect(items.nth(2)).to_contain_text("+ extra.txt")
    items.nth(1).get_by_role("button", name="Diff").click()
    diff = panel.get_by_label("Diff of turn 1")
    expect(diff).to_contain_text("-by turn zero")
    expect(diff).to_contain_text("+by turn one")
    items.nth(2).get_by_role("button", name="Diff").click()
    expect(panel.get_by_label("Diff of turn 2")).to_contain_text("<img src=x onerror=")  # the file's text, as text
    assert panel.locator("img").count() == 0
    assert page.title().endswith(" — Trellis")  # the session's title, as text: no script of the model's ran

    log = page.get_by_role("log", name="Conversation")  # a rewind updates the panel
    log.locator(".user-turn").nth(1).get_by_role("button", name="Rewind here").click()
    page.get_by_role("dialog", name="Rewind to this turn?").get_by_role("button", name="Rewind", exact=True).click()
    expect(items).to_have_count(1)


def test_a_rewind_and_its_undo_reach_another_page_and_a_page_opened_later(page, browser, daemons, tmp_path):
    d, sid, work = three_turns(daemons, tmp_path)
    other_context = browser.new_context(viewport={"width": 1280, "height": 860})
    try:
        other = other_context.new_page()
        watching = open_session(other, d, sid)  # another client: it did not ask for the rewind
        log = open_session(page, d, sid)
        log.locator(".user-turn").nth(1).get_by_role("button", name="Rewind here").click()
        page.get_by_role("dialog", name="Rewind to this turn?").get_by_role("button", name="Rewind",
                                                                            exact=True).click()
        expect(log.locator(".user-turn.rewound")).to_have_count(2)
        expect(log.locator(".rewind-cut")).to_have_count(1)  # its answer and its event cut once

        expect(watching.locator(".user-turn.rewound")).to_have_count(2)
        expect(watching.locator(".user-turn").nth(0)).not_to_have_class(re.compile(r"\brewound\b"))
        expect(watching.locator(".rewind-cut")).to_contain_text("conversation rewound to the start of turn 1")

        later_context = browser.new_context(viewport={"width": 1280, "height": 860})
        try:
            later = later_context.new_page()  # replays the ring: the turns, then their rewind
            token = (d.state / "token").read_text().strip()
            later.goto(f"{d.url}/#token={token}&session={sid}")
            late_log = later.get_by_role("log", name="Conversation")
            expect(late_log.locator(".user-turn.rewound")).to_have_count(2)
        finally:
            later_context.close()

        page.get_by_role("status", name="Rewind").get_by_role("button", name="Undo").click()
        expect(watching.locator(".user-turn.rewound")).to_have_count(0)
        expect(watching.locator(".rewind-cut").last).to_contain_text("rewind undone")
        expect(log.locator(".user-turn.rewound")).to_have_count(0)
        expect(log.locator(".rewind-cut")).to_have_count(2)  # the cut, and its undo: once each
        with d.client() as client:
            assert users(client, sid) == ["first turn", "second turn", "third turn"]
    finally:
        other_context.close()
