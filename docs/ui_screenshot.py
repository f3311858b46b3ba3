"""Make ``docs/ui-session.png`` and ``docs/ui-phone.png``, the README's pictures of the browser UI (1280 and
390 px wide): a real daemon, a scripted model.

    .venv/bin/python docs/ui_screenshot.py [OUT.png [PHONE.png]]

Needs chromium and the ``playwright`` package (the test extras), like the
browser tests. The scene: a planned migration with a thought, a shell call
that was allowed, a background job streaming output, a permission request
waiting, and a prompt queued behind it; the answers are markdown (a table, a
highlighted code block). The phone-sized picture is the same session, its
session list and work panels in drawers.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.sync_daemon import Daemon  # noqa: E402

TODOS = {"todos": [{"id": "t1", "content": "list the pending migrations", "status": "completed"},
                   {"id": "t2", "content": "apply them to the staging database", "status": "in_progress"},
                   {"id": "t3", "content": "rotate the service keys", "status": "pending"}]}
JOB = "for i in 1 2 3 4; do echo applying migration 00$i; sleep 0.2; done; sleep 600"
SCRIPT = [
    [{"thought": "The plan first: three steps, the migrations before the keys."},
     {"text": "I'll plan this, then look at what is pending.\n"},
     {"tool_call": {"name": "todo_write", "arguments": TODOS}}],
    [{"tool_call": {"name": "shell", "arguments": {"command": "ls migrations"}}}],
    [{"text": "Four migrations are **pending**:\n\n| migration | tables |\n|---|---|\n| `001_tables.sql` | users |\n"
               "| `002_tables.sql` | orders |\n| `003_tables.sql` | invoices |\n| `004_tables.sql` | audit |\n\n"
               "Applying them in the background with:\n\n"
               "```bash\nfor i in 1 2 3 4; do\n  echo applying migration 00$i\ndone\n```\n"},
     {"tool_call": {"name": "shell", "arguments": {"command": JOB, "run_in_background": True}}}],
    [{"text": "While they run: the keys are next.\n"},
     {"tool_call": {"name": "shell", "arguments": {"command": "vault write -f transit/keys/service/rotate"}}}],
    [{"text": "done"}],
]


def main(out: str, phone: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "migrations").mkdir()
        for n in range(1, 5):
            (Path(tmp) / "migrations" / f"00{n}_tables.sql").write_text("-- migration\n")
        daemon = Daemon(Path(tmp)).start(SCRIPT, {"experimental": {"todoStopGuard": True}}, "--workspace", tmp)
        try:
            token = (daemon.state / "token").read_text().strip()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 860}, device_scale_factor=1)
                page.goto(f"{daemon.url}/#token={token}")
                page.get_by_role("button", name="New session").click()
                page.get_by_role("textbox", name="Prompt").fill("Migrate the staging database, then rotate the keys.")
                page.get_by_role("button", name="Send").click()
                page.get_by_role("button", name="Allow", exact=True).click()  # ls migrations
                page.get_by_role("button", name="Allow", exact=True).click()  # the background job
                expect(page.get_by_role("region", name="Permission requests")).to_contain_text("vault write")
                page.get_by_role("textbox", name="Prompt").fill("Then write a short report of what changed.")
                page.get_by_role("button", name="Queue").click()
                expect(page.get_by_role("region", name="Background tasks")).to_contain_text("applying migration 004")
                # Scrolled up to the markdown answer (its table and code): the log stops following, and
                # offers to jump to the latest.
                page.locator(".msg.agent table").scroll_into_view_if_needed()
                page.locator(".msg.agent table").evaluate("n => n.closest('.msg').scrollIntoView({block: 'start'})")
                expect(page.get_by_role("button", name="Jump to latest")).to_be_visible()
                page.screenshot(path=out)
                small = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=1)
                small.goto(page.url.split("#")[0] + "#" + page.url.split("#", 1)[1] + f"&token={token}")
                expect(small.get_by_role("region", name="Permission requests")).to_contain_text("vault write")
                expect(small.get_by_role("status")).to_have_text("● live")
                small.wait_for_timeout(300)  # the drawers' and the log's last frame
                small.screenshot(path=phone)
                browser.close()
        finally:
            daemon.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("ui-session.png")),
         sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).with_name("ui-phone.png")))
