"""No orphans without a sandbox: what a command starts with ``setsid`` or a double fork dies with it.

A process group holds neither: these tests fail with group kills alone.
"""

from __future__ import annotations

import os

import trio

from actors import CountingIds, Settings, load_script, open_daemon
from actors.background.shell import Kill, OutputBuffer, ShellProcess, ShellTask
from actors.process import NO_SANDBOX, RUN_VAR, TASK_VAR, run_id
from actors.subagents.runners import ArgvProcess
from tests.processes import kill_all, marker, pids_with, sleeping

# Three sleeps that each escape differently: a new session, a double fork, and the shell's own child.
ESCAPING = "setsid sleep {m} & (sleep {m} &); sleep {m}"
UNSANDBOXED = Settings(approval_mode="yolo", sandbox="off")


def call(name: str, **arguments) -> dict:
    return {"tool_call": {"name": name, "arguments": arguments}}


async def until(predicate, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def escaped(mark: str) -> None:
    """Wait until all three sleeps run, and check that one really left the shell's session."""
    await until(lambda: len(sleeping(mark)) == 3)
    assert len({os.getsid(pid) for pid in sleeping(mark)}) == 2


async def test_killing_a_background_shell_leaves_none_of_what_it_started(tmp_path):
    mark = marker()
    exits: list[tuple[int | None, bool]] = []
    task = ShellTask("shell-1", ESCAPING.format(m=mark), str(tmp_path), on_output=lambda _: None,
                     on_exit=lambda code, killed: exits.append((code, killed)), sandbox=NO_SANDBOX)
    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                ref = await nursery.start(task.run)
                await escaped(mark)
                assert await ref.ask(Kill) is True
                await until(lambda: not pids_with(mark), 5)
        assert exits == [(exits[0][0], True)]
    finally:
        kill_all(pids_with(mark))


async def test_a_foreground_shell_takes_what_it_left_running_with_it(tmp_path):
    mark = marker()
    process = ShellProcess(f"{ESCAPING.format(m=mark)} & echo started", str(tmp_path), OutputBuffer())
    try:
        with trio.fail_after(30):
            await process.start()
            await escaped(mark)
            await process.run()
            await process.kill_and_reap()  # what every shell call does once its shell has exited
            await until(lambda: not pids_with(mark), 5)
    finally:
        kill_all(pids_with(mark))


async def test_a_subagent_command_that_is_stopped_leaves_nothing(tmp_path):
    mark = marker()
    process = ArgvProcess(["/bin/sh", "-c", ESCAPING.format(m=mark)], str(tmp_path), OutputBuffer())
    try:
        with trio.fail_after(30):
            await process.start()
            await escaped(mark)
            await process.kill_and_reap()
            await until(lambda: not pids_with(mark), 5)
    finally:
        kill_all(pids_with(mark))


async def test_closing_an_unsandboxed_session_kills_every_shell_and_monitor_command_it_started(tmp_path):
    shell_mark, monitor_mark = marker(), marker()
    model = load_script({"responses": [
        [call("shell", command=ESCAPING.format(m=shell_mark), run_in_background=True),
         call("monitor", command=ESCAPING.format(m=monitor_mark), timeout=300)],
        [{"text": "started"}],
    ]})
    try:
        with trio.fail_after(30):
            async with open_daemon(UNSANDBOXED, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
                session, _ = await daemon.create_session()
                assert (await session.status())["sandbox"] == "off"
                await session.prompt("start them")
                await escaped(shell_mark)
                await escaped(monitor_mark)
                await daemon.close_session(session.session_id)
                await until(lambda: not pids_with(shell_mark) and not pids_with(monitor_mark), 5)
    finally:
        kill_all(pids_with(shell_mark) + pids_with(monitor_mark))


async def test_stopping_an_unsandboxed_daemon_kills_what_its_shells_started(tmp_path):
    mark = marker()
    model = load_script({"responses": [[call("shell", command=ESCAPING.format(m=mark), run_in_background=True)],
                                       [{"text": "started"}]]})
    try:
        with trio.fail_after(30):
            async with open_daemon(UNSANDBOXED, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
                session, _ = await daemon.create_session()
                await session.prompt("start it")
                await escaped(mark)
            await until(lambda: not pids_with(mark), 5)
    finally:
        kill_all(pids_with(mark))


async def test_every_command_carries_this_run_and_a_task_of_its_own(tmp_path):
    show = f'echo "${RUN_VAR} ${TASK_VAR}"'
    model = load_script({"responses": [[call("shell", command=show)], [call("shell", command=show)],
                                       [{"text": "done"}]]})
    with trio.fail_after(30):
        async with open_daemon(UNSANDBOXED, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            await session.prompt("look")
            async for event in sub:
                if event.type in ("turn_complete", "turn_error"):
                    break
    seen = [request.messages[-1].content.split("\n")[0].split() for request in model.calls[1:]]
    assert [run for run, _ in seen] == [run_id(), run_id()]
    assert seen[0][1] != seen[1][1] and all(len(task) == 16 for _, task in seen)
