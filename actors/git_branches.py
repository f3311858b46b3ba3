"""A work tree's branches for qwen's Web Shell branch picker: ``git for-each-ref`` run in the sandbox.

As the status, diffs and history (:mod:`actors.workspace_git`), git runs only in
the sandbox. The answer is qwen serve's (``GET /workspaces/:workspace/git/branches``),
with its rules: local and remote branches (a symbolic ref such as
``origin/HEAD`` left out) with their upstream, how far ahead and behind, the
push target, the last commit's time and subject; tags newest first; up to 20
branches checked out recently (from the reflog, the current one and bare hashes
left out); the branch checked out, or the short hash of a detached head.

The script is fixed and takes no argument; it prints its sections separated by
a line holding only :data:`SECTION` (``for-each-ref`` lines always hold NULs,
and the others are names or reflog subjects of one line each).
"""

from __future__ import annotations

import re

from .process.sandbox import Sandbox
from .wire import answers
from .workspace_git import PRELUDE, run_script

MAX_RECENT_BRANCHES = 20
MAX_REFLOG_ENTRIES = 200
SECTION = "\x1e"  # the record separator, alone on a line between the script's sections

_BRANCH_FORMAT = ("%(refname:short)%00%(HEAD)%00%(upstream:short)%00%(upstream:track,nobracket)%00"
                  "%(committerdate:unix)%00%(subject)%00%(symref)%00%(push:short)%00%(push:track,nobracket)")

BRANCHES_SCRIPT = PRELUDE + """s() { printf '\\n\\036\\n'; }
g for-each-ref --format='""" + _BRANCH_FORMAT + """' refs/heads/; s
g for-each-ref --format='""" + _BRANCH_FORMAT + """' refs/remotes/; s
g for-each-ref --format='%(refname:short)%00%(creatordate:unix)%00%(subject)' --sort=-creatordate refs/tags/; s
g symbolic-ref --short HEAD; s
g rev-parse --short HEAD; s
g reflog show --format=%gs -""" + str(MAX_REFLOG_ENTRIES) + """
exit 0
"""

_AHEAD = re.compile(r"ahead (\d+)")
_BEHIND = re.compile(r"behind (\d+)")
_SHA = re.compile(r"[0-9a-f]{7,40}")


def _count(pattern: re.Pattern[str], track: str) -> int:
    found = pattern.search(track)
    return int(found.group(1)) if found else 0


def branches(lines: list[str]) -> list[answers.GitBranch]:
    """``for-each-ref`` lines of the branch format: the branches, symbolic refs left out."""
    out = []
    for line in lines:
        parts = line.split("\0")
        if len(parts) != 9 or parts[6]:
            continue
        name, head, upstream, track, date, subject, _, push, push_track = parts
        pushed = bool(push) and not re.search(r"\bgone\b", push_track)
        out.append(answers.GitBranch(
            name=name, isHead=head == "*", upstream=upstream or None,
            upstreamGone=True if upstream and re.search(r"\bgone\b", track) else None,
            ahead=_count(_AHEAD, track), behind=_count(_BEHIND, track), pushTarget=push or None,
            pushAhead=_count(_AHEAD, push_track) if pushed else None,
            pushBehind=_count(_BEHIND, push_track) if pushed else None,
            pushGone=True if push and not pushed else None,
            commitDate=int(date) if date.isdigit() else 0, commitSubject=subject))
    return out


def tags(lines: list[str]) -> list[answers.GitTag]:
    out = []
    for line in lines:
        parts = line.split("\0")
        if len(parts) == 3:
            out.append(answers.GitTag(name=parts[0], date=int(parts[1]) if parts[1].isdigit() else 0,
                                      subject=parts[2]))
    return out


def recent(reflog: list[str], head: str) -> list[str]:
    """Branches checked out recently, newest first: the reflog's ``checkout: moving from A to B``."""
    out: list[str] = []
    for line in reflog:
        if not line.startswith("checkout: moving from ") or " to " not in line:
            continue
        branch = line[line.index(" to ") + 4:]
        if branch and branch not in out and branch != head and not _SHA.fullmatch(branch):
            out.append(branch)
            if len(out) >= MAX_RECENT_BRANCHES:
                break
    return out


def parse(cwd: str, output: str) -> answers.GitBranches | None:
    """The script's output as qwen's answer; ``None`` if it is not that."""
    sections = [[line for line in part.split("\n") if line] for part in output.split(f"\n{SECTION}\n")]
    if len(sections) != 6:
        return None
    local, remote, tagged, symbolic, short, reflog = sections
    head = symbolic[0] if symbolic else ""
    return answers.GitBranches(v=1, workspaceCwd=cwd, available=True, local=branches(local),
                               remote=branches(remote), tags=tags(tagged), recent=recent(reflog, head),
                               head=head or (short[0] if short else ""), detached=not head)


def unavailable_branches(cwd: str) -> answers.GitBranches:
    return answers.GitBranches(v=1, workspaceCwd=cwd, available=False, local=[], remote=[], tags=[], recent=[],
                               head="", detached=False)


async def read_branches(sandbox: Sandbox, cwd: str) -> answers.GitBranches:
    """The branches of the repository holding ``cwd`` (see the module's docstring)."""
    ran = await run_script(sandbox, cwd, BRANCHES_SCRIPT)
    if ran is None or ran[0] != 0:  # no sandbox, no work tree, a failure
        return unavailable_branches(cwd)
    return parse(cwd, ran[1]) or unavailable_branches(cwd)


__all__ = ["MAX_RECENT_BRANCHES", "branches", "parse", "read_branches", "recent", "tags", "unavailable_branches"]
