"""``--report-loop-stalls MS``: the real daemon times its steps once it listens and reports the longest at exit,
held time (less run-queue delay) beside wall time (actors/loop_stalls.py, wired in transport/bootstrap.py)."""

from __future__ import annotations

import re

import trio

from actors.loop_stalls import RunDelay
from tests.conftest import daemon_process

REPORT = re.compile(r"event loop: longest step ([0-9.]+) ms in task (\S+) \(([0-9.]+) ms wall; longest wall step "
                    r"([0-9.]+) ms(?:; [0-9.]+ ms of it collecting garbage, generation \d)?\); (\d+) step\(s\) over 1000 ms")


async def test_the_daemon_reports_its_longest_step_held_and_wall_at_exit(tmp_path):
    with trio.fail_after(60):
        async with daemon_process("--model", "scripted", "--report-loop-stalls", "1000", state_dir=tmp_path) as daemon:
            async with daemon.client(daemon.token()) as client:
                assert (await client.get("/health")).status_code == 200
    report = REPORT.search(daemon.stderr.decode())
    assert report is not None or not RunDelay().available, daemon.stderr.decode()
    if report is not None:
        held, task, wall, longest_wall, stalls = report.groups()
        assert float(held) <= float(wall) <= float(longest_wall)
        assert task != "-" and stalls == "0"
