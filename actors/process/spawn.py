"""Starting a model-run command from the thread that runs Trio.

``trio.lowlevel.open_process`` forks from a worker thread. The sandbox's
``--die-with-parent`` is ``PR_SET_PDEATHSIG``, which fires when the *thread*
that forked exits, and Trio retires idle worker threads after a few seconds:
a sandboxed command would be killed for nothing. Forking from the Trio thread
ties the command's life to the thread that lives as long as the daemon does.
The fork itself is short (CPython uses ``vfork`` here), so the event loop
barely notices.

:class:`Child` is the small part of ``trio.Process`` the shells use: ``pid``,
``stdout`` (a Trio stream), ``returncode`` and ``wait()``.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

import trio

POLL_INTERVAL = 0.05  # seconds, only where pidfd_open is missing


class Child:
    """A started process whose stdout and stderr share one pipe."""

    def __init__(self, popen: subprocess.Popen[bytes], stdout: trio.lowlevel.FdStream) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdout = stdout
        self._wait_lock = trio.Lock()

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        """Wait for the process to exit and reap it; its exit code (negative: killed by that signal)."""
        async with self._wait_lock:
            if self._popen.poll() is None:
                try:
                    pidfd = os.pidfd_open(self.pid)
                except (AttributeError, OSError):
                    while self._popen.poll() is None:
                        await trio.sleep(POLL_INTERVAL)
                else:
                    try:
                        await trio.lowlevel.wait_readable(pidfd)
                    finally:
                        os.close(pidfd)
            return self._popen.wait()


def require_executable(program: str, cwd: str, env: Mapping[str, str]) -> None:
    """Raise ``FileNotFoundError`` as ``Popen`` would when ``program`` cannot be run.

    A sandboxed command starts ``bwrap``, which always exists; checking the
    real program first keeps "it never started" an ``OSError`` at start, as
    it is without a sandbox, rather than an exit code from inside.
    """
    if "/" in program:
        found = os.path.join(cwd, program)
        ok = os.path.isfile(found) and os.access(found, os.X_OK)
    else:
        ok = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    if not ok:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def spawn_child(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> Child:
    """Start ``argv`` in its own session and process group, stdin from /dev/null, output piped."""
    read_end, write_end = os.pipe()
    try:
        popen = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=write_end,
            stderr=write_end, start_new_session=True, close_fds=True,
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return Child(popen, trio.lowlevel.FdStream(read_end))
