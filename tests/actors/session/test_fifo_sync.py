"""In the daemon a FIFO's journal syncs in a worker thread: the event loop runs on meanwhile, and the 202 still
waits for the sync (actors/storage/writer.py, actors/_actor.py serve_mailbox's commit).

A slow disk is stood in for by an ``os.fsync`` that takes 50 ms, a fast one by one that returns at once;
the real clock runs (a worker thread under virtual time would let the clock jump while it works).
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
import trio

from actors import CountingIds, Settings, load_script, open_daemon
from tests.conftest import loop_ticks_while

LIMIT = 30


class SlowDisk:
    """``os.fsync`` taking 50 ms, noting for each journal's sync which thread ran it and when it ended."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.syncing = 0
        self.journal_syncs: list[tuple[bool, float]] = []  # (on the main thread, when it ended)
        self.record_syncs: list[bool] = []  # a session record's (its temporary file): on the main thread

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        self.syncing += 1
        try:
            time.sleep(0.05)
            self.real(fd)
        finally:
            self.syncing -= 1
        on_main = threading.current_thread() is threading.main_thread()
        if path.endswith(".journal.jsonl"):
            self.journal_syncs.append((on_main, time.monotonic()))
        elif ".session.json." in path:
            self.record_syncs.append(on_main)


async def admit_one(tmp_path, monkeypatch: pytest.MonkeyPatch, *, sync_in_thread: bool) -> tuple[SlowDisk, int,
                                                                                                 float]:
    """Admit one prompt; returns the disk, how often the loop ran during its syncs, and when the 202 came."""
    disk = SlowDisk()
    model = load_script({"responses": [[{"text": "done"}]], "then": "demo"})
    async with open_daemon(Settings(), model=model, ids=CountingIds(), state_dir=tmp_path / "state",
                           workspace=str(tmp_path), sync_in_thread=sync_in_thread) as daemon:
        monkeypatch.setattr(os, "fsync", disk)
        handle, _ = await daemon.create_session(str(tmp_path))  # its record's sync finds the disk slow
        async with loop_ticks_while(lambda: disk.syncing) as ticks:
            with trio.fail_after(LIMIT):
                await handle.prompt("go")
                admitted_at = time.monotonic()
        monkeypatch.setattr(os, "fsync", disk.real)
    return disk, ticks.count, admitted_at


async def test_the_admission_syncs_off_the_event_loop_and_its_202_waits_for_the_sync(tmp_path, monkeypatch):
    disk, ran_while_syncing, admitted_at = await admit_one(tmp_path, monkeypatch, sync_in_thread=True)
    assert disk.journal_syncs, "the admission was not synced"
    on_main, synced_at = disk.journal_syncs[0]
    assert not on_main
    assert synced_at <= admitted_at  # durable before the answer
    assert ran_while_syncing > 0  # the loop went on while the disk worked


async def test_without_it_the_sync_holds_the_event_loop(tmp_path, monkeypatch):
    disk, ran_while_syncing, _ = await admit_one(tmp_path, monkeypatch, sync_in_thread=False)
    assert disk.journal_syncs and all(on_main for on_main, _ in disk.journal_syncs)
    assert ran_while_syncing == 0


async def test_a_new_sessions_record_is_written_off_the_event_loop(tmp_path, monkeypatch):
    disk = SlowDisk()
    monkeypatch.setattr(os, "fsync", disk)
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), ids=CountingIds(), state_dir=tmp_path / "state", workspace=str(tmp_path),
                               sync_in_thread=True) as daemon:
            await daemon.create_session(str(tmp_path))
            await daemon.create_session(str(tmp_path))
    assert disk.record_syncs == [False, False]


class JournalSyncs:
    """``os.fsync`` noting, at each sync of a journal, whether the main thread ran it and the ops the file held."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.syncs: list[tuple[bool, list[str]]] = []

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.endswith(".journal.jsonl"):
            with open(path) as f:
                ops = [json.loads(line)["op"] for line in f if line.strip()]
            self.syncs.append((threading.current_thread() is threading.main_thread(), ops))
        self.real(fd)

    def ops(self) -> list[list[str]]:
        """Each sync's ops, a model call's usage records left out."""
        return [[op for op in ops if op != "usage"] for _, ops in self.syncs]


async def run_one_turn(handle, text: str) -> None:
    events = handle.subscribe()
    await handle.prompt(text)
    async for event in events:
        if event.type == "turn_complete":
            return


async def test_an_admission_and_the_start_it_wakes_are_synced_together_in_a_thread(tmp_path, monkeypatch):
    # Keeping fast syncs on the loop left the first slow one of a spell there: once 1.27 s.
    disk = JournalSyncs()
    monkeypatch.setattr(os, "fsync", disk)
    model = load_script({"responses": [[{"text": "done"}]], "then": "demo"})
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=model, ids=CountingIds(), state_dir=tmp_path / "state",
                               workspace=str(tmp_path), sync_in_thread=True) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            await run_one_turn(handle, "go")
    assert disk.syncs == [(False, ["admitted", "started"])]  # one sync, off the loop, for both (a group commit)


async def test_a_turns_end_is_written_unsynced_and_made_durable_by_the_next_admission(tmp_path, monkeypatch):
    disk = JournalSyncs()
    monkeypatch.setattr(os, "fsync", disk)
    model = load_script({"responses": [[{"text": "done"}], [{"text": "again"}]]})
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=model, ids=CountingIds(), state_dir=tmp_path / "state",
                               workspace=str(tmp_path)) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            await run_one_turn(handle, "go")
            after_first_turn = disk.ops()
            await handle.prompt("again")
    assert after_first_turn == [["admitted"], ["admitted", "started"]]  # the end: no fsync of its own
    assert disk.ops()[2] == ["admitted", "started", "ended", "admitted"]  # durable with the next admission


async def test_a_journals_compaction_syncs_off_the_event_loop_and_a_restart_finds_every_turn(tmp_path, monkeypatch):
    from actors.storage import writer

    monkeypatch.setattr(writer, "COMPACT_AFTER", 6)  # a few times in three turns
    syncs: list[tuple[bool, str]] = []
    real = os.fsync

    def noting(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if ".journal.jsonl" in path or os.path.isdir(path):
            syncs.append((threading.current_thread() is threading.main_thread(), path))
        real(fd)

    monkeypatch.setattr(os, "fsync", noting)
    model = load_script({"responses": [[{"text": f"answer {i}"}] for i in range(3)], "then": "demo"})
    state = tmp_path / "state"
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=model, ids=CountingIds(), state_dir=state,
                               workspace=str(tmp_path), sync_in_thread=True) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            prompt_ids = []
            for i in range(3):
                events = handle.subscribe()
                prompt_ids.append((await handle.prompt(f"prompt {i}")).prompt_id)
                async for event in events:
                    if event.type == "turn_complete":
                        break
            session_id = handle.session_id
            turns = [await handle.turn(p) for p in prompt_ids]
    journal = state / "sessions" / f"{session_id}.journal.jsonl"
    assert "session_usage" in journal.read_text()  # compacted (the snapshot's last record)
    assert any(".tmp" in path for _, path in syncs)  # a compaction's new file, fsynced ...
    assert not any(on_main for on_main, _ in syncs)  # ... as every journal and directory sync: off the loop
    assert not list((state / "sessions").glob(".*.tmp"))
    monkeypatch.setattr(os, "fsync", real)
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=load_script({"responses": []}), ids=CountingIds(), state_dir=state,
                               workspace=str(tmp_path)) as daemon:
            restored = await daemon.load_session(session_id)
            assert [await restored.turn(p) for p in prompt_ids] == turns
            assert [t["state"] for t in turns] == ["completed"] * 3
