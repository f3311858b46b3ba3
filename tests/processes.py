"""Finding a test's processes from the host, sandboxed or not.

Inside the sandbox's PID namespace ``$$`` and ``$!`` are that namespace's
numbers, so tests mark their commands with a unique word instead and look for
it in every host process's command line (the sandbox's own ``bwrap`` processes
carry the command too, so they are counted as well).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def marker() -> str:
    """A ``sleep`` duration no other process uses: ``sleep 300.<random>``."""
    return f"300.{secrets.randbelow(10**9):09d}"


def alive(pid: int) -> bool:
    """Present in /proc and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def pids_with(word: str) -> list[int]:
    """Live host processes whose command line contains ``word`` (this test process excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if word in cmdline and alive(int(entry)):
            found.append(int(entry))
    return found


def sleeping(mark: str) -> list[int]:
    """Live host processes that are ``sleep <mark>`` itself (not a shell or ``bwrap`` whose command names it)."""
    found = []
    for pid in pids_with(mark):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(argv) >= 2 and os.path.basename(argv[0]) == b"sleep" and argv[1] == mark.encode():
            found.append(pid)
    return found


def kill_all(pids: list[int]) -> None:
    """Clean up after a failed assertion: SIGKILL what is left (gone already is fine)."""
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
