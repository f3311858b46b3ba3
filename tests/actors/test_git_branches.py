"""A work tree's branches for the branch picker (actors/git_branches.py), read from a real repository with a
remote, in the sandbox as the daemon runs it, with qwen serve's rules."""

from __future__ import annotations

from pathlib import Path

from actors.git_branches import branches, parse, read_branches, recent, tags
from actors.process import NO_SANDBOX
from tests.actors.test_git_diff import git, needs_git, sandboxed, within
from tests.actors.test_git_log import commit

__all__ = ["sandboxed"]  # the fixture, used by name


def test_branch_lines_with_upstreams_push_targets_and_symbolic_refs():
    line = "\0".join
    found = branches([line(["main", "*", "origin/main", "ahead 2, behind 1", "100", "fix", "", "origin/main",
                            "ahead 2, behind 1"]),
                      line(["old", " ", "origin/old", "gone", "50", "x", "", "origin/old", "gone"]),
                      line(["origin/HEAD", " ", "", "", "100", "fix", "origin/main", "", ""]),  # symbolic: left out
                      "not a branch line"])
    main, old = found
    assert (main.name, main.isHead, main.upstream, main.ahead, main.behind, main.pushTarget, main.pushAhead,
            main.pushBehind, main.commitDate, main.commitSubject) == ("main", True, "origin/main", 2, 1,
                                                                      "origin/main", 2, 1, 100, "fix")
    assert main.upstreamGone is None and main.pushGone is None
    assert old.upstreamGone is True and old.pushGone is True and old.pushAhead is None and not old.isHead


def test_tags_and_recently_checked_out_branches():
    assert [(t.name, t.date, t.subject) for t in tags(["v2\x00200\x00two", "v1\x00100\x00one", "bad"])] == [
        ("v2", 200, "two"), ("v1", 100, "one")]
    reflog = ["checkout: moving from main to feature", "commit: x", "checkout: moving from fix to main",
              "checkout: moving from main to fix", "checkout: moving from feature to 0123abc",
              "checkout: moving from x to feature"]
    assert recent(reflog, "main") == ["feature", "fix"]  # newest first, once each; not the head, not a hash
    assert parse("/w", "not the script's output") is None


def with_remote(work: Path) -> Path:
    """``work/repo``, one commit ("first") on ``main``, and a bare ``work/upstream.git`` as its ``origin``."""
    upstream, repo = work / "upstream.git", work / "repo"
    git(work, "init", "-q", "--bare", str(upstream))
    repo.mkdir()
    git(repo, "init", "-q")
    commit(repo, "f.txt", "1\n", "first")
    git(repo, "remote", "add", "origin", str(upstream))
    return repo


@needs_git
def test_the_branches_of_a_repository_with_a_remote(sandboxed):
    sandbox, work = sandboxed
    repo = with_remote(work)
    git(repo, "push", "-q", "-u", "origin", "main")
    ahead = commit(repo, "f.txt", "2\n", "second, not pushed")
    git(repo, "tag", "v1")
    git(repo, "checkout", "-q", "-b", "feature")
    git(repo, "checkout", "-q", "main")

    found = within(read_branches, sandbox, str(repo))
    assert found.available and found.head == "main" and not found.detached
    assert [(b.name, b.isHead, b.upstream, b.ahead, b.commitSubject) for b in found.local] == [
        ("feature", False, None, 0, "second, not pushed"), ("main", True, "origin/main", 1, "second, not pushed")]
    assert [b.name for b in found.remote] == ["origin/main"]
    assert [t.name for t in found.tags] == ["v1"] and found.recent == ["feature"]
    git(repo, "checkout", "-q", ahead)
    detached = within(read_branches, sandbox, str(repo))
    assert detached.detached and detached.head == ahead[:len(detached.head)] and len(detached.head) >= 7
    assert within(read_branches, sandbox, str(work)).available is False  # no repository there
    assert within(read_branches, NO_SANDBOX, str(repo)).available is False
