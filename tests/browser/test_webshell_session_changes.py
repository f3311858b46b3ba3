"""qwen's Web Shell (0.24.4) in headless chromium follows a session another client changes.

Its mode picker reads only qwen serve's ``approval_mode_changed`` (it ignores the ``current_mode_update``
session update): without the event, a mode another client set never showed. Harness: tests/browser/test_webshell.py.
"""

from __future__ import annotations

from tests.browser.test_webshell import WAIT, expect, only_session, open_shell, send, shell_origin, start

__all__ = ["shell_origin"]  # the module's fixture: the shell's files on a port of their own


def test_the_mode_picker_follows_a_mode_another_client_sets(page, daemons, shell_origin):
    d = start(daemons, shell_origin, [[{"text": "ok"}]])
    open_shell(page, shell_origin, d)
    send(page, "hello")
    expect(page.get_by_text("ok", exact=True)).to_be_visible(timeout=WAIT)
    picker = page.get_by_role("button", name="Approval mode")
    expect(picker).not_to_have_text("Full Access")
    with d.client() as client:
        r = client.post(f"/session/{only_session(d)}/approval-mode", json={"mode": "yolo"})
        assert r.status_code == 200, r.text
    expect(picker).to_have_text("Full Access", timeout=WAIT)
