"""Red team, seventh round: a command filled the disk it writes.

Nothing bounded what a sandboxed command writes in its cwd: ``yes > log`` filled the file system the project
shares with the host (and often with the daemon's state). Now each file system a command may write keeps a
reserve free (``sandbox.diskReserve``, ``actors/process/disk.py``): the daemon kills its running commands when
one passes it, says why in the shell's result, and refuses the next command until there is room.

The real daemon (a subprocess, as root), a real bwrap, the session's cwd a 32 MiB tmpfs of its own, its reserve
8 MiB; the command writes 256 KiB at a time, about 20 MiB a second, much more than the tmpfs holds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import trio

from actors.process.sandbox import SandboxSetting, resolve_sandbox
from tests.e2e.isolation_harness import hostile_daemon, needs_bwrap, shell, small_tmpfs

FILL = "i=0; while [ $i -lt 400 ]; do head -c 262144 /dev/zero >> fill; i=$((i+1)); sleep 0.01; done; echo END"
AFTER = "echo still-here"


SETTINGS = {"sandbox": {"mode": "bwrap", "diskReserve": 8}}


@needs_bwrap
def test_a_command_filling_its_cwd_is_stopped_at_the_reserve_and_the_next_one_refused(tmp_path):
    with small_tmpfs(tmp_path / "work") as work:  # the hostile daemon's cwd
        responses = [[shell(FILL)], [shell(AFTER)], [{"text": "done"}]]

        async def run() -> list[str]:
            async with hostile_daemon(tmp_path, responses, settings=SETTINGS) as d:
                with trio.fail_after(90):
                    sid = await d.open_session()
                    record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=90)
                assert record["state"] == "completed", record
                return d.tool_results()

        filled, after = trio.run(run)
        st = os.statvfs(work)
        free = st.f_bavail * st.f_frsize
    assert "END" not in filled, filled
    # -9: bwrap itself was killed; 137: it saw its command killed first and reported it as a shell does
    assert re.search(rf"\[exit code (-9|137); the command was killed: the file system holding {re.escape(str(work))} "
                     r"has \d+ MiB free", filled), filled
    assert "MiB the sandbox keeps free there (sandbox.diskReserve)]" in filled, filled
    assert free > 1024 * 1024, free  # stopped near the reserve, never at a full disk
    assert "still-here" not in after, after
    assert f"refusing to start a command: the file system holding {work} has " in after, after


@needs_bwrap
def test_a_background_shell_stopped_at_the_reserve_tells_the_model_why(tmp_path):
    with small_tmpfs(tmp_path / "work") as work:
        responses = [[shell(FILL, background=True)], [{"text": "started"}], [{"text": "noted"}]]

        async def run() -> str:
            async with hostile_daemon(tmp_path, responses, settings=SETTINGS) as d:
                with trio.fail_after(90):
                    sid = await d.open_session()
                    await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=90)
                    while len(d.fake.requests) < 3:  # the notification's automatic turn
                        await trio.sleep(0.1)
                return json.dumps(d.fake.requests[2].body)

        told = trio.run(run)
    assert re.search(r"finished with exit code (-9|137); the command was killed: the file system holding "
                     rf"{re.escape(str(work))} has \d+ MiB free, under the 8 MiB", told), told


# ``fallocate`` takes any size in one call, faster than any watch: refused where the reserve is kept, as a file
# system without it answers (EOPNOTSUPP), so that the C library's posix_fallocate writes the blocks instead.
PREALLOCATE = ("fallocate -l 64M direct; echo direct=$?; "
               f"{sys.executable} -c \"import os; fd = os.open('emulated', os.O_CREAT | os.O_WRONLY); "
               "os.posix_fallocate(fd, 0, 1 << 20); print('emulated', os.fstat(fd).st_size)\"; echo END")


@needs_bwrap
@pytest.mark.skipif(shutil.which("fallocate") is None, reason="util-linux's fallocate is not installed")
@pytest.mark.parametrize(("reserve", "refused"), [(8, True), (0, False)])
def test_fallocate_is_refused_where_a_disk_reserve_is_kept_and_posix_fallocate_still_works(tmp_path, reserve,
                                                                                          refused):
    sandbox = resolve_sandbox(SandboxSetting("bwrap", disk_reserve=reserve))
    if not sandbox.seccomp:
        pytest.skip("no seccomp filter for this machine")
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(sandbox.wrap(["/bin/sh", "-c", PREALLOCATE], str(work)), cwd=work, capture_output=True,
                          text=True, timeout=60, start_new_session=True)
    assert "END" in done.stdout, done
    assert "emulated 1048576" in done.stdout, done
    if refused:
        assert "direct=1" in done.stdout and "Operation not supported" in done.stderr, done
        assert not (work / "direct").exists() or (work / "direct").stat().st_blocks == 0, done
    else:
        assert "direct=0" in done.stdout and (work / "direct").stat().st_size == 64 * 2**20, done
