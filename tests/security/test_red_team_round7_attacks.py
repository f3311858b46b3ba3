"""Red team, seventh round, the attacks: what a hostile model's command still gets past the two new protections.

The protections (``actors/process/disk.py``, ``actors/process/root_only.py``): a disk reserve kept free on every
file system a sandboxed command may write (refused at the start, the daemon's commands killed by a watch once
one passes it, ``fallocate`` refused by the seccomp filter), and the files only root may read under the system
directories, found by a scan of their modes and hidden from a root daemon's commands.

Every test asserts the SAFE behaviour. Each was a finding (it failed) until the fix named in its docstring or
comment: the ioctls that preallocate refused by the seccomp filter, free inodes kept as well as blocks, the
mounts below a writable path watched too, a file system watched by every path still there, the scan's roots
walked /etc first, mounted volumes entered, where commands write not walked, /proc's and /sys's own files
scanned, and a directory full of hidden entries hidden whole. A real bwrap, as root (CI runs as root); every
file system a test fills is a small tmpfs the test mounts itself (and unmounts), never the host's disk.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from actors.process import root_only
from actors.process.disk import MIB, DiskGuard
from actors.process.sandbox import SandboxSetting, make_home, resolve_sandbox
from tests.e2e.isolation_harness import hostile_daemon, needs_bwrap, shell, small_tmpfs

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs and attacks a root daemon (CI runs as root)")

RESERVE_MIB = 8
SETTINGS = {"sandbox": {"mode": "bwrap", "diskReserve": RESERVE_MIB}}
MARK = secrets.token_hex(8)


tmpfs = small_tmpfs


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(directory: str) -> str:
    """A command writing ``directory`` 256 KiB at a time, about 20 MiB a second: far more than the tmpfs holds."""
    return (f"cd {directory} && i=0; while [ $i -lt 400 ]; do head -c 262144 /dev/zero >> fill 2>/dev/null; "
            "i=$((i+1)); sleep 0.01; done; echo END")


def run_sandboxed(command: str, cwd: Path, home_root: Path, *, reserve: int = RESERVE_MIB) -> subprocess.CompletedProcess:
    sandbox = resolve_sandbox(SandboxSetting("bwrap", disk_reserve=reserve))
    sandbox = sandbox.with_home(make_home(str(home_root), "s/commands"))
    argv = sandbox.wrap(["/bin/sh", "-c", command], str(cwd))
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, start_new_session=True,
                          env=sandbox.environment(os.environ))


def daemon_results(tmp_path: Path, responses: list, timeout: float = 90) -> list[str]:
    async def run() -> list[str]:
        async with hostile_daemon(tmp_path, responses, settings=SETTINGS) as d:
            sid = await d.open_session()
            await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=timeout)
            return d.tool_results()

    return trio.run(run)


# ---------------------------------------------------------------------------------------------- the disk reserve

# FS_IOC_RESVSP / FS_IOC_RESVSP64 (_IOW('X', 40 / 42, struct space_resv)): the XFS preallocation ioctls, which
# fs/ioctl.c answers for every regular file of every file system with fallocate (ext4, tmpfs, xfs, btrfs) by
# calling vfs_fallocate(FALLOC_FL_KEEP_SIZE). The seccomp filter refuses the fallocate *syscall* only.
RESVSP = {"FS_IOC_RESVSP": 0x40305828, "FS_IOC_RESVSP64": 0x4030582A}


def preallocate_ioctl(request: int, leave: int = 64 * 1024) -> str:
    """A command taking all but ``leave`` bytes of its cwd's file system in one ioctl, the file's size unchanged."""
    code = ("import fcntl, os, struct; st = os.statvfs('.'); n = st.f_bavail * st.f_frsize - " + str(leave) + "; "
            "fd = os.open('hog', os.O_RDWR | os.O_CREAT, 0o644); "
            f"fcntl.ioctl(fd, {request}, struct.pack('=hhxxxxqqii16x', 0, 0, 0, n, 0, 0)); "
            "print('size', os.fstat(fd).st_size, 'allocated', os.fstat(fd).st_blocks * 512)")
    return f"{sys.executable} -c \"{code}\"; echo END"


@needs_bwrap
@needs_root
@pytest.mark.parametrize("name", sorted(RESVSP))
def test_the_preallocation_ioctls_cannot_take_the_reserve_in_one_call(tmp_path, name):
    with tmpfs(tmp_path / "work") as work:
        done = run_sandboxed(preallocate_ioctl(RESVSP[name]), work, tmp_path / "state")
        free = free_bytes(work)
    assert "END" in done.stdout, done
    assert free >= RESERVE_MIB * MIB, (free, done.stdout, done.stderr)


@needs_bwrap
@needs_root
def test_the_daemons_watch_cannot_undo_a_preallocation_ioctl(tmp_path):
    with tmpfs(tmp_path / "work") as work:
        results = daemon_results(tmp_path, [[shell(preallocate_ioctl(RESVSP["FS_IOC_RESVSP64"]))],
                                            [{"text": "done"}]])
        free = free_bytes(work)
    assert results, results
    assert free > 1 * MIB, (free, results)  # what the reserve promises: never a full disk


@needs_bwrap
@needs_root
def test_a_command_taking_every_inode_is_stopped(tmp_path):
    make = ("i=0; while [ $i -lt 3000 ]; do touch f$i 2>/dev/null || break; i=$((i+1)); done; "
            "echo made=$i; sleep 2; echo END")
    with tmpfs(tmp_path / "work", "size=32m,nr_inodes=1000") as work:
        made, after = daemon_results(tmp_path, [[shell(make)], [shell("touch another && echo still-here")],
                                                [{"text": "done"}]])
        inodes, free = os.statvfs(work).f_favail, free_bytes(work)
    # unsafe: no inode left while the blocks are free (made=998, END, and "touch: ... No space left on device")
    assert "END" not in made or "refusing to start a command" in after, (inodes, free, made, after)


@needs_bwrap
@needs_root
def test_a_file_system_mounted_below_the_cwd_keeps_its_reserve(tmp_path):
    with tmpfs(tmp_path / "work") as work, tmpfs(work / "data", "size=16m") as data:
        filled, = daemon_results(tmp_path, [[shell(fill("data"))], [{"text": "done"}]])[:1]
        free = free_bytes(data)
    assert "END" not in filled and free > 1 * MIB, (free, filled)


@needs_root
def test_the_watch_still_sees_a_file_system_whose_first_admitted_path_was_removed(tmp_path):
    victim = subprocess.Popen(["sleep", "30"])
    try:
        with tmpfs(tmp_path / "fs") as fs:
            guard = DiskGuard(RESERVE_MIB, lambda: [victim.pid] if victim.poll() is None else [])
            (fs / "first-home").mkdir()
            guard.admit([str(fs / "first-home")])  # session 1's command
            (fs / "first-home").rmdir()  # session 1 closed: its home removed
            (fs / "second-home").mkdir()
            guard.admit([str(fs / "second-home")])  # session 2's command: admitted (room enough)
            with open(fs / "second-home" / "fill", "wb") as f:  # what session 2's command then writes
                f.write(b"\0" * (30 * MIB))

            async def watch() -> None:
                with trio.move_on_after(2):
                    await guard.watch(interval=0.05)

            trio.run(watch)
        assert guard.kills >= 1 and victim.wait(timeout=5) == -9, guard.kills
    finally:
        victim.kill()
        victim.wait()


@needs_bwrap
@needs_root
def test_a_later_session_filling_its_home_is_stopped_after_an_earlier_session_closed(tmp_path):
    state = tmp_path / "state"
    with tmpfs(state):
        responses = [[shell("echo first")], [{"text": "ok"}], [shell(fill("$HOME"))], [{"text": "done"}]]

        async def run() -> list[str]:
            async with hostile_daemon(tmp_path, responses, settings=SETTINGS) as d:
                first = await d.open_session()
                await d.wait_turn(first, await d.prompt(first, "go"), timeout=60)
                assert (await d.client.delete(f"/session/{first}")).status_code == 204
                homes = state / "homes"
                with trio.fail_after(10):
                    while homes.exists() and any(p.name == first for p in homes.iterdir()):
                        await trio.sleep(0.05)
                second = await d.open_session()
                await d.wait_turn(second, await d.prompt(second, "go"), timeout=90)
                return d.tool_results()

        results = trio.run(run)
        free = free_bytes(state)
    filled = results[-1]
    assert "END" not in filled and free > 1 * MIB, (free, results)


# ------------------------------------------------------------------------------------- the root-only files scan


@needs_bwrap
@needs_root
def test_a_command_cannot_blind_the_scan_by_making_entries_where_it_is_walked(tmp_path):
    etc, srv = tmp_path / "etc", tmp_path / "srv"
    etc.mkdir()
    (etc / "service.key").write_text(f"key={MARK}\n")
    (etc / "service.key").chmod(0o600)
    project = srv / "project"
    project.mkdir(parents=True)
    roots = (str(etc), str(srv))  # as SCANNED_ROOTS: /etc first, so walked last (a stack)
    assert str(etc / "service.key") in root_only.scan(roots)[0]  # before: found
    flood = (f"{sys.executable} -c \"import os; [os.close(os.open(f'f{{i}}', os.O_CREAT | os.O_WRONLY)) "
             f"for i in range({root_only.ENTRY_LIMIT + 10})]\"; echo END")
    done = run_sandboxed(flood, project, tmp_path / "state", reserve=0)
    assert "END" in done.stdout, done
    found, stopped = root_only.scan(roots)
    assert str(etc / "service.key") in found or not stopped, stopped


@needs_root
def test_the_scan_finds_root_only_files_on_a_volume_mounted_below_a_scanned_root(tmp_path):
    srv = tmp_path / "srv"
    srv.mkdir()
    with tmpfs(srv / "volume", "size=1m,mode=0755") as volume:
        (volume / "db.key").write_text(f"key={MARK}\n")
        (volume / "db.key").chmod(0o600)
        found, _ = root_only.scan((str(srv),))
    assert str(volume / "db.key") in found, found


ROOT_ONLY_KERNEL_FILES = ["/proc/slabinfo", "/proc/vmallocinfo", "/proc/pagetypeinfo", "/proc/timer_list"]


def _root_only_acpi_table() -> list[str]:
    tables = "/sys/firmware/acpi/tables"
    with contextlib.suppress(OSError):
        for name in sorted(os.listdir(tables)):
            path = os.path.join(tables, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and root_only.private_to(st):
                return [path]
    return []


@needs_bwrap
@needs_root
@pytest.mark.parametrize("path", ROOT_ONLY_KERNEL_FILES + _root_only_acpi_table())
def test_root_only_kernel_files_are_not_readable(tmp_path, path):
    if not os.path.exists(path) or not root_only.private_to(os.stat(path)):
        pytest.skip(f"{path} is not root-only here")
    work = tmp_path / "work"
    work.mkdir()
    done = run_sandboxed(f"head -c 64 {path} | wc -c", work, tmp_path / "state")
    assert done.stdout.strip().splitlines()[-1] == "0", done


# --------------------------------------------------------------------------------------- what held (regressions)


@needs_bwrap
@needs_root
def test_fallocate_of_another_abi_and_io_uring_are_refused(tmp_path):
    """The fallocate syscall (EOPNOTSUPP), io_uring_setup (ENOSYS: IORING_OP_FALLOCATE never starts) and x32."""
    code = ("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); fd = os.open('f', os.O_CREAT | os.O_RDWR); "
            "r = libc.syscall(285, fd, 0, ctypes.c_long(0), ctypes.c_long(1 << 20)); print('fallocate', r, ctypes.get_errno()); "
            "p = ctypes.create_string_buffer(120); r = libc.syscall(425, 8, p); print('io_uring', r, ctypes.get_errno()); "
            "r = libc.syscall(0x40000000 | 285, fd, 0, ctypes.c_long(0), ctypes.c_long(1 << 20)); print('x32', r, ctypes.get_errno())")
    with tmpfs(tmp_path / "work") as work:
        done = run_sandboxed(f"{sys.executable} -c \"{code}\"", work, tmp_path / "state")
        allocated = (work / "f").stat().st_blocks
    assert "fallocate -1 95" in done.stdout, done  # EOPNOTSUPP
    assert "io_uring -1 38" in done.stdout, done  # ENOSYS
    assert "x32 -1 38" in done.stdout, done
    assert allocated == 0


@needs_bwrap
@needs_root
def test_a_double_forked_writer_dies_with_the_command(tmp_path):
    """setsid + a double fork: the pid namespace and the cgroup listing take it down with the shell."""
    with tmpfs(tmp_path / "work") as work:
        start = time.monotonic()
        results = daemon_results(tmp_path, [[shell("(setsid sh -c 'sleep 1; " + fill(".").replace("echo END", "")
                                                   + "' >/dev/null 2>&1 &) ; echo spawned")], [shell("sleep 4; echo waited")],
                                            [{"text": "done"}]])
        time.sleep(1)
        free = free_bytes(work)
    assert time.monotonic() - start < 90
    assert free > 16 * MIB, (free, results)  # the orphan died with its sandbox before it wrote


@needs_bwrap
@needs_root
def test_a_command_cannot_stop_other_sessions_commands_by_making_root_only_files(tmp_path, monkeypatch):
    srv = tmp_path / "srv"
    project, other = srv / "project", tmp_path / "other"
    project.mkdir(parents=True)
    other.mkdir()
    flood = (f"{sys.executable} -c \"import os; [os.close(os.open(f'k{{i}}', os.O_CREAT | os.O_WRONLY, 0o600)) "
             "for i in range(30000)]\"; echo END")
    assert "END" in run_sandboxed(flood, project, tmp_path / "state", reserve=0).stdout
    monkeypatch.setattr(root_only, "_SYSTEM", root_only.RootOnlyFiles((str(srv),)))  # /srv, scanned afresh
    try:
        done = run_sandboxed("echo other-session-ok", other, tmp_path / "state2", reserve=0)
    except OSError as exc:
        pytest.fail(f"another session's command could not start: {exc}")
    assert "other-session-ok" in done.stdout, done
