"""Red team, third round: the file tools and background shells against a hostile model, each as the safe behaviour.

Each test drives the real daemon (``python -m transport`` against the loopback fake OpenAI server,
:func:`tests.e2e.isolation_harness.hostile_daemon`, approval mode ``yolo``) with a scripted hostile model and
checks from the host what its tool calls achieved.

* ``read_file`` of a FIFO the model made blocked a worker thread in ``open`` until a writer came: the turn could
  not be cancelled, and 40 of them (40 subagents) took every thread of trio's default limiter, so creating a
  session and every other file and storage call of the daemon waited for good. Every file tool now refuses what
  is not a regular file (a FIFO, a socket, a device), naming the path and its kind.
* Background shells kept 4 Mi *characters* of output each, 256 shells a session: one model response of shells
  printing 4-byte characters grew the daemon by 1.6 GiB in 20 s. Output is now bounded in bytes, per shell and
  per session, and what was dropped is counted.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import trio

from tests.e2e.isolation_harness import Running, hostile_daemon


def call(tool: str, n: int, /, **arguments: Any) -> list[dict[str, Any]]:
    return [{"tool_call": {"id": f"call_{n}", "name": tool, "arguments": arguments}}]


DONE = [{"text": "done"}]
PIPES = 40  # trio's default worker-thread limiter: 40 reads stuck on FIFOs held every thread of it


async def open_session(d: Running) -> str:
    r = await d.client.post("/session", json={})
    assert r.status_code == 200, r.text
    return r.json()["sessionId"]


def release(fifos: list[Path]) -> None:
    """Open each FIFO at both ends and close it: a reader or writer the daemon left blocked returns (the daemon
    with the defect can then stop)."""
    for fifo in fifos:
        try:
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
        except OSError:
            pass


async def test_file_tools_refuse_fifos_and_devices_at_once_and_the_daemon_keeps_serving(tmp_path):
    make = ("mkdir -p f d && for i in $(seq 1 %d); do mkfifo f/p$i; done && mkfifo d/.gitignore && "
            "echo alpha > d/a.txt && echo ordinary > ok.txt" % PIPES)
    reads = [step for i in range(1, PIPES + 1) for step in call("read_file", i, path=f"f/p{i}")]
    responses = [call("shell", 0, command=make), reads,
                 call("write_file", 101, path="f/p1", content="x"),
                 call("edit", 102, path="f/p2", old_string="a", new_string="b"),
                 call("grep", 103, pattern="x", path="f/p3"),
                 call("grep", 104, pattern="alpha", path="d"),
                 call("glob", 105, pattern="**/*", path="d"),
                 call("read_file", 106, path="/dev/zero"),
                 call("read_file", 107, path="ok.txt"), DONE,
                 call("read_file", 108, path="ok.txt"), DONE]
    settings = {"tools": {"allowPathsOutsideCwd": True}}
    fifos = [tmp_path / "work" / "f" / f"p{i}" for i in range(1, PIPES + 1)] + [tmp_path / "work" / "d" / ".gitignore"]
    async with hostile_daemon(tmp_path, responses, settings=settings) as d:
        try:
            sid = await open_session(d)
            record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=60)
            assert record["state"] == "completed", record
            # Another session's ordinary read and the creation of a session still go through.
            with trio.fail_after(20):
                other = await open_session(d)
                record = await d.wait_turn(other, await d.prompt(other, "go"), timeout=20)
            assert record["state"] == "completed", record
        finally:
            release(fifos)
        results = d.tool_results()
    fifo = "it is a named pipe (FIFO), not a regular file; the file tools use regular files only"
    for i in range(1, PIPES + 1):
        assert f"Error: cannot read f/p{i}: {fifo}" in results, results
    assert f"Error: f/p1 cannot be changed as text: {fifo}" in results
    assert f"Error: f/p2 cannot be changed as text: {fifo}" in results
    assert "Error: f/p3 is a named pipe (FIFO), not a regular file or a directory; grep searches those only" in results
    assert "d/a.txt:1:alpha" in results and "d/a.txt" in results  # the FIFO .gitignore gave no rules, no hang
    assert ("Error: cannot read /dev/zero: it is a character device, not a regular file; the file tools use "
            "regular files only") in results
    assert "ordinary\n" in results


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


async def idle_with_every_shell_ended(d: Running, sid: str) -> list[dict[str, Any]]:
    """The session's background tasks once every shell ended (its output read to the end) and the automatic
    turns of their notifications ran (the fake answers them ``ok``)."""
    while True:
        status = (await d.client.get(f"/session/{sid}/status")).json()
        tasks = status["backgroundTasks"]
        if (all(t["status"] != "running" for t in tasks) and not status["automaticQueue"]
                and status["state"] == "idle"):
            return tasks
        await trio.sleep(0.1)


async def test_one_model_response_of_background_shells_cannot_grow_the_daemon_past_the_output_budget(tmp_path):
    # 32 shells, each printing 4 MiB of 4-byte characters: bounded in characters, each kept all of it as a str
    # (6.7 MiB), 215 MiB in all; bounded in bytes, the session keeps 16 MiB of it.
    shells, each = 32, 4 * 1024 * 1024 - 4  # whole "\U0001F600\n" lines
    calls = [step for i in range(shells)
             for step in call("shell", i, command=f"yes \U0001F600 | head -c {each}", run_in_background=True)]
    async with hostile_daemon(tmp_path, [calls, DONE]) as d:
        sid = await open_session(d)
        before = peak = rss(d.proc.pid)
        record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=60)
        assert record["state"] == "completed", record
        with trio.fail_after(180):
            tasks = await idle_with_every_shell_ended(d, sid)
            peak = max(peak, rss(d.proc.pid))
        shells_ended = [t for t in tasks if t["kind"] == "shell"]
        assert len(shells_ended) == shells and all(t["status"] == "completed" for t in shells_ended), tasks
        d.fake.add(call("shell_output", 200, task_id=shells_ended[0]["taskId"]), DONE)
        record = await d.wait_turn(sid, await d.prompt(sid, "read"), timeout=60)
        assert record["state"] == "completed", record
        result = next(r for r in reversed(d.tool_results()) if r.startswith("status: "))
    grown = peak - before
    assert grown < 64 * 1024 * 1024, f"the daemon grew by {grown / 2**20:.0f} MiB"
    head, note, text = result.split("\n", 2)
    assert head == "status: completed, exit code 0", result[:300]
    assert note.endswith(" bytes were dropped before this read: a background shell keeps its newest 1,024 KiB "
                         "of output, and a session's shells 16 MiB together]"), note
    dropped = int(note[1:].split(" ")[0].replace(",", ""))
    assert 0 < len(text.encode()) <= 1024 * 1024
    assert dropped + len(text.encode()) == each  # every byte kept or counted as dropped
