"""The disk reserve of sandboxed commands (``actors/process/disk.py``): the amount, the refusal at a start, the
watch while commands run. The file systems are real: a tmpfs of a few MiB where this process may mount one (CI
runs as root), so filling it touches nothing else."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
import trio

from actors.process.disk import MIB, DiskGuard, DiskShortage, Shortage, reserve_for, shortage
from actors.process.sandbox import SandboxSetting
from tests.e2e.isolation_harness import small_tmpfs


@pytest.fixture
def tmpfs(tmp_path) -> Iterator[Path]:
    """A 32 MiB tmpfs of its own."""
    with small_tmpfs(tmp_path / "small") as point:
        yield point


def free_mib(path: Path) -> float:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / MIB


def test_the_default_reserve_is_a_gibibyte_or_five_percent_of_a_smaller_file_system():
    assert reserve_for(None, 100 * 1024 * MIB) == 1024 * MIB
    assert reserve_for(None, 10 * 1024 * MIB) == 512 * MIB
    assert reserve_for(16, 10 * 1024 * MIB) == 16 * MIB
    assert reserve_for(0, 10 * 1024 * MIB) == 0


def test_a_file_system_below_its_reserve_is_named_with_its_free_space(tmpfs):
    assert shortage([str(tmpfs)], 8) is None
    (tmpfs / "fill").write_bytes(b"\0" * 28 * MIB)
    found = shortage([str(tmpfs / "absent"), str(tmpfs)], 8)  # a path that is gone is passed over
    assert found == Shortage(str(tmpfs), found.free, 8 * MIB) and found.free < 8 * MIB
    assert found.describe() == (f"the file system holding {tmpfs} has {found.free // MIB} MiB free, under the "
                                f"8 MiB the sandbox keeps free there (sandbox.diskReserve)")
    assert shortage([str(tmpfs)], 0) is None


def test_a_command_is_refused_at_its_start_below_the_reserve_and_never_with_none(tmpfs):
    (tmpfs / "fill").write_bytes(b"\0" * 28 * MIB)
    with pytest.raises(DiskShortage, match=rf"^refusing to start a command: the file system holding {tmpfs} has "
                                           r"\d+ MiB free, under the 8 MiB .*\(sandbox.diskReserve\)\. Free space"):
        DiskGuard(8, None).admit([str(tmpfs)])
    DiskGuard(0, None).admit([str(tmpfs)])  # 0: no reserve
    DiskGuard(1, None).admit([str(tmpfs)])


@pytest.mark.parametrize(("value", "problem"), [
    (-1, "must be a number of MiB from 0 to"),
    ("1G", "sandbox.diskReserve"),
    (1.5, "sandbox.diskReserve"),
])
def test_a_bad_reserve_setting_is_refused_naming_its_key(value, problem):
    with pytest.raises(ValueError, match=problem) as raised:
        SandboxSetting.parse({"mode": "auto", "diskReserve": value})
    assert "sandbox.diskReserve" in str(raised.value)


def test_the_reserve_setting_is_kept():
    assert SandboxSetting.parse({"mode": "auto", "diskReserve": 64}).disk_reserve == 64
    assert SandboxSetting.parse({"mode": "auto", "diskReserve": 0}).disk_reserve == 0
    assert SandboxSetting.parse({"mode": "auto"}) == "auto"


async def test_the_watch_kills_the_commands_once_their_file_system_passes_its_reserve(tmpfs):
    sleeper = subprocess.Popen(["sleep", "60"])
    guard = DiskGuard(8, lambda: [sleeper.pid] if sleeper.poll() is None else [])
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(guard.watch, interval=0.02))
            await trio.sleep(0)
            guard.admit([str(tmpfs)])
            await trio.sleep(0.2)
            assert sleeper.poll() is None and guard.kills == 0  # above the reserve: left alone
            (tmpfs / "fill").write_bytes(b"\0" * 28 * MIB)
            with trio.fail_after(10):
                while sleeper.poll() is None:
                    await trio.sleep(0.02)
            assert sleeper.returncode == -9
            assert guard.kills == 1
            assert guard.stopped_since(0) == f"the command was killed: {guard.last.describe()}"
            assert guard.stopped_since(1) is None  # a command started after the kill was not stopped by it
            with pytest.raises(DiskShortage):
                guard.admit([str(tmpfs)])
            nursery.cancel_scope.cancel()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_volume_below_a_writable_path_is_watched_and_a_non_local_one_is_not(tmp_path):
    from actors.process.disk import local_paths
    from actors.process.mounts import file_system_type

    with small_tmpfs(tmp_path / "work") as work, small_tmpfs(work / "data", "size=1m") as data:
        proc = work / "proc"
        proc.mkdir()
        if subprocess.run(["mount", "-t", "proc", "proc", str(proc)], capture_output=True).returncode != 0:
            pytest.skip("cannot mount a proc here")
        try:
            # a proc (like NFS, FUSE) is not the host's disk, and its statvfs may hang: never watched
            assert file_system_type(str(proc)) == "proc" and file_system_type(str(data)) == "tmpfs"
            assert local_paths([str(work)]) == [str(work), str(data)]
        finally:
            subprocess.run(["umount", "-l", str(proc)], check=False)
