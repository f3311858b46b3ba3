"""actors/process/limits.py with a real bwrap: a session's sandboxed commands cannot start more than the limit.

The fork loops here are bounded (at most 120 forks, a timeout), and what they start dies with the command
(the sandbox's PID namespace), so a limit that does not hold cannot hurt the machine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from actors.process.limits import MAX_PROCESSES_ENV, max_processes, resolve_process_limit
from actors.process.sandbox import SandboxUnavailable, make_home, remove_home, resolve_sandbox

FORKS = 120
# Starts up to FORKS sleepers from an inner shell (a shell exits at its first failed fork), then counts the
# processes of the PID namespace and reads the first error with builtins only (no fork left to spare), then
# kills them; they would die with the command anyway.
SCRIPT = (f"sh -c 'i=0; while [ $i -lt {FORKS} ]; do sleep 30 & i=$((i+1)); done' 2>/tmp/err; "
          "set -- /proc/[0-9]*; echo started=$#; read -r line </tmp/err; echo \"error=$line\"; "
          "kill -9 -1; echo done")


def _sandbox(monkeypatch: pytest.MonkeyPatch, limit: str):
    monkeypatch.setenv(MAX_PROCESSES_ENV, limit)
    try:
        sandbox = resolve_sandbox("bwrap")
    except SandboxUnavailable as exc:
        if MAX_PROCESSES_ENV in str(exc):
            raise
        pytest.skip(f"bwrap cannot run here: {exc}")
    return sandbox


def _run(sandbox, work: Path) -> str:
    done = subprocess.run(sandbox.wrap(["/bin/sh", "-c", SCRIPT], str(work)), cwd=work, capture_output=True,
                          text=True, timeout=60)
    return done.stdout + done.stderr


def test_a_sessions_commands_cannot_start_more_processes_than_the_limit(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    sandbox = _sandbox(monkeypatch, "40")
    if sandbox.processes.how == "none":
        pytest.skip(f"no process limit can be set here: {sandbox.processes.reason}")
    home = make_home(tmp_path / "state", "s1/commands")
    session = sandbox.with_home(home)
    out = _run(session, work)
    started = int(out.split("started=")[1].split()[0])
    assert started <= 40, out  # /proc of the PID namespace: bwrap's init, the shells, the sleepers
    assert "fork" in out.split("error=")[1].lower() and "done" in out, out
    if sandbox.processes.how == "cgroup":
        group = os.path.dirname(session.wrap(["true"], str(work))[3])
        assert Path(group, "pids.max").read_text().strip() == "40"
        remove_home(home)  # the session's end removes its group with its home
        assert not os.path.exists(group)


def test_without_a_limit_the_same_command_starts_them_all(tmp_path, monkeypatch):
    # The control: the loop above is what hits the limit, not something else of the machine.
    work = tmp_path / "work"
    work.mkdir()
    sandbox = _sandbox(monkeypatch, "0")
    assert sandbox.processes.how == "none" and MAX_PROCESSES_ENV in sandbox.processes.reason
    out = _run(sandbox, work)
    assert int(out.split("started=")[1].split()[0]) >= FORKS, out


def test_the_limit_setting_is_checked_and_named():
    assert max_processes({}) == 1024
    assert max_processes({MAX_PROCESSES_ENV: "0"}) == 0
    for bad in ("many", "-1", "3", "1e3"):
        with pytest.raises(ValueError, match=f"\\${MAX_PROCESSES_ENV}"):
            max_processes({MAX_PROCESSES_ENV: bad})
    if os.geteuid() == 0:
        limit = resolve_process_limit({MAX_PROCESSES_ENV: "64"})
        # Root: a pids cgroup, or no limit at all (RLIMIT_NPROC does not bind root), said so.
        assert limit.how in ("cgroup", "none")
        assert limit.how == "cgroup" or "root" in limit.reason
