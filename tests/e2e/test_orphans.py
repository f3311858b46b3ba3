"""No orphans, ever: the real daemon, with and without the sandbox, leaves no process behind.

Every command here starts a ``setsid`` child and a double-forked one, which
neither a process group kill nor the parent chain reaches. Without bubblewrap
the markers and the lifeline (docs/processes.md) must find them; with it the
PID namespace does as well.
"""

from __future__ import annotations

import signal

import pytest
import trio

from tests.e2e.isolation_harness import KEY, TOKEN, descendants, hostile_daemon, needs_bwrap, process_image, shell
from tests.processes import alive, kill_all, marker, pids_with, sleeping

SANDBOXES = [pytest.param("off", id="sandbox-off"), pytest.param("auto", id="bwrap", marks=needs_bwrap)]


async def running(mark: str, count: int) -> None:
    with trio.fail_after(15):
        while len(sleeping(mark)) < count:
            await trio.sleep(0.05)


SHOW_RUN = shell('echo "run=$TRELLIS_DAEMON_RUN"')


def run_of(d) -> str:
    """The daemon's run id, as a command saw it (``SHOW_RUN``)."""
    return next(r for r in d.tool_results() if "run=" in r).split("run=", 1)[1].split()[0]


def lifelines(run: str) -> list[int]:
    """The lifeline of ``run``: detached from the daemon, so found by its command line, not in the daemon's tree."""
    found = []
    for pid in pids_with(run):
        argv = process_image(pid).split("\n")[-1].split("\0")  # its command line
        if len(argv) >= 3 and argv[-2] == run and argv[-3].endswith("lifeline.py"):
            found.append(pid)
    return found


async def detached_lifelines(run: str, daemon: int) -> list[int]:
    """The lifelines of ``run`` once they are out of the daemon's tree.

    The starter forks the lifeline and exits; until it has, the one process
    found may still be the starter, a child of the daemon. A starter that
    exits between the two scans is in neither the daemon's tree nor alive: so
    what is returned must still be alive after the tree was read.
    """
    with trio.fail_after(5):
        while True:
            found = lifelines(run)
            if found and not set(found) & set(descendants(daemon)) and all(alive(pid) for pid in found):
                return found
            await trio.sleep(0.02)


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_deleting_a_session_leaves_nothing_it_started(tmp_path, sandbox):
    mark = marker()
    command = f"setsid sleep {mark} & (sleep {mark} &); sleep {mark}"
    try:
        async with hostile_daemon(tmp_path, [[shell(command, background=True)], [{"text": "started"}]],
                                  sandbox=sandbox) as d:
            sid = await d.open_session()
            await d.wait_turn(sid, await d.prompt(sid, "leave something running"))
            await running(mark, 3)
            r = await d.client.delete(f"/session/{sid}")
            assert r.status_code == 204, r.text
            with trio.fail_after(2):
                while pids_with(mark):
                    await trio.sleep(0.02)
    finally:
        kill_all(pids_with(mark))


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_nothing_survives_the_daemon_being_sigkilled_for_two_seconds(tmp_path, sandbox):
    mark = marker()
    commands = [f"sleep {mark}", f"setsid sleep {mark} & wait", f"(sleep {mark} &); sleep {mark}"]
    responses = [[*(shell(c, background=True) for c in commands), SHOW_RUN], [{"text": "started"}]]
    try:
        async with hostile_daemon(tmp_path, responses, sandbox=sandbox) as d:
            sid = await d.open_session()
            await d.wait_turn(sid, await d.prompt(sid, "leave them running"))
            await running(mark, 4)
            watchers = await detached_lifelines(run_of(d), d.proc.pid)
            assert len(watchers) == 1
            d.proc.send_signal(signal.SIGKILL)
            with trio.fail_after(2):
                while pids_with(mark) or any(alive(pid) and "lifeline.py" in process_image(pid) for pid in watchers):
                    await trio.sleep(0.02)
    finally:
        kill_all(pids_with(mark))


@pytest.mark.parametrize("sandbox", SANDBOXES)
async def test_a_graceful_shutdown_leaves_nothing_behind(tmp_path, sandbox):
    mark = marker()
    command = f"setsid sleep {mark} & (sleep {mark} &); sleep {mark}"
    try:
        async with hostile_daemon(tmp_path, [[shell(command, background=True)], [{"text": "started"}]],
                                  sandbox=sandbox) as d:
            sid = await d.open_session()
            await d.wait_turn(sid, await d.prompt(sid, "leave something running"))
            await running(mark, 3)
            d.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(15):
                await d.proc.wait()
            with trio.fail_after(2):
                while pids_with(mark):
                    await trio.sleep(0.02)
    finally:
        kill_all(pids_with(mark))


async def test_the_lifeline_holds_no_secret(tmp_path):
    async with hostile_daemon(tmp_path, [[SHOW_RUN], [{"text": "looked"}]], sandbox="off", token_in_env=True) as d:
        sid = await d.open_session()
        await d.wait_turn(sid, await d.prompt(sid, "look"))
        run = run_of(d)
        assert len(run) == 16
        [lifeline] = await detached_lifelines(run, d.proc.pid)  # the starter may not have forked it yet
        image = process_image(lifeline)
        for secret in (KEY, TOKEN, d.token):
            assert secret not in image
        environ, cmdline = (open(f"/proc/{lifeline}/{n}", "rb").read() for n in ("environ", "cmdline"))
        assert environ == b""
        assert cmdline.split(b"\0")[-2] == run.encode()
        await d.assert_no_secret(sid)
