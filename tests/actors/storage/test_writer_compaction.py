"""A journal's compaction where the store syncs in threads (the daemon's): noted by compact_if_due, made by the
next commit with its fsyncs in worker threads, every record appended meanwhile carried over
(actors/storage/writer.py, actors/storage/local.py FileJournalCompaction)."""

from __future__ import annotations

import os
import stat
import threading

import pytest
import trio

from actors.storage import writer as writer_module
from actors.storage.local import LocalStore
from actors.storage.writer import JournalWriter

LIMIT = 10
BOUND = 4


class Disk:
    """``os.fsync`` noting, per call, the thread and whether the descriptor is a directory; optionally failing
    (every sync, or a directory's only), or holding a worker thread's first sync until released."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.calls: list[tuple[bool, bool]] = []  # (on the main thread, a directory)
        self.failing = False
        self.failing_directories = False
        self.hold = False
        self.held = threading.Event()
        self.released = threading.Event()

    def __call__(self, fd: int) -> None:
        on_main = threading.current_thread() is threading.main_thread()
        directory = stat.S_ISDIR(os.fstat(fd).st_mode)
        self.calls.append((on_main, directory))
        if self.hold and not on_main and not self.held.is_set():
            self.held.set()
            assert self.released.wait(LIMIT), "the test never released the held sync"
        if self.failing or (directory and self.failing_directories):
            raise OSError(5, "Input/output error")
        self.real(fd)

    def on_main(self) -> list[bool]:
        return [main for main, _ in self.calls]


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    patched = Disk()
    monkeypatch.setattr(os, "fsync", patched)
    monkeypatch.setattr(writer_module, "COMPACT_AFTER", BOUND)
    return patched


def ops(store: LocalStore) -> list[str]:
    return [r["op"] for r in store.journal_read("s")]


def filled(tmp_path) -> tuple[LocalStore, JournalWriter]:
    """A daemon-style store (syncs in threads) and a writer whose journal has reached the bound."""
    store = LocalStore(tmp_path, sync_in_thread=True)
    writer = JournalWriter(store, "s")
    with writer.deferring():
        for i in range(BOUND):
            writer.append({"op": f"r{i}"})
    return store, writer


def snapshot() -> list[dict]:
    return [{"op": "snapshot"}]


async def compacted_while(tmp_path, disk: Disk, failing: str) -> tuple[LocalStore, JournalWriter]:
    """A filled journal's compaction committed while ``disk.<failing>`` is set (then cleared)."""
    store, writer = filled(tmp_path)
    writer.compact_if_due(snapshot)
    setattr(disk, failing, True)
    with trio.fail_after(LIMIT):
        await writer.commit()
    setattr(disk, failing, False)
    return store, writer


def leftovers(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "sessions").glob(".*.tmp"))


async def test_past_the_bound_the_next_commit_compacts_with_every_fsync_off_the_loop(tmp_path, disk):
    store, writer = filled(tmp_path)
    writer.compact_if_due(snapshot)
    assert ops(store) == ["r0", "r1", "r2", "r3"]  # only noted: nothing rewritten in the handler
    assert writer.unsynced and disk.calls == []
    with trio.fail_after(LIMIT):
        await writer.commit()
    assert ops(store) == ["snapshot"]
    assert disk.calls and not any(disk.on_main())  # the new file's and the directory's: both in threads
    assert (True in [d for _, d in disk.calls])  # the rename was made durable
    assert not writer.unsynced and leftovers(tmp_path) == []
    assert stat.S_IMODE(os.stat(tmp_path / "sessions" / "s.journal.jsonl").st_mode) == 0o600
    disk.calls.clear()
    with writer.deferring():
        writer.append({"op": "next"})
    await writer.commit()  # an ordinary sync again, of the new journal
    assert ops(store) == ["snapshot", "next"] and disk.on_main() == [False]


async def test_records_appended_while_the_snapshot_is_written_are_carried_over_in_order(tmp_path, disk):
    store, writer = filled(tmp_path)
    writer.compact_if_due(snapshot)
    disk.hold = True
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.commit)
            while not disk.held.is_set():
                await trio.sleep(0.001)  # the loop runs while the worker thread writes
            writer.append({"op": "timer"})  # a session's timer: durable, synced inline as ever
            writer.append({"op": "usage"}, durable=False)
            writer.compact_if_due(snapshot)  # past the bound still, but one is being written: not again
            # Until the new journal replaces it, the old one holds everything.
            assert ops(store) == ["r0", "r1", "r2", "r3", "timer", "usage"]
            disk.released.set()
    assert ops(store) == ["snapshot", "timer", "usage"]
    assert not writer.unsynced  # no second compaction waiting
    # The timer's record was synced where it was written (the old journal, a new file: its directory too),
    # and, being durable, again in the new one before the rename (on the loop: a timer firing during a
    # compaction is rare); the rest in threads.
    assert [c for c in disk.calls if c[0]] == [(True, False), (True, True), (True, False)]
    assert leftovers(tmp_path) == []
    # The count starts again from what the new journal holds: three records, one short of the bound.
    writer.compact_if_due(snapshot)
    assert not writer.unsynced
    writer.append({"op": "usage"}, durable=False)
    writer.compact_if_due(snapshot)
    assert writer.unsynced


async def test_a_compaction_that_cannot_be_written_keeps_the_old_journal_and_syncs_it_as_usual(tmp_path, disk,
                                                                                               caplog):
    store, writer = await compacted_while(tmp_path, disk, "failing")
    assert "journal not compacted" in caplog.text and "journal not synced" in caplog.text
    assert ops(store) == ["r0", "r1", "r2", "r3"] and leftovers(tmp_path) == []
    with writer.deferring():
        writer.append({"op": "r4"})  # the failed sync: synced inline now (and it works)
        writer.compact_if_due(snapshot)  # still due
    with trio.fail_after(LIMIT):
        await writer.commit()
    assert ops(store) == ["snapshot"]


async def test_until_the_renamed_journals_directory_is_synced_the_next_durable_append_syncs_it(tmp_path, disk,
                                                                                              caplog):
    store, writer = await compacted_while(tmp_path, disk, "failing_directories")
    # Retried as a plain commit (the file by name, its directory with it) before the replies go; failed too.
    assert "directory not synced" in caplog.text and "journal not synced" in caplog.text
    assert disk.calls[-2:] == [(False, False), (False, True)]
    assert ops(store) == ["snapshot"]  # in place, its name not yet durable
    disk.calls.clear()
    with writer.deferring():
        writer.append({"op": "admitted"})  # synced inline (after a failed sync), the directory with it
    assert disk.calls == [(True, False), (True, True)]
    disk.calls.clear()
    with writer.deferring():
        writer.append({"op": "started"})
    await writer.commit()  # deferred again, and the directory owes nothing now
    assert disk.calls == [(False, False)]


async def test_a_store_that_syncs_on_the_loop_compacts_in_the_handler_as_before(tmp_path, disk):
    store = LocalStore(tmp_path)
    writer = JournalWriter(store, "s")
    for i in range(BOUND):
        writer.append({"op": f"r{i}"})
    disk.calls.clear()
    writer.compact_if_due(snapshot)
    assert ops(store) == ["snapshot"] and all(disk.on_main()) and disk.calls
    assert not writer.unsynced


async def test_a_directory_sync_owed_by_a_compacted_journal_is_paid_after_its_session_closes(tmp_path, disk):
    store, _ = await compacted_while(tmp_path, disk, "failing_directories")
    store.close("s")  # the session closes, and is loaded again in the same daemon
    again = JournalWriter(store, "s", existing=1)
    disk.calls.clear()
    again.append({"op": "admitted"})  # synced inline (outside a handler): the directory with it
    assert disk.calls == [(True, False), (True, True)]
