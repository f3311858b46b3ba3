"""The Web Shell's git panel runs ``git status`` in a repository the model may have made: only in the sandbox.

``git status`` starts what the repository's configuration names: a clean filter for a file whose size
did not change, a ``core.fsmonitor`` command. Run by the daemon itself, either would be a command of the
model's choosing outside the sandbox, as the daemon's user (root here).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import trio

from tests.e2e.isolation_harness import hostile_daemon

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("bwrap") is None,
                                reason="needs git and bubblewrap")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", *args],
                   cwd=cwd, check=True, capture_output=True)


def hostile_repository(work: Path, escaped: Path) -> None:
    """What the model could have made: a repository whose clean filter reaches outside the project (touching
    ``escaped``) and marks that it ran (``marks/filter-ran``), and a change git reads through that filter."""
    git(work, "init", "-q")
    (work / "a.txt").write_text("hello\n")
    (work / ".gitignore").write_text("marks/\n")
    git(work, "add", ".")
    git(work, "commit", "-qm", "one")
    (work / "marks").mkdir()
    git(work, "config", "filter.evil.clean", f"touch {escaped}; touch marks/filter-ran; cat")
    (work / ".gitattributes").write_text("* filter=evil\n")
    (work / "a.txt").write_text("HELLO\n")  # the same size: git reads it through the filter


def test_the_repositorys_filter_and_monitor_run_in_the_sandbox(tmp_path):
    escaped = Path("/var/tmp") / f"trellis-git-escaped-{uuid.uuid4().hex}"  # the host's, read-only inside
    monitor = Path("/var/tmp") / f"trellis-git-monitor-{uuid.uuid4().hex}"

    async def run() -> tuple[dict, dict]:
        async with hostile_daemon(tmp_path, []) as d:
            hostile_repository(d.work, escaped)
            git(d.work, "config", "core.fsmonitor", f"touch {monitor}; true")  # a monitor, too
            with trio.fail_after(60):
                first = (await d.client.get("/workspace/git")).json()
                plain = (await d.client.get("/workspace/git", params={"cwd": "/var/tmp"})).json()
            return first, plain

    try:
        status, elsewhere = trio.run(run)
        assert status["branch"] == "main" and status["unstaged"] == 1 and status["untracked"] == 1, status
        assert status["staged"] == 0 and status["conflicted"] == 0 and isinstance(status["computedAt"], int)
        assert (tmp_path / "work" / "marks" / "filter-ran").exists()  # the filter ran: in the project only
        assert not escaped.exists() and not monitor.exists()
        # A directory no session works in: git is not run there (the branch alone, from .git/HEAD)
        assert elsewhere == {"v": 2, "workspaceCwd": "/var/tmp", "branch": None}
    finally:
        escaped.unlink(missing_ok=True)
        monitor.unlink(missing_ok=True)


def test_the_changes_dialogs_diffs_run_in_the_sandbox(tmp_path):
    """``git diff`` runs the same filters as ``git status``: the Changes dialog's list and hunks are computed
    in the sandbox too, over HTTP from the real daemon."""
    escaped = Path("/var/tmp") / f"trellis-git-diff-escaped-{uuid.uuid4().hex}"

    async def run() -> tuple[dict, dict, dict]:
        async with hostile_daemon(tmp_path, []) as d:
            hostile_repository(d.work, escaped)
            with trio.fail_after(60):
                listing = (await d.client.get("/workspace/git/diff")).json()
                one = (await d.client.get("/workspace/git/diff/file", params={"path": "a.txt"})).json()
                new = (await d.client.get("/workspace/git/diff/file", params={"path": ".gitattributes"})).json()
            return listing, one, new

    try:
        listing, one, new = trio.run(run)
        assert listing["available"] is True and listing["filesCount"] == 2, listing
        assert {f["path"]: (f["added"], f["removed"], f["isUntracked"]) for f in listing["files"]} == {
            "a.txt": (1, 1, False), ".gitattributes": (1, 0, True)}
        assert one["available"] is True and one["hunks"][0]["lines"] == ["-hello", "+HELLO"], one
        assert new["hunks"] == [{"oldStart": 0, "oldLines": 0, "newStart": 1, "newLines": 1,
                                 "lines": ["+* filter=evil"]}], new
        assert (tmp_path / "work" / "marks" / "filter-ran").exists()  # the filter ran: in the project only
        assert not escaped.exists()
    finally:
        escaped.unlink(missing_ok=True)
