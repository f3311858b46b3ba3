"""A work tree's history for the Changes dialog's History tab (actors/git_log.py), read from real repositories
in the sandbox as the daemon runs it, with qwen serve's rules (a page and ``hasMore``, every branch with ``all``,
a range, a search of messages, authors and a commit's hash; one commit's files against its first parent)."""

from __future__ import annotations

import subprocess
from pathlib import Path


from actors.git_log import is_sha, read_commit, read_log, records, safe_range
from actors.process import NO_SANDBOX
from tests.actors.test_git_diff import git, needs_git, sandboxed, within

__all__ = ["sandboxed"]  # the fixture, used by name


def commit(repo: Path, name: str, text: str, message: str, author: str = "t") -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    subprocess.run(["git", "-c", f"user.name={author}", "-c", f"user.email={author}@example.org", "commit", "-qm",
                    message], cwd=repo, check=True, capture_output=True)
    return git(repo, "rev-parse", "HEAD").strip()


def test_records_of_git_logs_nul_separated_format():
    out = "\0".join(["a" * 40, "aaaaaaa", "Ann", "ann@x", "100", "fix: the thing", "HEAD -> main, tag: v1", "b" * 40,
                     "200", "b" * 40, "bbbbbbb", "Bob", "bob@x", "50", "first", "", "", "150", ""])
    (first, committed), (root, _) = records(out)
    assert (first.shortSha, first.authorName, first.authorDate, first.subject, first.refs, first.parents,
            committed) == ("aaaaaaa", "Ann", 100, "fix: the thing", "HEAD -> main, tag: v1", ["b" * 40], 200)
    assert root.refs is None and root.parents == [] and root.authorDate == 50
    assert records("") == [] and records("truncated\0record\0") == []


def test_what_a_range_and_a_sha_may_be():
    assert safe_range("main") and safe_range("v1.2..HEAD~3") and safe_range("origin/main^")
    assert not any(safe_range(r) for r in ("-p", "--output=/tmp/x", "..main", "a b", "a;b", ""))
    assert is_sha("abc1234") and is_sha("A" * 40)
    assert not any(is_sha(s) for s in ("abc123", "a" * 41, "ghijklm", "HEAD~1"))


@needs_git
def test_a_page_of_history_every_branch_a_range_and_a_search(sandboxed):
    sandbox, repo = sandboxed
    git(repo, "init", "-q")
    shas = [commit(repo, "f.txt", f"{n}\n", f"change number {n}") for n in range(5)]
    git(repo, "checkout", "-q", "-b", "side")
    side = commit(repo, "g.txt", "g\n", "on the side branch", author="Zed")
    git(repo, "checkout", "-q", "main")
    git(repo, "tag", "v1", shas[2])

    page = within(read_log, sandbox, str(repo), limit=2)
    assert page.available and page.hasMore and [e.sha for e in page.entries] == shas[::-1][:2]
    assert page.entries[0].refs == "HEAD -> main" and page.entries[0].parents == [shas[3]]
    assert page.entries[0].authorEmail == "t@example.org" and page.entries[0].authorDate > 0
    last = within(read_log, sandbox, str(repo), limit=2, skip=4)
    assert [e.sha for e in last.entries] == [shas[0]] and not last.hasMore and last.entries[0].parents == []
    every = within(read_log, sandbox, str(repo), all=True)
    assert {e.sha for e in every.entries} == {*shas, side}
    ranged = within(read_log, sandbox, str(repo), range="v1..main")
    assert [e.sha for e in ranged.entries] == shas[:2:-1]
    found = within(read_log, sandbox, str(repo), all=True, search="SIDE branch")
    assert [e.sha for e in found.entries] == [side]  # the message, any case
    by_author = within(read_log, sandbox, str(repo), all=True, search="zed")
    assert [e.sha for e in by_author.entries] == [side]
    by_hash = within(read_log, sandbox, str(repo), search=shas[1][:8])
    assert [e.sha for e in by_hash.entries] == [shas[1]]
    assert within(read_log, sandbox, str(repo), search="nothing like it").entries == []


@needs_git
def test_one_commit_its_message_and_files(sandboxed):
    sandbox, repo = sandboxed
    git(repo, "init", "-q")
    root = commit(repo, "a.txt", "one\ntwo\n", "the root")
    (repo / "logo.png").write_bytes(b"\0\1")
    git(repo, "add", ".")
    git(repo, "mv", "a.txt", "b.txt")
    (repo / "b.txt").write_text("one\n2\n")
    git(repo, "add", "b.txt")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "move it\n\nand say why"],
                   cwd=repo, check=True, capture_output=True)
    head = git(repo, "rev-parse", "HEAD").strip()

    detail = within(read_commit, sandbox, str(repo), head[:10])
    assert detail.available and detail.sha == head and detail.parents == [root]
    assert (detail.subject, detail.body) == ("move it", "and say why")
    assert sorted((f.path, f.added, f.removed, f.isBinary) for f in detail.files) == [
        ("b.txt", 1, 1, False), ("logo.png", 0, 0, True)]  # the rename followed: one file, by its new path
    assert (detail.filesCount, detail.linesAdded, detail.linesRemoved, detail.hiddenCount) == (2, 1, 1, 0)
    first = within(read_commit, sandbox, str(repo), root)
    assert first.parents == [] and [(f.path, f.added) for f in first.files] == [("a.txt", 2)]
    assert within(read_commit, sandbox, str(repo), "0" * 40).available is False


@needs_git
def test_no_commits_no_repository_no_sandbox(sandboxed, tmp_path):
    sandbox, repo = sandboxed
    (repo / "plain").mkdir()
    assert within(read_log, sandbox, str(repo / "plain")).available is False
    git(repo, "init", "-q")
    empty = within(read_log, sandbox, str(repo))
    assert empty.available and empty.entries == [] and not empty.hasMore
    commit(repo, "f.txt", "f\n", "one")
    assert within(read_log, NO_SANDBOX, str(repo)).available is False
