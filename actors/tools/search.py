"""``glob`` and ``grep``: finding files by name and lines by a regular expression.

Rules:

* Both search from ``path`` (default: the session's cwd), checked by
  :mod:`.paths`, and walk the local tree as :mod:`.walk` says: ``.gitignore``
  respected, ``.git`` and the daemon's state skipped, symlinked directories
  not followed, at most :data:`~.walk.MAX_ENTRIES` entries looked at. The walk
  runs in a worker thread, abandoned if the call is cancelled.
* Paths in the results are relative to the cwd (absolute when outside it), so
  they can be passed to ``read_file`` as they are.
* ``glob`` matches ``pattern`` against each file's path relative to ``path``:
  ``*.py`` is the files at the top only, ``**/*.py`` those at any depth. The
  result is sorted by path, at most :data:`MAX_FILES` of them, and says how
  many more matched.
* ``grep`` takes a Python regular expression (the ``regex`` package's syntax:
  ``re``'s and more, such as Unicode properties), matched
  against each line (``case_insensitive`` optional). ``glob`` filters the
  files searched: a pattern without ``/`` is matched against the file's name
  at any depth (``*.py``), one with ``/`` against its path relative to
  ``path``. ``path`` may also be one file. Binary files (a NUL byte in the
  first 8 KiB) and files over :data:`MAX_GREP_FILE_BYTES` are skipped and
  counted; text that is not UTF-8 is searched with its undecodable bytes
  replaced. Output: ``path:line:text`` lines, each cut at
  :data:`MAX_MATCH_CHARS` characters, at most :data:`MAX_MATCHES` of them and
  :data:`MAX_OUTPUT_CHARS` characters; the end says how many more lines (in
  how many files) matched. A pattern that does not compile is a failure naming
  the pattern and ``re``'s reason.
* **A hostile pattern fails the call, it does not freeze the daemon.** ``re``
  holds the GIL while it backtracks: ``(a+)+$`` over 26 ``a`` and a ``!``
  kept ``/health`` waiting 4.7 s, and each ``a`` more multiplies that. The
  pattern is compiled and matched by the ``regex`` package under the call's
  :class:`~.walk.Budget` (the GIL released, the time left as each match's
  timeout; the rules are :mod:`.walk`'s, shared with the glob and
  ``.gitignore`` patterns). A call whose matches run out of it fails, naming
  the pattern, the limit and the ``file:line`` it was at; nothing is
  returned from the files already searched. ``regex`` unrolls a repeat's
  minimum count when it compiles (``(?:a{1000}){1000}`` took gigabytes), so
  a pattern whose unrolled size, read from its text (:mod:`.regex_size`),
  passes :data:`MAX_REGEX_SIZE` is refused before it is compiled.
  The compiling and the search run in a worker thread of the file tools' own
  limiter (:func:`~.access.tool_threads`); a cancelled call's worker stops at
  its next match.
* Neither asks permission (ACP kind ``search``), in any approval mode.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from typing import Any

import regex
import trio

from ..session.tools import ToolContext, ToolResult
from .access import FileAccessError, file_kind, is_binary, open_beneath, tool_threads
from .common import BadArguments, cut_line, done, plural
from .paths import PathRefused, Scope, location, scope_of
from .read import split_lines
from .regex_size import NestedTooDeeply, repeat_size
from .walk import MAX_ENTRIES, MATCH_SECONDS, BadPattern, Budget, Matcher, TooSlow, Walk, glob_regex

MAX_REGEX_SIZE = 50_000  # a grep pattern's elements, its repeats' minimum counts unrolled (regex's compile does)
MAX_FILES = 200
MAX_MATCHES = 200
MAX_MATCH_CHARS = 500
MAX_OUTPUT_CHARS = 50_000
MAX_GREP_FILE_BYTES = 4 * 1024 * 1024
MAX_LOCATIONS = 20  # of the matches, on the tool call (for editors that follow along)

PATH_PROPERTY = {"type": "string", "minLength": 1, "description": "where to search, relative to the working "
                                                                   "directory (default: the working directory)"}


def _stopped_note(walk: Walk) -> list[str]:
    """What the walk left out: entries past its limit, .gitignore patterns past theirs."""
    stopped = [f"[the search stopped after looking at {MAX_ENTRIES:,} entries; give a narrower path]"] \
        if walk.stopped else []
    return stopped + walk.notes


def _root(scope: Scope, args: dict[str, Any]) -> str:
    return scope.resolve(args.get("path", "."))


def compile_grep(pattern: str, case_insensitive: bool = False) -> Any:
    """``pattern`` compiled by ``regex`` once its unrolled size is bounded (:mod:`.regex_size`); ``BadArguments``
    naming the pattern and the reason otherwise. Holds the GIL while ``regex`` compiles."""
    try:
        size = repeat_size(pattern)
    except NestedTooDeeply as exc:
        raise BadArguments(f"invalid regular expression {pattern!r}: nested too deeply ({exc})") from None
    if size > MAX_REGEX_SIZE:
        raise BadArguments(f"regular expression {pattern!r} is too large: its repeats come to {size:,} elements "
                           f"(at most {MAX_REGEX_SIZE:,}); use smaller counts in {{m,n}}, or + and *")
    try:
        return regex.compile(pattern, regex.IGNORECASE if case_insensitive else 0)
    except (regex.error, RecursionError) as exc:
        raise BadArguments(f"invalid regular expression {pattern!r}: {exc}") from None


async def _in_worker(budget: Budget, work: Callable[[], Any]) -> Any:
    """``work()`` in a worker thread, abandoned if the call is cancelled; the budget then stops it at its next
    match."""
    try:
        return await trio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=tool_threads())
    finally:
        budget.abandon()  # done, or abandoned: either way nothing more to match


class GlobTool:
    name = "glob"
    kind = "search"
    builtin = True
    description = (
        "Find files by a glob pattern such as `**/*.py` or `src/**/*.{ts,tsx}`, matched against paths relative to "
        "`path` (default: the working directory); `*.py` matches only the top level. Files ignored by .gitignore "
        f"are left out. Returns at most {MAX_FILES} paths, sorted, and says how many more matched."
    )
    parameters = {
        "type": "object",
        "properties": {"pattern": {"type": "string", "minLength": 1, "description": "e.g. **/*.py"},
                       "path": PATH_PROPERTY},
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def __init__(self, match_seconds: float = MATCH_SECONDS) -> None:
        self.match_seconds = match_seconds  # the Budget's slow-match seconds (a test gives less)

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        scope = scope_of(context)
        pattern = arguments["pattern"]
        try:
            compiled = glob_regex(pattern)
            root = _root(scope, arguments)
        except (BadPattern, PathRefused) as exc:
            return ToolResult.failure(str(exc))
        if not os.path.isdir(root):
            return ToolResult.failure(f"{scope.shown(root)} is not a directory")
        budget = Budget(self.match_seconds)
        matcher = Matcher(compiled, budget, "glob pattern", pattern)
        walk = Walk(root, scope, budget=budget)

        def search() -> list[str]:
            return [path for path, _ in walk.files() if matcher.match(os.path.relpath(path, root))]

        try:
            found = sorted(scope.shown(p) for p in await _in_worker(budget, search))
        except TooSlow as exc:
            return ToolResult.failure(exc.explain(scope.shown))
        notes = _stopped_note(walk)
        if len(found) > MAX_FILES:
            notes.insert(0, f"[{len(found) - MAX_FILES:,} more files match, not shown; narrow the pattern or path]")
        if not found:
            text = f"No files match {pattern!r} under {scope.shown(root)}."
        else:
            text = "\n".join(found[:MAX_FILES])
        text += "".join("\n" + n for n in notes)
        return done(text, display={"files": len(found)}, locations=[location(root)])


class GrepTool:
    name = "grep"
    kind = "search"
    builtin = True
    description = (
        "Search file contents for a Python regular expression, line by line, under `path` (a directory or one "
        "file; default: the working directory). `glob` filters the files (`*.py`: by name at any depth; "
        "`src/**/*.ts`: by path). Files ignored by .gitignore and binary files are skipped. Returns "
        f"`path:line:text` lines, at most {MAX_MATCHES}, and says how many more matched."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "a Python regular expression"},
            "path": PATH_PROPERTY,
            "glob": {"type": ["string", "null"], "minLength": 1,
                     "description": "only files matching this glob, e.g. *.py"},
            "case_insensitive": {"type": "boolean"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def __init__(self, match_seconds: float = MATCH_SECONDS) -> None:
        self.match_seconds = match_seconds  # the Budget's slow-match seconds (a test gives less)

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        scope = scope_of(context)
        budget = Budget(self.match_seconds)
        pattern, case_insensitive = arguments["pattern"], arguments.get("case_insensitive", False)
        try:
            wanted = _file_filter(arguments.get("glob"), budget)
            root = _root(scope, arguments)
        except (BadPattern, PathRefused) as exc:
            return ToolResult.failure(str(exc))
        walk = Walk(root, scope, budget=budget)

        def run() -> Search:
            # The stat here, not on the event loop (a hung mount would hold every session).
            try:
                mode = os.stat(root).st_mode
            except (OSError, ValueError):
                raise BadArguments(f"{scope.shown(root)} does not exist") from None
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):  # a FIFO would block the read, a device never end
                raise BadArguments(f"{scope.shown(root)} is {file_kind(mode)}, not a regular file or a directory; "
                                   "grep searches those only")
            # Compiled here, not on the event loop: re's parser is Python, and a long pattern takes a while.
            search = Search(Matcher(compile_grep(pattern, case_insensitive), budget, "grep pattern", pattern), scope)
            if stat.S_ISDIR(mode):
                search.run((path, real) for path, real in walk.files() if wanted(os.path.relpath(path, root)))
            else:
                search.run(iter([(root, root)]))
            return search

        try:
            search = await _in_worker(budget, run)
        except BadArguments as exc:  # the pattern did not compile, or the path is nothing grep reads
            return ToolResult.failure(str(exc))
        except TooSlow as exc:
            return ToolResult.failure(exc.explain(scope.shown))
        return search.result(pattern, scope.shown(root), _stopped_note(walk))


def _file_filter(pattern: str | None, budget: Budget) -> Callable[[str], bool]:
    """Which relative paths grep searches, by its ``glob`` argument."""
    if pattern is None:
        return lambda _: True
    matcher = Matcher(glob_regex(pattern), budget, "glob pattern", pattern)
    if "/" in pattern:
        return lambda relative: matcher.match(relative) is not None
    return lambda relative: matcher.match(os.path.basename(relative)) is not None


class Search:
    """The matches of one grep, bounded as they are found; every match is counted."""

    def __init__(self, matcher: Matcher, scope: Scope) -> None:
        self.matcher = matcher
        self.scope = scope
        self.lines: list[str] = []
        self.chars = 0
        self.locations: list[dict[str, Any]] = []
        self.matches = 0
        self.files_matched = 0
        self.shown_files: set[str] = set()
        self.binary = 0
        self.large = 0

    def run(self, files: Any) -> None:
        for path, real in files:
            try:
                if os.path.getsize(real) > MAX_GREP_FILE_BYTES:
                    self.large += 1
                    continue
                with open(open_beneath(real), "rb") as f:  # no symlink swapped in since the walk
                    data = f.read(MAX_GREP_FILE_BYTES + 1)
            except (OSError, ValueError, FileAccessError):  # vanished, unreadable or swapped since the walk
                continue
            if is_binary(data):
                self.binary += 1
                continue
            self.search(path, real, data.decode("utf-8", errors="replace"))

    def search(self, path: str, real: str, text: str) -> None:
        shown = self.scope.shown(path)
        found = False
        search = self.matcher.search
        for number, line in enumerate(split_lines(text), 1):
            try:
                if search(line) is None:
                    continue
            except TooSlow as exc:
                exc.at = f"{shown}:{number}"
                raise
            found = True
            self.matches += 1
            entry = f"{shown}:{number}:{cut_line(line.removesuffix(chr(13)), MAX_MATCH_CHARS)}"
            if len(self.lines) < MAX_MATCHES and self.chars + len(entry) <= MAX_OUTPUT_CHARS:
                self.lines.append(entry)
                self.chars += len(entry) + 1
                self.shown_files.add(shown)
                if len(self.locations) < MAX_LOCATIONS:
                    self.locations.append(location(real, number))
        self.files_matched += found

    def result(self, pattern: str, root: str, notes: list[str]) -> ToolResult:
        left = self.matches - len(self.lines)
        head: list[str] = []
        if left:
            head.append(f"[{plural(left, 'more matching line')} not shown ({plural(self.files_matched, 'file')} "
                        f"matched in all); narrow the pattern, glob or path]")
        skipped = []
        if self.binary:
            skipped.append(plural(self.binary, "binary file"))
        if self.large:
            skipped.append(f"{plural(self.large, 'file')} over {MAX_GREP_FILE_BYTES // (1024 * 1024)} MiB")
        if skipped:
            head.append(f"[skipped {' and '.join(skipped)}]")
        text = "\n".join(self.lines) if self.lines else f"No matches for {pattern!r} under {root}."
        text += "".join("\n" + n for n in head + notes)
        return done(text, display={"matches": self.matches, "files": self.files_matched},
                    locations=self.locations)


__all__ = ["GlobTool", "GrepTool", "MAX_FILES", "MAX_MATCHES", "MAX_REGEX_SIZE", "Search", "compile_grep"]
