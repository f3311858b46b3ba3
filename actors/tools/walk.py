"""Walking a tree for ``glob`` and ``grep``: ``.gitignore`` rules, bounds, glob patterns.

Rules:

* **Order.** Directories are read in name order, depth first, so the same
  tree always walks the same way.
* **Skipped always**: every ``.git`` entry (a repository's directory, or a
  worktree's ``.git`` file), symlinked directories (never followed), the
  daemon's hidden paths (:meth:`.paths.Scope.allows`), and a symlinked file
  whose target lies where the tools may not look.
* **``.gitignore``** as git reads it (the patterns are pathspec's
  ``GitIgnoreSpec``, git's own wildmatch rules): each directory's
  ``.gitignore`` applies below it, a deeper file's patterns win over a
  shallower one's (``!keep.log`` re-includes), and an ignored directory is not
  entered, so nothing under it can be re-included. Above the walk's root the
  ``.gitignore`` files of its parents apply too, up to the repository's top
  (the nearest directory with a ``.git``), whose ``.git/info/exclude`` is read
  as well; outside a repository, up to the session's cwd. Git's global
  excludes file is not read. A ``.gitignore`` is honoured in a directory that
  is not a git repository too.
* **Bounded**: at most :data:`MAX_ENTRIES` directory entries are looked at;
  past that the walk stops and says so (``Walk.stopped``).
* **Glob patterns** (:func:`glob_regex`): ``*`` and ``?`` within one path
  segment, ``[abc]``/``[!abc]`` classes, ``**`` as a whole segment for any
  number of directories (none included), ``{a,b}`` alternatives. As in a
  shell, wildcards do not match a name's leading dot (``**/*.py`` skips
  ``.venv/``; ``.github/**`` names it). A pattern whose regular expression
  would pass :data:`MAX_GLOB_REGEX_CHARS` characters is refused.
* **Hostile patterns.** A glob or ``.gitignore`` pattern comes from the model
  (which can write a ``.gitignore`` too), and Python's ``re`` holds the GIL
  while it backtracks: ``*a*a*a*a*a*a*a*a*b`` over a long name froze the whole
  daemon, cancelling did not stop it. So every pattern is compiled with the
  ``regex`` package and matched through a :class:`Matcher`: the GIL released
  (``concurrent``), each match given what is left of the call's
  :class:`Budget` as its timeout. A match over :data:`SLOW_MATCH_SECONDS`
  counts against :data:`MATCH_SECONDS` for the call (a hostile pattern shows
  as slow matches, a big tree as many fast ones), and every match against
  :data:`ALL_MATCHES_SECONDS`; past either the call stops with
  :class:`TooSlow`, which names the pattern, where it came from and the limit.
  (``regex`` does not backtrack exponentially through the shapes glob and
  ``.gitignore`` patterns make: the slowest of those tried took 0.3 s, on a
  4,000-character path; the budget bounds them anyway.) A cancelled call's
  worker stops at its next match. ``.gitignore`` lines are turned into regular
  expressions by pathspec (``pattern_to_regex`` of its git pattern class,
  git's wildmatch rules) and compiled the same way; a line over
  :data:`MAX_GITIGNORE_LINE` characters, or one git would reject (``!`` alone,
  a dangling ``\\``), is skipped, as git skips what it cannot parse.
* **Bounded ``.gitignore`` files.** Of each file at most
  :data:`MAX_GITIGNORE_BYTES` are read and its first :data:`MAX_GITIGNORE_PATTERNS`
  patterns used; the rest is skipped, and the walk says so (``Walk.notes``).
  Compiling them is charged to the call's :class:`Budget` (:class:`TooSlow`
  when it runs out) and stops when the call is abandoned (:class:`Abandoned`),
  as a match does: a cancelled call does not go on compiling a huge file. A
  ``.gitignore`` that is not a regular file (a named pipe, a device) gives no
  rules: it is never read.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import regex
from pathspec import GitIgnoreSpec

from .access import NotRegularFile, open_regular
from .paths import Scope

# pathspec 1.x matches through a backend: "simple" is its own loop calling each pattern's ``search`` (re2 or
# hyperscan, when installed, would compile the regular expressions again themselves). 0.12 has only that loop,
# calling each pattern's ``match``.
try:
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern as GitPattern
    SPEC_OPTIONS: dict[str, Any] = {"backend": "simple"}
except ImportError:  # pathspec 0.12
    from pathspec.patterns.gitwildmatch import GitWildMatchPattern as GitPattern
    SPEC_OPTIONS = {}

MAX_ENTRIES = 100_000
MAX_BRACE_EXPANSIONS = 64
MAX_GLOB_REGEX_CHARS = 20_000  # compiling holds the GIL: a pattern's brace expansions stay small
MAX_GITIGNORE_LINE = 4096  # no path is longer (PATH_MAX)
MAX_GITIGNORE_BYTES = 256 * 1024  # read of one .gitignore (or info/exclude); the rest is skipped
MAX_GITIGNORE_PATTERNS = 5000  # patterns used of one such file; the rest are skipped
MATCH_SECONDS = 5.0  # one call's slow matches, in all
SLOW_MATCH_SECONDS = 0.001  # a match that takes longer is slow (a hostile pattern's are; a grep line's take µs)
ALL_MATCHES_SECONDS = 60.0  # one call's matches, every one, in all


# ----------------------------------------------------------------- bounded matching


class TooSlow(Exception):
    """One call's regular expressions used up its :class:`Budget`; :meth:`explain` is the failure for the model."""

    def __init__(self, what: str, pattern: str, at: str, limit: str, source: str | None = None) -> None:
        super().__init__(f"{what} {pattern!r} took longer than {limit}")
        self.what = what  # "grep pattern", "glob pattern", ".gitignore pattern"
        self.pattern = pattern
        self.at = at  # what it was matching when the budget ran out, as the model sees it
        self.limit = limit
        self.source = source  # the file the pattern came from (a .gitignore), if not the call

    def explain(self, shown: Callable[[str], str]) -> str:
        where = f" (in {shown(self.source)})" if self.source is not None else ""
        advice = "simplify that pattern or remove it" if self.source is not None else "simplify the pattern"
        return (f"{self.what} {self.pattern!r}{where} took longer than {self.limit}, at {self.at}; "
                f"nothing else was searched: {advice}")


class Abandoned(Exception):
    """The call that owned the budget was cancelled: its worker thread stops here (no one reads its result)."""


class Budget:
    """The time one ``glob`` or ``grep`` call may spend matching, shared by its pattern and the ``.gitignore`` rules."""

    def __init__(self, slow_seconds: float = MATCH_SECONDS, all_seconds: float = ALL_MATCHES_SECONDS) -> None:
        self.slow_seconds = slow_seconds
        self.all_seconds = all_seconds
        self.slow = 0.0  # spent in slow matches
        self.spent = 0.0  # spent in every match
        self.abandoned = False

    def abandon(self) -> None:
        """Stop the worker at its next match (set from the event loop when the call is cancelled)."""
        self.abandoned = True

    def left(self) -> float:
        return min(self.slow_seconds - self.slow, self.all_seconds - self.spent)

    def limit(self) -> str:
        """The rule that ran out, for :class:`TooSlow`."""
        if self.all_seconds - self.spent <= self.slow_seconds - self.slow:
            return f"{self.all_seconds:g} s to match in all (one call's limit, for all its matches)"
        return (f"{self.slow_seconds:g} s to match (one call's limit, for its matches over "
                f"{SLOW_MATCH_SECONDS * 1000:g} ms each)")


class Matcher:
    """A pattern compiled by ``regex``, matched with the GIL released and what is left of ``budget`` as its
    timeout. ``search``/``match`` take one text (as pathspec calls a compiled pattern's ``search``)."""

    __slots__ = ("compiled", "budget", "what", "pattern", "source")

    def __init__(self, compiled: Any, budget: Budget, what: str, pattern: str, source: str | None = None) -> None:
        self.compiled = compiled
        self.budget = budget
        self.what = what
        self.pattern = pattern
        self.source = source

    def search(self, text: str) -> Any:
        return self._run(self.compiled.search, text)

    def match(self, text: str) -> Any:
        return self._run(self.compiled.match, text)

    def _run(self, method: Callable[..., Any], text: str) -> Any:
        budget = self.budget
        if budget.abandoned:
            raise Abandoned
        left = budget.left()
        started = time.perf_counter()
        try:
            if left <= 0:
                raise TimeoutError
            return method(text, concurrent=True, timeout=left)
        except TimeoutError:
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise TooSlow(self.what, self.pattern, repr(shown), budget.limit(), self.source) from None
        finally:
            elapsed = time.perf_counter() - started
            budget.spent += elapsed
            if elapsed > SLOW_MATCH_SECONDS:
                budget.slow += elapsed


# ----------------------------------------------------------------- .gitignore


def _spec(path: str, budget: Budget, cut: list[str] | None = None) -> GitIgnoreSpec | None:
    """The rules of one ``.gitignore`` (bounded: see the module's rules); a file cut short is added to ``cut``."""
    try:
        # A regular file only: a .gitignore the model made a FIFO would block the walk's thread for good.
        with open(open_regular(path, follow=True), "rb") as f:
            data = f.read(MAX_GITIGNORE_BYTES + 1)
    except (OSError, NotRegularFile):  # absent, unreadable, a pipe or a device: no rules from it
        return None
    truncated = len(data) > MAX_GITIGNORE_BYTES
    if truncated:  # up to the last whole line read
        data = data[:MAX_GITIGNORE_BYTES]
        data = data[:data.rfind(b"\n") + 1]
    lines = data.decode("utf-8", errors="replace").splitlines()
    patterns = []
    for number, line in enumerate(lines, 1):
        if budget.abandoned:  # the call was cancelled: no one reads what is compiled
            raise Abandoned
        if len(line) > MAX_GITIGNORE_LINE or not line.strip() or line.startswith("#"):
            continue
        if len(patterns) >= MAX_GITIGNORE_PATTERNS:
            truncated = True
            break
        started = time.perf_counter()
        try:
            source, include = GitPattern.pattern_to_regex(line)
            if include is None:  # blank, a comment, or one git discards
                continue
            compiled = regex.compile(source)
        except (ValueError, regex.error):  # GitIgnorePatternError among them: one git cannot parse either, skipped
            continue
        finally:  # compiling holds the GIL: it is charged to the call's budget as matching is
            elapsed = time.perf_counter() - started
            budget.spent += elapsed
            if elapsed > SLOW_MATCH_SECONDS:
                budget.slow += elapsed
        if budget.left() < 0:
            raise TooSlow(".gitignore pattern", line.strip(), f"line {number}", budget.limit(), source=path)
        matcher = Matcher(compiled, budget, ".gitignore pattern", line.strip(), source=path)
        patterns.append(GitPattern(matcher, include))
    if truncated and cut is not None:
        cut.append(path)
    return GitIgnoreSpec(patterns, **SPEC_OPTIONS) if patterns else None


@attrs.frozen
class Ignores:
    """The ``.gitignore`` rules in force in one directory: ``(base, spec)`` layers, outermost first, matched
    under ``budget``."""

    layers: tuple[tuple[str, GitIgnoreSpec], ...] = ()
    budget: Budget = attrs.field(factory=Budget, eq=False)
    cut: list[str] = attrs.field(factory=list, eq=False)  # the files read only in part (their first patterns)

    def ignored(self, path: str, is_dir: bool) -> bool:
        for base, spec in reversed(self.layers):  # the deepest file that has an opinion decides
            relative = os.path.relpath(path, base) + ("/" if is_dir else "")
            verdict = spec.check_file(relative).include
            if verdict is not None:
                return verdict
        return False

    def entering(self, directory: str) -> Ignores:
        spec = _spec(os.path.join(directory, ".gitignore"), self.budget, self.cut)
        return self if spec is None else Ignores((*self.layers, (directory, spec)), self.budget, self.cut)


def ignores_above(root: str, scope: Scope, budget: Budget | None = None, cut: list[str] | None = None) -> Ignores:
    """The rules in force at ``root`` from its parents (and its own ``.gitignore``); a file read only in part
    is added to ``cut``."""
    chain: list[str] = []
    top: str | None = None
    directory = root
    while True:
        chain.append(directory)
        if os.path.exists(os.path.join(directory, ".git")):
            top = directory
            break
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    if top is None:  # no repository: the parents up to the session's cwd only
        chain = [d for d in chain if scope.inside(d)] or [root]
    budget = budget or Budget()
    cut = cut if cut is not None else []
    layers: list[tuple[str, GitIgnoreSpec]] = []
    if top is not None:
        exclude = _spec(os.path.join(top, ".git", "info", "exclude"), budget, cut)
        if exclude is not None:
            layers.append((top, exclude))
    ignores = Ignores(tuple(layers), budget, cut)
    for directory in reversed(chain):
        ignores = ignores.entering(directory)
    return ignores


# ----------------------------------------------------------------- the walk


@attrs.define
class Walk:
    """One bounded walk under ``root``; iterate :meth:`files` for the files it may use. Its ``.gitignore``
    rules are matched under ``budget`` (the call's: :class:`TooSlow` from :meth:`files` when it runs out)."""

    root: str
    scope: Scope
    limit: int = MAX_ENTRIES
    entries: int = 0
    stopped: bool = False  # the entry limit was reached before the tree ended
    budget: Budget = attrs.field(factory=Budget)
    cut: list[str] = attrs.field(factory=list)  # .gitignore files read only in part

    def files(self) -> Iterator[tuple[str, str]]:
        """``(path, real)`` of each usable file: the path as walked (under ``root``), and its target."""
        yield from self._walk(self.root, ignores_above(self.root, self.scope, self.budget, self.cut))

    @property
    def notes(self) -> list[str]:
        """What the walk has to say besides its files: the limits it reached."""
        return [f"[{self.scope.shown(path)} is too long: only its first {MAX_GITIGNORE_BYTES // 1024} KiB and "
                f"{MAX_GITIGNORE_PATTERNS:,} patterns are used, the rest of it was skipped]"
                for path in dict.fromkeys(self.cut)]

    def _walk(self, directory: str, ignores: Ignores) -> Iterator[tuple[str, str]]:
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:  # unreadable, vanished: skipped
            return
        for entry in entries:
            self.entries += 1
            if self.entries > self.limit:
                self.stopped = True
                return
            if entry.name == ".git":
                continue
            path = entry.path
            try:
                is_link = entry.is_symlink()
                is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if self.scope.is_hidden(path) or ignores.ignored(path, is_dir):
                continue
            if is_dir:
                yield from self._walk(path, ignores.entering(path))
                if self.stopped:
                    return
                continue
            real = os.path.realpath(path) if is_link else path
            if is_link and (not os.path.isfile(real) or not self.scope.allows(real)):
                continue  # a link to a directory, to nothing, or out of bounds
            if is_link or entry.is_file(follow_symlinks=False):
                yield path, real


# ----------------------------------------------------------------- glob patterns


class BadPattern(ValueError):
    """A glob pattern that cannot be used; the message is for the model."""


def expand_braces(pattern: str) -> list[str]:
    """``a{b,c}d`` as ``[abd, acd]`` (nested too), at most :data:`MAX_BRACE_EXPANSIONS` patterns."""
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth = 0
    parts: list[str] = []
    last = start + 1
    for i in range(start, len(pattern)):
        c = pattern[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                parts.append(pattern[last:i])
                head, tail = pattern[:start], pattern[i + 1:]
                if len(parts) == 1:  # "{x}" is no alternative: keep the braces as text
                    return [head + "{" + parts[0] + "}" + t for t in expand_braces(tail)]
                out = [head + p for part in parts for p in expand_braces(part + tail)]
                if len(out) > MAX_BRACE_EXPANSIONS:
                    raise BadPattern(f"{pattern!r} expands to more than {MAX_BRACE_EXPANSIONS} patterns")
                return out
        elif c == "," and depth == 1:
            parts.append(pattern[last:i])
            last = i + 1
    return [pattern]  # an unclosed brace is text


_NAME = "[^/.][^/]*"  # one path segment that is not hidden (no leading dot)


def _segment(segment: str) -> str:
    # As in a shell, a wildcard does not match a leading dot: ``*`` skips ``.venv``, ``.*`` names it.
    out, i = ["(?!\\.)"] if segment[:1] in ("*", "?", "[") else [], 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = segment.find("]", i + 2 if segment[i + 1:i + 2] in ("!", "^") else i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = segment[i + 1:end].replace("\\", "\\\\").replace("[", "\\[")  # "[" is text: no nested set
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:] + "/"  # a negated class still stays within the segment
                out.append("[" + body + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def glob_regex(pattern: str) -> Any:
    """A regular expression (compiled by ``regex``: match it through a :class:`Matcher`) matching the relative
    paths ``pattern`` names."""
    if not pattern or pattern.startswith("/") or ".." in pattern.split("/"):
        raise BadPattern(f"{pattern!r} must be a relative pattern without '..'; give the directory as path")
    alternatives = []
    for one in expand_braces(pattern.removeprefix("./")):
        segments = one.split("/")
        source = ""
        for n, segment in enumerate(segments):
            last = n == len(segments) - 1
            if segment == "**":
                source += f"{_NAME}(?:/{_NAME})*" if last else f"(?:{_NAME}/)*"
            else:
                source += _segment(segment) + ("" if last else "/")
        alternatives.append(source)
    source = "(?:" + "|".join(alternatives) + r")\Z"
    if len(source) > MAX_GLOB_REGEX_CHARS:
        raise BadPattern(f"{pattern!r} is too long: its regular expression comes to more than "
                         f"{MAX_GLOB_REGEX_CHARS:,} characters")
    try:
        return regex.compile(source)
    except regex.error as exc:
        raise BadPattern(f"{pattern!r} is not a valid glob pattern: {exc}") from None


__all__ = ["ALL_MATCHES_SECONDS", "Abandoned", "BadPattern", "Budget", "Ignores", "MATCH_SECONDS", "MAX_ENTRIES",
           "MAX_GITIGNORE_BYTES", "MAX_GITIGNORE_PATTERNS",
           "Matcher", "SLOW_MATCH_SECONDS", "TooSlow", "Walk", "expand_braces", "glob_regex", "ignores_above"]
