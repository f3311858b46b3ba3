"""The lifeline: a small process that kills the daemon's commands once the daemon is gone, however it went.

Without the sandbox's PID namespace nothing in the kernel ties a command to
the daemon: when the daemon is SIGKILLed, every shell it started is
reparented and runs on. The lifeline closes that gap with a pipe:

- the daemon makes the pipe and keeps the write end to itself (``O_CLOEXEC``,
  so no command it executes inherits it, and a plain ``fork`` of the daemon
  closes it in the child: a copy of the daemon is not the daemon);
- the lifeline gets only the read end, as its stdin, and blocks reading it;
- the kernel closes the write end when the daemon ends — a normal exit, a
  crash, SIGKILL alike — and the read returns end of file;
- then the lifeline kills every process carrying the daemon's run marker
  (:data:`actors.process.reaper.RUN_VAR`), sweeping a few times over half a
  second so that a fork or an ``exec`` in flight when the daemon died is
  caught too, and exits.

It is detached from the daemon: started in a session of its own, it forks
once more and the intermediate exits, so it is neither in the daemon's
process group nor among its descendants. A terminal's Ctrl-C, a kill of the
daemon's process group or of its whole process tree (a supervisor's "kill
tree", the daemon's own forced shutdown) all miss it — exactly when it is
needed. It does not use ``PR_SET_PDEATHSIG``: that fires when the *thread*
that forked exits, and the daemon may start it from any thread.

The daemon knows it is alive through a second pipe, the other way round: the
lifeline holds its write end as stdout (it writes its pid there once, then
nothing), the daemon polls the read end, and end of file there means the
lifeline is gone, so :mod:`actors.process.markers` starts another.

It holds no secret: its environment is empty and its command line is the
interpreter, this file and the run id (which is not a secret: knowing it
only lets a process get itself killed). The daemon starts it as
``python -I -S <this file> <run id>``: isolated, standard library only, so it
starts in milliseconds and imports nothing of the package. ``python -m
actors.process.lifeline <run id>`` runs it by hand.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import threading
import time

try:
    from .reaper import RUN_VAR, kill_marked
except ImportError:  # run by path, as the daemon starts it: the sibling module, without the package
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "_trellis_reaper", os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py"))
    assert _spec is not None and _spec.loader is not None
    _reaper = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_reaper)
    RUN_VAR, kill_marked = _reaper.RUN_VAR, _reaper.kill_marked

SWEEPS = (0.0, 0.05, 0.15, 0.3)  # seconds to wait before each sweep after end of file: 0.5 s in all
RUN_ID = re.compile(r"[0-9a-f]{16,64}")

_open: set[Lifeline] = set()  # this process's lifelines whose write end is open


class Lifeline:
    """The daemon's side: the write end of the lifeline's pipe and the read end of its heartbeat."""

    def __init__(self, write_end: int, heartbeat: int, run: str) -> None:
        self.run = run
        self._write_end: int | None = write_end
        self._heartbeat: int | None = heartbeat
        self._said = b""  # what the lifeline wrote: its pid and a newline
        self._gone = False

    @classmethod
    def start(cls, run: str) -> Lifeline:
        """Start a lifeline for ``run`` (without waiting for it); ``OSError`` when it cannot start."""
        if not RUN_ID.fullmatch(run):
            raise ValueError(f"not a run id: {run!r}")
        watch_read, watch_write = os.pipe()  # all four ends O_CLOEXEC: no command we execute inherits one
        beat_read, beat_write = os.pipe()
        try:
            starter = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), run],
                stdin=watch_read, stdout=beat_write, stderr=subprocess.DEVNULL,
                cwd="/", env={}, close_fds=True, start_new_session=True,
            )
        except BaseException:
            os.close(watch_write)
            os.close(beat_read)
            raise
        finally:
            os.close(watch_read)
            os.close(beat_write)
        # The starter forks the lifeline off and exits at once; reap it without holding anyone up.
        threading.Thread(target=starter.wait, name="lifeline-starter", daemon=True).start()
        os.set_blocking(beat_read, False)
        lifeline = cls(watch_write, beat_read, run)
        _open.add(lifeline)
        return lifeline

    def _listen(self) -> None:
        while self._heartbeat is not None and not self._gone:
            try:
                data = os.read(self._heartbeat, 64)
            except BlockingIOError:
                return
            if not data:
                self._gone = True
            self._said += data

    @property
    def watching(self) -> bool:
        """Still holding our end and not known to have exited: it will sweep when this process ends."""
        self._listen()
        return self._write_end is not None and not self._gone

    @property
    def exited(self) -> bool:
        """The lifeline (and its starter) have exited."""
        self._listen()
        return self._gone

    def pid(self, timeout: float = 10.0) -> int:
        """The lifeline's pid, once it has said it (``TimeoutError`` if it does not within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._said:
            remaining = deadline - time.monotonic()
            if self._heartbeat is None or self._gone or remaining <= 0:
                raise TimeoutError("the lifeline did not say its pid")
            select.select([self._heartbeat], [], [], remaining)
            self._listen()
        return int(self._said.split(b"\n", 1)[0])

    def close(self) -> None:
        """Let go of the pipe, as the daemon's death would: the lifeline sweeps and exits."""
        _open.discard(self)
        if self._write_end is not None:
            os.close(self._write_end)
            self._write_end = None

    def release(self) -> None:
        """Close both ends: :meth:`close`, and stop listening to the heartbeat."""
        self.close()
        if self._heartbeat is not None:
            os.close(self._heartbeat)
            self._heartbeat = None


def _after_fork_in_child() -> None:
    for lifeline in list(_open):  # this copy of the daemon is not the daemon: it holds neither end
        lifeline.release()


os.register_at_fork(after_in_child=_after_fork_in_child)


def watch(fd: int, run: str) -> int:
    """Block until ``fd`` reaches end of file, then sweep ``run``'s processes; how many were killed."""
    while True:
        try:
            if not os.read(fd, 4096):
                break
        except OSError:
            break
    killed = 0
    for delay in SWEEPS:
        time.sleep(delay)
        killed += kill_marked(RUN_VAR, run)
    return killed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not RUN_ID.fullmatch(args[0]):
        print("usage: lifeline RUN_ID  (stdin: the pipe whose end of file means the daemon is gone)",
              file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP):  # only the pipe ends it early; SIGTERM still does, on purpose
        signal.signal(sig, signal.SIG_IGN)
    if os.fork():
        os._exit(0)  # the starter: gone, so the lifeline is nobody's descendant
    try:
        os.write(1, f"{os.getpid()}\n".encode())
    except OSError:
        pass  # nobody listens (run by hand with stdout closed): watch all the same
    watch(0, args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
