"""The browser UI as people use it: markdown answers, following the stream, a phone-sized screen,
the running turn in the header (and the session's usage, "1 model call"), session titles, surviving a
daemon restart, and a page joining mid-call naming the tool call.

A real daemon subprocess with the scripted model, driven by role and accessible name like
``test_ui.py``; nothing sleeps to wait for the page (``expect`` waits).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pytest

from tests.browser.test_ui import TODOS, conversation, new_session, open_ui, send, token_of
from tests.sync_daemon import free_port, text

playwright = pytest.importorskip("playwright.sync_api", reason="playwright drives the browser tests")
expect = playwright.expect

MARKDOWN = """## Picnic plan

Bring **sandwiches** and *lemonade*.

```python
def pack(basket):
    return [item for item in basket if item != "ants"]
```

| item | count |
|------|-------|
| apples | 4 |
| pears | 2 |

Inert: <script>window.owned = 1</script> and <img src=x onerror="window.owned = 2"> stay text.
"""


def test_an_answer_is_markdown_code_is_highlighted_and_html_in_it_stays_text(page, daemons):
    d = daemons().start([[{"text": MARKDOWN[:40]}, {"text": MARKDOWN[40:]}]])
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    open_ui(page, d)
    new_session(page)
    send(page, "plan the picnic")
    answer = conversation(page).locator(".msg.agent")
    expect(answer.get_by_role("heading", name="Picnic plan")).to_be_visible()
    expect(answer.locator("strong")).to_have_text("sandwiches")
    expect(answer.locator("em")).to_have_text("lemonade")
    code = answer.locator("pre code")
    expect(code).to_contain_text('return [item for item in basket if item != "ants"]')
    expect(code.locator(".hljs-keyword").first).to_have_text("def")  # highlighted
    expect(code.locator(".hljs-string")).to_have_text('"ants"')
    assert "mono" in code.evaluate("n => getComputedStyle(n).fontFamily").lower()
    table = answer.get_by_role("table")
    expect(table.get_by_role("columnheader")).to_have_text(["item", "count"])
    expect(table.get_by_role("row")).to_have_count(3)
    expect(answer).to_contain_text('<script>window.owned = 1</script> and '
                                   '<img src=x onerror="window.owned = 2"> stay text.')
    assert answer.locator("script, img").count() == 0
    assert page.evaluate("window.owned") is None
    assert all(u.startswith(d.url) for u in requested), requested  # the libraries are the daemon's files


def test_rendered_markdown_keeps_nothing_active(page, daemons):
    d = daemons().start([])
    page.goto(d.url + "/")
    page.get_by_role("textbox", name="Token").wait_for()
    shown = page.evaluate("""async () => {
        const { parseMarkdown } = await import('/ui/markdown.js');
        const box = document.createElement('div');
        box.append(await parseMarkdown([
            '[click](javascript:alert(1)) [ok](https://example.org)',
            '![pic](https://example.org/x.png)',
            '<a href="javascript:alert(2)" onclick="alert(3)">raw</a>',
            '<iframe src="https://example.org"></iframe><style>body{display:none}</style>',
        ].join('\\n\\n')));
        const attributes = [...box.querySelectorAll('*')].flatMap((n) => [...n.attributes].map((a) => a.name));
        const tags = [...new Set([...box.querySelectorAll('*')].map((n) => n.tagName))];
        return { html: box.innerHTML, attributes, tags,
                 links: [...box.querySelectorAll('a')].map((a) => [a.getAttribute('href'), a.rel]) };
    }""")
    assert "javascript:" not in "".join(str(href) for href, _ in shown["links"])
    assert ["https://example.org", "noopener noreferrer nofollow"] in shown["links"]
    assert set(shown["tags"]) <= {"P", "A"}, shown["html"]  # no iframe, style, img, script
    assert set(shown["attributes"]) <= {"href", "target", "rel"}, shown["html"]  # no onclick
    assert "&lt;iframe" in shown["html"] and "onclick" in shown["html"]  # shown as the characters they are


def lines(first: int, last: int) -> str:
    return "".join(f"line {n} of the answer\n\n" for n in range(first, last + 1))


def test_a_long_answer_is_followed_until_the_reader_scrolls_up(page, daemons):
    steps: list[dict[str, Any]] = [{"text": lines(1, 5)}, {"sleep": 0.3}, {"text": lines(6, 90)}]  # a large chunk
    for n in range(91, 131):
        steps += [{"sleep": 0.05}, {"text": lines(n, n)}]
    slow: list[dict[str, Any]] = [{"text": lines(1, 60)}]
    for n in range(61, 200):
        slow += [{"sleep": 0.1}, {"text": lines(n, n).replace("line", "more")}]
    d = daemons().start([steps, slow])
    open_ui(page, d)
    new_session(page)
    send(page, "a long one")
    log = conversation(page)
    expect(log.get_by_text("line 130 of the answer")).to_be_visible()
    expect(log.get_by_text("line 130 of the answer")).to_be_in_viewport()  # followed to the end
    expect(log.get_by_text("✓ turn complete")).to_be_in_viewport()
    jump = page.get_by_role("button", name="Jump to latest")
    expect(jump).to_be_hidden()

    send(page, "another")
    expect(log.get_by_text("more 70 of the answer")).to_be_in_viewport()
    log.hover()
    page.mouse.wheel(0, -800)  # the reader scrolls up to read
    expect(jump).to_be_visible()
    expect(log.get_by_text("more 90 of the answer")).to_be_attached()
    expect(log.get_by_text("more 90 of the answer")).not_to_be_in_viewport()  # not dragged down
    jump.click()
    expect(jump).to_be_hidden()
    expect(log.get_by_text(re.compile(r"^more 1\d\d of the answer$")).last).to_be_in_viewport()
    expect(log.get_by_text("more 199 of the answer")).to_be_in_viewport(timeout=20_000)  # followed again


def test_a_phone_sized_screen_has_the_conversation_and_the_sessions_in_a_drawer(browser, daemons):
    d = daemons().start([[{"text": "Small **screens** work."}]])
    context = browser.new_context(viewport={"width": 390, "height": 844})
    context.set_default_timeout(10_000)
    try:
        page = context.new_page()
        page.goto(f"{d.url}/#token={token_of(d)}")
        toggle = page.get_by_role("button", name="Sessions")
        expect(toggle).to_be_visible()
        expect(page.get_by_role("button", name="New session")).to_be_hidden()  # in the closed drawer
        toggle.click()
        expect(page.get_by_role("button", name="New session")).to_be_visible()
        page.get_by_role("button", name="New session").click()
        expect(page.get_by_role("button", name="New session")).to_be_hidden()  # opening a session closes it
        box = page.get_by_role("textbox", name="Prompt")
        expect(box).to_be_enabled()
        send(page, "hello from a phone")
        answer = conversation(page).locator(".msg.agent")
        expect(answer).to_have_text("Small screens work.")
        expect(answer).to_be_in_viewport()
        for what in (box, page.get_by_role("button", name="Send"), conversation(page)):
            shape = what.bounding_box()
            assert shape["x"] >= 0 and shape["x"] + shape["width"] <= 390, shape
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        toggle.click()  # the list is there, in the drawer
        expect(page.get_by_role("list", name="Sessions").get_by_role("listitem")).to_have_count(1)
        page.keyboard.press("Escape")
        expect(page.get_by_role("list", name="Sessions")).to_be_hidden()
    finally:
        context.close()


def test_the_header_shows_the_model_a_running_turn_and_its_usage(page, daemons):
    usage = {"usage": {"prompt_tokens": 1000, "completion_tokens": 234, "total_tokens": 1234}}
    d = daemons().start([
        [{"text": "planning"}, usage, {"tool_call": {"name": "todo_write", "arguments": TODOS}}],
        [{"sleep": 2.5}, {"text": "done"}, usage],
    ])
    open_ui(page, d)
    expect(page.locator("#model")).to_contain_text("scripted")
    new_session(page)
    send(page, "take a moment")
    timer = page.get_by_role("timer", name="Turn")
    expect(timer).to_be_visible()
    expect(timer).to_have_text(re.compile(r"^[12]s$"), timeout=5_000)  # the elapsed time counts
    expect(page.locator("#turn-usage")).to_have_text(re.compile(r"this turn: 1 model call · 1,234 tokens"))
    expect(page.locator("#session-usage")).to_have_text("session: 1 model call · 1,234 tokens")  # not "1 model calls"
    expect(timer).to_be_hidden(timeout=10_000)
    expect(page.locator("#session-usage")).to_have_text("session: 2 model calls · 2,468 tokens")
    expect(page.locator("#turn-usage")).to_have_text(re.compile(r"last turn: 2 model calls · 2,468 tokens"))


def test_sessions_are_titled_renamed_counted_and_closed(page, daemons, tmp_path):
    d = daemons().start([[{"text": "slowly"}, {"sleep": 30}], [{"text": "queued one"}]])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    open_ui(page, d)
    page.get_by_text("Directory and title of a new session").click()
    page.get_by_role("textbox", name="Working directory").fill(str(elsewhere))
    page.get_by_role("textbox", name="Title", exact=True).fill("Picnic plans")
    page.get_by_role("button", name="Create").click()
    expect(page.get_by_role("heading", name="Picnic plans")).to_be_visible()
    sid = re.search(r"#session=(.+)$", page.url)[1]
    sessions = page.get_by_role("list", name="Sessions")
    item = sessions.get_by_role("listitem").filter(has_text=sid)
    expect(item.locator(".session-name")).to_have_text("Picnic plans")
    expect(item.locator(".session-cwd")).to_have_text(str(elsewhere))

    item.get_by_role("button", name="Rename").click()
    field = page.get_by_role("textbox", name="Session title")
    field.fill("Garden party")
    field.press("Enter")
    expect(page.get_by_role("heading", name="Garden party")).to_be_visible()
    expect(sessions.get_by_role("listitem").filter(has_text=sid).locator(".session-name")).to_have_text("Garden party")
    with d.client() as client:
        assert client.get(f"/session/{sid}/status").json()["title"] == "Garden party"
        client.post(f"/session/{sid}/title", json={"title": "Renamed elsewhere"})  # the page hears of it
    expect(page.get_by_role("heading", name="Renamed elsewhere")).to_be_visible()

    send(page, "first")
    expect(conversation(page).get_by_text("slowly")).to_be_visible()
    page.get_by_role("textbox", name="Prompt").fill("second")
    page.get_by_role("button", name="Queue").click()
    item = sessions.get_by_role("listitem").filter(has_text=sid)
    expect(item.locator(".queued")).to_have_text("1 queued · ")  # the running one is not pending
    expect(page.get_by_role("region", name="Pending prompts").get_by_role("listitem")).to_have_count(1)

    page.once("dialog", lambda dialog: dialog.accept())
    item.get_by_role("button", name="Close session").click()
    expect(page.get_by_role("heading", name="No session open")).to_be_visible()
    expect(item.locator(".badge")).to_have_text("restorable")  # closed: its state directory keeps it
    with d.client() as client:
        assert all(s["sessionId"] != sid or not s["live"] for s in client.get("/session").json()["sessions"])


def test_a_restarted_daemon_is_reconnected_to_and_the_draft_is_kept(page, daemons):
    d = daemons(port=free_port()).start([[{"text": "before the restart"}]])
    open_ui(page, d)
    sid = new_session(page)
    send(page, "first")
    log = conversation(page)
    expect(log.get_by_text("before the restart")).to_be_visible()
    box = page.get_by_role("textbox", name="Prompt")
    box.fill("a half-written thought")
    d.stop()
    expect(page.get_by_role("status")).to_have_text(re.compile("reconnecting|unreachable"))
    expect(log.get_by_text("before the restart")).to_be_visible()  # the conversation stays
    d.start([[{"text": "after the restart"}]])  # the same port and state directory (and token)
    expect(page.get_by_role("status")).to_have_text("● live", timeout=15_000)
    expect(box).to_have_value("a half-written thought")
    expect(log.get_by_text("before the restart")).to_have_count(1)
    page.get_by_role("button", name="Send").click()
    expect(log.get_by_text("after the restart")).to_be_visible()
    expect(box).to_have_value("")
    assert page.evaluate("Object.keys(sessionStorage).filter((k) => k.startsWith('trellis.draft'))") == []
    with d.client() as client:
        assert client.get(f"/session/{sid}/status").json()["historyLength"] == 4


def rotate(d: Any) -> str:
    new = "rotated-" + os.urandom(8).hex()
    path = d.state / "token"
    path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (new + "\n").encode())
    os.close(fd)
    return new


def test_a_new_token_after_a_restart_keeps_the_view_and_the_draft_and_a_pasted_url_is_taken(page, daemons):
    d = daemons(port=free_port()).start([[{"text": "said before"}]])
    open_ui(page, d)
    sid = new_session(page)
    send(page, "first")
    log = conversation(page)
    expect(log.get_by_text("said before")).to_be_visible()
    page.get_by_role("textbox", name="Prompt").fill("keep me")
    d.stop()
    new = rotate(d)
    d.start([[{"text": "said after"}]])
    expect(page.get_by_role("textbox", name="Token")).to_be_visible(timeout=15_000)  # the old token is refused
    expect(log.get_by_text("said before")).to_be_visible()  # behind the form, the conversation stays
    assert page.get_by_role("textbox", name="Prompt").input_value() == "keep me"
    assert page.evaluate(f"sessionStorage.getItem('trellis.draft.{sid}')") == "keep me"
    page.evaluate("(t) => { location.hash = 'token=' + t; }", new)  # `trellis open --print`'s URL, pasted
    expect(page.get_by_role("textbox", name="Token")).to_be_hidden()
    expect(page.get_by_role("status")).to_have_text("● live", timeout=15_000)
    assert "token" not in page.url
    expect(page.get_by_role("textbox", name="Prompt")).to_have_value("keep me")
    page.get_by_role("button", name="Send").click()
    expect(log.get_by_text("said after")).to_be_visible()
    expect(log.get_by_text("said before")).to_have_count(1)


def test_a_page_joining_mid_call_names_the_tool_from_the_waiting_permission_request(page, daemons, tmp_path):
    """The page opens while a turn waits on a permission request whose ``tool_call`` already left the ring
    (``eventRingSize`` 1: the replay holds the request only): the card of the call, made from its update
    (which carries only an id), is named as the request names the call (a shell's command), not "tool"."""
    d = daemons().start([[{"text": "x\n"}, {"tool_call": {"name": "shell", "arguments": {"command": "echo ring-ok"}}}],
                         [{"text": "done"}]], {"limits": {"eventRingSize": 1}})
    with d.client() as client:
        sid = client.post("/session", json={"cwd": str(tmp_path)}).json()["sessionId"]
        client.post(f"/session/{sid}/prompt", json=text("go"))
        deadline = time.monotonic() + 10
        while not client.get(f"/session/{sid}/status").json()["pendingPermissions"]:
            assert time.monotonic() < deadline, "no permission request"
            time.sleep(0.02)
    page.goto(f"{d.url}/#session={sid}&token={token_of(d)}")
    asked = page.get_by_role("region", name="Permission requests")
    expect(asked).to_contain_text("echo ring-ok")
    asked.get_by_role("button", name="Allow", exact=True).click()
    card = conversation(page).locator(".tool").first
    expect(card.locator(".badge")).to_have_text("completed")
    expect(card.locator(".output")).to_contain_text("ring-ok")
    expect(card.locator(".tool-title")).to_have_text("echo ring-ok")
