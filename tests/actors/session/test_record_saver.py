"""A live session's record after a change is written off the event loop in the daemon, before the change is
answered, one write at a time (actors/session/persistence.py ``RecordSaver``)."""

from __future__ import annotations

import json
import os
import threading
import time

import trio

from actors import CountingIds, Settings, open_daemon
from tests.conftest import loop_ticks_while

LIMIT = 30


class SlowRecordDisk:
    """``os.fsync`` taking 50 ms for a session record's files (``first`` for the first temporary file
    synced), noting which thread ran each."""

    def __init__(self, first: float = 0.05) -> None:
        self.real = os.fsync
        self.on_main: list[bool] = []
        self.syncing = 0
        self.first = first
        self.first_path: str | None = None

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if ".session.json" in path or path.endswith("/sessions"):
            if self.first_path is None and path.endswith(".tmp"):
                self.first_path = path
            self.syncing += 1
            try:
                time.sleep(self.first if path == self.first_path else 0.05)
            finally:
                self.syncing -= 1
            self.on_main.append(threading.current_thread() is threading.main_thread())
        self.real(fd)


def record_of(state, session_id: str) -> dict:
    return json.loads((state / "sessions" / f"{session_id}.session.json").read_text())


async def change_mode(tmp_path, monkeypatch, *, sync_in_thread: bool) -> tuple[SlowRecordDisk, int]:
    disk = SlowRecordDisk()
    state = tmp_path / "state"
    async with open_daemon(Settings(), ids=CountingIds(), state_dir=state, workspace=str(tmp_path),
                           sync_in_thread=sync_in_thread) as daemon:
        handle, _ = await daemon.create_session(str(tmp_path))
        monkeypatch.setattr(os, "fsync", disk)
        async with loop_ticks_while(lambda: disk.syncing) as ticks:
            with trio.fail_after(LIMIT):
                assert await handle.set_approval_mode("plan") == "plan"
            assert record_of(state, handle.session_id)["approvalMode"] == "plan"  # on disk when answered
        monkeypatch.setattr(os, "fsync", disk.real)
    return disk, ticks.count


async def test_in_the_daemon_a_changed_record_is_written_in_a_thread_before_the_answer(tmp_path, monkeypatch):
    disk, ticks = await change_mode(tmp_path, monkeypatch, sync_in_thread=True)
    assert disk.on_main and not any(disk.on_main)
    assert ticks > 0  # the loop ran on while the disk worked


async def test_an_embedders_daemon_writes_it_on_the_loop_as_before(tmp_path, monkeypatch):
    disk, ticks = await change_mode(tmp_path, monkeypatch, sync_in_thread=False)
    assert disk.on_main and all(disk.on_main)
    assert ticks == 0


async def test_writes_go_one_at_a_time_and_the_newest_state_lands_last(tmp_path, monkeypatch):
    disk = SlowRecordDisk(first=0.3)  # the first write is slow: a second one at the same time would finish first
    state = tmp_path / "state"
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), ids=CountingIds(), state_dir=state, workspace=str(tmp_path),
                               sync_in_thread=True) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            monkeypatch.setattr(os, "fsync", disk)
            session = handle._session
            async with trio.open_nursery() as nursery:
                session.context.model_name = "first"
                nursery.start_soon(session.records.save)  # as a slash command's /model does
                await trio.sleep(0.01)  # that write is under way in its thread
                assert await handle.set_model("second") == "second"
            monkeypatch.setattr(os, "fsync", disk.real)
            assert record_of(state, handle.session_id)["model"] == "second"


async def test_a_save_whose_task_is_cancelled_still_writes_the_change(tmp_path):
    # A /model cut short (a cancel, a close) while the write before it holds the record: the change is live.
    state = tmp_path / "state"
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), ids=CountingIds(), state_dir=state, workspace=str(tmp_path),
                               sync_in_thread=True) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            session = handle._session
            release = trio.Event()

            async def write_before_it(task_status=trio.TASK_STATUS_IGNORED) -> None:
                async with session.records._one_at_a_time:
                    task_status.started()
                    await release.wait()

            cut = trio.CancelScope()

            async def cut_short() -> None:
                with cut:
                    await session.records.save()

            async with trio.open_nursery() as nursery:
                await nursery.start(write_before_it)
                session.context.model_name = "changed"
                nursery.start_soon(cut_short)
                while session.records._one_at_a_time.statistics().tasks_waiting < 1:  # it waits for that write
                    await trio.sleep(0)
                cut.cancel()
                await trio.sleep(0)
                release.set()
            assert record_of(state, handle.session_id)["model"] == "changed"
