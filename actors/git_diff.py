"""A work tree's changes for qwen's Web Shell *Changes* dialog: ``git diff`` run in the sandbox, its output parsed.

``git diff`` runs the clean filters a repository's ``.gitattributes`` names, as
``git status`` does (:mod:`actors.workspace_git`, whose runner and git options
this uses), so it runs only in the sandbox. The answers are qwen serve's
(``GET /workspaces/:workspace/git/diff`` and ``.../git/diff/file?path=[&oldPath=]``)
with its limits:

* the list: every change against ``HEAD`` (the empty tree on an unborn branch)
  over the whole work tree, paths from its top: added and removed lines,
  binary, deleted, renamed (``oldPath``); untracked files count as added
  lines. At most :data:`MAX_FILES` entries are listed (``hiddenCount`` the
  rest); past :data:`MAX_FILES_FOR_DETAILS` files none are, and untracked
  files' lines are not counted;
* one file: its hunks, at most :data:`MAX_LINES_PER_FILE` lines of them, from
  at most :data:`MAX_DIFF_BYTES` of diff (``truncated`` when either cut it);
  an untracked file is one hunk of added lines; a binary one has none;
* nothing is available (``available: false``) where no diff can be had: no
  work tree, a merge, rebase, cherry-pick or revert under way (a bisect is
  fine), no sandbox or no git, a failure, more than 10 s or 4 MiB of output.

Where Trellis differs from qwen serve on purpose: an unborn branch is diffed
against the empty tree (qwen's local route answers nothing there); a file's
diff past the byte limit shows its first lines, marked ``truncated`` (qwen's
drops it).

The scripts are fixed; a requested path reaches git as an argument (``$1``),
after ``--`` and as a literal pathspec.
"""

from __future__ import annotations

import re

from .process.sandbox import Sandbox
from .wire import answers
from .workspace_git import OPERATIONS, PRELUDE, run_script

MAX_FILES = 50  # entries listed
MAX_FILES_FOR_DETAILS = 500  # files past which none are listed
MAX_LINES_PER_FILE = 400  # hunk lines of one file's diff
MAX_DIFF_BYTES = 1_000_000  # of one file's diff read
BUSY = 4  # the scripts' exit code while an operation (not a bisect) is under way
SEPARATOR = "\0\0"  # between the list script's sections: -z output never holds an empty entry

_OPERATION_NAMES = [name for name, operation in OPERATIONS.items() if operation != "bisect"]
_AT_TOP = """for m in """ + " ".join(_OPERATION_NAMES) + """; do
  p=$(g rev-parse --git-path "$m") && test -e "$p" && exit """ + str(BUSY) + """
done
cd "$(g rev-parse --show-toplevel)" || exit 1
base=HEAD
g rev-parse -q --verify HEAD >/dev/null || base=$(g hash-object -t tree /dev/null)
d() { g diff --no-ext-diff --no-textconv --no-color "$@"; }
"""

LIST_SCRIPT = PRELUDE + _AT_TOP + """d --numstat -z "$base"
printf '\\0\\0'
d --name-status -z "$base"
printf '\\0\\0'
g ls-files -z --others --exclude-standard
"""

# The untracked files named as arguments, each diffed against nothing: their added lines (``-`` if binary).
UNTRACKED_SCRIPT = PRELUDE + _AT_TOP + """for f; do d --no-index --numstat -z -- /dev/null "$f"; done
exit 0
"""

# $1 the file, $2 its old path (a rename) or empty: the first line says which diff follows.
FILE_SCRIPT = PRELUDE + _AT_TOP + """if test -n "$(g ls-files --others --exclude-standard -- "$1")"; then
  echo untracked
  d --no-index -- /dev/null "$1" | head -c """ + str(MAX_DIFF_BYTES + 1) + """
else
  echo tracked
  d --find-renames "$base" -- ${2:+"$2"} "$1" | head -c """ + str(MAX_DIFF_BYTES + 1) + """
fi
exit 0
"""


def numstat(tokens: list[str]) -> list[tuple[str, int, int, bool, str | None]]:
    """``git diff --numstat -z`` entries: (path, added, removed, binary, old path of a rename)."""
    out: list[tuple[str, int, int, bool, str | None]] = []
    pending: tuple[int, int, bool] | None = None
    old: str | None = None
    for token in tokens:
        if pending is not None:  # a rename: "added\tremoved\t", then the old path, then the new one
            if old is None:
                old = token
                continue
            out.append((token, *pending, old))
            pending, old = None, None
            continue
        parts = token.split("\t", 2)
        if len(parts) != 3:
            continue
        binary = "-" in parts[:2]
        added, removed = (0, 0) if binary else (_count(parts[0]), _count(parts[1]))
        if parts[2]:
            out.append((parts[2], added, removed, binary, None))
        else:
            pending = (added, removed, binary)
    return out


def _count(text: str) -> int:
    return int(text) if text.isascii() and text.isdigit() else 0


def deleted(tokens: list[str]) -> set[str]:
    """The deleted paths of ``git diff --name-status -z`` (a rename or copy names two paths)."""
    out: set[str] = set()
    at = 0
    while at < len(tokens):
        status = tokens[at]
        at += 1
        if status[:1] in ("R", "C"):
            at += 2
            continue
        if status[:1] == "D" and at < len(tokens):
            out.add(tokens[at])
        at += 1
    return out


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def hunks(diff: str) -> tuple[list[answers.GitHunk], bool]:
    """The hunks of one file's unified diff, at most :data:`MAX_LINES_PER_FILE` lines of them; and whether
    they were cut (by that, or by :data:`MAX_DIFF_BYTES` of diff)."""
    cut = len(diff.encode()) > MAX_DIFF_BYTES
    if cut:  # the limit cut the last line read: it may be part of one, and is not shown
        diff = diff[:diff.rfind("\n") + 1]
    found: list[answers.GitHunk] = []
    lines: list[str] | None = None
    count = 0
    for line in diff.split("\n"):
        if match := _HUNK.match(line):
            old_start, old_lines, new_start, new_lines = match.groups()
            lines = []
            found.append(answers.GitHunk(oldStart=int(old_start), oldLines=int(old_lines or 1),
                                         newStart=int(new_start), newLines=int(new_lines or 1), lines=lines))
        elif lines is None:
            continue  # the file's header
        elif line.startswith("diff --git "):
            break  # a second file's diff: not this one's
        elif line[:1] in ("+", "-", " "):
            if count >= MAX_LINES_PER_FILE:
                cut = True
                break
            lines.append(line)
            count += 1
        elif line.startswith("\\"):  # "\ No newline at end of file"
            lines.append(line)
    return found, cut


def unavailable_list(cwd: str) -> answers.GitDiff:
    return answers.GitDiff(v=1, workspaceCwd=cwd, available=False, filesCount=0, linesAdded=0, linesRemoved=0,
                           files=[], hiddenCount=0)


def _sections(output: str) -> list[list[str]]:
    parts = output.split(SEPARATOR)
    return [[t for t in part.split("\0") if t] for part in parts]


async def read_diff(sandbox: Sandbox, cwd: str) -> answers.GitDiff:
    """The changes of the work tree holding ``cwd`` (see the module's docstring)."""
    ran = await run_script(sandbox, cwd, LIST_SCRIPT)
    if ran is None or ran[0] != 0:
        return unavailable_list(cwd)
    sections = _sections(ran[1])
    if len(sections) != 3:
        return unavailable_list(cwd)
    changed, gone, untracked = numstat(sections[0]), deleted(sections[1]), sections[2]
    files_count = len(changed) + len(untracked)
    added = sum(entry[1] for entry in changed)
    removed = sum(entry[2] for entry in changed)
    if files_count > MAX_FILES_FOR_DETAILS:
        return answers.GitDiff(v=1, workspaceCwd=cwd, available=True, filesCount=files_count, linesAdded=added,
                               linesRemoved=removed, files=[], hiddenCount=files_count)
    files = [answers.GitDiffEntry(path=path, added=a, removed=r, isBinary=binary, isUntracked=False,
                                  isDeleted=path in gone, truncated=False, oldPath=old)
             for path, a, r, binary, old in changed[:MAX_FILES]]
    if untracked:
        counted = await run_script(sandbox, cwd, UNTRACKED_SCRIPT, *untracked)
        stats = {path: (a, binary) for path, a, _, binary, _ in numstat(counted[1].split("\0"))} \
            if counted is not None and counted[0] == 0 else {}
        for path in untracked:
            lines, binary = stats.get(path, (0, False))
            added += lines
            if len(files) < MAX_FILES:
                files.append(answers.GitDiffEntry(path=path, added=lines, removed=0, isBinary=binary,
                                                  isUntracked=True, isDeleted=False, truncated=False))
    return answers.GitDiff(v=1, workspaceCwd=cwd, available=True, filesCount=files_count, linesAdded=added,
                           linesRemoved=removed, files=files, hiddenCount=max(0, files_count - len(files)))


async def read_file_diff(sandbox: Sandbox, cwd: str, path: str, old_path: str | None = None) -> answers.GitDiffFile:
    """One file's hunks, ``path`` (and ``old_path``, a rename's) from the top of the work tree holding ``cwd``."""
    ran = await run_script(sandbox, cwd, FILE_SCRIPT, path, old_path or "")
    none = answers.GitDiffFile(v=1, workspaceCwd=cwd, path=path, available=False, hunks=[])
    if ran is None or ran[0] != 0:
        return none
    kind, _, diff = ran[1].partition("\n")
    if kind not in ("tracked", "untracked"):
        return none
    found, cut = hunks(diff)
    return answers.GitDiffFile(v=1, workspaceCwd=cwd, path=path, available=bool(found), hunks=found,
                               truncated=cut or None)


__all__ = ["BUSY", "MAX_DIFF_BYTES", "MAX_FILES", "MAX_FILES_FOR_DETAILS", "MAX_LINES_PER_FILE", "deleted", "hunks",
           "numstat", "read_diff", "read_file_diff", "unavailable_list"]
