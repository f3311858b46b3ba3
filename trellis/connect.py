"""Which daemon a client subcommand talks to, and with which token.

The state directories looked in: ``--state-dir``, else ``$TRELLIS_STATE_DIR``;
if neither is given, the nearest ``.trellis`` in the current directory or one
of its parents (``trellis serve``'s default, so a client run where the daemon
runs, or below it, finds it; ``./.trellis`` when there is none) and then the
per-user one, ``$XDG_STATE_HOME/trellis`` (else ``~/.local/state/trellis``),
for a daemon started with ``--state-dir`` there, which clients find from any
directory. As git does with a repository, a ``.trellis`` found by that search
counts only if it is the user's own and no one else may write to it: another
user's ``daemon.json`` (in ``/tmp/.trellis``, say) could otherwise send the
token of ``$TRELLIS_TOKEN`` to a URL of their choosing.
A running daemon writes ``<state-dir>/daemon.json`` (its URL and pid) at its
start and removes it on exit (:mod:`transport.daemon_lock`). With it goes a
proof that the daemon knows its token (:func:`daemon_file_proof`): a client
takes a ``daemon.json``'s URL only when the proof holds for the token it would
send there. A sandboxed command may create ``.trellis/daemon.json`` in its
cwd, naming a listener of its own; without the proof, a client run there would
send that listener the token of ``$TRELLIS_TOKEN``. With no token given the
proof can be made with a ``token`` file planted beside it, so on Linux a
``daemon.json`` also counts only if the process it names, in this client's
own PID namespace, holds the socket listening on its URL's port
(:func:`listens_on`): a sandboxed command runs in a PID namespace of its own,
and cannot name a process of this one that listens where it does.

- the URL: ``--url``, else ``$TRELLIS_URL``, else the URL in the first of
  those directories whose ``daemon.json`` names a live process, else
  ``http://127.0.0.1:4170`` (the daemon's default address). A ``daemon.json``
  counts only if it proves its daemon knows the token: the one given, else the
  one in its own directory's ``token`` file (none at all: a ``daemon.json``
  without a proof, a daemon run with ``--no-auth``);
- the token: ``--token``, else ``$TRELLIS_TOKEN``, else the ``token`` file
  of the directory the URL came from (with ``--url``/``$TRELLIS_URL``: the
  one whose ``daemon.json`` names that URL), else of the first directory
  that has one; no token at all is allowed (a daemon run with
  ``--no-auth``), and the daemon's 401 then says what to send.

A token given on the command line shows in the process list: the help says
to prefer the environment or the file.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import os
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

import attrs
import orjson

DEFAULT_URL = "http://127.0.0.1:4170"
DEFAULT_STATE_DIR = ".trellis"
DAEMON_FILE = "daemon.json"
TOKEN_FILE = "token"


@attrs.frozen
class Target:
    """A daemon's base URL and the bearer token to send it (``None``: send none)."""

    url: str
    token: str | None = attrs.field(default=None, repr=False)  # never printed
    # The state directory whose files named the daemon or gave the token (None: flags and environment only).
    state_dir: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@attrs.frozen
class RunningDaemon:
    """What a daemon's ``daemon.json`` says of it."""

    url: str
    pid: int
    proof: str | None = attrs.field(default=None, repr=False)  # daemon_file_proof of its token; None: no auth

    def proven_by(self, token: str | None) -> bool:
        """Whether this daemon knows ``token`` (``None``: whether it wants none)."""
        if token is None:
            return self.proof is None
        return self.proof is not None and hmac.compare_digest(self.proof, daemon_file_proof(token, self.url,
                                                                                             self.pid))


def daemon_file_proof(token: str, url: str, pid: int) -> str:
    """What a daemon's ``daemon.json`` carries to show it knows ``token``: an HMAC of its URL and pid, keyed
    with the token (written by :meth:`transport.daemon_lock.HeldStateDir.announce`). It says nothing of the
    token to whoever reads the file, and no one who does not know the token can make one."""
    message = f"trellis daemon.json\n{url}\n{pid}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--token`` and ``--state-dir`` on a client subcommand."""
    group = parser.add_argument_group("daemon")
    group.add_argument("--url", default=None,
                       help=f"the daemon (default: $TRELLIS_URL, else the one STATE_DIR/daemon.json names, else "
                            f"{DEFAULT_URL})")
    group.add_argument("--token", default=None,
                       help="its bearer token (default: $TRELLIS_TOKEN, else STATE_DIR/token; prefer those: a "
                            "flag shows in the process list)")
    group.add_argument("--state-dir", default=None, metavar="DIR",
                       help=f"the daemon's state directory, for its daemon.json and token files (default: "
                            f"$TRELLIS_STATE_DIR, else the nearest {DEFAULT_STATE_DIR} here or above that is "
                            f"yours, then $XDG_STATE_HOME/trellis or ~/.local/state/trellis)")


def user_state_dir(environ: Mapping[str, str] | None = None) -> str:
    """The per-user state directory: ``$XDG_STATE_HOME/trellis``, else ``~/.local/state/trellis``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(base):  # the XDG spec: a relative value is invalid and ignored
        home = env.get("HOME") or os.path.expanduser("~")
        base = os.path.join(home, ".local", "state")
    return os.path.join(base, "trellis")


def state_dirs(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> list[str]:
    """The state directories to look in, in order (the module doc)."""
    env = os.environ if environ is None else environ
    given = getattr(args, "state_dir", None) or env.get("TRELLIS_STATE_DIR")
    if given:
        return [given]
    nearest = nearest_state_dir()
    if nearest is None and not os.path.lexists(DEFAULT_STATE_DIR):
        nearest = DEFAULT_STATE_DIR  # none yet: where `trellis serve` would make one (never one passed over)
    return [d for d in (nearest, user_state_dir(env)) if d is not None]


def nearest_state_dir(start: str | None = None) -> str | None:
    """The nearest ``.trellis`` directory in ``start`` (the current directory) or one of its parents that
    :func:`unsafe_state_dir` accepts: relative (``.trellis``) when it is in ``start``, else absolute. None when
    there is none."""
    for candidate, why, here in _state_dirs_above(start):
        if why is None:
            return DEFAULT_STATE_DIR if here and start is None else candidate
    return None


def _state_dirs_above(start: str | None) -> Iterator[tuple[str, str | None, bool]]:
    """Each ``.trellis`` directory in ``start`` (the current directory) and its parents, nearest first:
    ``(path, why it may not be trusted or None, whether it is in start itself)``."""
    try:
        here = os.path.abspath(start if start is not None else os.getcwd())
    except OSError:  # the current directory was deleted
        return
    first = here
    while True:
        candidate = os.path.join(here, DEFAULT_STATE_DIR)
        if os.path.isdir(candidate):
            yield candidate, unsafe_state_dir(candidate), here == first
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


def unsafe_state_dir(path: str) -> str | None:
    """Why a state directory found by the search may not be trusted (another user's, or writable by others),
    or None."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to you"
    if st.st_mode & 0o022:
        return f"{path} is writable by others (mode {st.st_mode & 0o777:o})"
    return None


def skipped_state_dirs(start: str | None = None) -> list[str]:
    """Why each ``.trellis`` nearer than the one the search found (or than the root) was passed over."""
    out = []
    for _, why, _ in _state_dirs_above(start):
        if why is None:
            break
        out.append(why)
    return out


def read_daemon_file(state_dir: str) -> RunningDaemon | None:
    """The daemon ``<state_dir>/daemon.json`` names, if that process is alive (a killed daemon leaves it)."""
    try:
        with open(os.path.join(state_dir, DAEMON_FILE), "rb") as f:
            data = orjson.loads(f.read())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str) or type(data.get("pid")) is not int:
        return None
    if not pid_alive(data["pid"]) or listens_on(data["pid"], data["url"]) is False:
        return None
    proof = data.get("proof")
    return RunningDaemon(data["url"].rstrip("/"), data["pid"], proof if isinstance(proof, str) else None)


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OSError:
        return False
    return True


LISTEN = "0A"  # a TCP socket's state in /proc/net/tcp: listening


def listens_on(pid: int, url: str) -> bool | None:
    """Whether process ``pid``, of this client's PID namespace, holds a TCP socket listening on ``url``'s port;
    ``None`` where that cannot be read (no ``/proc``: not Linux). A process another user's, or gone: ``False``."""
    if not os.path.isdir("/proc/self/fd"):
        return None
    try:
        port = urlsplit(url).port or (443 if urlsplit(url).scheme == "https" else 80)
        if os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid"):
            return False  # a sandboxed command's (its own PID namespace), or one that cannot be read
        listening = set()
        for table in ("tcp", "tcp6"):
            try:
                with open(f"/proc/{pid}/net/{table}", encoding="ascii") as f:
                    next(f, None)  # the header
                    for line in f:
                        fields = line.split()
                        if len(fields) > 9 and fields[3] == LISTEN \
                                and int(fields[1].rsplit(":", 1)[1], 16) == port:
                            listening.add(f"socket:[{fields[9]}]")
            except FileNotFoundError:
                continue  # no IPv6
        if not listening:
            return False
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in listening:
                    return True
            except OSError:
                continue  # closed meanwhile
    except (OSError, ValueError):
        return False
    return False


def _read_token(state_dir: str) -> str | None:
    try:
        with open(os.path.join(state_dir, TOKEN_FILE), encoding="utf-8") as f:
            return f.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _choose(dirs: list[str], url: str | None, token: str | None) -> tuple[str | None, RunningDaemon | None]:
    """The state directory to take the daemon and token from: the first whose live daemon is the one asked for
    (any, without a URL) and proves it knows the token (``token``, else the directory's own), else the first
    with a token file."""
    for state_dir in dirs:
        running = read_daemon_file(state_dir)
        if running is not None and (url is None or running.url == url) \
                and running.proven_by(token if token is not None else _read_token(state_dir)):
            return state_dir, running
    for state_dir in dirs:
        if os.path.isfile(os.path.join(state_dir, TOKEN_FILE)):
            return state_dir, None
    return None, None


def target(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Target:
    """The daemon ``args`` name, by the rules of the module doc."""
    env = os.environ if environ is None else environ
    given_url = (args.url or env.get("TRELLIS_URL") or "").rstrip("/") or None
    token = args.token or env.get("TRELLIS_TOKEN") or None
    state_dir, running = _choose(state_dirs(args, env), given_url, token)
    url = given_url or (running.url if running is not None else DEFAULT_URL)
    if token is None and state_dir is not None:
        token = _read_token(state_dir)
    return Target(url, token, state_dir)


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (``localhost`` or a loopback address): proxies never apply.

    :func:`actors.hosts.is_loopback_host`'s rule, written again: importing ``actors`` would load the whole
    runtime into every client command (about a second)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["DAEMON_FILE", "DEFAULT_STATE_DIR", "DEFAULT_URL", "RunningDaemon", "Target", "add_arguments",
           "daemon_file_proof", "is_loopback", "listens_on", "read_daemon_file", "state_dirs", "target",
           "user_state_dir"]
