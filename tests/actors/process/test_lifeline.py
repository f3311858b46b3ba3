"""The lifeline: when the pipe's write end closes (the daemon gone, however), the run's processes go too."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import trio

from actors.process import RUN_VAR, TASK_VAR, ensure_lifeline, marked_environment, run_id, spawn_child
from actors.process.lifeline import Lifeline
from tests.e2e.isolation_harness import descendants
from tests.processes import alive, kill_all, marker, pids_with, sleeping

ESCAPING = "sleep {m} & setsid sleep {m} & (sleep {m} &); sleep {m}"


def start_marked(command: str, run: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["/bin/sh", "-c", command], env={**os.environ, RUN_VAR: run},
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def until(predicate, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


def started_from_a_thread_that_ends(run: str) -> Lifeline:
    """A daemon may start it from a worker thread that Trio retires soon after; PDEATHSIG would fire then."""
    box: list[Lifeline] = []
    thread = threading.Thread(target=lambda: box.append(Lifeline.start(run)))
    thread.start()
    thread.join()
    return box[0]


async def test_closing_the_pipe_kills_every_process_of_the_run_and_the_lifeline_exits():
    mark, bystander_mark = marker(), marker()
    run = secrets.token_hex(8)
    lifeline = started_from_a_thread_that_ends(run)
    shell = start_marked(ESCAPING.format(m=mark), run)
    bystander = start_marked(f"sleep {bystander_mark}", secrets.token_hex(8))  # another run
    try:
        await until(lambda: len(sleeping(mark)) == 4 and sleeping(bystander_mark))
        pid = lifeline.pid()
        await trio.sleep(0.3)  # well past the end of the thread that started it
        assert lifeline.watching and alive(pid)
        lifeline.close()  # what the kernel does to the daemon's end when the daemon dies
        with trio.fail_after(2):
            while pids_with(mark) or not lifeline.exited:
                await trio.sleep(0.02)
        assert bystander.poll() is None and sleeping(bystander_mark)
    finally:
        lifeline.release()
        kill_all(pids_with(mark) + pids_with(bystander_mark))
        shell.wait()
        bystander.wait()


async def test_the_lifeline_holds_no_secret_and_only_the_read_end(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-lifeline-leak")
    monkeypatch.setenv("TRELLIS_TOKEN", "token-lifeline-leak")
    run = secrets.token_hex(8)
    lifeline = Lifeline.start(run)
    try:
        pid = lifeline.pid()
        proc = Path(f"/proc/{pid}")
        assert (proc / "environ").read_bytes() == b""
        argv = (proc / "cmdline").read_bytes().split(b"\x00")[:-1]
        assert argv[1:3] == [b"-I", b"-S"] and argv[-1] == run.encode() and len(argv) == 5
        # Its stdin is the pipe, read-only, and no other descriptor of it holds that pipe: end of file can come.
        stdin = os.readlink(proc / "fd" / "0")
        flags = next(line for line in (proc / "fdinfo" / "0").read_text().splitlines() if line.startswith("flags:"))
        assert stdin.startswith("pipe:") and int(flags.split()[1], 8) & os.O_ACCMODE == os.O_RDONLY
        assert [fd.name for fd in (proc / "fd").iterdir() if os.readlink(fd) == stdin] == ["0"]
        # Detached: not in our process group or session, not our descendant; a group or tree kill misses it.
        assert os.getsid(pid) != os.getsid(0) and os.getpgid(pid) != os.getpgid(0)
        assert pid not in descendants(os.getpid())
    finally:
        lifeline.close()
        await until(lambda: lifeline.exited, 5)
        lifeline.release()


async def test_commands_and_forked_copies_do_not_hold_the_write_end():
    """The lifeline must see end of file while a child of the daemon still runs, or nobody would kill it."""
    mark = marker()
    lifeline = Lifeline.start(secrets.token_hex(8))
    spawned = spawn_child(["sleep", mark], "/", {"PATH": os.environ["PATH"]})  # how commands start
    popen = subprocess.Popen(["sleep", mark], close_fds=False)  # even with every inheritable fd passed on
    hooked = await trio.lowlevel.open_process(["sleep", mark])  # how hooks start (trio.run_process)
    forked = os.fork()
    if forked == 0:  # a copy of this process that is not the daemon: holds nothing open for long
        time.sleep(60)
        os._exit(0)
    try:
        assert len(sleeping(mark)) == 3
        lifeline.close()
        with trio.fail_after(2):
            while not lifeline.exited:
                await trio.sleep(0.02)
        assert len(sleeping(mark)) == 3  # unmarked: none of the lifeline's business
    finally:
        lifeline.release()
        os.kill(forked, signal.SIGKILL)
        os.waitpid(forked, 0)
        kill_all(pids_with(mark))
        await spawned.wait()
        await hooked.wait()
        popen.wait()


async def test_a_lifeline_that_died_is_replaced_at_the_next_command():
    env, task = marked_environment({"PATH": "/bin"})
    env2, task2 = marked_environment({})
    assert env == {"PATH": "/bin", RUN_VAR: run_id(), TASK_VAR: task} and env2[RUN_VAR] == run_id()
    assert task != task2
    lifeline = ensure_lifeline()
    assert lifeline is not None and lifeline.watching and lifeline.run == run_id()
    assert ensure_lifeline() is lifeline
    os.kill(lifeline.pid(), signal.SIGKILL)  # a command with the user's rights may do this
    await until(lambda: lifeline.exited, 5)
    marked_environment({})
    replacement = ensure_lifeline()
    assert replacement is not None and replacement is not lifeline and replacement.watching
    assert alive(replacement.pid())


def test_the_lifeline_refuses_a_run_id_that_is_not_one():
    with pytest.raises(ValueError):
        Lifeline.start("")
    result = subprocess.run([sys.executable, "-m", "actors.process.lifeline", "x"], capture_output=True,
                            stdin=subprocess.DEVNULL, timeout=30, check=False)
    assert result.returncode == 2 and b"usage" in result.stderr
