"""A work tree's history for qwen's Web Shell *Changes* dialog (its History tab): ``git log`` run in the sandbox.

Like the status and the diffs (:mod:`actors.workspace_git`, :mod:`actors.git_diff`),
git runs only in the sandbox, with the same options, since the repository may be
the model's. The answers are qwen serve's (``GET /workspaces/:workspace/git/log``
and ``.../git/log/commit?sha=``), with its rules:

* a page of commits, newest first (``--date-order``): ``limit`` of them (at most
  :data:`MAX_LOG_LIMIT`) after ``skip``, from ``HEAD``, or from every branch, tag
  and remote (``all``), or from one ``range`` (a revision or ``a..b``);
  ``hasMore`` when there are more;
* a ``search`` is three walks, merged and newest first: messages and authors
  containing it (any case, as written), and the commit it names if it is 4 to 40
  hexadecimal digits;
* a repository without commits has an empty history; outside a work tree,
  without a sandbox or git, or when git fails: ``available: false``;
* one commit: its message, its files with added and removed lines against its
  first parent (renames followed), at most 50 listed.

The scripts are fixed; a request's values reach git as arguments, after a
prefix that makes each an option's value (``--grep=...``) or once checked to be a
revision (:func:`safe_range`, hexadecimal digits).
"""

from __future__ import annotations

import re

from .git_diff import MAX_FILES, numstat
from .process.sandbox import Sandbox
from .wire import answers
from .workspace_git import PRELUDE, run_script

MAX_LOG_LIMIT = 200  # commits a page
DEFAULT_LOG_LIMIT = 50
MAX_SEARCH_CHARS = 200
NO_COMMITS = 5  # the log script's exit code in a repository without commits
LOG_FIELDS = 9
# sha, short sha, author, email, author time, subject, refs, parents, then the committer time (for merging
# searches) or the message's body (a commit's detail).
_FORMAT = "%H%x00%h%x00%an%x00%ae%x00%at%x00%s%x00%D%x00%P%x00"
LOG_FORMAT = _FORMAT + "%ct"
DETAIL_FORMAT = _FORMAT + "%b"

# $1 commits to print, $2 to skip, $3 "all", "range" or empty, $4 the range, $5 the search (or empty).
LOG_SCRIPT = PRELUDE + """g rev-parse -q --verify HEAD >/dev/null || exit """ + str(NO_COMMITS) + """
n=$1 skip=$2 mode=$3 range=$4 query=$5
case $mode in
  all) set -- HEAD --branches --tags --remotes ;;
  range) set -- "$range" ;;
  *) set -- ;;
esac
l() { g log -z --format='""" + LOG_FORMAT + """' "$@"; }
if test -z "$query"; then
  l --date-order -n "$n" --skip "$skip" "$@" -- || exit 1
else
  l --date-order -i --fixed-strings "--grep=$query" -n "$n" "$@" --
  l --date-order -i --fixed-strings "--author=$query" -n "$n" "$@" --
  case $query in *[!0-9a-fA-F]*) ;; ????*) l --no-walk "$query^{commit}" -- ;; esac
fi
exit 0
"""

# $1 the commit (hexadecimal, checked): its detail, then its files against its first parent.
COMMIT_SCRIPT = PRELUDE + """g log -1 -z --format='""" + DETAIL_FORMAT + """' "$1" -- || exit 1
if g rev-parse -q --verify "$1^2" >/dev/null; then
  g diff-tree --no-commit-id --numstat -M -r -z "$1^1" "$1"
else
  g diff-tree --no-commit-id --numstat -M -r -z --root "$1"
fi
exit 0
"""

_SAFE_RANGE = re.compile(r"[A-Za-z0-9_./~^-]+")
_SHA = re.compile(r"[0-9a-fA-F]{7,40}")


def safe_range(text: str) -> bool:
    """A revision or range git reads as nothing else (qwen serve's rule): no option, no path."""
    return not text.startswith(("-", "..")) and _SAFE_RANGE.fullmatch(text) is not None


def is_sha(text: str) -> bool:
    return _SHA.fullmatch(text) is not None


def _entry(fields: list[str]) -> tuple[answers.GitLogEntry, int]:
    entry = answers.GitLogEntry(sha=fields[0], shortSha=fields[1], authorName=fields[2], authorEmail=fields[3],
                                authorDate=_int(fields[4]), subject=fields[5], refs=fields[6] or None,
                                parents=fields[7].split())
    return entry, _int(fields[8])


def _int(text: str) -> int:
    return int(text) if text.isascii() and text.isdigit() else 0


def records(output: str) -> list[tuple[answers.GitLogEntry, int]]:
    """``git log -z`` records of :data:`LOG_FORMAT` (each ends with a NUL): entries with their committer time."""
    fields = output.split("\0")
    if fields and fields[-1] == "":
        fields.pop()
    return [_entry(fields[at:at + LOG_FIELDS]) for at in range(0, len(fields) - LOG_FIELDS + 1, LOG_FIELDS)]


def unavailable_log(cwd: str) -> answers.GitLog:
    return answers.GitLog(v=1, workspaceCwd=cwd, available=False, entries=[], hasMore=False)


async def read_log(sandbox: Sandbox, cwd: str, *, limit: int = DEFAULT_LOG_LIMIT, skip: int = 0, all: bool = False,
                   range: str | None = None, search: str | None = None) -> answers.GitLog:
    """A page of the history of the work tree holding ``cwd`` (see the module's docstring). ``range`` must be
    :func:`safe_range`."""
    mode = "all" if all else "range" if range else ""
    count = skip + limit + 1 if search else limit + 1
    ran = await run_script(sandbox, cwd, LOG_SCRIPT, str(count), str(skip), mode, range or "", search or "")
    if ran is None:
        return unavailable_log(cwd)
    code, output = ran
    if code == NO_COMMITS:
        return answers.GitLog(v=1, workspaceCwd=cwd, available=True, entries=[], hasMore=False)
    if code != 0:
        return unavailable_log(cwd)
    found = records(output)
    if search:
        ranked: dict[str, tuple[answers.GitLogEntry, int, int]] = {}
        for entry, committed in found:
            ranked.setdefault(entry.sha, (entry, committed, len(ranked)))
        ordered = [e for e, _, _ in sorted(ranked.values(), key=lambda item: (-item[1], item[2]))]
        return answers.GitLog(v=1, workspaceCwd=cwd, available=True, entries=ordered[skip:skip + limit],
                              hasMore=len(ordered) > skip + limit)
    entries = [entry for entry, _ in found]
    return answers.GitLog(v=1, workspaceCwd=cwd, available=True, entries=entries[:limit], hasMore=len(entries) > limit)


async def read_commit(sandbox: Sandbox, cwd: str, sha: str) -> answers.GitCommit:
    """One commit of the work tree holding ``cwd``; ``sha`` must be :func:`is_sha`."""
    none = answers.GitCommit(v=1, workspaceCwd=cwd, available=False)
    ran = await run_script(sandbox, cwd, COMMIT_SCRIPT, sha)
    if ran is None or ran[0] != 0:
        return none
    fields = ran[1].split("\0")
    if len(fields) < LOG_FIELDS:
        return none
    entry, _ = _entry(fields[:LOG_FIELDS - 1] + ["0"])
    changed = numstat(fields[LOG_FIELDS:])
    files = [answers.GitCommitFile(path=path, added=a, removed=r, isBinary=binary)
             for path, a, r, binary, _ in changed[:MAX_FILES]]
    return answers.GitCommit(
        v=1, workspaceCwd=cwd, available=True, sha=entry.sha, shortSha=entry.shortSha, authorName=entry.authorName,
        authorEmail=entry.authorEmail, authorDate=entry.authorDate, subject=entry.subject,
        body=fields[LOG_FIELDS - 1].removesuffix("\n"), refs=entry.refs, parents=entry.parents, files=files,
        filesCount=len(changed), linesAdded=sum(c[1] for c in changed), linesRemoved=sum(c[2] for c in changed),
        hiddenCount=max(0, len(changed) - len(files)))


__all__ = ["DEFAULT_LOG_LIMIT", "MAX_LOG_LIMIT", "MAX_SEARCH_CHARS", "is_sha", "read_commit", "read_log", "records",
           "safe_range", "unavailable_log"]
