"""Where the file tools may look: paths resolved against the session's cwd, and what is refused.

Rules (the same for ``read_file``, ``write_file``, ``edit``, ``glob`` and ``grep``):

* A relative path is taken from the session's cwd; ``~`` is the daemon user's
  home. Every path is resolved with its symlinks (``os.path.realpath``) before
  it is checked, so a symlink inside the cwd that points out of it counts as
  outside.
* By default a path must lie under the cwd: outside it, reads and searches are
  refused as writes are. The setting ``tools.allowPathsOutsideCwd`` lifts
  that; writes outside the cwd then still go through the permission flow like
  any write (so ``default`` mode asks, ``auto-edit``/``yolo`` do not).
* The daemon's state directory (token file, transcripts, subagent configs), its
  settings file and the credentials in the user's home that the sandbox hides
  (``~/.ssh``, ``~/.netrc``, shell rc files: ``HOME_SECRETS``) are never read,
  written or listed, wherever they lie — the sandbox hides them from commands,
  and these tools run in the daemon itself. A search skips them silently.
* A walk never descends into ``.git`` and never follows a symlinked directory.
* Writes that can make code run later ask in every approval mode, ``yolo``
  included (:meth:`Scope.ask_always`): anything under a ``.git`` directory
  (``.git/config`` and ``.git/hooks`` run commands on the user's next ``git``),
  and any file a configured hook command names (hooks run unsandboxed).
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
    """The session's cwd, whether paths outside it are allowed, and the paths never touched."""

    cwd: str = attrs.field(converter=os.path.realpath)
    outside_allowed: bool = False
    hidden: tuple[str, ...] = ()  # resolved: the state directory, the settings file
    protected: tuple[str, ...] = ()  # resolved: files a configured hook command names

    def resolve(self, raw: Any, *, name: str = "path") -> str:
        """``raw`` (an argument) as a checked absolute path, or :class:`PathRefused`."""
        if not isinstance(raw, str) or not raw.strip():
            raise PathRefused(f"{name} must be a non-empty string")
        if "\0" in raw:
            raise PathRefused(f"{name} must not contain a NUL character")
        real = os.path.realpath(os.path.join(self.cwd, os.path.expanduser(raw)))
        if self.is_hidden(real):
            raise PathRefused(f"{raw} is the daemon's own state; file tools never touch it")
        if not self.outside_allowed and not _inside(real, self.cwd):
            shown = raw if raw == real else f"{raw} ({real})"
            raise PathRefused(f"{shown} lies outside the session's working directory {self.cwd}; "
                              f"use a path under it")
        return real

    def ask_always(self, real: str) -> str | None:
        """Why a write to ``real`` is asked for in every approval mode, or ``None`` (the mode decides)."""
        if GIT_DIR in real.split(os.sep):
            return "it lies under .git/, where git finds commands to run (config, hooks)"
        if real in self.protected:
            return "a configured hook command names it, and hooks run outside the sandbox"
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
        return any(_inside(real, h) for h in self.hidden)

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
    managers' tokens, ...: :mod:`actors.process.home_secrets`), whether they exist yet or not."""
    from ..process.home_secrets import secret_paths

    return secret_paths()


def scope_of(context: Any) -> Scope:
    """The :class:`Scope` of a tool call: its cwd, and what the daemon's runtime says (when there is one)."""
    services = context.services
    return scope_for(context.cwd, getattr(services, "runtime", None), getattr(services, "hooks", None))


def scope_for(cwd: str, runtime: Any = None, hooks: Any = None) -> Scope:
    """The :class:`Scope` of ``cwd`` under a daemon's ``runtime`` and a session's ``hooks`` (either may be None)."""
    from ..session.hooks import hook_files

    hidden = home_secrets()
    outside = False
    if runtime is not None:
        hidden += [p for p in (runtime.state_dir, runtime.settings.path) if p is not None]
        outside = runtime.settings.paths_outside_cwd
        if hooks is None:
            hooks = runtime.settings.hook_config
    protected = hook_files(hooks, cwd) if hooks is not None else ()
    return Scope(cwd, outside, tuple(os.path.realpath(p) for p in hidden), protected)


def location(real: str, line: int | None = None) -> dict[str, Any]:
    """An ACP ``ToolCallLocation``: an absolute path, and a 1-based line when known."""
    return {"path": real} if line is None else {"path": real, "line": line}


__all__ = ["GIT_DIR", "PathRefused", "Scope", "location", "scope_for", "scope_of"]
