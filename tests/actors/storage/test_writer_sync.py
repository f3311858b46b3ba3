"""JournalWriter's deferred syncs: where the store syncs in a thread (the daemon's), written in the handler and
synced by commit in a worker thread; after a failed sync, durable appends sync inline again, so the next that cannot be
made durable is refused."""

from __future__ import annotations

import os
import threading

import pytest

from actors.storage.base import StorageError
from actors.storage.local import LocalStore
from actors.storage.writer import JournalWriter


class Fsyncs:
    """``os.fsync`` noting the thread of each call; failing while ``failing`` is set."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.on_main: list[bool] = []
        self.failing = False

    def __call__(self, fd: int) -> None:
        self.on_main.append(threading.current_thread() is threading.main_thread())
        if self.failing:
            raise OSError(5, "Input/output error")
        self.real(fd)


def slow_store(tmp_path) -> LocalStore:
    store = LocalStore(tmp_path, sync_in_thread=True)
    assert store.sync_in_thread
    return store


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Fsyncs:
    patched = Fsyncs()
    monkeypatch.setattr(os, "fsync", patched)
    return patched


async def test_a_deferred_record_is_synced_by_commit_off_the_main_thread(tmp_path, fsyncs):
    writer = JournalWriter(slow_store(tmp_path), "s")
    with writer.deferring():
        writer.append({"op": "admitted"})
    assert fsyncs.on_main == []  # written, not synced yet
    await writer.commit()
    assert fsyncs.on_main[0] is False
    fsyncs.on_main.clear()
    await writer.commit()  # nothing left: no sync at all
    writer.append({"op": "timer"})  # outside a handler: synced inline, as before
    assert fsyncs.on_main == [True]


async def test_after_a_failed_sync_durable_appends_sync_inline_until_one_works(tmp_path, fsyncs, caplog):
    writer = JournalWriter(slow_store(tmp_path), "s")
    with writer.deferring():
        writer.append({"op": "admitted"})
    fsyncs.failing = True
    await writer.commit()  # logged, not raised: it was answered already
    assert "journal not synced" in caplog.text
    fsyncs.on_main.clear()
    with writer.deferring(), pytest.raises(StorageError):
        writer.append({"op": "started"})  # synced inline now: the failure refuses it (the FIFO fails closed)
    assert fsyncs.on_main == [True]
    fsyncs.failing = False
    with writer.deferring():
        writer.append({"op": "started"})  # inline, and it worked: deferral resumes after it
        writer.append({"op": "ended"})
    fsyncs.on_main.clear()
    await writer.commit()
    assert fsyncs.on_main == [False]


async def test_a_store_without_thread_syncs_keeps_every_durable_append_inline(tmp_path, fsyncs):
    writer = JournalWriter(LocalStore(tmp_path), "s")
    with writer.deferring():
        writer.append({"op": "admitted"})
    assert fsyncs.on_main == [True, True]  # the file, then its new name in the directory
    await writer.commit()
    assert fsyncs.on_main == [True, True]
