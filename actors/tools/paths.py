"""Where the file tools may look: paths resolved against the session's cwd, and what is refused.

Rules (the same for ``read_file``, ``write_file``, ``edit``, ``glob`` and ``grep``):

* A relative path is taken from the session's cwd; ``~`` is the daemon user's
  home. Every path is resolved with its symlinks (``os.path.realpath``) before
  it is checked, so a symlink inside the cwd that points out of it counts as
  outside.
* The session's cwd must still be where it was: one that no longer resolves
  to itself (another session moved it, or put a symlink in its place) is
  refused, naming what happened, rather than followed.
* By default a path must lie under the cwd: outside it, reads and searches are
  refused as writes are. The setting ``tools.allowPathsOutsideCwd`` lifts
  that for reads and searches; a write outside the cwd is then asked for in
  every approval mode, ``yolo`` included (``~/.gitconfig``, ``~/.local/bin``,
  shell rc files run code later, and no list names them all).
* The daemon's state directory (token file, transcripts, subagent configs), its
  settings file and the credentials in the user's home that the sandbox hides
  (``~/.ssh``, ``~/.netrc``, shell rc files: ``HOME_SECRETS``) are never read,
  written or listed, wherever they lie — the sandbox hides them from commands,
  and these tools run in the daemon itself. A search skips them silently. They
  are recognised by path, and also by device and inode: as they exist when the
  call starts, and the state directory and settings file as last seen in their
  place, so one reached under another name (a parent renamed, a bind mount, a
  hard link) is refused all the same.
* A walk never descends into ``.git`` and never follows a symlinked directory.
* Writes that can make code run later ask in every approval mode, ``yolo``
  included (:meth:`Scope.ask_always`): anything under a ``.git`` directory
  (``.git/config`` and ``.git/hooks`` run commands on the user's next ``git``),
  every path the sandbox makes read-only for git's sake
  (:func:`actors.process.sandbox.git_protections`: a git directory a ``.git``
  file names, ``core.hooksPath``, ``include.path`` files, the same of the
  repositories nested in the cwd), any file a configured hook command names
  (hooks run unsandboxed), and any path outside the cwd.
* Files the daemon itself writes on the model's or a subagent's behalf (the
  report files of ``agent``, ``goal_reached`` and ``need_help``) follow one
  stricter rule (:meth:`Scope.resolve_report`): under the session's cwd
  whatever ``tools.allowPathsOutsideCwd`` says, no component starting with
  ``.`` (the state directory, settings, ``.git``, shell rc files), none of the
  paths above.

The check happens on the resolved path; the local backend then opens it
without following any symlink (:func:`.access.open_beneath`), so a link
swapped in between the check and the access is refused, not followed.
"""

from __future__ import annotations

import os
from typing import Any

import attrs


GIT_DIR = ".git"


class PathRefused(ValueError):
    """A path the tools will not use; the message is for the model."""


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@attrs.frozen
class Scope:
    """The session's cwd, whether paths outside it are allowed, and the paths never touched.

    ``cwd`` is kept as given (absolute; a session's is resolved when it is set) and checked to
    still resolve to itself at every :meth:`resolve`. A Scope lives for one tool call: the hidden
    paths that exist are looked up once, at its creation, and what a walk learns is kept.
    """

    cwd: str = attrs.field(converter=os.path.abspath)
    outside_allowed: bool = False
    hidden: tuple[str, ...] = ()  # resolved: the state directory, the settings file, the home's credentials
    protected: tuple[str, ...] = ()  # resolved: files a configured hook command names
    credentials: frozenset[str] = frozenset()  # which of ``hidden`` are credentials in the home (for messages)
    # The daemon's own hidden paths (not the credentials) as the daemon saw them before, path -> (device,
    # inode): one moved away since is still known by its identity (scope_for keeps one for the process).
    remembered: dict[str, tuple[int, int]] = attrs.field(factory=dict, eq=False, repr=False)
    # (device, inode) -> hidden path, of the hidden paths that exist (or were remembered); and, per path seen,
    # the hidden path it is or lies under by device and inode (None: none)
    _hidden_ids: dict[tuple[int, int], str] = attrs.field(init=False, eq=False, repr=False)
    _seen: dict[str, str | None] = attrs.field(init=False, eq=False, repr=False, factory=dict)

    @_hidden_ids.default
    def _stat_hidden(self) -> dict[tuple[int, int], str]:
        ids: dict[tuple[int, int], str] = {}
        for path in self.hidden:
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                if path in self.remembered:  # gone from its place: renamed, its parent renamed
                    ids.setdefault(self.remembered[path], path)
                continue
            identity = (st.st_dev, st.st_ino)
            ids.setdefault(identity, path)
            if path not in self.credentials:
                self.remembered[path] = identity
        return ids

    def resolve(self, raw: Any, *, name: str = "path") -> str:
        """``raw`` (an argument) as a checked absolute path, or :class:`PathRefused`."""
        if not isinstance(raw, str) or not raw.strip():
            raise PathRefused(f"{name} must be a non-empty string")
        if "\0" in raw:
            raise PathRefused(f"{name} must not contain a NUL character")
        self.check_cwd()
        real = os.path.realpath(os.path.join(self.cwd, os.path.expanduser(raw)))
        hiding = self.hiding(real)
        if hiding is not None:
            if hiding in self.credentials:
                raise PathRefused(f"{raw} is a credential (in the home, or a file only root may read), hidden "
                                  f"from the tools as from the sandbox's commands; file tools never touch it")
            raise PathRefused(f"{raw} is the daemon's own state; file tools never touch it")
        if not self.outside_allowed and not _inside(real, self.cwd):
            shown = raw if raw == real else f"{raw} ({real})"
            raise PathRefused(f"{shown} lies outside the session's working directory {self.cwd}; "
                              f"use a path under it")
        return real

    def check_cwd(self) -> None:
        """:class:`PathRefused` when the cwd no longer resolves to itself (moved, or a symlink put in its place)."""
        real = os.path.realpath(self.cwd)
        if real != self.cwd:
            raise PathRefused(f"the session's working directory {self.cwd} was moved or replaced by a symlink "
                              f"since the session started (it now leads to {real}); nothing was done")

    def ask_always(self, real: str) -> str | None:
        """Why a write to ``real`` is asked for in every approval mode, or ``None`` (the mode decides)."""
        if not _inside(real, self.cwd):
            return ("it lies outside the session's working directory: tools.allowPathsOutsideCwd lets the tools "
                    "reach it, and a write there (a dotfile, a script on the PATH) may run code later")
        if GIT_DIR in real.split(os.sep):
            return "it lies under .git/, where git finds commands to run (config, hooks)"
        if real in self.protected:
            return "a configured hook command names it, and hooks run outside the sandbox"
        return self._git_control(real)

    def _git_control(self, real: str) -> str | None:
        """Why ``real`` is one of git's control paths the sandbox makes read-only, or ``None``."""
        from ..process.sandbox import git_protections

        pinned, read_only = git_protections(self.cwd)
        for gitdir in pinned:
            if _inside(real, os.path.realpath(gitdir)):
                return (f"it lies in the git directory {self.shown(os.path.realpath(gitdir))}, where git finds "
                        f"commands to run (config, hooks)")
        for path in read_only:
            if _inside(real, os.path.realpath(path.rstrip("/") or "/")):
                return ("git runs code from it (a git directory's config or hooks, a .git file, core.hooksPath "
                        "or an included config file)")
        return None

    def resolve_report(self, raw: Any, *, name: str = "report_file") -> str:
        """``raw`` as a report file the daemon may append to, or :class:`PathRefused` naming the rule.

        The rule: under the cwd (symlinks resolved), never a hidden path (no component starting
        with ``.``, nor the daemon's state or a home secret), never under ``.git/``, never a file
        a hook command names.
        """
        rule = (f"{name} {raw!r} is refused: the daemon writes reports only under the working directory "
                f"{self.cwd}, never in a hidden path (a name starting with '.'), under .git/ or in a "
                f"file a hook runs")
        try:
            real = self.resolve(raw, name=name)
        except PathRefused as exc:
            raise PathRefused(f"{rule} ({exc})") from None
        if not _inside(real, self.cwd) or real == self.cwd:
            raise PathRefused(rule)
        if any(part.startswith(".") for part in os.path.relpath(real, self.cwd).split(os.sep)):
            raise PathRefused(rule)
        if self.ask_always(real) is not None:
            raise PathRefused(rule)
        return real

    def is_hidden(self, real: str) -> bool:
        return self.hiding(real) is not None

    def hiding(self, path: str) -> str | None:
        """The hidden path ``path`` is or lies under, or ``None``: by path, then by device and inode."""
        for hidden in self.hidden:
            if _inside(path, hidden):
                return hidden
        if not self._hidden_ids:
            return None
        return self._hidden_by_identity(path)

    def _hidden_by_identity(self, path: str) -> str | None:
        # ``path`` or a directory above it with the device and inode of a hidden path: one renamed, or reached
        # by another name (a bind mount, a hard link). Each directory is looked at once per Scope.
        chain: list[str] = []
        found: str | None = None
        current = path
        while True:
            if current in self._seen:
                found = self._seen[current]
                break
            chain.append(current)
            try:
                st = os.stat(current)
            except (OSError, ValueError):
                st = None
            if st is not None and (hit := self._hidden_ids.get((st.st_dev, st.st_ino))) is not None:
                found = hit
                break
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for seen in chain:
            self._seen[seen] = found
        return found

    def allows(self, real: str) -> bool:
        """Whether a resolved path met during a walk may be used."""
        return not self.is_hidden(real) and (self.outside_allowed or _inside(real, self.cwd))

    def inside(self, real: str) -> bool:
        return _inside(real, self.cwd)

    def shown(self, real: str) -> str:
        """How a path is shown to the model: relative to the cwd when under it, else absolute."""
        if real == self.cwd:
            return "."
        return os.path.relpath(real, self.cwd) if _inside(real, self.cwd) else real


def home_secrets() -> list[str]:
    """The credentials the sandbox hides from commands (``~/.ssh``, ``~/.netrc``, agents' and package
    managers' tokens, ...: :mod:`actors.process.home_secrets`), whether they exist yet or not; for a daemon
    run as root, the system's files only root may read too (``/etc/shadow``, host keys: a root daemon's file
    tools read as uid 0 as its commands do, which ``allowPathsOutsideCwd`` lets them reach)."""
    from ..process.home_secrets import secret_paths, system_secret_paths

    return [*secret_paths(), *system_secret_paths()]


def scope_of(context: Any) -> Scope:
    """The :class:`Scope` of a tool call: its cwd, and what the daemon's runtime says (when there is one)."""
    services = context.services
    return scope_for(context.cwd, getattr(services, "runtime", None), getattr(services, "hooks", None))


def scope_for(cwd: str, runtime: Any = None, hooks: Any = None) -> Scope:
    """The :class:`Scope` of ``cwd`` under a daemon's ``runtime`` and a session's ``hooks`` (either may be None)."""
    from ..process.home_secrets import homes
    from ..process.root_only import around, root_only_paths
    from ..session.hooks import hook_files

    secrets = [os.path.realpath(p) for p in home_secrets()]
    keep = [os.path.realpath(cwd), *homes()]
    try:  # a root daemon's: what the scan found only root may read, as the sandbox hides it from this cwd
        secrets += around(root_only_paths(), keep)
    except OSError:  # too much to hide around the cwd: the sandbox refuses its commands; the tools keep the cwd
        secrets += [p for p in root_only_paths() if not any(_inside(k, p) or _inside(p, k) for k in keep)]
    state: list[str] = []
    outside = False
    if runtime is not None:
        state = [os.path.realpath(p) for p in (runtime.state_dir, runtime.settings.path) if p is not None]
        outside = runtime.settings.paths_outside_cwd
        if hooks is None:
            hooks = runtime.settings.hook_config
    protected = hook_files(hooks, cwd) if hooks is not None else ()
    if len(_REMEMBERED) > 1024:  # a daemon has two; only a process making many (tests) gets here
        _REMEMBERED.clear()
    return Scope(cwd, outside, tuple(dict.fromkeys([*state, *secrets])), protected,
                 credentials=frozenset(secrets) - frozenset(state), remembered=_REMEMBERED)


# The identity of each daemon's state directory and settings file, path -> (device, inode), as last seen
# where it belongs: one renamed away (its parent renamed) is still refused by its identity.
_REMEMBERED: dict[str, tuple[int, int]] = {}


def location(real: str, line: int | None = None) -> dict[str, Any]:
    """An ACP ``ToolCallLocation``: an absolute path, and a 1-based line when known."""
    return {"path": real} if line is None else {"path": real, "line": line}


__all__ = ["GIT_DIR", "PathRefused", "Scope", "location", "scope_for", "scope_of"]
