"""Issue 35, finding 2: the model appended any line to any file, unasked, through report files.

``agent {report_file: "~/.bashrc"}`` with ``goal_reached {summary: "ok\\ntouch /tmp/X\\n"}`` put a
command in ``.bashrc``; ``.trellis/token`` the same broke every client. One rule now holds for every
file the daemon writes on the model's or a subagent's behalf: under the session's cwd, never a
hidden path, never ``.git/``, never a file a hook runs, asked for in ``default`` mode like
``write_file``; and a done line stays one line. The daemon serves its signal route on loopback; the
subagent is a child session whose model calls ``goal_reached`` over real HTTP.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from actors import Settings
from tests.transport.mcp.harness import mcp_daemon, routed, signal

BASHRC = "# the user's own\n"


def parent_turns(**agent: object) -> list:
    return [[{"tool_call": {"name": "agent", "arguments": {"name": "kid", "brief": "kid-brief: work", **agent}}}],
            [{"text": "delegated"}], [{"text": "noted"}], [{"text": "noted"}]]


async def run_parent(daemon, cwd: Path, on_permission=None) -> list:
    """One parent prompt, to the end of the run (or of the turn when no run starts); every event."""
    parent, _ = await daemon.create_session(str(cwd))
    seen: list = []
    async with parent.subscribe(last_event_id=0) as events:
        await parent.prompt("parent: delegate")
        with trio.fail_after(30):
            async for event in events:
                seen.append(event)
                if event.type == "permission_request" and on_permission is not None:
                    await on_permission(parent, event.data)
                if event.type == "turn_complete":
                    runs = daemon.subagents.list()
                    if not runs or all(r["ended"] for r in runs):
                        break
    return seen


def tool_results(seen: list) -> list[str]:
    return [str(e.data["update"].get("rawOutput") or e.data["update"].get("content"))
            for e in seen if e.type == "session_update"
            and e.data["update"].get("sessionUpdate") == "tool_call_update"
            and e.data["update"].get("status") in ("completed", "failed")]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text(BASHRC)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.mark.parametrize("target", ["HOME/.bashrc", "~/.bashrc", "../outside.txt", ".trellis/token",
                                    ".git/config", "notes/.hidden.md"])
async def test_a_report_file_outside_the_cwd_or_hidden_is_refused_even_in_yolo(tmp_path, home, target):
    work = tmp_path / "work"
    for d in (work / ".trellis", work / ".git", work / "notes"):
        d.mkdir(parents=True)
    (work / ".trellis" / "token").write_text("secret-token")
    (work / ".git" / "config").write_text("[core]\n")
    report = target.replace("HOME", str(home))
    model = routed(parent=parent_turns(report_file=report),
                   **{"kid-brief": signal("goal_reached", summary="ok\ntouch /tmp/X\n")})
    async with mcp_daemon(model=model, workspace=str(work), settings=Settings(approval_mode="yolo"),
                          state_dir=work / ".trellis") as (daemon, _):
        seen = await run_parent(daemon, work)
        assert daemon.subagents.list() == []  # no run started
    results = tool_results(seen)
    assert any("report_file" in r and "refused" in r for r in results), results
    assert (home / ".bashrc").read_text() == BASHRC
    assert (work / ".git" / "config").read_text() == "[core]\n"
    assert not (tmp_path / "outside.txt").exists() and not (work / "notes" / ".hidden.md").exists()


async def test_a_subagent_cannot_name_a_hidden_file_as_its_report(tmp_path, home):
    work = tmp_path / "work"
    (work / ".trellis").mkdir(parents=True)
    token = work / ".trellis" / "token"
    token.write_text("secret-token")
    model = routed(parent=parent_turns(goal="done"),
                   **{"kid-brief": signal("goal_reached", summary="pwned", report_file=".trellis/token")})
    async with mcp_daemon(model=model, workspace=str(work), settings=Settings(approval_mode="yolo"),
                          state_dir=work / ".trellis") as (daemon, _):
        await run_parent(daemon, work)
        run = daemon.subagents.get("kid")
        assert run.end_reason == "goal_reached"  # the signal is recorded all the same
        assert run.status()["reportFile"] is None
    assert token.read_text() == "secret-token"


async def test_a_done_line_stays_one_line_whatever_the_summary_holds(tmp_path, home):
    work = tmp_path / "work"
    work.mkdir()
    summary = "ok\ntouch /tmp/X\n\x1b]52;c;cHduZWQ=\x07\r\x85"
    model = routed(parent=parent_turns(report_file="report.md", goal="done"),
                   **{"kid-brief": signal("goal_reached", summary=summary)})
    async with mcp_daemon(model=model, workspace=str(work), settings=Settings(approval_mode="yolo")) as (daemon, _):
        await run_parent(daemon, work)
    lines = (work / "report.md").read_text().splitlines()
    assert lines and all(" subagent kid: " in line for line in lines), lines
    assert "touch /tmp/X" not in lines
    text = (work / "report.md").read_text()
    assert not any(ord(c) < 32 and c != "\n" or 0x7f <= ord(c) <= 0x9f for c in text)
    assert "ok\\ntouch /tmp/X\\n\\x1b]52;c;cHduZWQ=\\x07\\r\\x85" in text


async def test_default_mode_asks_before_the_daemon_appends_to_a_report_file(tmp_path, home):
    work = tmp_path / "work"
    work.mkdir()
    asked: list = []

    async def reject(parent, request) -> None:
        asked.append(request)
        await parent.vote(request["requestId"], "selected", "cancel")

    model = routed(parent=parent_turns(report_file="report.md"),
                   **{"kid-brief": signal("goal_reached", summary="done")})
    async with mcp_daemon(model=model, workspace=str(work)) as (daemon, _):
        seen = await run_parent(daemon, work, reject)
        assert daemon.subagents.list() == []
    assert asked and "report.md" in asked[0]["toolCall"]["title"]
    assert any("no run was started" in r for r in tool_results(seen))
    assert not (work / "report.md").exists()


async def test_a_report_the_subagent_names_is_asked_for_and_written_once_approved(tmp_path, home):
    work = tmp_path / "work"
    work.mkdir()
    (work / "kid-report.md").write_text("# findings\n")
    asked: list = []

    async def approve(parent, request) -> None:
        asked.append(request)
        await parent.vote(request["requestId"], "selected", "proceed_once")

    model = routed(parent=parent_turns(goal="done"),
                   **{"kid-brief": signal("goal_reached", summary="all found", report_file="kid-report.md")})
    async with mcp_daemon(model=model, workspace=str(work)) as (daemon, _):
        await run_parent(daemon, work, approve)
        with trio.fail_after(10):
            while "Run ended" not in (work / "kid-report.md").read_text():
                await trio.sleep(0.05)
    assert asked and asked[0]["toolCall"]["title"].startswith("agent kid: start")  # the start is asked for first
    assert any("kid-report.md" in a["toolCall"]["title"] for a in asked[1:])
    text = (work / "kid-report.md").read_text()
    assert text.startswith("# findings\n") and "all found" in text


async def test_a_report_file_swapped_for_a_symlink_after_the_start_is_not_followed(tmp_path, home):
    """Review finding: the start's report file was checked once, then appended to with a plain open, so a
    symlink made after the start (by the model's shell) led the daemon's append into ``~/.bashrc``."""
    work = tmp_path / "work"
    work.mkdir()
    bashrc = home / ".bashrc"
    kid = [{"delay": 2, "steps": [{"tool_call": {"name": "goal_reached",
                                                  "arguments": {"summary": "x; touch /tmp/pwned"}}}]},
           [{"text": "bye"}]]
    parent = [[{"tool_call": {"name": "agent", "arguments": {"name": "kid", "brief": "kid-brief: work",
                                                             "goal": "done", "report_file": "notes.md"}}}],
              [{"tool_call": {"name": "shell", "arguments": {"command": f"ln -sf {bashrc} notes.md"}}}],
              [{"text": "delegated"}], [{"text": "noted"}], [{"text": "noted"}]]
    model = routed(parent=parent, **{"kid-brief": kid})
    async with mcp_daemon(model=model, workspace=str(work), settings=Settings(approval_mode="yolo")) as (daemon, _):
        await run_parent(daemon, work)
        run = daemon.subagents.get("kid")
        assert run.end_reason == "goal_reached"
        assert "report" in (run.status().get("reportError") or "")
    assert bashrc.read_text() == BASHRC
    assert (work / "notes.md").is_symlink()
