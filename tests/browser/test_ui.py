"""The daemon's own UI at ``/`` (transport/ui), in headless chromium against a real daemon subprocess.

Everything is found the way a person (or a screen reader) finds it: by role
and accessible name — the textbox "Prompt", the buttons "Send", "Queue",
"Cancel", "Allow", "Reject", "Abort", "Kill", the list "Sessions", the regions
"Pending prompts", "Background tasks" and "Subagent runs", the log
"Conversation". Playwright's ``expect`` waits (up to 10 s) for what a test
looks for; nothing sleeps to wait for the page.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from tests.processes import kill_all, marker, sleeping
from tests.sync_daemon import Daemon, Proxy, environ, free_port, text, wait_turn

playwright = pytest.importorskip("playwright.sync_api", reason="playwright drives the browser tests")
expect = playwright.expect
expect.set_options(timeout=10_000)

TODOS = {"todos": [{"id": "t1", "content": "migrate the tables", "status": "in_progress"},
                   {"id": "t2", "content": "rotate the keys", "status": "pending"}]}


def token_of(daemon: Daemon) -> str:
    return (daemon.state / "token").read_text().strip()


def open_ui(page: Any, daemon: Daemon, url: str | None = None) -> None:
    """The page as ``trellis open`` opens it: the token in the fragment."""
    page.goto(f"{url or daemon.url}/#token={token_of(daemon)}")
    expect(page.get_by_role("button", name="New session")).to_be_visible()


def new_session(page: Any) -> str:
    page.get_by_role("button", name="New session").click()
    expect(page.get_by_role("textbox", name="Prompt")).to_be_enabled()
    found = re.search(r"#session=(.+)$", page.url)
    assert found, page.url
    return found[1]


def send(page: Any, words: str) -> None:
    page.get_by_role("textbox", name="Prompt").fill(words)
    page.get_by_role("button", name="Send", exact=True).click()


def wait_idle(client: httpx.Client, sid: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while client.get(f"/session/{sid}/status").json()["state"] != "idle":
        assert time.monotonic() < deadline, "the session did not go idle"
        time.sleep(0.05)


def conversation(page: Any) -> Any:
    return page.get_by_role("log", name="Conversation")


def test_a_prompt_streams_its_answer_and_the_turn_finishes(page, daemons):
    d = daemons().start([[{"thought": "weighing the options"}, {"text": "Hello "}, {"text": "streamed "},
                          {"text": "world."}]])
    open_ui(page, d)
    assert "token" not in page.url  # taken out of the address bar at once
    assert page.evaluate("sessionStorage.getItem('trellis.token')") == token_of(d)
    sid = new_session(page)
    expect(page.get_by_role("list", name="Sessions").get_by_role("listitem").filter(has_text=sid)).to_be_visible()
    send(page, "say hello")
    log = conversation(page)
    expect(log.locator(".msg.user")).to_have_text("say hello")
    expect(log.locator(".msg.thought")).to_have_text("weighing the options")
    expect(log.locator(".msg.agent")).to_have_text("Hello streamed world.")  # the chunks, in one bubble
    expect(log.get_by_text("✓ turn complete")).to_be_visible()
    expect(page.get_by_role("textbox", name="Prompt")).to_have_value("")
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()  # idle again
    with d.client() as client:
        assert client.get(f"/session/{sid}/status").json()["historyLength"] == 2


def test_a_permission_request_is_allowed_and_another_rejected(page, daemons):
    d = daemons().start([
        [{"tool_call": {"name": "shell", "arguments": {"command": "echo approved-output"}}}],
        [{"tool_call": {"name": "shell", "arguments": {"command": "echo refused-output"}}}],
        [{"text": "after both votes"}],
    ])
    open_ui(page, d)
    new_session(page)
    send(page, "run the commands")
    asked = page.get_by_role("region", name="Permission requests")
    expect(asked.get_by_role("group")).to_have_count(1)
    expect(asked).to_contain_text("echo approved-output")
    asked.get_by_role("button", name="Allow", exact=True).click()
    log = conversation(page)
    expect(log.locator(".tool").first.locator(".output")).to_contain_text("approved-output")
    expect(log.locator(".tool").first.locator(".badge")).to_have_text("completed")
    expect(asked).to_contain_text("echo refused-output")
    asked.get_by_role("button", name="Reject", exact=True).click()
    expect(log.get_by_text("after both votes")).to_be_visible()
    expect(log.get_by_text("→ Allow", exact=True)).to_be_visible()
    expect(log.get_by_text("→ Reject", exact=True)).to_be_visible()
    expect(asked).to_be_hidden()
    refused = log.locator(".tool").nth(1)
    expect(refused.locator(".badge")).to_have_text("failed")
    expect(refused.locator(".output")).to_contain_text("denied")
    assert "refused-output" not in refused.locator(".output").inner_text()  # refused: it never ran


def test_a_queued_prompt_is_aborted_and_a_running_turn_cancelled(page, daemons):
    d = daemons().start([[{"text": "working-slowly"}, {"sleep": 60}, {"text": "never shown"}],
                         [{"text": "the queued one must not run"}]])
    open_ui(page, d)
    sid = new_session(page)
    send(page, "take your time")
    expect(conversation(page).get_by_text("working-slowly")).to_be_visible()
    page.get_by_role("textbox", name="Prompt").fill("next please")
    page.get_by_role("button", name="Queue", exact=True).click()
    queue = page.get_by_role("region", name="Pending prompts")
    entry = queue.get_by_role("listitem").filter(has_text="next please")
    expect(entry).to_be_visible()
    entry.get_by_role("button", name="Abort").click()
    expect(queue.get_by_role("listitem")).to_have_count(0)
    with d.client() as client:
        assert client.get(f"/session/{sid}/pending-prompts").json()["pendingPrompts"][0]["text"] == "take your time"
        assert len(client.get(f"/session/{sid}/pending-prompts").json()["pendingPrompts"]) == 1
    page.get_by_role("button", name="Cancel").click()
    expect(conversation(page).get_by_text("✗ turn cancelled")).to_be_visible()
    expect(page.get_by_role("button", name="Cancel")).to_be_disabled()
    with d.client() as client:
        wait_idle(client, sid)  # the daemon agrees: nothing runs (its turn_complete came just before)
        assert client.get(f"/session/{sid}/pending-prompts").json()["pendingPrompts"] == []
    assert "never shown" not in conversation(page).inner_text()
    assert "the queued one must not run" not in conversation(page).inner_text()


def test_send_while_a_turn_runs_is_a_mid_turn_message(page, daemons):
    d = daemons().start([
        [{"text": "thinking-slowly"}, {"sleep": 1.5}, {"tool_call": {"name": "todo_write", "arguments": TODOS}}],
        [{"text": "took the note"}],
    ])
    open_ui(page, d)
    new_session(page)
    send(page, "wash up")
    expect(conversation(page).get_by_text("thinking-slowly")).to_be_visible()
    expect(page.get_by_role("button", name="Cancel")).to_be_enabled()  # the page knows a turn runs
    send(page, "also dry them")
    expect(conversation(page).get_by_text("↳ mid-turn message taken: also dry them")).to_be_visible()
    expect(conversation(page).get_by_text("took the note")).to_be_visible()
    expect(page.get_by_role("region", name="Pending prompts").get_by_role("listitem")).to_have_count(0)


def test_a_background_task_shows_its_output_live_and_is_killed(page, daemons):
    mark = marker()
    command = f"echo task-started-{mark}; sleep {mark}"
    d = daemons().start([
        [{"tool_call": {"name": "shell", "arguments": {"command": command, "run_in_background": True}}}],
        [{"text": "it runs in the background"}],
        [{"text": "noted that it stopped"}],  # the automatic turn for its notification
    ], None, "--sandbox", "off")
    try:
        open_ui(page, d)
        new_session(page)
        send(page, "start the job")
        page.get_by_role("button", name="Allow", exact=True).click()
        tasks = page.get_by_role("region", name="Background tasks")
        task = tasks.get_by_role("listitem").first
        expect(task.locator(".output")).to_contain_text(f"task-started-{mark}")
        expect(task.locator(".badge")).to_have_text("running")
        deadline = time.monotonic() + 10  # the shell printed its line; its sleep may exec a moment later
        while not sleeping(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sleeping(mark)
        task.get_by_role("button", name="Kill").click()
        expect(task.locator(".badge")).to_contain_text("killed")
        expect(task.get_by_role("button", name="Kill")).to_have_count(0)
        assert not sleeping(mark)
    finally:
        kill_all(sleeping(mark))


def test_guard_continuations_show_their_attempt_and_the_exhaustion(page, daemons):
    d = daemons().start([
        [{"text": "Planning."}, {"tool_call": {"name": "todo_write", "arguments": TODOS}}],
        [{"text": "I will stop here."}],
        [{"text": "continuing once"}],
        [{"text": "continuing twice"}],
    ], {"experimental": {"todoStopGuard": True}})
    open_ui(page, d)
    new_session(page)
    send(page, "do the migration")
    log = conversation(page)
    expect(log.locator(".plan")).to_contain_text("Plan (0/2 done)")
    expect(log.locator(".plan")).to_contain_text("migrate the tables")
    guard = log.locator(".line.guard")
    expect(guard.nth(0)).to_have_text("⟳ todo stop guard — attempt 1 of 2 (2 unfinished)")
    expect(guard.nth(1)).to_have_text("⟳ todo stop guard — attempt 2 of 2 (2 unfinished)")
    expect(guard.nth(2)).to_have_text("⟳ todo stop guard stopped after 2 of 2 attempts (2 unfinished)")
    expect(log.get_by_text("✓ turn complete")).to_be_visible()
    assert log.inner_text().index("continuing once") < log.inner_text().index("attempt 2 of 2")


def test_a_subagent_run_shows_its_turn_counter_and_how_it_ended(page, daemons):
    slow = {"delay": 1.2, "steps": [{"text": "ok\n"}]}  # shared by the parent and the child session
    d = daemons().start([
        [{"tool_call": {"name": "agent", "arguments": {"name": "kid", "brief": "count the files",
                                                       "goal": "a count", "max_turns": 2}}}],
        slow, slow, slow, slow, slow,
    ])
    open_ui(page, d)
    new_session(page)
    send(page, "delegate")
    page.get_by_role("button", name="Allow", exact=True).click()  # starting a run is asked, as a shell is
    runs = page.get_by_role("region", name="Subagent runs")
    run = runs.get_by_role("listitem").filter(has_text="kid")
    expect(run.locator(".run-turn")).to_have_text(re.compile(r"turn [12] of 2"))
    expect(run.locator(".run-turn")).to_have_text("turn 2 of 2", timeout=15_000)
    expect(run).to_contain_text("ended: turn_cap", timeout=15_000)
    expect(run).to_contain_text("goal: a count")
    expect(conversation(page).get_by_text(re.compile(r"⧉ subagent kid started"))).to_be_visible()


def test_a_dropped_connection_resumes_with_what_was_missed_and_nothing_twice(page, daemons):
    proxy_port = free_port()  # the page comes in through it: the daemon must accept its port as a Host
    d = daemons().start([[{"text": "before-the-cut"}], [{"text": "while-away"}], [{"text": "after-the-cut"}]],
                        None, "--allow-host", f"127.0.0.1:{proxy_port}")
    proxy = Proxy(int(d.url.rsplit(":", 1)[1]), proxy_port)
    try:
        open_ui(page, d, f"http://127.0.0.1:{proxy_port}")
        sid = new_session(page)
        send(page, "first")
        log = conversation(page)
        expect(log.get_by_text("before-the-cut")).to_be_visible()
        expect(page.get_by_role("status")).to_have_text("● live")
        proxy.cut()  # the stream drops, and no new connection gets through
        expect(page.get_by_role("status")).to_have_text("⟲ reconnecting…")
        with d.client() as client:  # meanwhile another client runs a turn on the session
            admitted = client.post(f"/session/{sid}/prompt", json=text("from elsewhere")).json()
            assert wait_turn(client, sid, admitted["promptId"])["state"] == "completed"
        proxy.up = True
        expect(page.get_by_role("status")).to_have_text("● live", timeout=15_000)
        expect(log.get_by_text("while-away")).to_be_visible()  # replayed after the last id the page had
        send(page, "third")
        expect(log.get_by_text("after-the-cut")).to_be_visible()
        expect(log.get_by_text("✓ turn complete")).to_have_count(3)
        shown = log.inner_text()
        for word in ("before-the-cut", "from elsewhere", "while-away", "after-the-cut"):
            assert shown.count(word) == 1, (word, shown)
    finally:
        proxy.close()


def test_a_page_without_the_token_asks_for_it_and_a_wrong_one_is_refused(page, daemons):
    d = daemons().start([[{"text": "hello"}]])
    page.goto(d.url + "/")
    box = page.get_by_role("textbox", name="Token")
    expect(box).to_be_visible()
    expect(page.get_by_role("button", name="New session")).to_be_hidden()
    box.fill("not-the-token")
    page.get_by_role("button", name="Connect").click()
    expect(page.get_by_role("alert").filter(has_text="refused")).to_be_visible()
    box.fill(token_of(d))
    page.get_by_role("button", name="Connect").click()
    expect(page.get_by_role("button", name="New session")).to_be_visible()
    page.reload()  # kept for the tab
    expect(page.get_by_role("button", name="New session")).to_be_visible()


def test_a_restorable_session_is_listed_and_opening_it_shows_its_history(page, daemons):
    d = daemons()
    d.start([[{"text": "remembered-answer"}]])
    with d.client() as client:
        sid = client.post("/session", json={}).json()["sessionId"]
        admitted = client.post(f"/session/{sid}/prompt", json=text("remember this")).json()
        wait_turn(client, sid, admitted["promptId"])
    d.stop()
    d.start([[{"text": "second-life"}]])  # the same state directory (and a new token)
    open_ui(page, d)
    item = page.get_by_role("list", name="Sessions").get_by_role("listitem").filter(has_text=sid)
    expect(item).to_contain_text("restorable")
    item.locator("button.session-item").click()
    log = conversation(page)
    expect(log.get_by_text("remembered-answer")).to_be_visible()
    expect(log.get_by_text("remember this")).to_be_visible()
    expect(item).to_contain_text("idle")  # live again
    send(page, "and now")
    expect(log.get_by_text("second-life")).to_be_visible()


def test_the_page_loads_no_script_from_elsewhere_and_model_text_is_never_markup(page, daemons):
    d = daemons().start([[{"text": "<img src=x onerror=\"document.title='owned'\"><b>bold?</b>"}]])
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    open_ui(page, d)
    new_session(page)
    send(page, "<script>document.title='owned'</script>")
    log = conversation(page)
    expect(log.locator(".msg.agent")).to_have_text("<img src=x onerror=\"document.title='owned'\"><b>bold?</b>")
    expect(log.locator(".msg.user")).to_have_text("<script>document.title='owned'</script>")
    assert log.locator("img, b, script").count() == 0
    assert page.title().endswith(" — Trellis")  # the session's title, as text: no script of the model's ran
    assert all(u.startswith(d.url) for u in requested), requested
    response = httpx.get(d.url + "/", trust_env=False)
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]


def test_the_url_trellis_open_prints_opens_the_session_it_names(page, daemons, tmp_path):
    d = daemons().start([[{"text": "opened-by-url"}]])
    with d.client() as client:
        sid = client.post("/session", json={}).json()["sessionId"]
        wait_turn(client, sid, client.post(f"/session/{sid}/prompt", json=text("hi")).json()["promptId"])
    printed = subprocess.run([sys.executable, "-m", "trellis", "open", "--print", "--url", d.url, "--state-dir",
                              str(d.state), "--session", sid], capture_output=True, text=True, timeout=30,
                             env=environ(), cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    page.goto(printed.stdout.strip())
    expect(page.locator("#session-title")).to_have_attribute("title", sid)  # its title, else its id, is shown
    expect(conversation(page).get_by_text("opened-by-url")).to_be_visible()
    expect(page.get_by_role("button", name=re.compile(sid))).to_have_attribute("aria-current", "true")


def start_run(daemon: Daemon, **arguments: Any) -> None:
    """A subagent run started by a parent over ``/mcp`` (this test): its session draws from the script."""
    token = token_of(daemon)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}
    with httpx.Client(base_url=daemon.url, headers=headers, timeout=10, trust_env=False) as client:
        init = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
        client.headers["Mcp-Session-Id"] = init.headers["Mcp-Session-Id"]
        client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        started = client.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                            "params": {"name": "start", "arguments": arguments}}).json()
        assert not started["result"].get("isError"), started


def test_a_run_that_needs_help_shows_its_question_and_one_that_reached_its_goal_says_self_reported(page, daemons):
    d = daemons().start([
        [{"tool_call": {"name": "need_help", "arguments": {"question": "which database should I migrate?"}}}],
        [{"text": "need_help sent"}],
        [{"tool_call": {"name": "goal_reached", "arguments": {"summary": "all green"}}}],
        [{"text": "goal_reached sent"}],
    ])
    open_ui(page, d)
    runs = page.get_by_role("region", name="Subagent runs")
    start_run(d, name="beta", brief="migrate", goal="migrated")
    beta = runs.get_by_role("listitem").filter(has_text="beta")
    expect(beta).to_contain_text("ended: need_help", timeout=15_000)
    expect(beta.locator(".run-question")).to_have_text("asks: which database should I migrate?")
    expect(beta.locator(".run-turn")).to_have_text("turn 1 of 5")
    start_run(d, name="gamma", brief="test", goal="green")
    gamma = runs.get_by_role("listitem").filter(has_text="gamma")
    expect(gamma).to_contain_text("ended: goal_reached (self-reported)", timeout=15_000)
    expect(gamma.locator(".run-question")).to_have_count(0)


def test_a_run_whose_child_waits_for_a_vote_says_so_and_opens_the_session_that_answers_it(page, daemons):
    d = daemons().start([[{"tool_call": {"name": "shell", "arguments": {"command": "echo from the child"}}}],
                         [{"text": "ran it"}]])
    open_ui(page, d)
    runs = page.get_by_role("region", name="Subagent runs")
    start_run(d, name="eps", brief="run a command")
    eps = runs.get_by_role("listitem").filter(has_text="eps")
    expect(eps.locator(".run-question")).to_contain_text("waits for a vote: echo from the child", timeout=15_000)
    eps.get_by_role("button", name="Open its session").click()
    page.get_by_role("region", name="Permission requests").get_by_role("button", name="Allow", exact=True).click()
    expect(eps).to_contain_text("ended: no_goal", timeout=15_000)
    expect(eps.locator(".run-question")).to_have_count(0)


def test_hook_results_show_in_the_conversation(page, daemons, tmp_path):
    hook = tmp_path / "hook.py"
    hook.write_text('import json\nprint(json.dumps({"systemMessage": "hook says: keep the tables"}))\n')
    settings = {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command",
                                                           "command": f"{sys.executable} {hook}"}]}]}}
    d = daemons().start([[{"text": "answered"}]], settings)
    open_ui(page, d)
    new_session(page)
    send(page, "go")
    log = conversation(page)
    expect(log.get_by_text("⚑ UserPromptSubmit hook: hook says: keep the tables")).to_be_visible()
    expect(log.get_by_text("answered")).to_be_visible()


def test_the_approval_mode_is_shown_and_changed_from_the_page(page, daemons):
    d = daemons().start([[{"tool_call": {"name": "shell", "arguments": {"command": "echo no-question-asked"}}}],
                         [{"text": "ran it"}]])
    open_ui(page, d)
    sid = new_session(page)
    mode = page.get_by_role("combobox", name="Approval mode")
    expect(mode).to_have_value("default")
    mode.select_option("yolo")
    expect(conversation(page).get_by_text("approval mode: yolo")).to_be_visible()
    with d.client() as client:
        assert client.get(f"/session/{sid}/status").json()["approvalMode"] == "yolo"
    send(page, "run it")
    expect(conversation(page).locator(".tool .output")).to_contain_text("no-question-asked")
    expect(page.get_by_role("region", name="Permission requests")).to_be_hidden()  # yolo: nothing was asked
    with d.client() as client:  # another client changes it: the page follows
        client.post(f"/session/{sid}/approval-mode", json={"mode": "plan"})
    expect(mode).to_have_value("plan")


def test_an_edit_asks_and_its_tool_card_shows_the_diff(page, daemons, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("one\ntwo\nthree\n")
    d = daemons().start([[{"tool_call": {"name": "edit", "arguments": {"path": "a.txt", "old_string": "two",
                                                                       "new_string": "2"}}}],
                         [{"text": "edited"}]], None, "--workspace", str(work))
    open_ui(page, d)
    new_session(page)
    send(page, "fix the number")
    page.get_by_role("region", name="Permission requests").get_by_role("button", name="Allow", exact=True).click()
    card = conversation(page).locator(".tool")
    expect(card.locator(".badge")).to_have_text("completed")
    expect(card.locator(".output")).to_contain_text("--- " + str(work / "a.txt") + " (from line 2)\n- two\n+ 2")
    assert (work / "a.txt").read_text() == "one\n2\nthree\n"
