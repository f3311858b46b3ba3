"""A work tree's changes for the Changes dialog (actors/git_diff.py): the parsers, and the scripts' output read
from real repositories, in the sandbox as the daemon runs them.

The list and file answers are compared with what qwen serve's own code computes for the same changes (its
``fetchGitDiff``/``parseGitDiff`` rules: a rename's numstat entry under its new path with ``oldPath``, an
untracked file one hunk of added lines, at most 50 entries and 400 lines of a file).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import attrs
import pytest
import trio

from actors.git_diff import (FILE_SCRIPT, LIST_SCRIPT, MAX_DIFF_BYTES, MAX_FILES, MAX_LINES_PER_FILE, deleted, hunks,
                             numstat, read_diff, read_file_diff)
from actors.process import NO_SANDBOX, resolve_sandbox
from actors.wire import answers
from tests.actors.test_workspace_git import conflicted_merge

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main",
                           *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_numstat_entries_plain_binary_and_renamed():
    tokens = ["3\t1\tsrc/a.py", "-\t-\tlogo.png", "2\t0\t", "old name.txt", "new name.txt", "1\t1\tb c"]
    assert numstat(tokens) == [("src/a.py", 3, 1, False, None), ("logo.png", 0, 0, True, None),
                               ("new name.txt", 2, 0, False, "old name.txt"), ("b c", 1, 1, False, None)]
    assert numstat(["garbage", "x\ty\tz"]) == [("z", 0, 0, False, None)]  # counts that are not numbers: 0


def test_deleted_paths_skip_both_paths_of_a_rename():
    assert deleted(["M", "a", "R100", "D-looking-old", "new", "D", "gone", "C75", "x", "y", "D", "also"]) == {
        "gone", "also"}


def test_hunks_of_a_unified_diff():
    diff = ("diff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@ def f():\n a\n-b\n+c\n+d\n"
            "@@ -10 +11 @@\n-x\n+--- not a header\n\\ No newline at end of file\n"
            "diff --git a/g b/g\n@@ -1 +1 @@\n-other file\n")
    found, cut = hunks(diff)
    assert found == [answers.GitHunk(oldStart=1, oldLines=2, newStart=1, newLines=3, lines=[" a", "-b", "+c", "+d"]),
                     answers.GitHunk(oldStart=10, oldLines=1, newStart=11, newLines=1,
                                     lines=["-x", "+--- not a header", "\\ No newline at end of file"])]
    assert cut is False
    assert hunks("Binary files /dev/null and b/x differ\n") == ([], False)


def test_hunks_are_cut_at_the_line_and_byte_limits():
    many = "@@ -0,0 +1,500 @@\n" + "".join(f"+line {n}\n" for n in range(500))
    found, cut = hunks(many)
    assert cut is True and len(found[0].lines) == MAX_LINES_PER_FILE and found[0].lines[-1] == "+line 399"
    wide = "@@ -0,0 +1,3 @@\n+" + "x" * 600_000 + "\n+" + "y" * 600_000 + "\n+partial"
    found, cut = hunks(wide[:MAX_DIFF_BYTES + 1])
    assert cut is True and found[0].lines == ["+" + "x" * 600_000]  # the line the limit cut is not shown


def _repository(repo: Path) -> None:
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / "src").mkdir()
    (repo / "src" / "a.py").write_text("one\ntwo\nthree\n")
    (repo / "old name.txt").write_text("moved\ncontent\nhere\n")
    (repo / "gone.txt").write_text("bye\n")
    (repo / "logo.png").write_bytes(b"\x89PNG\0\0\x01")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "one")
    (repo / "src" / "a.py").write_text("one\n2\nthree\nfour\n")
    git(repo, "mv", "old name.txt", "new name.txt")
    (repo / "gone.txt").unlink()
    (repo / "logo.png").write_bytes(b"\x89PNG\0\0\x02")
    (repo / "notes.md").write_text("a\nb\n")
    (repo / "blob.bin").write_bytes(b"\0\1\2")


EXPECTED_FILES = [
    {"path": "gone.txt", "added": 0, "removed": 1, "isBinary": False, "isUntracked": False, "isDeleted": True},
    {"path": "logo.png", "added": 0, "removed": 0, "isBinary": True, "isUntracked": False, "isDeleted": False},
    {"path": "new name.txt", "added": 0, "removed": 0, "isBinary": False, "isUntracked": False, "isDeleted": False,
     "oldPath": "old name.txt"},
    {"path": "src/a.py", "added": 2, "removed": 1, "isBinary": False, "isUntracked": False, "isDeleted": False},
    {"path": "blob.bin", "added": 0, "removed": 0, "isBinary": True, "isUntracked": True, "isDeleted": False},
    {"path": "notes.md", "added": 2, "removed": 0, "isBinary": False, "isUntracked": True, "isDeleted": False},
]


def _listed(diff: answers.GitDiff) -> list[dict]:
    return [{k: v for k, v in attrs.asdict(f).items() if v is not None and k != "truncated"} for f in diff.files]


@needs_git
def test_the_list_script_on_a_real_repository(tmp_path):
    repo = tmp_path / "repo"
    _repository(repo)
    out = subprocess.run(["/bin/sh", "-c", LIST_SCRIPT], cwd=repo / "src", capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    changed, gone, untracked = [[t for t in part.split("\0") if t] for part in out.stdout.split("\0\0")]
    assert sorted(p for p, *_ in numstat(changed)) == ["gone.txt", "logo.png", "new name.txt", "src/a.py"]
    assert deleted(gone) == {"gone.txt"} and sorted(untracked) == ["blob.bin", "notes.md"]  # from the top
    one = subprocess.run(["/bin/sh", "-c", FILE_SCRIPT, "sh", "src/a.py", ""], cwd=repo, capture_output=True,
                         text=True)
    kind, _, diff = one.stdout.partition("\n")
    assert kind == "tracked" and hunks(diff)[0][0].lines == [" one", "-two", "+2", " three", "+four"]


def within(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` run by Trio, failing after a minute instead of hanging."""
    async def bounded():
        with trio.fail_after(60):
            return await fn(*args, **kwargs)
    return trio.run(bounded)


@pytest.fixture
def sandboxed(tmp_path):
    """The sandbox, and a directory for a repository: under /var/tmp, since /tmp is the sandbox's own (a cwd
    under it is bound back alone)."""
    sandbox = resolve_sandbox("auto", [str(tmp_path / "state")])
    if not sandbox.active:
        pytest.skip(f"no sandbox here: {sandbox.reason}")
    work = Path("/var/tmp") / tmp_path.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    yield sandbox, work
    shutil.rmtree(work, ignore_errors=True)


@needs_git
def test_read_diff_in_the_sandbox(sandboxed):
    sandbox, work = sandboxed
    repo = work / "repo"
    _repository(repo)
    (work / "plain").mkdir()

    async def read() -> tuple:
        with trio.fail_after(60):
            return (await read_diff(sandbox, str(repo / "src")),
                    await read_file_diff(sandbox, str(repo), "src/a.py"),
                    await read_file_diff(sandbox, str(repo), "notes.md"),
                    await read_file_diff(sandbox, str(repo), "new name.txt", "old name.txt"),
                    await read_file_diff(sandbox, str(repo), "blob.bin"),
                    await read_file_diff(sandbox, str(repo), "*"),
                    await read_diff(sandbox, str(work / "plain")))

    listing, tracked, untracked, renamed, binary, star, plain = trio.run(read)
    assert listing.available and listing.workspaceCwd == str(repo / "src")
    assert sorted(_listed(listing), key=lambda f: (f["isUntracked"], f["path"])) == EXPECTED_FILES
    assert (listing.filesCount, listing.linesAdded, listing.linesRemoved, listing.hiddenCount) == (6, 4, 2, 0)
    assert tracked.available and [h.lines for h in tracked.hunks] == [[" one", "-two", "+2", " three", "+four"]]
    assert untracked.hunks == [answers.GitHunk(oldStart=0, oldLines=0, newStart=1, newLines=2,
                                               lines=["+a", "+b"])]
    assert renamed.available is False  # a rename with its content unchanged has no hunks
    assert binary.available is False and binary.hunks == []
    assert star.available is False  # "*" is a file's name, not a pathspec for every file
    assert plain.available is False and plain.files == []


@needs_git
def test_many_changes_list_fifty_and_count_the_rest(sandboxed):
    sandbox, work = sandboxed
    git(work, "init", "-q")
    for n in range(60):
        (work / f"t{n:02}.txt").write_text("x\n")
    git(work, "add", ".")
    git(work, "commit", "-qm", "one")
    for n in range(60):
        (work / f"t{n:02}.txt").write_text("y\n")
    for n in range(5):
        (work / f"u{n}.txt").write_text("1\n2\n3\n")
    listing = within(read_diff, sandbox, str(work))
    assert (listing.filesCount, listing.linesAdded, listing.linesRemoved) == (65, 75, 60)
    assert len(listing.files) == MAX_FILES and listing.hiddenCount == 15
    assert not any(f.isUntracked for f in listing.files)  # the tracked ones fill the list first


@needs_git
def test_an_unborn_branch_and_a_merge_under_way(sandboxed):
    sandbox, work = sandboxed
    git(work, "init", "-q")
    (work / "f.txt").write_text("base\n")
    git(work, "add", ".")
    unborn = within(read_diff, sandbox, str(work))  # against the empty tree
    assert unborn.available and [(f.path, f.added) for f in unborn.files] == [("f.txt", 1)]
    conflicted_merge(work, base_staged=True)
    merging = within(read_diff, sandbox, str(work))
    one = within(read_file_diff, sandbox, str(work), "f.txt")
    assert merging.available is False and one.available is False  # as qwen serve: not during a merge


@needs_git
def test_without_a_sandbox_git_does_not_run(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "n.txt").write_text("n\n")
    assert within(read_diff, NO_SANDBOX, str(tmp_path)).available is False
    assert within(read_file_diff, NO_SANDBOX, str(tmp_path), "n.txt").available is False
