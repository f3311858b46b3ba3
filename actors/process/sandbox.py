"""The sandbox model-run commands run in: bubblewrap on Linux, or none.

Which commands: ``shell`` (foreground and background), ``monitor`` commands
and the ``command`` subagent runner — everything whose command line a model
chose. Hooks are the user's own configuration and run unsandboxed.

The ``sandbox`` setting picks the policy at daemon start:

    setting   bwrap works here      bwrap missing or broken
    -------   -------------------   --------------------------------------
    auto      Sandbox("bwrap")      Sandbox("off") + reason, logged
    bwrap     Sandbox("bwrap")      SandboxUnavailable: the daemon refuses to start
    off       Sandbox("off")        Sandbox("off")

Inside a bwrap sandbox (see :meth:`Sandbox.wrap`):

- its own PID namespace: no daemon process is in its ``/proc``, and when its
  first process dies (the daemon killed, its process group killed) the kernel
  kills everything in it, ``setsid`` and double-forked children included;
- ``--die-with-parent``: the sandbox is killed when the daemon's Trio thread
  dies (see :mod:`actors.process.spawn` for why that thread);
- the whole filesystem read-only, the session's cwd and a private ``/tmp``
  writable (the daemon's own Python stays visible, read-only, when it is
  installed under ``/tmp``: :func:`interpreter_paths_under_tmp`);
- hidden paths (the state directory with transcripts, token file and every
  run's MCP config; the settings file) replaced by an empty directory or an
  unreadable node, then the few ``expose`` paths (a subagent's own MCP config
  file) bound back read-only at their own path;
- ``/run`` replaced by an empty directory (the user's session bus, ssh and
  gpg agents, ``docker.sock`` live there; DNS keeps working: a
  ``/etc/resolv.conf`` that points into ``/run`` is bound back), the
  variables that name such sockets (``SSH_AUTH_SOCK``,
  ``DBUS_SESSION_BUS_ADDRESS``, ``DISPLAY`` ...) dropped, and the files in the
  user's home that hold credentials or exports (``~/.ssh``, ``~/.aws``,
  ``~/.netrc``, shell rc files, ...: :data:`HOME_SECRETS`) hidden;
- the network is shared: a command can reach loopback, where every daemon
  route but ``/health`` and a run's own signal URL needs the bearer token it
  cannot read. So are abstract Unix sockets, and a Unix socket elsewhere on
  the (read-only) filesystem can still be connected to: the sandbox hides the
  well-known ones, it does not filter ``connect``.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence

import attrs

SANDBOX_SETTINGS = ("auto", "bwrap", "off")

# Under the user's home: credentials, agents' keys and the shell files people export API keys from.
HOME_SECRETS = (
    ".ssh", ".gnupg", ".aws", ".azure", ".config/gcloud", ".kube", ".docker", ".netrc", ".git-credentials",
    ".pypirc", ".npmrc", ".config/gh", ".config/hub", ".password-store", ".local/share/keyrings",
    ".bash_history", ".zsh_history", ".python_history", ".psql_history", ".mysql_history",
    ".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zshenv", ".zprofile", ".envrc",
    ".config/fish", ".trellis",
)
# Variables that point a command at a socket outside the sandbox (an agent, a session bus, a display).
SOCKET_VARIABLES = frozenset({
    "SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS",
    "DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "XDG_RUNTIME_DIR", "DOCKER_HOST", "PULSE_SERVER",
})
PROBE_TIMEOUT = 10.0

log = logging.getLogger("trellis.sandbox")


class SandboxUnavailable(RuntimeError):
    """``sandbox: "bwrap"`` was required and bubblewrap cannot run here."""


class SandboxRefusal(OSError):
    """A command the sandbox will not start (its cwd lies inside a hidden path)."""


@attrs.frozen
class Sandbox:
    """How model-run commands are started: ``kind`` is ``"bwrap"`` or ``"off"``."""

    kind: str = "off"
    executable: str | None = None
    hidden: tuple[str, ...] = ()
    reason: str = ""  # why there is no sandbox, when there is none

    @property
    def active(self) -> bool:
        return self.kind == "bwrap"

    def wrap(self, argv: Sequence[str], cwd: str, *, expose: Iterable[str] = ()) -> list[str]:
        """The argument vector that runs ``argv`` in ``cwd`` under this sandbox."""
        if not self.active:
            return list(argv)
        assert self.executable is not None
        cwd = os.path.realpath(cwd)
        for path in self.hidden:
            if _is_within(cwd, path):
                raise SandboxRefusal(f"refusing to run a command in {cwd}: it lies inside {path}, "
                                     "which the sandbox hides")
        args = [self.executable, "--die-with-parent", "--unshare-pid", "--unshare-ipc",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        for path in interpreter_paths_under_tmp():  # the daemon's own Python, were it installed under /tmp
            args += ["--ro-bind", path, path]
        if os.path.isdir("/run") and not _is_within(cwd, "/run"):
            args += ["--tmpfs", "/run", *_resolver_binds()]
        args += ["--bind", cwd, cwd]
        for path in self.hidden:  # after the cwd bind, so a state directory under the cwd is still hidden
            if os.path.isdir(path):
                args += ["--tmpfs", path]
            elif os.path.lexists(path):
                args += ["--ro-bind", "/dev/null", path]
        for path in expose:
            real = os.path.realpath(path)
            args += ["--ro-bind", real, real]
        return [*args, "--chdir", cwd, "--", *argv]

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` without the variables that name sockets outside the sandbox (unchanged when off)."""
        if not self.active:
            return env
        return {k: v for k, v in env.items() if k not in SOCKET_VARIABLES}

    def describe(self) -> str:
        return "bwrap" if self.active else "off"


NO_SANDBOX = Sandbox("off", reason="no sandbox configured")


def _resolver_binds() -> list[str]:
    """Bind back the resolver configuration when ``/etc/resolv.conf`` lives under ``/run`` (systemd-resolved)."""
    real = os.path.realpath("/etc/resolv.conf")
    if _is_within(real, "/run") and os.path.exists(real):
        return ["--ro-bind", real, real]
    return []


@functools.lru_cache(maxsize=1)
def interpreter_paths_under_tmp() -> tuple[str, ...]:
    """This interpreter's prefixes that lie under ``/tmp`` (a checkout or venv there, as in CI).

    The sandbox's ``/tmp`` is its own, so without these a command could not run
    the daemon's own Python (``sys.executable``, as command subagents are often
    configured). They hold no secret and are bound read-only.
    """
    candidates = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                 os.path.dirname(sys.executable))}
    under = sorted(p for p in candidates if _is_within(p, "/tmp") and p != "/tmp" and os.path.isdir(p))
    # innermost first would be shadowed by its parent's bind: keep only the outermost of nested ones
    return tuple(p for p in under if not any(q != p and _is_within(p, q) for q in under))


def home_secrets(home: str | None = None) -> list[str]:
    """The :data:`HOME_SECRETS` that exist under ``home`` (default: the user's)."""
    home = home or os.path.expanduser("~")
    return [p for p in (os.path.join(home, name) for name in HOME_SECRETS) if os.path.lexists(p)]


def _is_within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


@functools.lru_cache(maxsize=8)  # one probe per executable and process: daemons in tests and replays are many
def probe(executable: str) -> str | None:
    """Why ``executable`` cannot make a sandbox here, or ``None`` when it can."""
    try:
        result = subprocess.run(
            [executable, "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev",
             "--proc", "/proc", "--", "true"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{executable} did not run: {exc}"
    if result.returncode != 0:
        detail = result.stderr.decode(errors="replace").strip().splitlines()
        return f"{executable} failed ({detail[-1] if detail else f'exit {result.returncode}'})"
    return None


def resolve_sandbox(setting: str, hidden: Iterable[str | os.PathLike[str]] = ()) -> Sandbox:
    """The sandbox a daemon uses for ``setting``; raises :class:`SandboxUnavailable` for a required one."""
    if setting not in SANDBOX_SETTINGS:
        raise ValueError(f"sandbox must be one of {list(SANDBOX_SETTINGS)}, got {setting!r}")
    if setting == "off":
        return Sandbox("off", reason="the sandbox setting is off")
    executable = shutil.which("bwrap")
    if not sys.platform.startswith("linux"):
        problem: str | None = f"bubblewrap needs Linux, this is {sys.platform}"
    elif executable is None:
        problem = "bwrap is not installed (Debian package bubblewrap)"
    else:
        problem = probe(executable)
    if problem is not None:
        if setting == "bwrap":
            raise SandboxUnavailable(f"sandbox \"bwrap\" is required but unavailable: {problem}")
        return Sandbox("off", reason=problem)
    real = tuple(dict.fromkeys(os.path.realpath(p) for p in [*hidden, *home_secrets()]))
    return Sandbox("bwrap", executable=executable, hidden=real)


def log_sandbox(sandbox: Sandbox) -> None:
    """Say at start what protects the user's machine from model-run commands."""
    if sandbox.active:
        log.info("model-run commands run in a bubblewrap sandbox")
    else:
        log.warning("no sandbox (%s): commands the model runs have your rights and can read your files",
                    sandbox.reason)
