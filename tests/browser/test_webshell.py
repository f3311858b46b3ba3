"""qwen-code's own Web Shell (0.24.4), unchanged, in headless chromium against a real Trellis daemon.

The shell is the ``web-shell/`` folder of the npm package ``@qwen-code/qwen-code@0.24.4``: the copy
bench/peer_qwen.py installs into ``$TMPDIR/trellis-peer-qwen-0.24.4`` if there is one, else the package's
tarball fetched with ``npm pack`` when node is there (once: it is unpacked into
``$TMPDIR/trellis-webshell-0.24.4``), served as static files from a loopback port of its own. The
daemon allows that origin (``--allow-origin``) and the page is opened as docs/webshell.md says:
``?daemon=<daemon origin>#token=<token>``, then the shell's "Connect" dialog, which the fragment filled in.

Things are found as a person finds them: the composer (a CodeMirror editor, ``.cm-content``), the buttons
"Send message", "Connect" and "esc to cancel", the permission choices (radio buttons), the sidebar's session
titles. Playwright's ``expect`` waits for what a test looks for; nothing sleeps.
"""

from __future__ import annotations

import fcntl
import functools
import http.server
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.sync_daemon import Daemon, text, wait_turn

playwright = pytest.importorskip("playwright.sync_api", reason="playwright drives the browser tests")
expect = playwright.expect

PACKAGE, VERSION = "@qwen-code/qwen-code", "0.24.4"
# bench/peer_qwen.py --install puts the whole package (and its dependencies) here; if it did, that copy is used.
INSTALLED = Path(tempfile.gettempdir()) / f"trellis-peer-qwen-{VERSION}" / "node_modules" / "@qwen-code" / "qwen-code"
# Else the package's tarball alone (``npm pack``: about 33 MB, no dependencies), unpacked here once.
PACKED = Path(tempfile.gettempdir()) / f"trellis-webshell-{VERSION}"
WAIT = 15_000  # ms: the shell is a 5 MB bundle, and its first session starts a stream


def _version_of(package: Path) -> str | None:
    try:
        version = json.loads((package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return version if (package / "web-shell" / "index.html").is_file() else None


def shell_folder() -> Path:
    """The package's ``web-shell`` folder: an installed copy, else its tarball from npm, unpacked (or skip).
    One process at a time fetches and unpacks it (parallel test workers share the folder)."""
    if _version_of(INSTALLED) == VERSION:
        return INSTALLED / "web-shell"
    PACKED.parent.mkdir(parents=True, exist_ok=True)
    with open(PACKED.parent / f"{PACKED.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _unpacked_shell_folder()


def _unpacked_shell_folder() -> Path:
    if _version_of(PACKED / "package") == VERSION:
        return PACKED / "package" / "web-shell"
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        pytest.skip(f"node and npm are needed to obtain {PACKAGE}@{VERSION} (its Web Shell)")
    PACKED.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([npm, "pack", "--silent", f"{PACKAGE}@{VERSION}"], cwd=PACKED, capture_output=True,
                              text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"npm pack {PACKAGE}@{VERSION} failed: {exc}")
    tarball = PACKED / (done.stdout.strip().splitlines() or [""])[-1]
    if done.returncode != 0 or not tarball.is_file():
        pytest.skip(f"npm pack {PACKAGE}@{VERSION} failed ({done.returncode}): "
                    f"{(done.stderr or done.stdout).strip()[-300:]}")
    with tarfile.open(tarball) as archive:  # only the shell and the package's manifest
        wanted = [m for m in archive.getmembers()
                  if m.name == "package/package.json" or m.name.startswith("package/web-shell/")]
        archive.extractall(PACKED, members=wanted, filter="data")
    tarball.unlink()
    if _version_of(PACKED / "package") != VERSION:
        pytest.skip(f"{tarball.name} from npm holds no web-shell/ of {PACKAGE}@{VERSION}")
    return PACKED / "package" / "web-shell"


class _Files(http.server.SimpleHTTPRequestHandler):
    """The shell's files; any other path (``/session/<id>``, the shell's own routes) is its index.html."""

    def send_head(self) -> Any:
        wanted = Path(self.directory, self.path.split("?", 1)[0].lstrip("/"))
        if not wanted.is_file():
            self.path = "/index.html"
        return super().send_head()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def shell_origin() -> Iterator[str]:
    """``http://127.0.0.1:PORT``, serving the Web Shell for this module's tests."""
    folder = shell_folder()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Files, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def start(daemons: Any, shell_origin: str, script: list[Any]) -> Daemon:
    return daemons().start(script, None, "--allow-origin", shell_origin)


def token_of(daemon: Daemon) -> str:
    return (daemon.state / "token").read_text().strip()


def open_shell(page: Any, shell_origin: str, daemon: Daemon) -> None:
    """Open the shell on ``daemon`` with its token, and confirm the connection as its dialog asks."""
    page.goto(f"{shell_origin}/?daemon={quote(daemon.url, safe='')}#token={token_of(daemon)}")
    expect(page.get_by_text("Connect to Qwen Code")).to_be_visible(timeout=WAIT)
    expect(page.get_by_label("Bearer token (optional)")).to_have_value(token_of(daemon))  # from the fragment
    page.get_by_role("button", name="Connect").click()
    expect(page.get_by_text("What would you like to do?")).to_be_visible(timeout=WAIT)


def send(page: Any, words: str) -> None:
    page.locator(".cm-content").click()
    page.keyboard.type(words)
    page.get_by_role("button", name="Send message").click()


def only_session(daemon: Daemon) -> str:
    with daemon.client() as client:
        [session] = client.get("/session").json()["sessions"]
    return session["sessionId"]


def stop_reason(daemon: Daemon, sid: str) -> str:
    """The stop reason of the first turn of ``sid``: its event stream from the start, read until that turn ends."""
    with daemon.client() as client, client.stream("GET", f"/session/{sid}/events",
                                                  headers={"Last-Event-ID": "0"}) as events:
        for line in events.iter_lines():
            frame = json.loads(line[5:]) if line.startswith("data:") else {}
            if frame.get("type") == "turn_complete":
                return frame["data"]["stopReason"]
    raise AssertionError("the stream ended before the turn did")


def test_sessions_load_in_the_sidebar_and_one_opens_with_its_conversation(page, daemons, shell_origin):
    d = start(daemons, shell_origin, [[{"text": "Bring the blanket."}]])
    with d.client() as client:  # a session another client made, before the page opens
        sid = client.post("/session", json={}).json()["sessionId"]
        admitted = client.post(f"/session/{sid}/prompt", json=text("plan a picnic")).json()
        assert wait_turn(client, sid, admitted["promptId"])["state"] == "completed"
    open_shell(page, shell_origin, d)
    title = page.get_by_text("plan a picnic", exact=True)
    expect(title).to_be_visible(timeout=WAIT)  # listed, titled by its first prompt
    title.click()
    expect(page.get_by_text("Bring the blanket.")).to_be_visible(timeout=WAIT)
    expect(page.get_by_text("Bring the blanket.")).to_have_count(1)  # shown once, though load published it again


def test_a_prompt_streams_its_answer(page, daemons, shell_origin):
    d = start(daemons, shell_origin, [[{"thought": "weighing it"}, {"text": "Hello "}, {"text": "from "},
                                       {"text": "Trellis."}]])
    open_shell(page, shell_origin, d)
    send(page, "say hello")
    expect(page.get_by_text("Hello from Trellis.")).to_be_visible(timeout=WAIT)
    sid = only_session(d)
    with d.client() as client:
        status = client.get(f"/session/{sid}/status").json()
        assert status["historyLength"] == 2 and status["model"] == "scripted"  # the shell set its model
    # The echo of the shell's own prompt is dropped (it showed the prompt already): one bubble, not two.
    expect(page.locator("[data-web-shell-user-bubble]")).to_have_text(["say hello"])


def test_a_permission_request_is_answered_in_the_page(page, daemons, shell_origin):
    d = start(daemons, shell_origin, [[{"tool_call": {"name": "shell", "arguments": {"command": "echo hi"}}}],
                                      [{"text": "done"}]])
    open_shell(page, shell_origin, d)
    send(page, "run echo hi")
    allow = page.get_by_role("radio", name="Yes, allow once")
    expect(allow).to_be_visible(timeout=WAIT)
    # The session-rule option reads as what it does: the shell labels an option of qwen's id "proceed_always"
    # "Allow All Edits" whatever its name says, and on a shell command that was the rule Bash(echo:*).
    expect(page.get_by_role("radio", name=re.compile(r"^Always allow in this session: Bash\(echo"))).to_be_visible()
    expect(page.get_by_role("radio", name="Allow All Edits")).to_have_count(0)
    allow.click()
    expect(page.get_by_text("done", exact=True)).to_be_visible(timeout=WAIT)
    sid = only_session(d)
    with d.client() as client:
        [record] = [r for r in client.get(f"/session/{sid}/transcript").json()["entries"]
                    if r["message"]["role"] == "tool"]
        assert "hi" in record["message"]["content"]  # it ran, allowed


def test_a_running_turn_is_cancelled_from_the_page(page, daemons, shell_origin):
    d = start(daemons, shell_origin, [[{"text": "working on it"}, {"sleep": 60}, {"text": "never shown"}]])
    open_shell(page, shell_origin, d)
    send(page, "work slowly")
    expect(page.get_by_text("working on it")).to_be_visible(timeout=WAIT)
    stop = page.get_by_role("button", name="esc to cancel")
    stop.click()
    expect(stop).to_have_count(0, timeout=WAIT)
    expect(page.get_by_role("button", name="Send message")).to_be_visible()
    assert stop_reason(d, only_session(d)) == "cancelled"
    expect(page.get_by_text("never shown")).to_have_count(0)


def test_the_approval_mode_picker_and_the_daemon_status_panel_speak_for_trellis(page, daemons, shell_origin):
    d = start(daemons, shell_origin, [[{"text": "ok"}]])
    open_shell(page, shell_origin, d)
    send(page, "hello")
    expect(page.get_by_text("ok", exact=True)).to_be_visible(timeout=WAIT)
    page.get_by_role("button", name="Approval mode").click()
    page.get_by_text("Full Access (yolo)").click()
    expect(page.get_by_role("button", name="Approval mode")).to_have_text("Full Access")
    with d.client() as client:
        assert client.get(f"/session/{only_session(d)}/status").json()["approvalMode"] == "yolo"
    page.get_by_role("button", name="Daemon Status").click()
    expect(page.get_by_text("trellis", exact=True)).to_be_visible()  # its Mode row
    expect(page.get_by_text("first-responder", exact=True)).to_be_visible()


def test_text_typed_while_a_turn_runs_goes_in_mid_turn_and_no_unserved_route_is_asked(page, daemons, shell_origin):
    d = start(daemons, shell_origin, [[{"text": "working on it"}, {"sleep": 60}, {"text": "never shown"}],
                                      [{"text": "bye then"}]])
    missing: list[str] = []
    page.on("response", lambda r: missing.append(f"{r.request.method} {r.url}") if r.status == 404 else None)
    open_shell(page, shell_origin, d)
    send(page, "work slowly")
    expect(page.get_by_text("working on it")).to_be_visible(timeout=WAIT)
    sid = only_session(d)
    send(page, "and then say bye")  # the turn is running: a mid-turn message
    with d.client() as client:
        deadline = time.monotonic() + WAIT / 1000
        while client.get(f"/session/{sid}/status").json()["midTurnQueued"] != 1:
            assert time.monotonic() < deadline, "the mid-turn message was not queued"
            time.sleep(0.05)
        # No tool boundary takes it: cancelled, the turn leaves it to run as a prompt of its own.
        assert client.post(f"/session/{sid}/cancel").status_code in (200, 202, 204)
    expect(page.get_by_text("bye then", exact=True)).to_be_visible(timeout=WAIT)
    with d.client() as client:
        users = [r["message"]["content"] for r in client.get(f"/session/{sid}/transcript").json()["entries"]
                 if r["message"]["role"] == "user"]
    assert any("and then say bye" in u for u in users), users
    # The capabilities name no feature whose routes Trellis does not serve (mid-turn-messages were polled).
    assert not [m for m in missing if "mid-turn-messages" in m], missing


def test_mid_turn_input_another_client_sent_is_listed_in_the_page_by_its_text(page, daemons, shell_origin):
    """A queued prompt makes the shell refresh its queue view from ``GET /session/:id/mid-turn-messages``; a
    message another client sent is new to it and rebuilt from the listing's ``text`` (without one the page broke)."""
    d = start(daemons, shell_origin, [[{"text": "working on it"}, {"sleep": 60}, {"text": "never shown"}],
                                      [{"text": "bye then"}]])
    open_shell(page, shell_origin, d)
    send(page, "work slowly")
    expect(page.get_by_text("working on it")).to_be_visible(timeout=WAIT)
    sid = only_session(d)
    with d.client() as client:
        attached = client.post("/session", json={"sessionId": sid}).json()  # another client attaches
        other = {"X-Qwen-Client-Id": attached["clientId"]}
        posted = client.post(f"/session/{sid}/mid-turn-message", json={"message": "look at the tests too"},
                             headers=other).json()
        assert posted["accepted"] is True
        assert client.post(f"/session/{sid}/prompt", json=text("then tidy up"), headers=other).status_code == 202
    queue = page.locator("[data-web-shell-queued-prompts]")
    expect(queue).to_contain_text("look at the tests too", timeout=WAIT)
    expect(page.get_by_text("Something went wrong")).to_have_count(0)


def test_a_failed_turn_is_retried_from_the_page(page, daemons, shell_origin):
    """The turn's error offers the shell's retry: it sends the prompt again with a top-level ``retry: true``
    (qwen serve's form), which Trellis takes as a trusted retry (it refused the field before: 400)."""
    d = start(daemons, shell_origin, [{"refuse": {"code": "rate_limited", "message": "slow down"}},
                                      [{"text": "Recovered after the retry."}]])
    refused: list[str] = []
    page.on("response", lambda r: refused.append(f"{r.status} {r.request.method} {r.url}")
            if r.status >= 400 and r.url.endswith("/prompt") else None)
    open_shell(page, shell_origin, d)
    send(page, "fix the parser")
    retry = page.get_by_role("button", name="Press Ctrl+Y to retry or click to retry")
    expect(retry).to_be_visible(timeout=WAIT)
    retry.click()
    expect(page.get_by_text("Recovered after the retry.")).to_be_visible(timeout=WAIT)
    assert not refused, refused
    with d.client() as client:
        users = [r["message"]["content"] for r in client.get(f"/session/{only_session(d)}/transcript").json()["entries"]
                 if r["message"]["role"] == "user"]
    assert users == ["fix the parser"]  # retried as it stood, not asked a second time


def test_a_renamed_sessions_title_shows_in_the_sidebar_and_a_rename_reaches_the_open_page(page, daemons,
                                                                                          shell_origin):
    """The shell lists a session by its ``displayName`` (Trellis's title, once always its first prompt) and
    learns of a rename only from ``session_metadata_updated`` (it drops ``session_info_update``)."""
    d = start(daemons, shell_origin, [[{"text": "Bring the blanket."}]])
    with d.client() as client:
        sid = client.post("/session", json={}).json()["sessionId"]
        admitted = client.post(f"/session/{sid}/prompt", json=text("plan a picnic")).json()
        assert wait_turn(client, sid, admitted["promptId"])["state"] == "completed"
        assert client.post(f"/session/{sid}/title", json={"title": "Picnic for six"}).status_code == 200
    open_shell(page, shell_origin, d)
    renamed = page.get_by_text("Picnic for six", exact=True)
    expect(renamed).to_be_visible(timeout=WAIT)
    expect(page.get_by_text("plan a picnic", exact=True)).to_have_count(0)
    renamed.click()
    expect(page.get_by_text("Bring the blanket.")).to_be_visible(timeout=WAIT)
    with d.client() as client:  # renamed by another client while the page shows the session
        assert client.post(f"/session/{sid}/title", json={"title": "Picnic for eight"}).status_code == 200
    expect(page.get_by_text("Picnic for eight", exact=True).first).to_be_visible(timeout=WAIT)
    expect(page.get_by_text("Picnic for six", exact=True)).to_have_count(0)
