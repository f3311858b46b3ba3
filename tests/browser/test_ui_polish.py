"""The browser UI's finish: a tool card bounds what it shows of a call's input; closing a session leaves no
request for it behind; the header offers no approval mode with no session open; many sessions of one title
prefix are told apart, and filtered.

A real daemon subprocess running the scripted model, driven by role and accessible name like ``test_ui.py``;
nothing sleeps to wait for the page (``expect`` waits, or a response awaited).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.test_ui import conversation, new_session, open_ui, send

playwright = pytest.importorskip("playwright.sync_api", reason="playwright drives the browser tests")
expect = playwright.expect

ROW = "row {} " + "x" * 500 + "\n"


def sessions_listed(response: Any) -> bool:
    return response.request.method == "GET" and response.url.endswith("/session")


def test_a_huge_rejected_write_makes_a_small_card_that_says_what_it_leaves_out(page, daemons, tmp_path):
    content = "".join(ROW.format(i) for i in range(300))
    d = daemons().start([
        [{"tool_call": {"name": "write_file", "arguments": {"path": "big.txt", "content": content}}}],
        [{"text": "refused"}],
    ])
    with d.client() as client:
        sid = client.post("/session", json={"cwd": str(tmp_path)}).json()["sessionId"]
    open_ui(page, d)
    page.goto(f"{d.url}/#session={sid}")
    send(page, "write the big file")
    asked = page.get_by_role("group", name="Permission: write_file big.txt")
    asked.get_by_role("button", name="Reject", exact=True).click()
    log = conversation(page)
    expect(log.get_by_text("refused")).to_be_visible()
    card = log.locator(".tool").filter(has_text="write_file")
    expect(card.get_by_text(re.compile(r"^… [\d,]+ more characters not shown$"))).to_be_visible()
    height = card.bounding_box()["height"]
    assert height < 400, height  # the whole input made a card of 32,000 px
    assert len(card.inner_text()) < 3000


def test_a_long_command_shows_its_first_lines_with_its_hidden_characters_made_visible(page, daemons, tmp_path):
    command = "echo 'start \u202eevil\u202c \x1b[2J'\n" + "".join(f"echo line {i}\n" for i in range(60))
    d = daemons().start([
        [{"tool_call": {"name": "shell", "arguments": {"command": command}}}],
        [{"text": "refused"}],
    ])
    with d.client() as client:
        sid = client.post("/session", json={"cwd": str(tmp_path)}).json()["sessionId"]
    open_ui(page, d)
    page.goto(f"{d.url}/#session={sid}")
    send(page, "run it")
    page.get_by_role("region", name="Permission requests").get_by_role("button", name="Reject", exact=True).click()
    log = conversation(page)
    expect(log.get_by_text("refused")).to_be_visible()
    card = log.locator(".tool").first
    expect(card).to_contain_text("echo 'start ⟨U+202E⟩evil⟨U+202C⟩ ␛[2J'")
    expect(card).to_contain_text("echo line 0")
    expect(card.get_by_text(re.compile(r"^… \d+ more lines not shown$"))).to_be_visible()
    assert "echo line 59" not in card.inner_text()
    assert card.bounding_box()["height"] < 600


def test_closing_the_open_session_leaves_no_request_for_it_behind(page, daemons):
    d = daemons().start([[{"text": "working-slowly"}, {"sleep": 60}, {"text": "never shown"}]])
    failures: list[str] = []
    page.on("console", lambda message: failures.append(message.text) if message.type == "error" else None)
    page.on("response", lambda answer: failures.append(f"{answer.status} {answer.url}") if answer.status >= 400 else None)
    open_ui(page, d)
    sid = new_session(page)
    send(page, "take your time")
    expect(conversation(page).get_by_text("working-slowly")).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    item = page.get_by_role("list", name="Sessions").get_by_role("listitem").filter(has_text=sid)
    item.get_by_role("button", name="Close session").click()
    expect(page.get_by_role("heading", name="No session open")).to_be_visible()
    expect(item.locator(".badge")).to_have_text("restorable")
    expect(page.get_by_role("combobox", name="Approval mode")).to_be_hidden()
    for _ in range(2):  # two more polls of the list: whatever the close set off has been answered
        with page.expect_response(sessions_listed):
            pass
    assert failures == [], "\n".join(failures)


def test_no_approval_mode_is_offered_with_no_session_open(page, daemons):
    d = daemons().start([])
    open_ui(page, d)
    mode = page.get_by_role("combobox", name="Approval mode")
    expect(mode).to_be_hidden()
    new_session(page)
    expect(mode).to_be_visible()
    expect(mode).to_be_enabled()


BULK = "bulk session number {} with a fairly long title to test truncation"

# Whether the words ``shown`` of an element's text are inside its box (not cut off by its overflow).
SHOWN_IN_BOX = """([node, shown]) => {
    const text = node.firstChild, at = text.data.indexOf(shown);
    const range = document.createRange();
    range.setStart(text, at);
    range.setEnd(text, at + shown.length);
    const word = range.getBoundingClientRect(), box = node.getBoundingClientRect();
    return word.width > 0 && word.bottom <= box.bottom + 0.5 && word.right <= box.right + 0.5;
}"""


def make_sessions(d: Any, tmp_path: Any) -> dict[str, str]:
    """Six sessions whose titles share their first 20 characters, and one of another directory."""
    made = {}
    with d.client() as client:
        for n in range(1, 7):
            title = BULK.format(n)
            made[title] = client.post("/session", json={"cwd": str(tmp_path), "title": title}).json()["sessionId"]
        other = tmp_path / "beta-project"
        other.mkdir()
        made["elsewhere"] = client.post("/session", json={"cwd": str(other), "title": "elsewhere"}).json()["sessionId"]
    return made


def test_sessions_whose_titles_share_a_long_prefix_are_told_apart(page, daemons, tmp_path):
    d = daemons().start([])
    made = make_sessions(d, tmp_path)
    open_ui(page, d)
    sessions = page.get_by_role("list", name="Sessions")
    for n in range(1, 7):
        item = sessions.get_by_role("listitem").filter(has_text=made[BULK.format(n)])
        name = item.locator(".session-name")
        expect(name).to_be_visible()
        assert page.evaluate(SHOWN_IN_BOX, [name.element_handle(), f"number {n}"]), f"number {n} is cut off"
        tooltip = item.get_by_role("button", name=re.compile(re.escape(BULK.format(n)))).get_attribute("title")
        assert BULK.format(n) in tooltip and made[BULK.format(n)] in tooltip  # not the id alone


def test_the_session_list_is_filtered_by_title_id_or_directory(page, daemons, tmp_path):
    d = daemons().start([])
    made = make_sessions(d, tmp_path)
    open_ui(page, d)
    sessions = page.get_by_role("list", name="Sessions").get_by_role("listitem")
    expect(sessions).to_have_count(7)
    box = page.get_by_role("searchbox", name="Filter sessions")
    box.focus()
    page.keyboard.type("NUMBER 4")  # the title's words, in any case
    expect(sessions).to_have_count(1)
    expect(sessions).to_contain_text(BULK.format(4))
    with page.expect_response(sessions_listed):  # the list's poll keeps the filter
        pass
    expect(sessions).to_have_count(1)
    box.fill(made[BULK.format(2)].removeprefix("session-")[:10])  # part of an id
    expect(sessions).to_have_count(1)
    expect(sessions).to_contain_text(BULK.format(2))
    box.fill("beta-project")  # the directory
    expect(sessions).to_have_count(1)
    expect(sessions).to_contain_text("elsewhere")
    box.fill("no such session")
    expect(sessions).to_have_count(0)
    expect(page.get_by_role("status").filter(has_text="No session matches the filter.")).to_be_visible()
    box.press("Escape")  # clears it
    expect(box).to_have_value("")
    expect(sessions).to_have_count(7)
    expect(page.get_by_text("No session matches the filter.")).to_be_hidden()
