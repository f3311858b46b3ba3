"""Finding and killing every process a command started, by a marker in its environment.

A process group does not hold a command's processes: ``setsid`` leaves it, and
a double fork leaves the parent chain too. The environment does hold them:
it is inherited through ``fork``, ``setsid`` and ``exec`` unless a program
deliberately replaces it. So every command the daemon starts carries two
non-secret variables (:mod:`actors.process.markers`):

- :data:`RUN_VAR` — the daemon process's run id, the same for all its commands;
- :data:`TASK_VAR` — an id of its own per started command;

and the host finds the command's processes again by reading
``/proc/<pid>/environ`` (readable for processes of the same user).

Killing is careful about two races. A process found in one pass may fork
before it is killed, so :func:`kill_marked` scans again until a pass finds
nothing new (a process with a fatal signal pending cannot complete a fork,
so the loop ends). And a pid may be reused between reading and killing, so
each process is pinned with ``pidfd_open`` *before* its environment is read
and signalled through that pidfd: a process that exited in between makes the
signal fail instead of hitting a stranger. Entries that vanish or cannot be
read mid-scan are skipped.

While a marked process is alive its direct children are found too, through
``/proc/<pid>/task/<tid>/children``, marked or not: a child that was started
with a scrubbed environment (``env -i``) is still caught as long as its
parent lives. One that scrubbed its environment *and* lost its parent is not
(the documented limit, docs/processes.md).

Standard library only: the lifeline (:mod:`actors.process.lifeline`) runs this
without importing the rest of the package.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable

RUN_VAR = "TRELLIS_DAEMON_RUN"
TASK_VAR = "TRELLIS_TASK"

MAX_PASSES = 20  # a pass that finds nothing new ends the loop long before this
PROC = "/proc"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone, a kernel thread, another user's, mid-exec: not ours to judge
        return None


def _has(environ: bytes, needle: bytes) -> bool:
    return (b"\0" + environ + b"\0").find(b"\0" + needle + b"\0") >= 0


def _parent(pid: int) -> int | None:
    stat = _read(f"{PROC}/{pid}/stat")
    if not stat:
        return None
    try:
        return int(stat.rsplit(b")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        threads = os.listdir(f"{PROC}/{pid}/task")
    except OSError:
        return found
    for tid in threads:
        data = _read(f"{PROC}/{pid}/task/{tid}/children")  # absent without CONFIG_PROC_CHILDREN: then none
        if data:
            found += [int(c) for c in data.split() if c.isdigit()]
    return found


def _pids() -> list[int]:
    try:
        entries = os.listdir(PROC)
    except OSError:  # no /proc (not Linux): nothing can be found, nothing is killed
        return []
    me = os.getpid()
    return [int(e) for e in entries if e.isdigit() and int(e) != me]


class _Pinned:
    """A process held by a pidfd, so that signalling it can never hit a process that reused its pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        try:
            self.fd = os.pidfd_open(pid)
        except ProcessLookupError:
            raise
        except (AttributeError, OSError):  # no pidfd_open (before Linux 5.3): the bare pid it is
            pass

    def signal(self, sig: int) -> bool:
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            else:
                os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _pin_if(pid: int, still: Callable[[], bool]) -> _Pinned | None:
    """``pid`` pinned, if ``still()`` holds once it is pinned (so what was checked is the pinned process)."""
    try:
        held = _Pinned(pid)
    except ProcessLookupError:
        return None
    if still():
        return held
    held.close()
    return None


def marked_pids(name: str, value: str) -> list[int]:
    """Live processes whose environment holds ``name=value`` (this process excluded)."""
    return _marked(_pids(), name, value)


def _marked(pids: Iterable[int], name: str, value: str) -> list[int]:
    needle = f"{name}={value}".encode()
    return [pid for pid in pids if (environ := _read(f"{PROC}/{pid}/environ")) and _has(environ, needle)]


def kill_marked(name: str, value: str, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` to every process marked ``name=value`` and to the live children of each.

    Scans until a pass finds no process it has not signalled yet (at most
    :data:`MAX_PASSES`). Returns how many processes were signalled. Never
    signals the calling process.
    """
    me = os.getpid()
    signalled: set[int] = set()  # tried already, whether the signal landed or the process was gone
    landed = 0
    for _ in range(MAX_PASSES):
        pinned: list[_Pinned] = []
        for pid in marked_pids(name, value):
            if pid not in signalled:
                held = _pin_if(pid, lambda pid=pid: bool(_marked([pid], name, value)))
                if held is not None:
                    pinned.append(held)
        # The children of what was found, read before anything is killed (a dead parent's children move).
        parents = [held.pid for held in pinned]
        seen = set(parents) | signalled
        while parents:
            parent = parents.pop()
            for child in _children(parent):
                if child in seen or child == me:
                    continue
                seen.add(child)
                held = _pin_if(child, lambda child=child, parent=parent: _parent(child) == parent)
                if held is not None:
                    pinned.append(held)
                    parents.append(child)
        if not pinned:
            break
        for held in pinned:
            landed += held.signal(sig)
            signalled.add(held.pid)
            held.close()
    return landed

