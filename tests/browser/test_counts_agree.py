"""The browser UI's counts agree with ``GET /session/:id/status``.

The state of tests/e2e/test_counts_agree.py (a running prompt that made two
model calls and waits on a permission request, two prompts queued behind it),
seen by two pages: one that had the session open before any of it happened
(it follows the live events), one opened once it holds (a replay, then the
status snapshot). On both, the sidebar's entry (its state badge, "N queued"),
the header's session usage and running turn's usage, the pending-prompt panel,
the Work toggle's count and the permission requests show the status route's
numbers.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.test_counts_agree import QUEUED, SCRIPT, WAIT
from tests.sync_daemon import text

playwright = pytest.importorskip("playwright.sync_api", reason="playwright drives the browser tests")
expect = playwright.expect


def open_session(browser: Any, url: str, token: str, sid: str) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.goto(f"{url}/#session={sid}&token={token}")
    expect(page.get_by_role("textbox", name="Prompt")).to_be_enabled()
    return page


def assert_counts(page: Any, sid: str, status: dict[str, Any]) -> None:
    usage = status["usage"]
    item = page.get_by_role("list", name="Sessions").get_by_role("listitem").filter(has_text=sid)
    expect(item.locator(".badge")).to_have_text(status["state"])
    expect(item.locator(".queued")).to_have_text(f"{status['queuedCount']} queued · ")
    # The running turn made every call of the session: its usage is the session's.
    expect(page.locator("#turn-usage")).to_have_text(
        f"this turn: {usage['calls']} model calls · {usage['totalTokens']:,} tokens")
    queued = page.get_by_role("region", name="Pending prompts").get_by_role("listitem")
    expect(queued).to_have_count(status["queuedCount"])  # the running prompt is not pending
    expect(queued.locator(".item-text")).to_have_text(QUEUED)
    live_tasks = [t for t in status["backgroundTasks"] if t.get("status") == "running"]
    expect(page.locator("#work-count")).to_have_text(str(status["queuedCount"] + len(live_tasks)))
    expect(page.get_by_role("region", name="Permission requests").get_by_role("group")).to_have_count(
        len(status["pendingPermissions"]))
    expect(page.locator("#session-usage")).to_have_text(
        f"session: {usage['calls']} model calls · {usage['totalTokens']:,} tokens")


def test_the_pages_counts_agree_with_the_status_route(browser, daemons, tmp_path):
    d = daemons().start(SCRIPT)
    token = (d.state / "token").read_text().strip()
    with d.client() as client:
        sid = client.post("/session", json={"cwd": str(tmp_path)}).json()["sessionId"]
        before = open_session(browser, d.url, token, sid)  # follows it all as it happens
        client.post(f"/session/{sid}/prompt", json=text("first"))
        deadline = time.monotonic() + WAIT
        while not client.get(f"/session/{sid}/status").json()["pendingPermissions"]:
            assert time.monotonic() < deadline, "no permission request"
            time.sleep(0.02)
        for body in QUEUED:
            client.post(f"/session/{sid}/prompt", json=text(body))
        status = client.get(f"/session/{sid}/status").json()
        assert (status["state"], status["queuedCount"], len(status["pendingPermissions"])) == ("running", 2, 1)
        assert (status["usage"]["calls"], status["usage"]["totalTokens"]) == (2, 350)
        after = open_session(browser, d.url, token, sid)  # a replay, then the status snapshot
        try:
            for page in (before, after):
                assert_counts(page, sid, status)
            assert client.get(f"/session/{sid}/status").json()["usage"] == status["usage"]  # nothing moved
        finally:
            client.post(f"/session/{sid}/cancel")
            before.context.close()
            after.context.close()
