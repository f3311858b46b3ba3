"""A workspace's git status (actors/workspace_git.py): the script's output read from real repositories.

The script runs here under /bin/sh without a sandbox (the repositories are this test's own); the daemon
runs it only in the sandbox (tests/security/test_workspace_git_sandboxed.py).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import trio

from actors.process import NO_SANDBOX, resolve_sandbox
from actors.workspace_git import SCRIPT, GitStatus, count_entries, parse, parse_branch_line, read_status

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main",
                           *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def script(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["/bin/sh", "-c", SCRIPT], cwd=cwd, capture_output=True, text=True)


def test_the_branch_line_in_each_of_its_forms():
    assert parse_branch_line("## main...origin/main [ahead 2, behind 3]") == {
        "branch": "main", "detached": False, "hasUpstream": True, "ahead": 2, "behind": 3}
    assert parse_branch_line("## feature/x...up/feature/x [behind 1]")["branch"] == "feature/x"
    assert parse_branch_line("## topic") == {"branch": "topic", "detached": False, "hasUpstream": False,
                                             "ahead": 0, "behind": 0}
    assert parse_branch_line("## No commits yet on trunk")["branch"] == "trunk"
    assert parse_branch_line("## HEAD (no branch)")["detached"] is True
    assert parse_branch_line("garbage")["branch"] is None


def test_entries_are_counted_as_qwen_counts_them():
    tokens = ["M  staged.py", " M unstaged.py", "MM both.py", "?? new.py", "!! ignored.py", "UU conflict.py",
              "AA added-both.py", "R  new-name.py", "old-name.py", "A  added.py"]
    assert count_entries(tokens) == {"staged": 4, "unstaged": 2, "untracked": 1, "conflicted": 2}


def test_output_not_of_the_script_is_no_status():
    assert parse("") is None
    assert parse("fatal: not a git repository\n") is None
    assert parse("x\n\n## main\0") is None


@needs_git
def test_a_real_repository_read_by_the_script(tmp_path):
    upstream, repo = tmp_path / "upstream", tmp_path / "repo"
    upstream.mkdir()
    git(upstream, "init", "-q", "--bare")
    repo.mkdir()
    git(repo, "init", "-q")
    for name in ("a.txt", "b.txt", "c.txt", "d.txt"):
        (repo / name).write_text(name)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    git(repo, "remote", "add", "origin", str(upstream))
    git(repo, "push", "-q", "-u", "origin", "main")
    (repo / "e.txt").write_text("e")
    git(repo, "add", "e.txt")
    git(repo, "commit", "-qm", "two")  # one ahead of origin/main
    (repo / "a.txt").write_text("stashed change")
    git(repo, "stash", "-q")
    (repo / "a.txt").write_text("changed")  # unstaged
    (repo / "b.txt").write_text("staged")
    git(repo, "add", "b.txt")  # staged
    git(repo, "mv", "c.txt", "c-renamed.txt")  # staged, two tokens
    (repo / "new.txt").write_text("new")  # untracked
    (repo / "sub").mkdir()
    (repo / "sub" / "deep.txt").write_text("x")  # one more untracked entry: the directory
    done = script(repo / "sub")  # from a directory inside: the work tree's status all the same
    assert done.returncode == 0, done
    assert parse(done.stdout) == GitStatus(branch="main", hasUpstream=True, ahead=1, behind=0, staged=2,
                                           unstaged=1, untracked=2, conflicted=0, stashCount=1)


def conflicted_merge(repo: Path, *, base_staged: bool = False) -> None:
    """In a new repository: ``f.txt`` committed, changed on ``main`` and on ``other``, and ``other`` merged: a
    conflict, the merge under way. ``base_staged``: ``f.txt`` is written and added already."""
    if not base_staged:
        (repo / "f.txt").write_text("base\n")
        git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    git(repo, "checkout", "-q", "-b", "other")
    (repo / "f.txt").write_text("other\n")
    git(repo, "commit", "-qam", "other")
    git(repo, "checkout", "-q", "main")
    (repo / "f.txt").write_text("main\n")
    git(repo, "commit", "-qam", "main")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "other"], cwd=repo,
                   capture_output=True)


@needs_git
def test_a_conflicted_merge_an_unborn_branch_and_no_repository(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    assert parse(script(repo).stdout) == GitStatus(branch="main")  # no commits yet
    conflicted_merge(repo)
    status = parse(script(repo).stdout)
    assert status is not None and status.conflicted == 1 and status.operation == "merge", status
    plain = tmp_path / "plain"
    plain.mkdir()
    assert script(plain).returncode == 3  # no work tree: read_status answers False


@needs_git
def test_read_status_without_a_sandbox_does_not_run_git(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    assert trio.run(read_status, NO_SANDBOX, str(repo)) is None


@needs_git
def test_read_status_in_the_sandbox(tmp_path):
    sandbox = resolve_sandbox("auto", [str(tmp_path / "state")])
    if not sandbox.active:
        pytest.skip(f"no sandbox here: {sandbox.reason}")
    work = Path("/var/tmp") / tmp_path.name  # /tmp is the sandbox's own: a cwd under it is bound back alone
    shutil.rmtree(work, ignore_errors=True)
    try:
        (work / "repo").mkdir(parents=True)
        repo = work / "repo"
        git(repo, "init", "-q")
        (repo / "f.txt").write_text("f")
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "one")
        (repo / "f.txt").write_text("g")
        (repo / "n.txt").write_text("n")

        async def both() -> tuple[object, object]:
            with trio.fail_after(30):
                return await read_status(sandbox, str(repo)), await read_status(sandbox, str(work))

        in_repo, outside = trio.run(both)
        assert in_repo == GitStatus(branch="main", unstaged=1, untracked=1), in_repo
        assert outside is False
    finally:
        shutil.rmtree(work, ignore_errors=True)
