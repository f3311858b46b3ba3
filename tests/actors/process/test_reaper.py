"""kill_marked: every process carrying a marker, however it left its group, and nothing else."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

import trio

from actors.process import reaper
from actors.process.reaper import kill_marked, marked_pids
from tests.processes import kill_all, marker, pids_with, sleeping

NAME = "TRELLIS_TEST_MARK"  # not a name the daemon uses: these tests never touch a real run's processes
# A setsid grandchild, a double-forked one (its parent subshell gone at once), and the shell's own child.
ESCAPING = "setsid sleep {m} & (sleep {m} &); sleep {m}"


def start(command: str, value: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, NAME: value}
    return subprocess.Popen(["/bin/sh", "-c", command], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def until(predicate, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def test_a_setsid_and_a_double_forked_grandchild_are_found_and_nothing_else():
    mine, other = marker(), marker()
    value = secrets.token_hex(8)
    shell = start(ESCAPING.format(m=mine), value)
    bystander = start(f"sleep {other}", secrets.token_hex(8))  # another marker value: not ours
    try:
        await until(lambda: len(sleeping(mine)) == 3 and sleeping(other))
        sleeps = sleeping(mine)
        sessions = {os.getsid(pid) for pid in sleeps}
        assert len(sessions) == 2  # the setsid one left the shell's session: a group kill misses it
        assert set(sleeps) <= set(marked_pids(NAME, value))
        assert kill_marked(NAME, value) >= 4  # the shell and its three sleeps
        await until(lambda: not pids_with(mine), 5)
        assert shell.wait() < 0
        assert sleeping(other) and bystander.poll() is None  # the unrelated process lives on
    finally:
        kill_all(pids_with(mine) + pids_with(other))
        bystander.wait()
        shell.wait()


async def test_a_child_that_scrubbed_its_environment_is_found_while_its_parent_lives():
    mine = marker()
    value = secrets.token_hex(8)
    shell = start(f"env -i sleep {mine} & wait", value)
    try:
        await until(lambda: sleeping(mine))
        assert sleeping(mine)[0] not in marked_pids(NAME, value)  # its environment says nothing
        kill_marked(NAME, value)
        await until(lambda: not pids_with(mine), 5)
    finally:
        kill_all(pids_with(mine))
        shell.wait()


def test_the_caller_is_never_signalled_even_when_it_carries_the_marker():
    value = secrets.token_hex(8)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from actors.process.reaper import kill_marked; "
            f"kill_marked({NAME!r}, {value!r}); print('survived')")
    result = subprocess.run([sys.executable, "-c", code, os.getcwd()], env={**os.environ, NAME: value},
                            capture_output=True, timeout=30, check=False)
    assert result.stdout == b"survived\n", result.stderr


def test_entries_that_vanish_or_cannot_be_read_are_skipped(tmp_path, monkeypatch):
    value = secrets.token_hex(8)
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names nobody now
    listed = tmp_path / str(gone.pid)
    listed.mkdir()
    (listed / "environ").write_bytes(f"{NAME}={value}\0".encode())  # found in the scan, gone when pinned
    (tmp_path / "424242").mkdir()  # a process without a readable environment
    (tmp_path / "424242" / "environ").mkdir()
    (tmp_path / "self").mkdir()
    (tmp_path / "not-a-pid").write_text("")
    monkeypatch.setattr(reaper, "PROC", str(tmp_path))
    assert marked_pids(NAME, value) == [gone.pid]
    assert kill_marked(NAME, value) == 0
    monkeypatch.setattr(reaper, "PROC", str(tmp_path / "missing"))  # no /proc at all
    assert marked_pids(NAME, value) == [] and kill_marked(NAME, value) == 0


def test_only_the_exact_value_matches():
    assert reaper._has(b"A=1\0" + f"{NAME}=abc\0".encode(), f"{NAME}=abc".encode())
    assert reaper._has(f"{NAME}=abc".encode(), f"{NAME}=abc".encode())  # no trailing NUL
    assert not reaper._has(f"{NAME}=abcd\0".encode(), f"{NAME}=abc".encode())
    assert not reaper._has(f"X{NAME}=abc\0".encode(), f"{NAME}=abc".encode())
