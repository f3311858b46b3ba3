"""qwen-code's own Web Shell (0.24.4) against Trellis: what a tool card and a cancelled turn show.

The shell is served and opened as in tests/browser/test_webshell.py (whose helpers and ``shell_origin``
fixture these tests share). Things are found as a person finds them; Playwright's ``expect`` waits.

A tool card is labelled by the call's tool name, which the shell reads from ``_meta.toolName`` of the
``tool_call``/``tool_call_update`` (qwen serve stamps it there; without it the card reads ``unknown``), shown
by its own display name for the tool (``glob``: "Glob"). A cancelled turn's ``turn_complete.promptCancelled``
``{cancelledAt, elapsedMs}`` is the line "You cancelled this request after …".
"""

from __future__ import annotations

import re
import time

import pytest

from tests.browser import test_webshell as webshell
from tests.browser.test_webshell import WAIT, open_shell, only_session, send, start

playwright = pytest.importorskip("playwright.sync_api", reason="playwright drives the browser tests")
expect = playwright.expect
shell_origin = webshell.shell_origin  # the module-scoped fixture serving the shell, used here as well


def test_a_tool_card_is_labelled_by_the_tools_name_not_unknown(page, daemons, shell_origin):
    d = start(daemons, shell_origin, [[{"tool_call": {"id": "c_glob", "name": "glob",
                                                      "arguments": {"pattern": "*.nothing-matches-this"}}}],
                                      [{"text": "Nothing matched."}]])
    open_shell(page, shell_origin, d)
    send(page, "look for files")
    expect(page.get_by_text("Nothing matched.")).to_be_visible(timeout=WAIT)
    page.get_by_role("button", name="Expand steps").click()  # the turn's steps fold once it ended
    expect(page.get_by_text("Glob", exact=True).first).to_be_visible(timeout=WAIT)  # the card, by the tool's name
    expect(page.get_by_text("unknown", exact=True)).to_have_count(0)
    with d.client() as client:  # the call ran (the card is of a real call)
        [record] = [r for r in client.get(f"/session/{only_session(d)}/transcript").json()["entries"]
                    if r["message"]["role"] == "tool"]
        assert record["message"]["content"]


def test_a_cancelled_turn_says_when_it_was_cancelled(page, daemons, shell_origin):
    d = start(daemons, shell_origin, [[{"text": "working on it"}, {"sleep": 60}, {"text": "never shown"}]])
    open_shell(page, shell_origin, d)
    send(page, "work slowly")
    expect(page.get_by_text("working on it")).to_be_visible(timeout=WAIT)
    stop = page.get_by_role("button", name="esc to cancel")
    stop.click()
    expect(stop).to_have_count(0, timeout=WAIT)
    expect(page.get_by_text("You cancelled this request", exact=False).first).to_be_visible(timeout=WAIT)


def test_the_token_usage_and_context_usage_panels_load(page, daemons, shell_origin):
    """``GET /session/:id/stats`` and ``/context-usage`` (404 before: "Failed to load ..."): the Token Usage panel
    shows the session's model calls. The scripted model has no known context window, so the Context Usage panel
    says it is unavailable (a window of 0; tests/e2e/test_webshell_usage_panels.py checks the figures with one)."""
    d = start(daemons, shell_origin, [[{"text": "Counted."}, {"usage": {"prompt_tokens": 1234,
                                                                       "completion_tokens": 56}}]])
    open_shell(page, shell_origin, d)
    send(page, "count me")
    expect(page.get_by_text("Counted.")).to_be_visible(timeout=WAIT)
    page.get_by_role("button", name="Session token usage").click()
    expect(page.get_by_text("By model")).to_be_visible(timeout=WAIT)  # a model made calls: its card, not "no data"
    expect(page.get_by_text("Failed to load token usage.")).to_have_count(0)
    expect(page.get_by_text("No API calls in this session yet.")).to_have_count(0)
    page.get_by_role("button", name="Context Usage").click()
    panel = page.get_by_role("complementary", name="Right panel")
    expect(panel.get_by_text("Context usage is unavailable for this session.")).to_be_visible(timeout=WAIT)
    expect(panel.get_by_text("Failed to load context usage.")).to_have_count(0)


def test_fork_with_a_directive_starts_a_session_that_runs_it(page, daemons, shell_origin):
    """The shell's ``/fork <directive>`` (400 before: "Failed to launch fork"): the shell says it started a
    background agent, and the directive runs in a new session holding a copy of the conversation."""
    d = start(daemons, shell_origin, [[{"text": "First answer."}], [{"text": "Forked and done."}]])
    open_shell(page, shell_origin, d)
    send(page, "remember the plan")
    expect(page.get_by_text("First answer.")).to_be_visible(timeout=WAIT)
    source = only_session(d)
    send(page, "/fork write the tests")
    expect(page.get_by_text('Started background agent: "write the tests"', exact=False)).to_be_visible(timeout=WAIT)
    expect(page.get_by_text("Failed to launch fork", exact=False)).to_have_count(0)
    with d.client() as client:
        forks = [s for s in client.get("/session").json()["sessions"] if s["sessionId"] != source]
        assert [s.get("title") for s in forks] == ["write the tests"], forks
        fork = forks[0]["sessionId"]
        for _ in range(200):
            texts = [e["message"]["content"] for e in client.get(f"/session/{fork}/transcript").json()["entries"]]
            if texts[-1:] == ["Forked and done."]:
                break
            page.wait_for_timeout(50)
        assert texts == ["remember the plan", "First answer.", "write the tests", "Forked and done."], texts


def test_the_environment_panel_shows_the_work_trees_changes(page, daemons, shell_origin, tmp_path):
    """``GET /workspaces/:workspace/git`` with the counts of ``git status`` run in the sandbox (the branch alone
    before): the Environment panel says what changed, and its Changes dialog lists the files and shows a file's
    hunks (``/git/diff``, ``/git/diff/file``), and its History tab the commits and a commit's files (``/git/log``,
    ``/git/log/commit``); the branch picker lists the branches (``/git/branches``). Without a sandbox it shows the
    branch alone."""
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    project = tmp_path / "project"
    project.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=trunk", *args],
                       cwd=project, check=True, capture_output=True)

    git("init", "-q")
    (project / "kept.txt").write_text("one\n")
    git("add", ".")
    git("commit", "-qm", "one")
    (project / "kept.txt").write_text("two\n")
    (project / "new.txt").write_text("new\n")
    d = daemons().start([[{"text": "ok"}]], None, "--allow-origin", shell_origin, "--workspace", str(project))
    with d.client() as client:
        sandboxed = client.get("/capabilities").json().get("sandbox") == "bwrap"
    open_shell(page, shell_origin, d)
    send(page, "hello")
    expect(page.get_by_text("ok", exact=True)).to_be_visible(timeout=WAIT)
    page.get_by_role("button", name="Toggle environment information").click()
    panel = page.get_by_role("complementary", name="Environment")
    expect(panel.get_by_role("button", name="trunk", exact=True)).to_be_visible(timeout=WAIT)
    if sandboxed:
        changes = panel.get_by_role("button", name="Changes 1 modified · 1 untracked")
        expect(changes).to_be_visible(timeout=WAIT)
        changes.click()  # the diffs, from git diff in the sandbox (the dialog said "Failed to load changes", then
        dialog = page.get_by_role("dialog", name="Changes")  # "Git is not available for this workspace")
        expect(dialog.get_by_text("2 files · +2 −1")).to_be_visible(timeout=WAIT)
        expect(dialog.get_by_role("button", name="Show changes for new.txt")).to_contain_text("Untracked")
        dialog.get_by_role("button", name="Show changes for kept.txt").click()
        expect(dialog.get_by_role("code").filter(has_text="one")).to_be_visible(timeout=WAIT)  # the removed line
        expect(dialog.get_by_role("code").filter(has_text="two")).to_be_visible(timeout=WAIT)  # and the added one
        expect(dialog.get_by_text("Git is not available for this workspace")).to_have_count(0)
        dialog.get_by_role("tab", name="History").click()  # git log in the sandbox ("Failed to load history")
        history = page.get_by_role("dialog", name="History")
        expect(history.get_by_text("1 commits")).to_be_visible(timeout=WAIT)
        history.get_by_role("button", name=re.compile(r"^[0-9a-f]{7} one trunk")).click()
        expect(history.get_by_text("1 files · +1 −0")).to_be_visible(timeout=WAIT)  # the commit's files
        expect(history.get_by_text("Failed to load history")).to_have_count(0)
        history.get_by_role("button", name="close").click()
        git("branch", "feature")
        page.get_by_role("button", name="Toggle environment information").click()  # the dialog closed the panel
        panel.get_by_role("button", name="trunk", exact=True).click()  # the branch picker: git for-each-ref
        picker = page.get_by_role("dialog").filter(has=page.get_by_role("textbox",
                                                                         name="Search for branches and actions"))
        expect(picker.get_by_role("button", name="feature", exact=True)).to_be_visible(timeout=WAIT)
        expect(picker.get_by_text("no route")).to_have_count(0)
        picker.get_by_role("button", name="feature", exact=True).click()  # git checkout, in the sandbox
        deadline = time.monotonic() + WAIT / 1000
        while subprocess.run(["git", "branch", "--show-current"], cwd=project, capture_output=True,
                             text=True).stdout.strip() != "feature":
            assert time.monotonic() < deadline, page.locator("body").aria_snapshot()[-1500:]
            page.wait_for_timeout(100)


def test_the_environment_panel_lists_a_running_background_shell(page, daemons, shell_origin):
    """``GET /session/:id/tasks`` (404 before: the panel showed "Get tasks failed"): a background shell the
    model started is listed, running."""
    d = daemons().start([[{"tool_call": {"name": "shell", "arguments": {"command": "sleep 30",
                                                                        "run_in_background": True}}}],
                         [{"text": "Started it."}]], {"approvalMode": "yolo"}, "--allow-origin", shell_origin)
    open_shell(page, shell_origin, d)
    send(page, "start the server")
    expect(page.get_by_text("Started it.")).to_be_visible(timeout=WAIT)
    page.get_by_role("button", name="Toggle environment information").click()
    panel = page.get_by_role("complementary", name="Environment")
    expect(panel.get_by_role("button", name="sleep 30 Running")).to_be_visible(timeout=WAIT)
    expect(page.get_by_text("Get tasks failed", exact=False)).to_have_count(0)


def test_the_panels_of_qwen_features_trellis_has_not_say_what_it_has_instead(page, daemons, shell_origin):
    """Plugins, Scheduled Tasks and Goals ask for qwen routes Trellis does not serve; each panel shows the
    answer's sentence, which said "no route GET /scheduled-tasks" and now says what Trellis has instead. The
    open session's goal, polled, is qwen's answer for a session without one."""
    d = start(daemons, shell_origin, [[{"text": "ok"}]])
    goal_answers: list[int] = []
    page.on("response", lambda r: goal_answers.append(r.status) if r.url.endswith("/goal") else None)
    open_shell(page, shell_origin, d)
    send(page, "hello")
    expect(page.get_by_text("ok", exact=True)).to_be_visible(timeout=WAIT)
    # The open session's goal is polled: qwen's answer for none (it was a 404, an error in the console).
    deadline = time.monotonic() + WAIT / 1000
    while not goal_answers and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert goal_answers and set(goal_answers) == {200}, goal_answers
    for button, words in (("Scheduled Tasks", "Trellis has no scheduled tasks"), ("Goals", "Trellis sessions have no goals"),
                          ("Plugins", "Trellis has no plugin manager")):
        page.get_by_role("button", name=button, exact=True).click()
        expect(page.get_by_text(words).first).to_be_visible(timeout=WAIT)
        page.keyboard.press("Escape")
