"""The sandbox model-run commands run in: bubblewrap on Linux, or none.

Which commands: ``shell`` (foreground and background), ``monitor`` commands
and the ``command`` subagent runner — everything whose command line a model
chose. Hooks are the user's own configuration and run unsandboxed, unless a
hook asks for the sandbox (``sandbox: true`` on the hook).

The ``sandbox`` setting picks the policy at daemon start, either as a mode
string or as ``{"mode": ..., "env": ...}`` (:class:`SandboxSetting`):

    mode      bwrap works here      bwrap missing or broken
    -------   -------------------   --------------------------------------
    auto      Sandbox("bwrap")      Sandbox("off") + reason, logged
    bwrap     Sandbox("bwrap")      SandboxUnavailable: the daemon refuses to start
    off       Sandbox("off")        Sandbox("off")

The environment of a model-run command is an allowlist, sandbox or not
(:meth:`Sandbox.environment`): ``PATH``, ``HOME``, ``LANG``, ``LC_*``,
``TERM``, ``TZ``, ``USER``, ``SHELL`` from the daemon's environment, plus the
setting's ``env`` (names passed through, or literal values), plus the
process markers :mod:`actors.process.markers` adds; nothing else of the
daemon's environment (no ``GITHUB_TOKEN``, no cloud keys). A name the daemon
withholds (:data:`WITHHELD_NAMES`) is refused in ``env`` when the settings
are read.

Inside a bwrap sandbox (see :meth:`Sandbox.wrap`):

- no capability (``--cap-drop ALL``) and, where bwrap can make one, a user
  namespace of its own (``--unshare-user``, probed at start; without one the
  daemon logs why and :meth:`Sandbox.describe` says so): a daemon run as root
  runs commands that cannot ``umount`` what hides a secret, ``mount -o
  remount,rw`` the read-only root or unmount ``/proc``;
- its own PID namespace: no daemon process is in its ``/proc``, and when its
  first process dies (the daemon killed, its process group killed) the kernel
  kills everything in it, ``setsid`` and double-forked children included;
- ``--die-with-parent``: the sandbox is killed when the daemon's Trio thread
  dies (see :mod:`actors.process.spawn` for why that thread);
- no ``--new-session``: every command is already started in a session of its
  own (:func:`actors.process.spawn.spawn_child`), so it has no controlling
  terminal to push input into with ``TIOCSTI``, and ``--dev`` gives it a
  ``/dev`` without the host's terminals; ``--new-session`` would also take
  the command out of bwrap's process group, so the SIGTERM a kill sends the
  group first would reach bwrap alone and the command would get SIGKILL with
  no chance to clean up;
- the whole filesystem read-only, the session's cwd and a private ``/tmp``
  writable (the daemon's own Python stays visible, read-only, when it is
  installed under ``/tmp``: :func:`interpreter_paths_under_tmp`);
- the cwd's git control files that make git run code read-only
  (:func:`git_protections`: ``.git/config``, ``.git/hooks``, ...; the same
  for repositories nested in the cwd, a bounded walk), and the ``.git``
  directory pinned in place so it cannot be renamed away and rebuilt; ``git
  add``, ``commit``, branches keep working. Callers add their own paths with
  ``protect`` (the session: files a hook command names);
- hidden paths (the state directory with transcripts, token file and every
  run's MCP config; the settings file; the credentials in the home,
  :mod:`actors.process.home_secrets`, looked up at every command) replaced by
  an empty directory or an unreadable node, then the few ``expose`` paths (a
  subagent's own MCP config file) bound back read-only at their own path;
- every directory between the cwd and a path mounted under it (hidden,
  read-only or a pinned git directory) pinned too: a mount point cannot be
  renamed (``EBUSY``), so ``mv proj proj2`` cannot carry the mount that hides
  ``proj/state`` away and leave ``proj2/state/token`` readable, nor ``mv
  .claude x`` make room for a new ``.claude/hooks/check.sh``;
- a cwd that no longer resolves to itself is refused (:func:`resolved_cwd`):
  callers pass the session's cwd, resolved when it was set, and one another
  session moved or replaced by a symlink would lead the command elsewhere;
- a cwd at or above the home is refused (:class:`SandboxRefusal`): there the
  command could create files the home does not have yet (``~/.bash_profile``,
  ``~/.ssh/authorized_keys``), which no mount can hide in advance;
- ``/run`` replaced by an empty directory (the user's session bus, ssh and
  gpg agents, ``docker.sock`` live there; DNS keeps working: a
  ``/etc/resolv.conf`` that points into ``/run`` is bound back);
- the network is shared unless ``sandbox.network`` is ``"off"`` (then the
  command gets a network namespace of its own, with only its own loopback):
  a command can reach loopback, where every daemon route but ``/health`` and
  a run's own signal URL needs the bearer token it cannot read. So are
  abstract Unix sockets (off: they are the namespace's own), and a Unix
  socket elsewhere on the (read-only) filesystem can still be connected to:
  the sandbox hides the well-known ones, it does not filter ``connect``;
- the directories of ``sandbox.writable`` bound writable early, right after
  the private ``/tmp``, so every protection above (git control files, pins,
  hidden paths) is mounted on top of them and still holds inside them; an
  entry at or above a home is refused when the settings are read
  (:class:`SandboxForm`). The command's own home (:meth:`Sandbox.with_home`)
  is bound last;
- at most ``sandbox.maxProcesses`` processes (default 1,024; ``0``: none) for
  all the commands of one sandbox home together, and 3/4 of the daemon's memory
  for all its commands together, ``/tmp`` included (:mod:`actors.process.limits`);
- ``/proc/sys`` read-only (:data:`PROC_COVERS`: a root daemon's commands are uid
  0, and a sysctl checks the uid, not a capability), and, for a root daemon,
  the files only root may read hidden: the well-known ones by name
  (:data:`~actors.process.home_secrets.SYSTEM_SECRETS`), the rest by their mode under
  ``/etc``, ``/var`` and the other system directories (:mod:`actors.process.root_only`);
- a disk reserve kept free on every file system a command may write, checked
  at its start and watched while commands run (``sandbox.diskReserve``,
  :mod:`actors.process.disk`);
- a seccomp filter that refuses setuid and setgid bits on files
  (:mod:`actors.process.seccomp`): the host honours them on what a command
  leaves in its cwd.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import attrs

from .. import checked
from ..checked import Invalid, shown
from .home_secrets import HOME_SECRETS, homes, secret_paths, system_secret_paths
from .root_only import around, note_writable, root_only_paths, start_scan
from .seccomp import program, program_path
from .disk import DiskGuard, DiskShortage, ReserveMiB
from .limits import DEFAULT_MAX_PROCESSES, ProcessCount, ProcessLimit, release, resolve_process_limit

SANDBOX_SETTINGS = ("auto", "bwrap", "off")

# What a model-run command inherits from the daemon's environment, sandbox or not (LC_*: the locale is no
# secret, and without it tools fall back to ASCII and to another sort order than the user's).
ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "TERM", "TZ", "USER", "SHELL")
ENV_ALLOWED_PREFIXES = ("LC_",)
# The daemon's own credentials (transport.process_image.SECRET_ENV, actors.background.shell.WITHHELD): never
# passed to a command, so a settings file that asks for one is refused.
WITHHELD_NAMES = frozenset({"TRELLIS_TOKEN", "OPENAI_API_KEY", "TRELLIS_STORE", "TRELLIS_EVENTS"})
# Variables that point a command at a socket outside the sandbox (an agent, a session bus, a display).
SOCKET_VARIABLES = frozenset({
    "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS",
    "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR", "DOCKER_HOST", "PULSE_SERVER",
})
PROBE_TIMEOUT = 10.0
# The kernel's settings under the new /proc, read-only. A daemon run as root runs commands as uid 0 (the user
# namespace maps it to the host's root), and a sysctl's write check is the uid, not a capability: with no
# capability at all, such a command could set kernel.core_pattern to "|<a script in its cwd>", which the kernel
# runs as the host's root, with every capability, at the next crash of any process. bwrap covers
# /proc/sysrq-trigger, /proc/irq and /proc/bus itself, and /proc/sys only when access(W_OK) says it is writable,
# which the directory never is (each sysctl decides for itself), so it is bound read-only here.
PROC_COVERS = ("--ro-bind", "/proc/sys", "/proc/sys")
MODULE_DEPTH = 4  # levels of nested submodules (.git/modules/a/modules/b/...) whose control files are protected
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# (name, value): a literal value, or None for "the daemon's own value, when it has one".
EnvAdditions = tuple[tuple[str, str | None], ...]

__all__ = ["ENV_ALLOWLIST", "HOME_SECRETS", "NO_SANDBOX", "SANDBOX_SETTINGS", "WITHHELD_NAMES", "Sandbox",
           "SandboxRefusal", "SandboxSetting", "SandboxUnavailable", "allowed_environment", "git_protections",
           "log_sandbox", "nested_repositories", "parse_env", "probe", "probe_user_namespace", "resolve_sandbox",
           "resolved_cwd"]

log = logging.getLogger("trellis.sandbox")


class SandboxUnavailable(RuntimeError):
    """``sandbox: "bwrap"`` was required and bubblewrap cannot run here."""


class SandboxRefusal(OSError):
    """A command the sandbox will not start (its cwd lies inside a hidden path, or at or above the home)."""


# ----------------------------------------------------------------- the environment


def allowed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` every model-run command inherits: :data:`ENV_ALLOWLIST` and ``LC_*``."""
    return {k: v for k, v in environ.items() if k in ENV_ALLOWLIST or k.startswith(ENV_ALLOWED_PREFIXES)}


def _variable_name(name: str) -> bool:
    if not _NAME.fullmatch(name):
        raise Invalid(f"{shown(name)} is not a variable name (letters, digits, _; not a digit first)")
    if name in WITHHELD_NAMES:
        raise Invalid(f"{name} is the daemon's own credential; it is never passed to a command")
    return True


EnvName = checked.constrained("EnvName", str, "a variable name", _variable_name,
                              schema={"pattern": "^[A-Za-z_][A-Za-z0-9_]*$", "not": {"enum": sorted(WITHHELD_NAMES)}})
def _no_nul(value: str) -> bool:
    if "\0" in value:
        raise Invalid("must not contain a NUL character")  # no environment can hold one
    return True


EnvValue = checked.constrained("EnvValue", str, "a string", _no_nul, schema={"pattern": "^[^\\u0000]*$"})
# An ``env`` setting (sandbox.env, subagents.runners.command.env): names passed through from the daemon's
# environment, or name -> literal value.
EnvForm = list[EnvName] | dict[EnvName, EnvValue]
ENV_DOC = ("Variables a command gets on top of the allowlisted environment (PATH, HOME, LANG, LC_*, TERM, TZ, USER, "
           "SHELL): an array of names passed through from the daemon's environment when set there, or an object "
           "of name -> literal value. The daemon's own credentials (" + ", ".join(sorted(WITHHELD_NAMES)) +
           ") are refused.")


def env_additions(form: list[str] | dict[str, str]) -> EnvAdditions:
    """The additions an ``env`` setting (:data:`EnvForm`, structured) asks for."""
    items = [(name, None) for name in form] if isinstance(form, list) else list(form.items())
    return tuple(dict(items).items())  # the last of a repeated name wins, as in an environment


def parse_env(value: Any, key: str) -> EnvAdditions:
    """An ``env`` setting (names to pass through, or an object of name -> value); a ``ValueError``
    (:class:`actors.checked.CheckError`) naming ``key`` and the bad entry."""
    return env_additions(checked.structure(value, EnvForm, key))


def with_additions(env: Mapping[str, str], additions: EnvAdditions,
                   source: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` plus ``additions``, a name without a value taken from ``source`` (the daemon's environment)."""
    src = os.environ if source is None else source
    out = dict(env)
    for name, value in additions:
        if value is not None:
            out[name] = value
        elif name in src and name not in WITHHELD_NAMES:  # parse_env refused those; a hand-made list too
            out[name] = src[name]
    return out


NETWORK_SETTINGS = ("on", "off")
SandboxMode = Literal[SANDBOX_SETTINGS]  # type: ignore[valid-type]
NetworkSetting = Literal[NETWORK_SETTINGS]  # type: ignore[valid-type]


@attrs.frozen
class SandboxSetting:
    """The ``sandbox`` setting in its object form: the mode, the variables commands get on top of the
    allowlist, directories they may write besides the cwd and their home, whether they have a network, and
    how many processes a session's commands may have at once (``0``: no limit)."""

    mode: str = "auto"
    env: EnvAdditions = ()
    writable: tuple[str, ...] = ()
    network: str = "on"
    max_processes: int = DEFAULT_MAX_PROCESSES
    disk_reserve: int | None = None  # MiB kept free where commands write (None: the default; 0: none)

    @classmethod
    def parse(cls, value: Any, key: str = "sandbox") -> str | SandboxSetting:
        """A mode string, or a :class:`SandboxSetting` when the object sets more; a ``ValueError``
        (:class:`actors.checked.CheckError`) naming ``key`` or the member below it."""
        form = checked.structure(value, SandboxMode | SandboxForm, key)
        return form.setting() if isinstance(form, SandboxForm) else form


def _writable_directory(raw: str) -> bool:
    """A ``sandbox.writable`` entry: an absolute path, or a ``~/``-relative one (the daemon user's home),
    neither at nor above a home."""
    path = os.path.expanduser(raw)
    if "\0" in raw or not os.path.isabs(path):
        raise Invalid("must be an absolute path or start with ~/", raw)
    path = os.path.normpath(path)
    real = os.path.realpath(path)
    above = [home for home in (*homes(), "/home") if _is_within(home, path) or _is_within(home, real)]
    if above:
        if above[0] == "/home" and "/home" not in homes():
            where = "holds the users' homes"
        elif above[0] in (path, real):
            where = "is the home directory"
        else:
            where = f"holds the home directory {above[0]}"
        raise Invalid(
            f"{shown(raw)} {where}: no writable directory may be at or above a home, where commands "
            "could create what the home does not have yet (~/.bash_profile, ~/.ssh/authorized_keys), which "
            "nothing hides in advance. Name a directory under the home (~/.cache/shared)")
    return True


WritableDirectory = checked.constrained(
    "WritableDirectory", str, "a directory path", _writable_directory,
    convert=lambda raw: os.path.normpath(os.path.expanduser(raw)), schema={"pattern": "^(/|~/)"})


@checked.form("The object form of the sandbox setting: the mode, and what model-run commands get besides it.",
              unknown=checked.REFUSE)
@attrs.frozen(kw_only=True)
class SandboxForm:
    """``sandbox`` as an object, as written (:meth:`setting` is what the daemon uses)."""

    mode: SandboxMode = checked.field("auto", "As the string form.")
    env: EnvForm = checked.field(factory=list, doc=ENV_DOC)
    writable: tuple[WritableDirectory, ...] = checked.field(
        (), "Directories sandboxed commands may write besides the session's cwd and its own home (absolute, "
            "or ~/ for the daemon user's home, neither at nor above a home); one that does not exist is left out.")
    network: NetworkSetting = checked.field(
        "on", "off: shells, monitors and stdio MCP servers get a network namespace of their own, with only its "
              "loopback (a command runner keeps the network: its agent CLI must reach its model and its signal "
              "URL).")
    max_processes: ProcessCount = checked.field(
        DEFAULT_MAX_PROCESSES,
        "How many processes and threads all of a session's sandboxed commands may have at once (a fork bomb "
        "then fails to fork instead of taking the host's pids): a pids cgroup per session where the daemon can "
        "make one, else none, said at start (docs/isolation.md). 0: no limit; else at least 8 (bwrap and a "
        "shell).")
    disk_reserve: ReserveMiB | None = checked.field(
        None, "MiB kept free on every file system a sandboxed command may write (its cwd, its home, writable): "
              "below it a command is refused at its start, and the daemon's running commands are killed "
              "(docs/isolation.md). Default: 1024, or 5 % of the file system when that is less; 0: no reserve.")

    def setting(self) -> str | SandboxSetting:
        """The setting: its mode alone when the object sets nothing more."""
        env = env_additions(self.env)
        if (env or self.writable or self.network != "on" or self.max_processes != DEFAULT_MAX_PROCESSES
                or self.disk_reserve is not None):
            return SandboxSetting(self.mode, env, self.writable, self.network, self.max_processes,
                                  self.disk_reserve)
        return self.mode


def setting_parts(setting: str | SandboxSetting) -> tuple[str, EnvAdditions]:
    """``(mode, env additions)`` of either form of the setting."""
    if isinstance(setting, SandboxSetting):
        return setting.mode, setting.env
    return setting, ()


# ----------------------------------------------------------------- the sandbox


@attrs.frozen
class Sandbox:
    """How model-run commands are started: ``kind`` is ``"bwrap"`` or ``"off"``.

    ``env`` is what the settings add to every model-run command's allowlisted
    environment; ``user_namespace`` whether bwrap gives the command a user
    namespace (``no_user_namespace`` says why not, when it does not).
    """

    kind: str = "off"
    executable: str | None = None
    hidden: tuple[str, ...] = ()
    reason: str = ""  # why there is no sandbox, when there is none
    env: EnvAdditions = ()
    user_namespace: bool = False
    no_user_namespace: str = ""
    # The files a session's unsandboxed hooks run, for a cwd: read-only to every command, as ``protect``.
    protect_for: Callable[[str], Iterable[str]] | None = attrs.field(default=None, eq=False)
    # A writable directory given to commands as their HOME (a session's or a run's own, see with_home):
    # tools write their caches and state there (npm's ~/.npm, uv's ~/.cache, ~/.claude, ~/.qwen), never
    # in the user's real home, which stays read-only with its credentials hidden.
    home: str | None = None
    # Directories the settings make writable for commands as well (sandbox.writable), e.g. a shared cache.
    writable: tuple[str, ...] = ()
    network: bool = True  # False: commands get a network namespace of their own, with only its loopback
    # How many processes a session's commands may have at once (actors/process/limits.py): a fork bomb in
    # one command must not take every pid of the host.
    processes: ProcessLimit = ProcessLimit(reason="not resolved")
    # Whether commands run under the seccomp filter that refuses setuid and setgid bits (actors/process/seccomp.py):
    # a file a command makes is the daemon user's, and the host honours the bits (a setuid-root shell in a
    # project, for a root daemon).
    seccomp: bool = False
    # The disk reserve of the file systems commands write (actors/process/disk.py): checked at each start,
    # watched while commands run. None: no reserve (a sandbox made in code, or no sandbox).
    disk: DiskGuard | None = attrs.field(default=None, eq=False)

    def with_home(self, home: str) -> Sandbox:
        """This sandbox, its commands' HOME being ``home`` (writable, bound at its own path)."""
        return attrs.evolve(self, home=os.path.realpath(home))

    def protecting(self, protect_for: Callable[[str], Iterable[str]]) -> Sandbox:
        """This sandbox, its commands also seeing ``protect_for(cwd)`` read-only (a session's hook files)."""
        return attrs.evolve(self, protect_for=protect_for)

    @property
    def active(self) -> bool:
        return self.kind == "bwrap"

    def wrap(self, argv: Sequence[str], cwd: str, *, expose: Iterable[str] = (),
             protect: Iterable[str] = ()) -> list[str]:
        """The argument vector that runs ``argv`` in ``cwd`` under this sandbox.

        ``expose``: files a hidden path holds that this command may read. ``protect``:
        paths under the cwd made read-only on top of :func:`git_protections` (a
        path ending in ``/`` is a directory, mounted as an empty read-only one
        when it does not exist; a missing file is skipped). ``cwd`` is given resolved
        (a session's, resolved when it was set). Raises :class:`SandboxRefusal` for a
        cwd the sandbox will not run a command in: inside a hidden path, at or above
        the home, or no longer resolving to itself (:func:`resolved_cwd`).
        """
        if not self.active:
            return list(argv)
        assert self.executable is not None
        cwd = resolved_cwd(cwd)
        hidden = self.hidden_paths()
        for path in hidden:
            if _is_within(cwd, path):
                raise SandboxRefusal(f"refusing to run a command in {cwd}: it lies inside {path}, "
                                     "which the sandbox hides")
        expose = [os.path.realpath(p) for p in expose]
        for home in homes():
            if _is_within(home, cwd):
                where = "it is the home directory" if home == cwd else f"the home directory {home} lies inside it"
                raise SandboxRefusal(
                    f"refusing to run a command in {cwd}: {where}. No sandboxed command runs at or above the "
                    "home: it may write its cwd, and from there it could create what the home does not have yet "
                    "(~/.bash_profile, ~/.ssh/authorized_keys, ~/.config/git/config), which nothing hides in "
                    "advance. Use a directory under the home (a project) as the session's cwd")
        note_writable([cwd, self.home or "", *self.writable])
        keep = [cwd, *homes(), self.home or "", *self.writable, *expose, *interpreter_paths()]
        try:  # a root daemon's: what the scan found only root may read, but what this command must reach
            hidden = list(dict.fromkeys([*hidden, *around(root_only_paths(), keep)]))
        except OSError as exc:
            raise SandboxRefusal(f"refusing to run a command in {cwd}: {exc}") from None
        if self.disk is not None:
            try:
                self.disk.admit([cwd, self.home or "", *self.writable])
            except DiskShortage as exc:
                raise SandboxRefusal(str(exc)) from None
        args = [self.executable, "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
        if self.user_namespace:
            args.append("--unshare-user")
        if not self.network:
            args.append("--unshare-net")
        args += ["--cap-drop", "ALL", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *PROC_COVERS,
                 "--tmpfs", "/tmp"]
        # The settings' writable directories first: every protection below is mounted over them, so a
        # ~/.cache made writable keeps ~/.cache/huggingface/token hidden, and one holding the cwd keeps its
        # .git/config and hooks read-only (bound last, such a directory would cover all of those again).
        for path in self.writable:
            if os.path.isdir(path):
                args += ["--bind", path, path]
        for path in interpreter_paths_under_tmp():  # the daemon's own Python, were it installed under /tmp
            args += ["--ro-bind", path, path]
        if os.path.isdir("/run") and not _is_within(cwd, "/run"):
            args += ["--tmpfs", "/run", *_resolver_binds()]
        args += ["--bind", cwd, cwd]
        pinned, read_only = git_protections(cwd)
        if self.protect_for is not None:
            protect = [*protect, *self.protect_for(cwd)]
        read_only = [*read_only, *(os.path.join(cwd, p) for p in protect)]
        # Bound over itself: a mount point, which cannot be renamed or removed (EBUSY). The git directories,
        # and every directory between the cwd and what is mounted below: renaming a parent would take the
        # mount along with it and leave the path it protects free to be made anew (mv proj proj2: the
        # state directory and settings file readable at proj2/..., a new .claude/hooks/check.sh).
        # hidden paths are resolved already: only those under the cwd can have a parent to pin
        below = [*pinned, *read_only, *(path for path in hidden if _is_within(path, cwd))]
        for path in _outermost_first([*pinned, *_parents_to_pin(below, cwd)]):
            args += ["--bind", path, path]
        for path in read_only:  # before hiding: none is bound back
            args += _read_only(path, cwd)
        for path in hidden:  # after the cwd bind, so a state directory under the cwd is still hidden
            if os.path.isdir(path):
                args += ["--tmpfs", path]
            elif os.path.lexists(path):
                args += ["--ro-bind", "/dev/null", path]
        for real in expose:
            args += ["--ro-bind", real, real]
        # Last, so the command's own home under a hidden path (the state directory) is bound back. Only the
        # daemon's own homes (make_home) come here: nothing protected lies inside one.
        if self.home is not None and os.path.isdir(self.home):
            args += ["--bind", self.home, self.home]
        bwrap = [*args, "--chdir", cwd, "--", *argv]
        # fallocate takes any size in one call: refused where a disk reserve is kept (actors/process/seccomp.py)
        reserve = self.disk is not None and self.disk.enabled
        bpf = program_path(fallocate=not reserve) if self.seccomp else None
        if bpf is not None:
            # bwrap reads the filter from a descriptor: a shell opens it on the way (exec: the same process, the
            # same group, no fork), so every caller of wrap gets it, however it starts the process.
            bwrap = ["/bin/sh", "-c", 'exec "$@" 3<"$0"', bpf, bwrap[0], "--seccomp", "3", *bwrap[1:]]
        return [*self.processes.prefix(self.home), *bwrap]

    def hidden_paths(self) -> list[str]:
        """What a command started now does not see: the daemon's own paths and the credentials that exist now."""
        found = [os.path.realpath(p) for p in secret_paths() if os.path.lexists(p)]
        # Never the home itself nor a directory above it (a variable naming one): a secret is inside a home.
        found = [p for p in found if not any(_is_within(home, p) for home in homes())]
        # A root daemon's commands run as uid 0, which owns what only root may read (/etc/shadow, host keys).
        found += [os.path.realpath(p) for p in system_secret_paths()]
        return list(dict.fromkeys([*self.hidden, *found]))

    def environment(self, env: Mapping[str, str], source: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a model-run command: the allowlisted part of ``env``, plus the setting's ``env``.

        The same with the sandbox off: the allowlist is about what a command is
        handed, not about bubblewrap. A name passed through is looked up in
        ``source`` (default: the daemon's environment).
        """
        return self._with_home(with_additions(allowed_environment(env), self.env, source))

    def _with_home(self, env: dict[str, str]) -> dict[str, str]:
        if self.active and self.home is not None:
            env["HOME"] = self.home
        return env

    def configured_environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` without the variables that name sockets outside the sandbox, HOME the sandbox's home
        (unchanged when off). For a command whose environment its configuration chose (a stdio MCP server)."""
        if not self.active:
            return dict(env)
        return self._with_home({k: v for k, v in env.items() if k not in SOCKET_VARIABLES})

    def describe(self) -> str:
        if not self.active:
            return "off"
        if not self.user_namespace:
            return f"bwrap (no user namespace: {self.no_user_namespace})"
        return "bwrap"


NO_SANDBOX = Sandbox("off", reason="no sandbox configured")


def resolved_cwd(cwd: str) -> str:
    """``cwd`` as given, when it still resolves to itself; :class:`SandboxRefusal` when it does not.

    Callers pass a session's cwd, resolved when the session started (or moved): a cwd that no longer
    resolves to itself was moved, or replaced by a symlink (by another session, whose cwd holds this
    one), and a command run there would work wherever the symlink now leads.
    """
    given = os.path.abspath(cwd)
    real = os.path.realpath(given)
    if real != given:
        raise SandboxRefusal(f"the session's working directory {given} was moved or replaced by a symlink since "
                             f"the session started (it now leads to {real}); nothing was done")
    return real


def _parents_to_pin(paths: Iterable[str], cwd: str) -> list[str]:
    """Every existing directory strictly between ``cwd`` and each of ``paths`` that lies under it, outermost first.

    A directory protection that does not exist yet (a ``hooks/`` bwrap makes as an empty read-only
    one) gets its missing parents made first, as bwrap itself would, so they can be pinned too.
    """
    found: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if not _is_within(real, cwd) or real == cwd:
            continue
        parent = os.path.dirname(real)
        if path.endswith("/") and not os.path.lexists(real) and not os.path.isdir(parent):
            try:
                os.makedirs(parent, exist_ok=True)
            except OSError:
                pass  # bwrap reports what it cannot make
        relative = os.path.relpath(parent, cwd)
        if relative == ".":
            continue
        current = cwd
        for part in relative.split(os.sep):
            current = os.path.join(current, part)
            if not os.path.isdir(current) or os.path.islink(current):
                break
            found.append(current)
    return _outermost_first(found)


def _outermost_first(paths: Iterable[str]) -> list[str]:
    return sorted(dict.fromkeys(paths), key=lambda p: (p.count(os.sep), p))


def _read_only(path: str, cwd: str) -> list[str]:
    """bwrap arguments that make ``path`` read-only over itself (nothing for a path outside the cwd: it is)."""
    directory = path.endswith("/")
    real = os.path.realpath(path)
    if not _is_within(real, cwd) or real == cwd:
        return []  # the rest of the filesystem is read-only already (and /tmp is the sandbox's own)
    if os.path.lexists(real):
        return ["--ro-bind", real, real]
    if directory:
        # bwrap creates the mount point in the cwd, on the host: an empty directory where none was
        return ["--tmpfs", real, "--remount-ro", real]
    return []


def git_protections(cwd: str) -> tuple[list[str], list[str]]:
    """``(pinned, read_only)``: the git directories of ``cwd`` to pin in place, and the control files that run code.

    A git directory under the cwd (``.git``, or the one a ``.git`` file names) is
    bound over itself so it cannot be renamed and rebuilt with a config of the
    command's choosing. Read-only: its ``config`` and ``hooks/`` (an empty
    read-only one when missing), ``config.worktree`` and ``commondir`` where
    present, the same of its linked worktrees and submodules, and a ``.git``
    file itself. What git writes for ``add``, ``commit`` and branches (objects,
    refs, the index, logs) stays writable. The same for the repositories nested
    in the cwd that :func:`nested_repositories` finds (a bounded walk). The file
    tools ask before writing any of these paths (``Scope.ask_always``).
    """
    cwd = os.path.realpath(cwd)
    pinned: list[str] = []
    read_only: list[str] = []
    budget = _GitdirBudget()
    for top in [cwd, *nested_repositories(cwd)]:
        _protect_repository(top, cwd, pinned, read_only, budget)
    return list(dict.fromkeys(pinned)), list(dict.fromkeys(read_only))


# Repositories nested in the cwd (a workspace root holding several clones, vendored repositories) are
# protected as the cwd's own is. They are found by a cheap walk of the cwd, run at every command and
# every file-tool write: at most NESTED_DEPTH levels below the cwd, and at most NESTED_ENTRIES directory
# entries read in all (breadth first, so the shallowest repositories are found first), never entering a
# symlink, a dot-directory (.git included: its own modules are found from it), nor the big trees of
# NESTED_SKIPPED. A repository deeper than that, or past the entry bound in a cwd that large, is not
# protected: its .git/config and hooks are writable like any file of the cwd.
NESTED_DEPTH = 3
NESTED_ENTRIES = 5000
NESTED_SKIPPED = frozenset({"node_modules", "venv", "target", "__pycache__", "site-packages"})


def nested_repositories(cwd: str) -> list[str]:
    """The directories strictly under ``cwd`` that hold a ``.git`` (directory or gitfile), within the bounds above."""
    found: list[str] = []
    queue: collections.deque[tuple[str, int]] = collections.deque([(cwd, 0)])
    read = 0
    while queue:
        directory, depth = queue.popleft()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    read += 1
                    if read > NESTED_ENTRIES:
                        return sorted(found)
                    if entry.name == ".git":
                        if directory != cwd:
                            found.append(directory)
                        continue
                    if depth >= NESTED_DEPTH or entry.name.startswith(".") or entry.name in NESTED_SKIPPED:
                        continue
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            queue.append((entry.path, depth + 1))
                    except OSError:
                        continue
        except OSError:  # unreadable, vanished: skipped
            continue
    return sorted(found)


def _protect_repository(top: str, cwd: str, pinned: list[str], read_only: list[str],
                        budget: _GitdirBudget) -> None:
    """The protections of the repository whose work tree is ``top`` (the cwd, or one nested in it)."""
    dot_git = os.path.join(top, ".git")
    if os.path.isfile(dot_git) and not os.path.islink(dot_git):
        read_only.append(dot_git)  # a gitfile the command could point at a directory of its own
        gitdir = _gitfile_target(dot_git)
        if gitdir is None or not _is_within(gitdir, cwd) or not os.path.isdir(gitdir):
            return
    elif os.path.isdir(dot_git) and not os.path.islink(dot_git):
        gitdir = dot_git
    else:
        return
    _protect_gitdir(gitdir, top, cwd, pinned, read_only, budget, create_hooks=True, depth=0)
    common = _commondir(gitdir)
    if common is not None and common != gitdir and _is_within(common, cwd) and os.path.isdir(common):
        _protect_gitdir(common, top, cwd, pinned, read_only, budget, create_hooks=True, depth=0)


def _protect_gitdir(gitdir: str, top: str, cwd: str, pinned: list[str], read_only: list[str],
                    budget: _GitdirBudget, *, create_hooks: bool, depth: int) -> None:
    if gitdir != cwd:
        pinned.append(gitdir)
    configs = [p for p in (os.path.join(gitdir, n) for n in ("config", "config.worktree")) if os.path.isfile(p)]
    read_only += configs
    if os.path.isfile(os.path.join(gitdir, "commondir")):
        read_only.append(os.path.join(gitdir, "commondir"))
    hooks = os.path.join(gitdir, "hooks")
    if create_hooks or os.path.isdir(hooks):
        read_only.append(hooks + "/")
    for config in configs:  # hooks elsewhere (core.hooksPath: .husky/, .githooks/) and included config files
        read_only += _config_paths(config, worktree=top)
    worktrees = os.path.join(gitdir, "worktrees")
    found = _worktree_gitdirs(worktrees, budget)
    if found is None:  # past the bounds: the whole directory read-only rather than some of it unprotected
        read_only.append(worktrees + "/")
    else:
        for worktree in found:  # linked worktrees: theirs point elsewhere
            pinned.append(worktree)
            read_only += [p for p in (os.path.join(worktree, n) for n in ("commondir", "config.worktree"))
                          if os.path.isfile(p)]
    if depth < MODULE_DEPTH:
        modules = os.path.join(gitdir, "modules")
        found = _module_gitdirs(modules, budget)
        if found is None:
            read_only.append(modules + "/")
        else:
            for module in found:
                _protect_gitdir(module, top, cwd, pinned, read_only, budget, create_hooks=False, depth=depth + 1)


_SECTION = re.compile(r'\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"[^"]*")?\s*\]\s*(.*)$')
_VARIABLE = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*=\s*(.*?)\s*$")


def _config_paths(config: str, *, worktree: str) -> list[str]:
    """``core.hooksPath`` (as a directory) and ``include``/``includeIf`` paths of a git config file.

    A plain reading of the format, enough for the values people write; a path
    that does not lie under the cwd is dropped later (it is read-only already).
    """
    try:
        with open(config, encoding="utf-8", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return []
    found: list[str] = []
    section = ""
    for line in lines:
        if match := _SECTION.match(line):
            section, line = match.group(1).lower(), match.group(2)
        match = _VARIABLE.match(line)
        if match is None:
            continue
        name, value = match.group(1).lower(), match.group(2).split(" #")[0].split(" ;")[0].strip().strip('"')
        if not value:
            continue
        value = os.path.expanduser(value)
        if (section, name) == ("core", "hookspath"):
            found.append(os.path.join(worktree, value).rstrip("/") + "/")  # relative: to the worktree's top
        elif section in ("include", "includeif") and name == "path":
            found.append(os.path.join(os.path.dirname(config), value))  # relative: to the including file
    return found


# The linked worktrees (.git/worktrees/<name>) and submodule git directories (.git/modules/<name>, a name
# being a path: modules/a/b) of every git directory protected are found by a bounded walk too, for a command
# can make as many of those directories as it likes (mkdir -p .git/modules/a/a/a/..., thousands wide), and
# each one found costs a few mounts. One git_protections call reads at most GITDIR_ENTRIES directory entries
# under those directories in all, looks at most MODULE_NAME_DEPTH levels down a submodule's name, and
# protects at most GITDIR_LIMIT such git directories. A worktrees/ or modules/ directory the walk could not
# finish within those bounds is made read-only as a whole (one mount), not left partly unprotected: git in
# such a repository cannot then update its worktrees or submodules from a sandboxed command.
GITDIR_ENTRIES = 5000
GITDIR_LIMIT = 256
MODULE_NAME_DEPTH = 8


@attrs.define
class _GitdirBudget:
    """What is left of one :func:`git_protections` call's bounds on ``worktrees/`` and ``modules/``."""

    entries: int = attrs.field(factory=lambda: GITDIR_ENTRIES)
    gitdirs: int = attrs.field(factory=lambda: GITDIR_LIMIT)

    def read(self) -> bool:
        """Count one directory entry read; ``False`` once the bound is passed."""
        self.entries -= 1
        return self.entries >= 0

    def found(self) -> bool:
        """Count one git directory found; ``False`` once the bound is passed."""
        self.gitdirs -= 1
        return self.gitdirs >= 0


def _bounded_subdirs(path: str, budget: _GitdirBudget) -> list[str] | None:
    """The subdirectories of ``path`` (none when it cannot be read), or ``None`` past the entry bound."""
    found: list[str] = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if not budget.read():
                    return None
                try:
                    if entry.is_dir(follow_symlinks=False):
                        found.append(entry.path)
                except OSError:
                    continue
    except OSError:  # absent, unreadable: nothing there
        return []
    return sorted(found)


def _worktree_gitdirs(worktrees: str, budget: _GitdirBudget) -> list[str] | None:
    """The git directories of linked worktrees (``.git/worktrees/<name>``), or ``None`` past the bounds."""
    found = _bounded_subdirs(worktrees, budget)
    if found is None or not all(budget.found() for _ in found):
        return None
    return found


def _module_gitdirs(modules: str, budget: _GitdirBudget | None = None) -> list[str] | None:
    """The git directories under ``.git/modules`` (a submodule named ``a/b`` lives at ``modules/a/b``): a
    directory holding a ``HEAD`` is one, any other is looked into. ``None`` past the bounds (above)."""
    budget = budget if budget is not None else _GitdirBudget()
    found: list[str] = []
    queue: collections.deque[tuple[str, int]] = collections.deque([(modules, 0)])
    while queue:  # breadth first, iterative: a deep chain of directories is no recursion
        directory, depth = queue.popleft()
        subdirs = _bounded_subdirs(directory, budget)
        if subdirs is None:
            return None
        for sub in subdirs:
            if os.path.isfile(os.path.join(sub, "HEAD")):
                if not budget.found():
                    return None
                found.append(sub)
            elif depth + 1 >= MODULE_NAME_DEPTH:
                return None  # deeper than any submodule name looked into: it may hold one
            else:
                queue.append((sub, depth + 1))
    return sorted(found)


def _first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline(4096).strip()
    except OSError:
        return ""


def _gitfile_target(path: str) -> str | None:
    first = _first_line(path)
    if not first.startswith("gitdir:"):
        return None
    return os.path.realpath(os.path.join(os.path.dirname(path), first.removeprefix("gitdir:").strip()))


def _commondir(gitdir: str) -> str | None:
    target = _first_line(os.path.join(gitdir, "commondir"))
    return os.path.realpath(os.path.join(gitdir, target)) if target else None


def _resolver_binds() -> list[str]:
    """Bind back the resolver configuration when ``/etc/resolv.conf`` lives under ``/run`` (systemd-resolved)."""
    real = os.path.realpath("/etc/resolv.conf")
    if _is_within(real, "/run") and os.path.exists(real):
        return ["--ro-bind", real, real]
    return []


def interpreter_paths() -> tuple[str, ...]:
    """This interpreter's prefixes (resolved): what a command needs to run the daemon's own Python."""
    return tuple(dict.fromkeys(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                             os.path.dirname(sys.executable))))


@functools.lru_cache(maxsize=1)
def interpreter_paths_under_tmp() -> tuple[str, ...]:
    """This interpreter's prefixes that lie under ``/tmp`` (a checkout or venv there, as in CI).

    The sandbox's ``/tmp`` is its own, so without these a command could not run
    the daemon's own Python (``sys.executable``, as command subagents are often
    configured). They hold no secret and are bound read-only.
    """
    under = sorted(p for p in interpreter_paths() if _is_within(p, "/tmp") and p != "/tmp" and os.path.isdir(p))
    # innermost first would be shadowed by its parent's bind: keep only the outermost of nested ones
    return tuple(p for p in under if not any(q != p and _is_within(p, q) for q in under))


def _is_within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


# ----------------------------------------------------------------- choosing one at start


def _try_bwrap(executable: str, extra: Sequence[str]) -> str | None:
    try:
        result = subprocess.run(
            [executable, "--die-with-parent", "--unshare-pid", *extra, "--ro-bind", "/", "/", "--dev", "/dev",
             "--proc", "/proc", "--", "true"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{executable} did not run: {exc}"
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        return f"{executable} failed ({detail[-1] if detail else f'exit {result.returncode}'})"
    return None


@functools.lru_cache(maxsize=8)  # one probe per executable and process: daemons in tests and replays are many
def probe(executable: str) -> str | None:
    """Why ``executable`` cannot make a sandbox here (every capability dropped), or ``None`` when it can."""
    return _try_bwrap(executable, ["--cap-drop", "ALL"])


@functools.lru_cache(maxsize=8)
def probe_user_namespace(executable: str) -> str | None:
    """Why ``executable`` cannot give the sandbox a user namespace here, or ``None`` when it can."""
    return _try_bwrap(executable, ["--unshare-user", "--cap-drop", "ALL"])


def resolve_sandbox(setting: str | SandboxSetting,
                    hidden: Iterable[str | os.PathLike[str]] = ()) -> Sandbox:
    """The sandbox a daemon uses for ``setting``; raises :class:`SandboxUnavailable` for a required one."""
    mode, env = setting_parts(setting)
    if mode not in SANDBOX_SETTINGS:
        raise ValueError(f"sandbox must be one of {list(SANDBOX_SETTINGS)}, got {mode!r}")
    start_scan()  # a root daemon's scan for what only root may read, ready before the first command or tool call
    if mode == "off":
        return Sandbox("off", reason="the sandbox setting is off", env=env)
    executable = shutil.which("bwrap")
    if not sys.platform.startswith("linux"):
        problem: str | None = f"bubblewrap needs Linux, this is {sys.platform}"
    elif executable is None:
        problem = "bwrap is not installed (Debian package bubblewrap)"
    else:
        problem = probe(executable)
    if problem is not None:
        if mode == "bwrap":
            raise SandboxUnavailable(f"sandbox \"bwrap\" is required but unavailable: {problem}")
        return Sandbox("off", reason=problem, env=env)
    assert executable is not None
    given = setting if isinstance(setting, SandboxSetting) else SandboxSetting(mode)
    try:
        processes = resolve_process_limit(given.max_processes)
    except ValueError as exc:  # a SandboxSetting made in code; the settings file's was checked when read
        raise SandboxUnavailable(str(exc)) from None
    no_userns = probe_user_namespace(executable) or ""
    real = tuple(dict.fromkeys(os.path.realpath(p) for p in hidden))
    writable, network = given.writable, given.network == "on"
    disk = DiskGuard(given.disk_reserve, processes.processes if processes.listed else None)
    return Sandbox("bwrap", executable=executable, hidden=real, env=env, user_namespace=not no_userns,
                   no_user_namespace=no_userns, writable=tuple(os.path.realpath(p) for p in writable),
                   network=network, processes=processes, seccomp=program() is not None, disk=disk)


def make_home(state_dir: str | os.PathLike[str] | None, name: str) -> str:
    """A new private directory for :meth:`Sandbox.with_home`: ``<state_dir>/homes/<name>`` (``name`` may be
    ``<session-id>/commands``), else under the system's temporary directory (which the sandbox's own ``/tmp``
    hides from every other command).

    A home left at that path (by a daemon that died) is not reused: it is renamed aside at once and deleted
    in a thread nobody awaits (:func:`_discard`), never on the event loop (it may be a large npm cache), and
    never by a removal still under way for the same path deleting the new home.
    """
    if state_dir is None:
        return tempfile.mkdtemp(prefix=f"trellis-home-{name.replace(os.sep, '-')}-")
    root = os.path.join(state_dir, "homes")
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not _discard(path, root):  # cannot be renamed (a mount point?): deleted here, as it always was
            shutil.rmtree(path, onerror=_writable_then_retry)
        os.mkdir(path, 0o700)
    return path


def remove_home(path: str) -> None:
    """Delete a home made by :func:`make_home` (or a directory of them, ``homes/<session-id>``); gone
    already is fine. Never waits on a large one.

    An empty home (no command wrote there) goes at once; one with content (an npm cache may be
    hundreds of megabytes) is renamed aside and deleted in a thread of its own that nothing awaits
    (:func:`_discard`), so a session or a run closes without a thread hop (and a virtual clock does not
    jump meanwhile), and a home made again at the same path is never touched by that thread. What the
    daemon's exit cut short is deleted at the next start (:func:`clear_homes`).
    """
    release(path)  # the session's process group (a pids cgroup), with its home
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return
    except OSError:
        _discard(path, os.path.dirname(path))  # not renamable: left for clear_homes at the next start


def clear_homes(state_dir: str | os.PathLike[str] | None) -> None:
    """At daemon start, before any session is made or restored: delete ``<state_dir>/homes`` with whatever
    homes a previous daemon left there (a removal thread its exit cut short, a daemon killed).

    ``homes`` is renamed into ``<state_dir>/homes.removing/`` at once, so the homes made from now on start
    afresh, and that directory (with anything an earlier start's thread did not finish) is deleted in a
    thread nobody awaits: one rename and one small listing on the event loop, never a big tree.
    """
    if state_dir is None:
        return
    homes_dir = os.path.join(state_dir, "homes")
    trash = os.path.join(state_dir, "homes.removing")
    for _ in range(2):  # a previous start's thread may remove the trash directory between mkdir and rename
        try:
            os.makedirs(trash, mode=0o700, exist_ok=True)
            os.rename(homes_dir, os.path.join(trash, uuid.uuid4().hex))
            break
        except FileNotFoundError:
            if not os.path.lexists(homes_dir):
                break
        except OSError as exc:
            log.warning("could not move %s aside to delete it: %s", homes_dir, exc)
            break
    try:
        if not os.listdir(trash):
            return
    except OSError:
        return
    threading.Thread(target=shutil.rmtree, args=(trash,), kwargs={"onerror": _writable_then_retry},
                     name="trellis-clear-homes", daemon=True).start()


def _discard(path: str, aside_in: str) -> bool:
    """Rename ``path`` to a unique name in ``aside_in`` (same filesystem) and delete it there in a daemon
    thread nobody awaits; ``True`` when it is gone from ``path`` (or was already). Renamed first, so the path
    is free at once and the thread's ``rmtree`` works on a tree no one will make again or remove too. One
    that cannot be renamed is left where it is (``False``): deleting it in place would race what is made
    there next."""
    aside = os.path.join(aside_in, f".removing-{os.path.basename(path)}-{uuid.uuid4().hex}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.warning("could not move %s aside to delete it: %s", path, exc)
        return False
    threading.Thread(target=shutil.rmtree, args=(aside,), kwargs={"onerror": _writable_then_retry},
                     name="trellis-remove-home", daemon=True).start()
    return True


def _writable_then_retry(function: Any, path: str, exc_info: Any) -> None:
    # Tools leave read-only directories behind (Go's module cache, some npm packages): make the parent
    # writable and try once more; anything else that fails is left (a cache, not a secret).
    if isinstance(exc_info[1], FileNotFoundError):
        return
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, ignore_errors=True)
        else:
            function(path)
    except OSError:
        pass


def log_sandbox(sandbox: Sandbox) -> None:
    """Say at start what protects the user's machine from model-run commands."""
    if sandbox.active:
        log.info("model-run commands run in a bubblewrap sandbox, with no capability")
        if not sandbox.user_namespace:
            log.warning("the sandbox has no user namespace of its own (%s): commands run with every "
                        "capability dropped, as the daemon's user", sandbox.no_user_namespace)
        if sandbox.processes.how == "none" and sandbox.processes.count:
            log.warning("sandboxed commands have %s: one command can start processes until the host has no "
                        "pid left (docs/isolation.md)", sandbox.processes.describe())
        else:
            log.info("sandboxed commands: %s", sandbox.processes.describe())
        if not sandbox.seccomp:
            log.warning("no seccomp filter for this machine (%s): a command can make a setuid or setgid file in "
                        "its cwd, which the host honours (docs/isolation.md)", os.uname().machine)
        if sandbox.disk is not None:
            log.log(logging.INFO if sandbox.disk.watched or not sandbox.disk.enabled else logging.WARNING,
                    "sandboxed commands: %s", sandbox.disk.describe())
        if sandbox.processes.memory.limit:
            log.info("sandboxed commands: %s", sandbox.processes.memory.describe())
        else:
            log.warning("sandboxed commands have %s: one command can take the host's memory, and the kernel's "
                        "OOM killer then picks among every process, the daemon included (docs/isolation.md)",
                        sandbox.processes.memory.describe())
    else:
        log.warning("no sandbox (%s): commands the model runs have your rights and can read your files",
                    sandbox.reason)
