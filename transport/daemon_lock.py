"""One daemon per state directory, and where clients find it: ``daemon.lock`` and ``daemon.json``.

Two daemons on one state directory would each restore the same sessions, append
to the same journals and clear each other's sandbox homes. ``trellis serve``
holds an exclusive ``flock`` on ``<state-dir>/daemon.lock`` from before the
daemon opens until its process ends; a second one refuses to start, naming the
first one's pid and URL. The OS releases the lock of a killed daemon, so a stale
lock file is never a problem (the file itself stays, and is reused).

The ACP agent on stdio (``trellis acp``) holds the same lock, so an editor's
agent and a daemon never share a state directory either.

Once it serves, the daemon writes ``<state-dir>/daemon.json``,
``{"url": ..., "pid": ..., "proof": ...}``, which clients read to find it
(:mod:`trellis.connect`); it is removed on exit. ``proof`` shows the daemon
knows its token (:func:`trellis.connect.daemon_file_proof`; absent when it
wants none): clients take only a file that proves it, so one a sandboxed
command planted in its cwd cannot draw their token to a listener of its own. A killed daemon leaves it
behind: clients check that its pid is alive, and the next daemon replaces it.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from actors.storage import StorageError, replace_private
from trellis.connect import daemon_file_proof

LOCK_FILE = "daemon.lock"
DAEMON_FILE = "daemon.json"


class StateDirInUse(RuntimeError):
    """Another daemon holds the state directory; the message names its pid and URL."""


class HeldStateDir:
    """The state directory, held by this process: :meth:`announce` writes ``daemon.json``."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.announced = False

    @property
    def daemon_file(self) -> Path:
        return self.state_dir / DAEMON_FILE

    def announce(self, url: str, token: str | None) -> None:
        """Write ``daemon.json`` with ``url``, this pid and the proof that it knows ``token`` (``None``: the
        daemon wants none). ``StorageError`` naming the file; not fatal to a daemon: its clients can still be
        given ``--url``."""
        pid = os.getpid()
        proof = {"proof": daemon_file_proof(token, url, pid)} if token else {}
        data = orjson.dumps({"url": url, "pid": pid, **proof})
        replace_private(self.daemon_file, data, sync=False)  # StorageError naming the file
        self.announced = True

    def withdraw(self) -> None:
        if not self.announced:
            return
        try:
            self.daemon_file.unlink()
        except OSError:
            pass
        self.announced = False


def _holder(state_dir: Path, lock_fd: int) -> str:
    """Who holds the lock, as the refusal says it: the pid and role the lock file holds, the URL its
    daemon.json names."""
    try:
        pid, _, role = os.pread(lock_fd, 200, 0).decode().strip().partition(" ")
    except (OSError, UnicodeDecodeError):
        pid, role = "", ""
    try:
        data = orjson.loads((state_dir / DAEMON_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        data = None
    url = data.get("url") if isinstance(data, dict) and str(data.get("pid")) == pid else None
    who = f"pid {pid}" if pid else "another process"
    if url:
        return f"{who}, serving on {url}"
    return f"{who}, {role}" if role else f"{who}, still starting"


@contextmanager
def hold_state_dir(state_dir: str | os.PathLike[str], role: str = "") -> Iterator[HeldStateDir]:
    """Hold ``state_dir`` for this daemon for the body: :class:`StateDirInUse` when another daemon has it,
    ``StorageError`` when the lock file cannot be made. On exit ``daemon.json`` is removed and the lock let go.

    ``role`` says what holds it when it is not an HTTP daemon (``daemon.json`` names those), so the
    refusal of the next one can say who to stop.
    """
    directory = Path(state_dir)
    path = directory / LOCK_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise StorageError(f"cannot open the lock file {path}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateDirInUse(f"another daemon uses the state directory {directory} ({_holder(directory, fd)}); "
                                "stop it first, or give this one another --state-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {role}".strip().encode() + b"\n", 0)  # who holds it, for the refusal of the next one
        held = HeldStateDir(directory)
        try:
            yield held
        finally:
            held.withdraw()
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # lets the lock go


__all__ = ["DAEMON_FILE", "LOCK_FILE", "HeldStateDir", "StateDirInUse", "hold_state_dir"]
