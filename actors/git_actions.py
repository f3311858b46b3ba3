"""The branch picker's actions in qwen's Web Shell: check out, start a branch, commit; git run in the sandbox.

These change the repository, and ``git checkout`` and ``git commit`` start the
hooks the repository names (``post-checkout``, ``pre-commit``), which the model
may have written; so git runs where a model-run command runs, in the sandbox
(:mod:`actors.workspace_git`), and so do its hooks. The answers are qwen serve's:

* check out ``ref``: a local branch; a remote branch (``origin/x``) as its local
  branch, made from it if there is none (its upstream is not recorded: the
  sandbox keeps ``.git/config`` read-only); anything else (a tag, a hash)
  detached. ``{branch, detached}``, ``branch`` the short hash when detached;
* start branch ``name`` at ``startPoint`` (``HEAD`` without one) and check it
  out: ``{branch, detached: false}``;
* commit ``message``, after staging every change with ``all`` (the index is put
  back if the commit fails): ``{sha, subject}``.

When git refuses (local changes in the way, a name taken, nothing to commit, no
author), :class:`GitRefused` carries git's own words, the work tree's path
replaced with ``<workspace>``. Push and pull are not offered: in the sandbox git
has no credentials, and outside it the repository's hooks and credential
helpers would run as the daemon.

The scripts are fixed; a request's values reach git as arguments, after ``--``
or as an option's value, and a ref is checked not to start with ``-``
(:func:`is_ref`).
"""

from __future__ import annotations

import re

from .process.sandbox import Sandbox
from .wire import answers
from .wire.bodies import GIT_REF
from .workspace_git import NOT_A_REPOSITORY, prelude, run_script

MAX_MESSAGE = 512  # characters of git's words kept in a refusal
RESULT = "\x1e"  # before the script's result, after whatever git printed

_PRELUDE = prelude("&1")
_REF = re.compile(GIT_REF)
_HEAD = """if b=$(g symbolic-ref -q --short HEAD); then printf '\\036%s\\n' "$b"
else printf '\\036%s\\ndetached\\n' "$(g rev-parse --short HEAD)"; fi
"""

# $1 the ref
CHECKOUT_SCRIPT = _PRELUDE + """if g show-ref --verify --quiet "refs/remotes/$1"; then
  mine=${1#*/}
  if g show-ref --verify --quiet "refs/heads/$mine"; then g checkout "$mine" --; else g checkout --track "$1" --; fi
else
  g checkout "$1" --
fi || exit 1
""" + _HEAD

# $1 the new branch, $2 where it starts (or empty: HEAD)
BRANCH_SCRIPT = _PRELUDE + """g checkout -b "$1" ${2:+"$2"} -- || exit 1
""" + _HEAD

# $1 the message, $2 "all" to stage every change first
COMMIT_SCRIPT = _PRELUDE + """if test "$2" = all; then
  saved=$(g write-tree) || exit 1
  g add -A || exit 1
fi
if ! g commit -q -m "$1"; then
  test -n "${saved:-}" && g read-tree "$saved"
  exit 1
fi
printf '\\036%s\\n%s\\n' "$(g rev-parse --short HEAD)" "$(g log -1 --format=%s)"
"""


class GitRefused(Exception):
    """git refused the action, or could not run here: the message says why (git's words where it spoke)."""


def is_ref(text: str) -> bool:
    """A value git may take as a ref or branch name here (:data:`~actors.wire.bodies.GIT_REF`): not an option, no
    space or control character (git judges the rest, and says so)."""
    return _REF.match(text) is not None


async def _run(sandbox: Sandbox, cwd: str, script: str, *args: str) -> list[str]:
    ran = await run_script(sandbox, cwd, script, *args)
    if ran is None:
        raise GitRefused("git cannot run here: no sandbox, or it took too long or printed too much")
    code, output = ran
    said, marker, result = output.partition(RESULT)
    if code == NOT_A_REPOSITORY:
        raise GitRefused("not a git work tree")
    if code != 0 or not marker:
        words = said.strip().replace(cwd, "<workspace>") or f"git failed (exit {code})"
        raise GitRefused(words[:MAX_MESSAGE])
    return result.rstrip("\n").split("\n")


def _checked_out(lines: list[str]) -> answers.GitCheckedOut:
    return answers.GitCheckedOut(branch=lines[0], detached=lines[1:] == ["detached"])


async def checkout(sandbox: Sandbox, cwd: str, ref: str) -> answers.GitCheckedOut:
    return _checked_out(await _run(sandbox, cwd, CHECKOUT_SCRIPT, ref))


async def create_branch(sandbox: Sandbox, cwd: str, name: str, start: str | None = None) -> answers.GitCheckedOut:
    return _checked_out(await _run(sandbox, cwd, BRANCH_SCRIPT, name, start or ""))


async def commit(sandbox: Sandbox, cwd: str, message: str, *, stage_all: bool = False) -> answers.GitCommitted:
    lines = await _run(sandbox, cwd, COMMIT_SCRIPT, message, "all" if stage_all else "")
    return answers.GitCommitted(sha=lines[0], subject=lines[1] if len(lines) > 1 else "")


__all__ = ["GitRefused", "checkout", "commit", "create_branch", "is_ref"]
