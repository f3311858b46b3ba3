"""A workspace's git status for qwen's Web Shell panel: git run in the sandbox, its porcelain output parsed.

``git status`` runs what the repository chooses: ``core.fsmonitor`` (a command
it starts), the clean and ``process`` filters its ``.gitattributes`` name. The
repository may be one the model made or edited, so the daemon runs git only
where a model-run command would run: in the sandbox, with the model's
environment, its cgroup and its disk reserve. Without a sandbox (``sandbox:
off``, or no bubblewrap) the panel gets the branch alone, read from
``.git/HEAD`` by the caller; so it does when git is missing, the sandbox
refuses the cwd, git fails, takes longer than :data:`TIMEOUT` or prints more
than :data:`OUTPUT_LIMIT`.

The command is fixed (nothing of the request is in it); it prints, in order::

    line 1   stash entries (``git stash list | wc -l``)
    line 2   the operation under way: a marker of REBASE_MARKERS found by ``git rev-parse --git-path``, or empty
    rest     ``git status --porcelain=v1 --branch -z``

:func:`parse` reads that into a :class:`GitStatus`, with qwen serve's names and
counting rules (an unmerged entry is conflicted, not staged; a rename's second
path is skipped).
"""

from __future__ import annotations

import re

import attrs
import trio

from .background.shell import OutputBuffer, ShellProcess
from .process.sandbox import Sandbox

TIMEOUT = 10.0  # seconds
OUTPUT_LIMIT = 4 * 1024 * 1024  # characters; a status longer than this gives the branch alone
OPERATIONS = {"rebase-merge": "rebase", "rebase-apply": "rebase", "MERGE_HEAD": "merge",
              "CHERRY_PICK_HEAD": "cherry-pick", "REVERT_HEAD": "revert", "BISECT_LOG": "bisect"}
NOT_A_REPOSITORY = 3  # the script's exit code outside a work tree

# core.fsmonitor= turns the monitor off (qwen's no-exec settings); the rest is what the sandbox is for. Paths given
# as arguments are literal (a "*" names the file "*"), and no command waits on a terminal or a pager.
_SETUP = """export LC_ALL=C GIT_OPTIONAL_LOCKS=0 GIT_TERMINAL_PROMPT=0 GIT_PAGER=cat GIT_EDITOR=true
g() { git -c core.quotepath=false -c core.fsmonitor= -c log.showSignature=false --literal-pathspecs "$@"; }
test "$(g rev-parse --is-inside-work-tree)" = true || exit """ + str(NOT_A_REPOSITORY) + "\n"


def prelude(errors: str = "/dev/null") -> str:
    """The scripts' first lines: git's options as ``g``, and the exit outside a work tree; git's messages go to
    ``errors`` (``&1``: into the output, for an action whose failure is shown)."""
    return f"exec 2>{errors} </dev/null\n" + _SETUP


PRELUDE = prelude()

SCRIPT = PRELUDE + """g stash list --format=%H | wc -l
for m in """ + " ".join(OPERATIONS) + """; do
  p=$(g rev-parse --git-path "$m") && test -e "$p" && { printf %s "$m"; break; }
done
echo
g status --porcelain=v1 --branch -z
"""


class _Script(ShellProcess):
    """A fixed script, given its arguments as ``$1``, ``$2``...: nothing of a request is in the script's text."""

    def __init__(self, script: str, args: tuple[str, ...], cwd: str, output: OutputBuffer, sandbox: Sandbox) -> None:
        super().__init__(script, cwd, output, sandbox=sandbox)
        self.args = args

    def argv(self) -> list[str]:
        return ["/bin/sh", "-c", self.command, "sh", *self.args]


async def run_script(sandbox: Sandbox, cwd: str, script: str, *args: str) -> tuple[int, str] | None:
    """Run ``script`` (a fixed one, starting with :func:`prelude`; the request's values only in ``args``) in
    ``sandbox`` at ``cwd``: its exit code and output; ``None`` when it cannot run here (no sandbox, a refusal),
    takes longer than :data:`TIMEOUT` or prints more than :data:`OUTPUT_LIMIT`."""
    if not sandbox.active:
        return None
    output = OutputBuffer(limit=OUTPUT_LIMIT)
    process = _Script(script, args, cwd, output, sandbox)
    try:
        await process.start()
    except OSError:
        return None
    try:
        with trio.move_on_after(TIMEOUT):
            code = await process.run()
            if not output.dropped:
                return code, output.tail(OUTPUT_LIMIT)
        return None
    finally:
        await process.kill_and_reap()  # a filter or monitor may have left something behind


@attrs.frozen(kw_only=True)
class GitStatus:
    """What qwen serve's ``GET /workspaces/:workspace/git`` reports of a work tree."""

    branch: str | None
    detached: bool = False
    hasUpstream: bool = False
    ahead: int = 0
    behind: int = 0
    staged: int = 0
    unstaged: int = 0
    untracked: int = 0
    conflicted: int = 0
    stashCount: int = 0
    operation: str | None = None


_UNBORN = re.compile(r"^(?:No commits yet|Initial commit) on (.+)$")
_TRACKING = re.compile(r" \[([^\]]*)\]$")


def parse_branch_line(line: str) -> dict[str, object]:
    """``## main...origin/main [ahead 1, behind 2]`` -> branch, detached, hasUpstream, ahead, behind."""
    out: dict[str, object] = {"branch": None, "detached": False, "hasUpstream": False, "ahead": 0, "behind": 0}
    if not line.startswith("## "):
        return out
    desc = line[3:]
    if desc.startswith("HEAD (no branch)"):
        return {**out, "detached": True}
    if unborn := _UNBORN.match(desc):
        return {**out, "branch": unborn.group(1)}
    if tracking := _TRACKING.search(desc):
        inner = tracking.group(1)
        ahead, behind = re.search(r"ahead (\d+)", inner), re.search(r"behind (\d+)", inner)
        out["ahead"] = int(ahead.group(1)) if ahead else 0
        out["behind"] = int(behind.group(1)) if behind else 0
        desc = desc[:tracking.start()].rstrip()
    out["hasUpstream"] = "..." in desc
    out["branch"] = desc[:desc.rindex("...")] if "..." in desc else desc or None
    return out


def count_entries(tokens: list[str]) -> dict[str, int]:
    """The porcelain v1 entries (``XY path``) -> staged, unstaged, untracked and conflicted counts."""
    counts = {"staged": 0, "unstaged": 0, "untracked": 0, "conflicted": 0}
    skip = False
    for token in tokens:
        if skip:  # a rename's or copy's original path
            skip = False
            continue
        if len(token) < 3 or token[2] != " ":
            continue
        x, y = token[0], token[1]
        if x == y == "?":
            counts["untracked"] += 1
        elif x == y == "!":
            continue
        elif "U" in (x, y) or x == y in ("D", "A"):
            counts["conflicted"] += 1
        else:
            counts["staged"] += x not in " ?"
            counts["unstaged"] += y not in " ?"
            skip = "R" in (x, y) or "C" in (x, y)
    return counts


def parse(output: str) -> GitStatus | None:
    """The script's output (see the module's docstring) as a :class:`GitStatus`; ``None`` if it is not that."""
    stash, newline, rest = output.partition("\n")
    operation, newline2, status = rest.partition("\n")
    if not (newline and newline2 and stash.strip().isdigit() and status.startswith("## ")):
        return None
    tokens = [t for t in status.split("\0") if t]
    return GitStatus(**parse_branch_line(tokens[0]), **count_entries(tokens[1:]),  # type: ignore[arg-type]
                     stashCount=int(stash.strip()), operation=OPERATIONS.get(operation.strip()))


async def read_status(sandbox: Sandbox, cwd: str) -> GitStatus | None | bool:
    """``git status`` of the work tree holding ``cwd``, run in ``sandbox``.

    ``False`` when ``cwd`` is in no work tree; ``None`` when the status cannot be had here (no sandbox, no git,
    a refusal, a failure, too long or too much: see the module's docstring)."""
    ran = await run_script(sandbox, cwd, SCRIPT)
    if ran is None:
        return None
    code, output = ran
    if code == NOT_A_REPOSITORY:
        return False
    return parse(output) if code == 0 else None
