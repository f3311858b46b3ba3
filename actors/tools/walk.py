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
  ``.venv/``; ``.github/**`` names it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import attrs
from pathspec import GitIgnoreSpec

from .paths import Scope

MAX_ENTRIES = 100_000
MAX_BRACE_EXPANSIONS = 64


# ----------------------------------------------------------------- .gitignore


def _spec(path: str) -> GitIgnoreSpec | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:  # absent, unreadable: no rules from it
        return None
    spec = GitIgnoreSpec.from_lines(lines)
    return spec if len(spec) else None


@attrs.frozen
class Ignores:
    """The ``.gitignore`` rules in force in one directory: ``(base, spec)`` layers, outermost first."""

    layers: tuple[tuple[str, GitIgnoreSpec], ...] = ()

    def ignored(self, path: str, is_dir: bool) -> bool:
        for base, spec in reversed(self.layers):  # the deepest file that has an opinion decides
            relative = os.path.relpath(path, base) + ("/" if is_dir else "")
            verdict = spec.check_file(relative).include
            if verdict is not None:
                return verdict
        return False

    def entering(self, directory: str) -> Ignores:
        spec = _spec(os.path.join(directory, ".gitignore"))
        return self if spec is None else Ignores((*self.layers, (directory, spec)))


def ignores_above(root: str, scope: Scope) -> Ignores:
    """The rules in force at ``root`` from its parents (and its own ``.gitignore``)."""
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
    layers: list[tuple[str, GitIgnoreSpec]] = []
    if top is not None:
        exclude = _spec(os.path.join(top, ".git", "info", "exclude"))
        if exclude is not None:
            layers.append((top, exclude))
    ignores = Ignores(tuple(layers))
    for directory in reversed(chain):
        ignores = ignores.entering(directory)
    return ignores


# ----------------------------------------------------------------- the walk


@attrs.define
class Walk:
    """One bounded walk under ``root``; iterate :meth:`files` for the files it may use."""

    root: str
    scope: Scope
    limit: int = MAX_ENTRIES
    entries: int = 0
    stopped: bool = False  # the entry limit was reached before the tree ended

    def files(self) -> Iterator[tuple[str, str]]:
        """``(path, real)`` of each usable file: the path as walked (under ``root``), and its target."""
        yield from self._walk(self.root, ignores_above(self.root, self.scope))

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
                body = segment[i + 1:end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:] + "/"  # a negated class still stays within the segment
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A compiled regular expression matching the relative paths ``pattern`` names."""
    if not pattern or pattern.startswith("/") or ".." in pattern.split("/"):
        raise BadPattern(f"{pattern!r} must be a relative pattern without '..'; give the directory as path")
    alternatives = []
    for one in expand_braces(pattern.removeprefix("./")):
        segments = one.split("/")
        regex = ""
        for n, segment in enumerate(segments):
            last = n == len(segments) - 1
            if segment == "**":
                regex += f"{_NAME}(?:/{_NAME})*" if last else f"(?:{_NAME}/)*"
            else:
                regex += _segment(segment) + ("" if last else "/")
        alternatives.append(regex)
    try:
        return re.compile("(?:" + "|".join(alternatives) + r")\Z")
    except re.error as exc:
        raise BadPattern(f"{pattern!r} is not a valid glob pattern: {exc}") from None


__all__ = ["BadPattern", "Ignores", "MAX_ENTRIES", "Walk", "expand_braces", "glob_regex", "ignores_above"]
