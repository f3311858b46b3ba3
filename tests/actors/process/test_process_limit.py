"""actors/process/limits.py with a real bwrap: a session's sandboxed commands cannot start more than the limit.

The limit is the settings file's ``sandbox.maxProcesses``: every sandbox here is made from a settings document,
as the daemon makes its own (actors.daemon: ``resolve_sandbox(settings.sandbox, ...)``).

The fork loops here are bounded (at most 120 forks, a timeout), and what they start dies with the command
(the sandbox's PID namespace), so a limit that does not hold cannot hurt the machine.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from actors.process.limits import DEFAULT_MAX_PROCESSES, resolve_process_limit
from actors.process.sandbox import SandboxSetting, SandboxUnavailable, make_home, remove_home, resolve_sandbox
from actors.settings import SettingsError
from actors.settings_file import settings_from_dict

FORKS = 120
# Starts up to FORKS sleepers from an inner shell (a shell exits at its first failed fork), then counts the
# processes of the PID namespace and reads the first error with builtins only (no fork left to spare), then
# kills them; they would die with the command anyway.
SCRIPT = (f"sh -c 'i=0; while [ $i -lt {FORKS} ]; do sleep 30 & i=$((i+1)); done' 2>/tmp/err; "
          "set -- /proc/[0-9]*; echo started=$#; read -r line </tmp/err; echo \"error=$line\"; "
          "kill -9 -1; echo done")


def _sandbox(limit: int):
    """The sandbox of a daemon whose settings file says ``{"sandbox": {"mode": "bwrap", "maxProcesses": limit}}``."""
    settings = settings_from_dict({"sandbox": {"mode": "bwrap", "maxProcesses": limit}})
    try:
        sandbox = resolve_sandbox(settings.sandbox)
    except SandboxUnavailable as exc:
        if "maxProcesses" in str(exc):
            raise
        pytest.skip(f"bwrap cannot run here: {exc}")
    return sandbox


def _run(sandbox, work: Path) -> str:
    done = subprocess.run(sandbox.wrap(["/bin/sh", "-c", SCRIPT], str(work)), cwd=work, capture_output=True,
                          text=True, timeout=60)
    return done.stdout + done.stderr


def test_a_sessions_commands_cannot_start_more_processes_than_the_limit(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    sandbox = _sandbox(40)
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
        remove_home(home)  # the session's end removes its group with its home (once its last process died)
        deadline = time.monotonic() + 10
        while os.path.exists(group):
            assert time.monotonic() < deadline, f"{group} outlived its home"
            time.sleep(0.02)


def test_without_a_limit_the_same_command_starts_them_all(tmp_path):
    # The control: the loop above is what hits the limit, not something else of the machine.
    work = tmp_path / "work"
    work.mkdir()
    sandbox = _sandbox(0)
    assert sandbox.processes.how == "none" and sandbox.processes.reason == "sandbox.maxProcesses is 0"
    out = _run(sandbox, work)
    assert int(out.split("started=")[1].split()[0]) >= FORKS, out


def test_the_limit_setting_is_checked_and_named():
    assert settings_from_dict({}).sandbox == "auto"  # the string form: the default limit
    assert settings_from_dict({"sandbox": {"maxProcesses": DEFAULT_MAX_PROCESSES}}).sandbox == "auto"
    assert settings_from_dict({"sandbox": {"maxProcesses": 0}}).sandbox == SandboxSetting(max_processes=0)
    assert settings_from_dict({"sandbox": {"maxProcesses": 8}}).sandbox.max_processes == 8
    base = settings_from_dict({"sandbox": {"mode": "off", "maxProcesses": 64}})
    for bad, says in ((3, "3 is too few for bwrap and a shell (at least 8; 0: no limit)"),
                      ("many", 'must be a number of processes from 8 to 4194304 (0: no limit), got "many"'),
                      (-1, "must be a number of processes from 8 to 4194304 (0: no limit), got -1"),
                      (4_194_305, "must be a number of processes from 8 to 4194304 (0: no limit), got 4194305"),
                      (1e3, "must be a number of processes from 8 to 4194304 (0: no limit), got 1000.0"),
                      (True, "must be a number of processes from 8 to 4194304 (0: no limit), got true")):
        with pytest.raises(SettingsError) as caught:
            settings_from_dict({"approvalMode": "yolo", "sandbox": {"maxProcesses": bad}}, source="settings.json",
                               base=base)
        assert str(caught.value) == f"settings.json: sandbox.maxProcesses: {says}"
    assert base == settings_from_dict({"sandbox": {"mode": "off", "maxProcesses": 64}})  # nothing changed
    with pytest.raises(ValueError, match="sandbox.maxProcesses: 3 is too few"):
        resolve_process_limit(3)  # a SandboxSetting made in code is checked the same way
    limit = resolve_process_limit(64)
    # A pids cgroup, or no limit at all, said so: never RLIMIT_NPROC, which counts the user's whole host.
    assert limit.how in ("cgroup", "none")
    assert limit.how == "cgroup" or limit.reason


def test_the_sandbox_flag_keeps_the_files_limit(tmp_path):
    from actors.settings_file import load_settings

    path = tmp_path / "settings.json"
    path.write_text('{"sandbox": {"mode": "auto", "maxProcesses": 40}}')
    assert load_settings(path, sandbox="bwrap").sandbox == SandboxSetting("bwrap", max_processes=40)


def test_a_daemon_with_a_bad_limit_in_its_settings_file_does_not_start(tmp_path):
    import sys

    (tmp_path / "none.json").write_text('{"responses": []}')
    settings = tmp_path / "settings.json"
    settings.write_text('{"sandbox": {"mode": "off", "maxProcesses": 3}}')
    done = subprocess.run([sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(tmp_path / "state"),
                           "--script", str(tmp_path / "none.json"), "--settings", str(settings)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"{settings}: sandbox.maxProcesses: 3 is too few for bwrap and a shell" in done.stderr
    assert "listening on" not in done.stdout and not (tmp_path / "state").exists()
