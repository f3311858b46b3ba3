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
import subprocess
from pathlib import Path

import pytest
import trio

from tests.e2e.isolation_harness import hostile_daemon, needs_bwrap, shell

FILL = "i=0; while [ $i -lt 400 ]; do head -c 262144 /dev/zero >> fill; i=$((i+1)); sleep 0.01; done; echo END"
AFTER = "echo still-here"


def small_cwd(tmp_path) -> Path:
    """``tmp_path/work`` (the hostile daemon's cwd), a 32 MiB tmpfs of its own."""
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(work)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}): CI runs as root")
    return work


SETTINGS = {"sandbox": {"mode": "bwrap", "diskReserve": 8}}


@needs_bwrap
def test_a_command_filling_its_cwd_is_stopped_at_the_reserve_and_the_next_one_refused(tmp_path):
    work = small_cwd(tmp_path)
    try:
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
    finally:
        subprocess.run(["umount", "-l", str(work)], check=False)
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
    work = small_cwd(tmp_path)
    try:
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
    finally:
        subprocess.run(["umount", "-l", str(work)], check=False)
    assert re.search(r"finished with exit code (-9|137); the command was killed: the file system holding "
                     rf"{re.escape(str(work))} has \d+ MiB free, under the 8 MiB", told), told
