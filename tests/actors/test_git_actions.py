"""The branch picker's actions (actors/git_actions.py) on real repositories, in the sandbox as the daemon runs
them: checkout of a branch, of a remote branch (tracked), of a tag (detached); a new branch; a commit of
everything; and git's refusals in its own words, the repository unchanged by them."""

from __future__ import annotations

import pytest

from actors.git_actions import GitRefused, checkout, commit, create_branch, is_ref
from actors.process import NO_SANDBOX
from tests.actors.test_git_branches import with_remote
from tests.actors.test_git_diff import git, needs_git, sandboxed, within
from tests.actors.test_git_log import commit as make_commit

__all__ = ["sandboxed"]  # the fixture, used by name


def test_what_a_ref_may_be():
    assert all(is_ref(r) for r in ("main", "origin/feature", "v1.2", "abc1234", "HEAD", "päivä"))
    assert not any(is_ref(r) for r in ("", "-b", "--orphan=x", "a b", "a\tb", "a\nb", "x\x00"))


def head(repo) -> str:
    return git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()


@needs_git
def test_checkout_a_branch_a_remote_branch_and_a_tag(sandboxed):
    sandbox, work = sandboxed
    repo = with_remote(work)
    git(repo, "tag", "v1")
    git(repo, "branch", "feature")
    git(repo, "checkout", "-q", "-b", "shared")
    git(repo, "push", "-q", "origin", "shared")
    git(repo, "checkout", "-q", "main")
    git(repo, "branch", "-q", "-D", "shared")
    git(repo, "fetch", "-q", "origin")

    assert within(checkout, sandbox, str(repo), "feature").branch == "feature" and head(repo) == "feature"
    tracked = within(checkout, sandbox, str(repo), "origin/shared")  # as a local branch of the same name
    assert (tracked.branch, tracked.detached) == ("shared", False)
    assert git(repo, "rev-parse", "shared").strip() == git(repo, "rev-parse", "origin/shared").strip()
    # Its upstream is not recorded: the sandbox keeps .git/config read-only (docs/webshell.md says so).
    tagged = within(checkout, sandbox, str(repo), "v1")
    assert tagged.detached and git(repo, "rev-parse", "HEAD").startswith(tagged.branch)


@needs_git
def test_a_new_branch_and_a_commit_of_everything(sandboxed):
    sandbox, repo = sandboxed
    git(repo, "init", "-q")
    first = make_commit(repo, "f.txt", "1\n", "first")
    make_commit(repo, "f.txt", "2\n", "second")
    made = within(create_branch, sandbox, str(repo), "from-first", first)
    assert (made.branch, made.detached) == ("from-first", False) and (repo / "f.txt").read_text() == "1\n"
    (repo / "f.txt").write_text("3\n")
    (repo / "new.txt").write_text("new\n")
    done = within(commit, sandbox, str(repo), "third, with -a", stage_all=True)
    assert done.subject == "third, with -a" and git(repo, "rev-parse", "--short", "HEAD").strip() == done.sha
    assert git(repo, "status", "--porcelain") == ""  # both files in it
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == ["f.txt", "new.txt"]


@needs_git
def test_gits_refusals_in_its_own_words_and_nothing_changed(sandboxed):
    sandbox, repo = sandboxed
    git(repo, "init", "-q")
    make_commit(repo, "f.txt", "1\n", "first")
    git(repo, "branch", "other")
    make_commit(repo, "f.txt", "2\n", "second")
    (repo / "f.txt").write_text("local change\n")
    with pytest.raises(GitRefused, match="would be overwritten by checkout"):
        within(checkout, sandbox, str(repo), "other")
    assert head(repo) == "main" and (repo / "f.txt").read_text() == "local change\n"
    with pytest.raises(GitRefused, match="already exists"):
        within(create_branch, sandbox, str(repo), "other")
    with pytest.raises(GitRefused, match="invalid reference|pathspec"):
        within(checkout, sandbox, str(repo), "no-such-branch")
    with pytest.raises(GitRefused, match="nothing added to commit|no changes added"):
        within(commit, sandbox, str(repo), "only staged")  # nothing staged: the change is not in it
    assert git(repo, "log", "--format=%s").split("\n")[0] == "second"
    with pytest.raises(GitRefused) as refused:
        within(checkout, sandbox, str(repo.parent), "main")  # no work tree there
    assert str(repo.parent) not in str(refused.value)
    with pytest.raises(GitRefused, match="cannot run here"):
        within(checkout, NO_SANDBOX, str(repo), "other")
