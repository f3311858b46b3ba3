"""Background shells as real subprocesses, driven through a session's tools."""

from __future__ import annotations

from pathlib import Path

import trio

from actors import CountingIds, Settings, load_script, open_daemon
from tests.processes import kill_all, marker, pids_with, sleeping


def call(name: str, **arguments) -> dict:
    return {"tool_call": {"name": name, "arguments": arguments}}


async def wait_for(predicate, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def run_until_idle(session, sub) -> list:
    got = []
    async for event in sub:
        got.append(event)
        if event.type in ("turn_complete", "turn_error"):
            return got
    return got


YOLO = Settings(approval_mode="yolo")


async def test_incremental_shell_output_loses_no_line_and_repeats_none(tmp_path):
    lines = 300
    command = (f'for i in $(seq 1 {lines}); do printf "line-%d\\n" $i; '
               f'[ $((i % 50)) -eq 0 ] && sleep 0.1; done; true')
    reads = [{"delay": 0.1, "steps": [call("shell_output", task_id="shell-1")]} for _ in range(40)]
    model = load_script({"responses": [[call("shell", command=command, run_in_background=True)], *reads,
                                       [{"text": "done"}]]})
    with trio.fail_after(30):
        async with open_daemon(YOLO, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            await session.prompt("watch it")
            await run_until_idle(session, sub)
    outputs = []
    # Reads every 0.1 s for 4 s: the 0.6 s loop has long finished by the last one.
    for request in model.calls[2:]:
        result = request.messages[-1]
        assert result.role == "tool" and result.name == "shell_output"
        outputs.append(result.content.split("\n", 1)[1])
    assert outputs[-1] == "" and "status: completed, exit code 0" in model.calls[-1].messages[-1].content
    seen = "".join(outputs).split()
    assert seen == [f"line-{i}" for i in range(1, lines + 1)]
    assert sum(1 for o in outputs if o) >= 3  # it really was read in pieces


async def test_kill_task_ends_the_shell_and_its_grandchild(tmp_path):
    mark = marker()
    command = f"sleep {mark} & touch started; wait"
    model = load_script({"responses": [
        [call("shell", command=command, run_in_background=True)],
        {"delay": 0.5, "steps": [call("kill_task", task_id="shell-1")]},
        [{"text": "killed"}],
    ]})
    with trio.fail_after(30):
        async with open_daemon(YOLO, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            await session.prompt("start and kill")
            await wait_for(lambda: (tmp_path / "started").exists() and len(pids_with(f"sleep {mark}")) >= 2)
            events = await run_until_idle(session, sub)
            assert "Stopped shell-1" in model.calls[2].messages[-1].content
            await wait_for(lambda: not pids_with(mark), 5)
            finished = [e.data for e in events if e.type == "background_task" and e.data["status"] == "finished"]
            assert finished and finished[0]["state"] == "killed"


async def test_kill_task_kills_the_process_group_also_a_child_without_the_markers(tmp_path):
    """The marker sweep only finds what carries ``TRELLIS_TASK``; a child that dropped it is found by its
    process group alone (``os.killpg``), which the sweep must not hide."""
    mark = marker()
    command = f"env -u TRELLIS_TASK -u TRELLIS_DAEMON_RUN sleep {mark} & touch started; wait"
    model = load_script({"responses": [
        [call("shell", command=command, run_in_background=True)],
        {"delay": 0.5, "steps": [call("kill_task", task_id="shell-1")]},
        [{"text": "killed"}],
    ]})
    try:
        with trio.fail_after(30):
            async with open_daemon(Settings(approval_mode="yolo", sandbox="off"), model=model, ids=CountingIds(),
                                   workspace=str(tmp_path)) as daemon:
                session, _ = await daemon.create_session()
                sub = session.subscribe()
                await session.prompt("start and kill")
                await wait_for(lambda: (tmp_path / "started").exists() and len(sleeping(mark)) == 1)
                [child] = sleeping(mark)
                environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
                assert not [v for v in environ if v.startswith((b"TRELLIS_TASK=", b"TRELLIS_DAEMON_RUN="))]
                events = await run_until_idle(session, sub)
                assert "Stopped shell-1" in model.calls[2].messages[-1].content
                # Gone after the kill, while the session (and the daemon, and its lifeline) still run.
                await wait_for(lambda: not sleeping(mark), 5)
                finished = [e.data for e in events if e.type == "background_task" and e.data["status"] == "finished"]
                assert finished and finished[0]["state"] == "killed"
    finally:
        kill_all(sleeping(mark))


async def test_closing_the_session_kills_everything_it_started(tmp_path):
    mark = marker()
    starts = [call("shell", command=f"sleep {mark}{n} & touch s{n}; wait", run_in_background=True)
              for n in range(3)]
    model = load_script({"responses": [[*starts], [{"text": "started"}]]})
    with trio.fail_after(30):
        async with open_daemon(YOLO, model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session()
            sub = session.subscribe()
            await session.prompt("start three")
            await run_until_idle(session, sub)
            await wait_for(lambda: all((tmp_path / f"s{n}").exists() for n in range(3)))
            await wait_for(lambda: all(pids_with(f"sleep {mark}{n} ") for n in range(3)))
            status = await session.status()
            assert [t["status"] for t in status["backgroundTasks"]] == ["running"] * 3
            await daemon.close_session(session.session_id)
            await wait_for(lambda: not pids_with(mark), 5)
