"""Killing every process below the daemon at once, what a forced shutdown does: by process group, then by
this run's marker (:mod:`.markers`) for what left both the group and the tree."""

from __future__ import annotations

import os
import signal

from .markers import run_id
from .reaper import RUN_VAR, kill_marked


def _descendants(root: int) -> list[int]:
    """Every live process below ``root``, from /proc (empty where there is none)."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat.rsplit(b")", 1)[-1].split()
            if len(fields) > 1 and fields[0] != b"Z":
                parents[int(entry)] = int(fields[1])
    found: list[int] = []
    frontier = {root}
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found.extend(children)
        frontier = children
    return found


def kill_process_groups(root: int | None = None) -> int:
    """SIGKILL every process group (and process) below ``root`` (this process); how many groups.

    Every command the daemon starts leads its own process group, so this ends them
    with whatever they started in the same group; what left the group (``setsid``)
    dies with the sandbox's PID namespace, or, without the sandbox, by the run
    marker every command carries.
    """
    root = os.getpid() if root is None else root
    own = os.getpgid(0)
    groups: set[int] = set()
    for pid in _descendants(root):
        try:
            pgid = os.getpgid(pid)
        except OSError:
            continue
        if pgid != own and pgid not in groups:
            groups.add(pgid)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _kill_marked_run()  # what left the group and the tree (setsid, double forks) still carries our marker
    return len(groups)


def _kill_marked_run() -> int:
    """SIGKILL every process marked with this daemon's run id (:mod:`.markers`)."""
    try:
        return kill_marked(RUN_VAR, run_id())
    except OSError:
        return 0
