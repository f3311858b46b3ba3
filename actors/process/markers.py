"""Marking the commands a daemon starts, so that all their processes can be found and killed.

Every model-run command (``shell``, ``monitor`` commands, the ``command``
subagent runner) and every hook gets, on top of its environment:

- ``TRELLIS_DAEMON_RUN`` — this process's run id, made once per process (a
  forked child makes its own);
- ``TRELLIS_TASK`` — an id for this one command.

Neither is a secret. :mod:`actors.process.reaper` finds the processes by
them; a command's kill paths kill its ``TRELLIS_TASK``, and the lifeline
(:mod:`actors.process.lifeline`) kills the whole ``TRELLIS_DAEMON_RUN`` once
this process is gone. The lifeline is started before the first marked
command exists (so none ever runs unwatched) and started again at the next
command if it has died.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
from collections.abc import Mapping

import trio

from .lifeline import Lifeline
from .reaper import RUN_VAR, TASK_VAR, kill_marked

log = logging.getLogger("trellis.processes")

_lock = threading.Lock()
_run: str | None = None
_lifeline: Lifeline | None = None


def run_id() -> str:
    """This process's run id (random, made at the first call)."""
    global _run
    with _lock:
        if _run is None:
            _run = secrets.token_hex(8)
        return _run


def ensure_lifeline() -> Lifeline | None:
    """This process's lifeline, started (or restarted) if need be; ``None`` if it cannot run.

    Commands start it lazily; a daemon may call this at start to have it ready.
    """
    global _lifeline
    run = run_id()
    with _lock:
        if _lifeline is not None and _lifeline.watching:
            return _lifeline
        if _lifeline is not None:
            log.warning("the lifeline has exited; starting another")
            _lifeline.release()
            _lifeline = None
        if not os.path.isdir("/proc/self"):
            return None  # nothing to find processes by: the markers stay, without a lifeline
        try:
            _lifeline = Lifeline.start(run)
        except OSError as exc:
            log.warning("cannot start the lifeline (%s): if this process is killed, "
                        "commands it started outside a sandbox keep running", exc)
            return None
        return _lifeline


def marked_environment(env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """``env`` plus this run's marker and a new task marker; returns it and the task id."""
    ensure_lifeline()
    task = secrets.token_hex(8)
    return {**env, RUN_VAR: run_id(), TASK_VAR: task}, task


def kill_task_now(task: str) -> int:
    """SIGKILL every process of one command, here and now (blocks for one scan of ``/proc``)."""
    return kill_marked(TASK_VAR, task)


async def kill_task(task: str) -> int:
    """SIGKILL every process of one command, scanning ``/proc`` off the event loop's thread."""
    return await trio.to_thread.run_sync(kill_marked, TASK_VAR, task)


def _after_fork_in_child() -> None:
    # A forked copy of the daemon is not the daemon: its commands are a run of their own, with a
    # lifeline of their own (the lifeline module closes the parent's pipe in the child).
    global _lock, _run, _lifeline
    _lock = threading.Lock()  # another thread may have held it at the fork
    _run = None
    _lifeline = None


os.register_at_fork(after_in_child=_after_fork_in_child)
