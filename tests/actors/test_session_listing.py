"""Daemon.list_sessions: live sessions from their handles, stored ones read from the store in a worker thread,
so a state directory of thousands does not hold the event loop for all of their reads."""

from __future__ import annotations

import threading
from typing import Any

import trio

from actors import ScriptedModel, open_daemon
from actors.daemon import stored_cwds, stored_summaries
from actors.storage import LocalStore


class GatedStore(LocalStore):
    """Its journal reads wait, in whatever thread runs them, until the test's event-loop task opens the gate."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.gated = False

    def journal_read(self, session_id: str) -> list[dict[str, Any]]:
        if self.gated and not self.gate.wait(10):
            raise AssertionError("the event loop ran nothing while the stored sessions were read")
        return super().journal_read(session_id)


async def test_stored_sessions_are_read_while_the_event_loop_runs_on(tmp_path):
    state, work = tmp_path / "state", tmp_path / "work"
    work.mkdir()
    async with open_daemon(model=ScriptedModel(), state_dir=state) as daemon:
        stored = (await daemon.create_session(str(work)))[0].session_id
        await daemon.close_session(stored)
    store = GatedStore(state)
    async with open_daemon(model=ScriptedModel(), state_dir=state, store=store) as daemon:
        live = (await daemon.create_session(str(work)))[0].session_id
        store.gated = True
        listed: list[dict[str, Any]] = []

        async def list_them() -> None:
            listed.extend(await daemon.list_sessions())

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(list_them)
                await trio.sleep(0.05)  # the listing is under way, its reads waiting at the gate
                store.gate.set()  # only if this task ran meanwhile
    by_id = {s["sessionId"]: s for s in listed}
    assert by_id[stored]["live"] is False and by_id[stored]["restorable"] is True
    assert by_id[stored]["state"] == "stored" and by_id[stored]["cwd"] == str(work)
    assert by_id[live]["live"] is True and set(by_id) == {stored, live}


class StepsOf(trio.abc.Instrument):
    """Counts the steps of the tasks with one name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += task.name == self.name


async def test_live_sessions_are_summed_up_a_bounded_number_to_a_loop_step(tmp_path, monkeypatch):
    monkeypatch.setattr("actors.daemon.LISTING_STEP", 2)
    async with open_daemon(model=ScriptedModel()) as daemon:
        for _ in range(7):
            await daemon.create_session(str(tmp_path))
        listed: list[dict[str, Any]] = []

        async def listing() -> None:
            listed.extend(await daemon.list_sessions())

        steps = StepsOf("listing")
        trio.lowlevel.add_instrument(steps)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(listing, name="listing")
        finally:
            trio.lowlevel.remove_instrument(steps)
    assert len(listed) == 7 and all(s["live"] for s in listed)
    assert steps.steps >= 4  # 7 summaries, 2 to a step: a checkpoint after the 2nd, 4th and 6th


def stored(tmp_path: Any, count: int) -> LocalStore:
    """``count`` stored sessions: a record each, and prompts queued in some journals."""
    store = LocalStore(tmp_path, fsync="never")
    for i in range(count):
        store.record_write(f"s{i}", {"sessionId": f"s{i}", "cwd": f"/work/{i}", "updatedAt": i})
        for n in range(i % 3):
            store.journal_append(f"s{i}", {"op": "admitted", "promptId": f"p{n}"})
    return store


class ReadsManyAtOnce(LocalStore):
    """A store with the batched reads (actors.storage.ManySessionReads), recording which sessions each was for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[tuple[str, list[str]]] = []

    def records_read(self, session_ids: list[str]) -> dict[str, dict[str, Any] | None]:
        self.batches.append(("records", list(session_ids)))
        return {s: self.record_read(s) for s in session_ids}

    def journals_read(self, session_ids: list[str]) -> dict[str, list[dict[str, Any]] | None]:
        self.batches.append(("journals", list(session_ids)))
        return {s: self.journal_read(s) for s in session_ids}

    def record_read(self, session_id: str) -> dict[str, Any] | None:
        if not self.batches:
            raise AssertionError("a session read by itself")
        return super().record_read(session_id)


def test_a_store_that_reads_many_sessions_at_once_is_asked_once_a_batch(tmp_path, monkeypatch):
    monkeypatch.setattr("actors.daemon.STORED_READ_BATCH", 2)
    expected = stored_summaries(stored(tmp_path, 5), frozenset({"s1"}))  # read one session at a time
    store = ReadsManyAtOnce(tmp_path, fsync="never")
    assert stored_summaries(store, frozenset({"s1"})) == expected
    assert [s["queuedCount"] for s in expected.values()] == [0, 2, 0, 1]
    assert store.batches == [("records", ["s0", "s2"]), ("journals", ["s0", "s2"]),
                             ("records", ["s3", "s4"]), ("journals", ["s3", "s4"])]
    store.batches.clear()
    assert stored_cwds(store) == {f"/work/{i}" for i in range(5)}
    assert store.batches == [("records", ["s0", "s1"]), ("records", ["s2", "s3"]), ("records", ["s4"])]


def test_a_session_whose_journal_cannot_be_read_is_listed_with_nothing_pending(tmp_path):
    store = stored(tmp_path, 3)
    journal = store.directory / "s2.journal.jsonl"
    journal.write_bytes(b"{torn\n" + journal.read_bytes())  # not the last line: an error, not a crash's tear
    listed = stored_summaries(store)
    assert listed["s2"]["cwd"] == "/work/2" and listed["s2"]["pendingCount"] == 0
    assert listed["s1"]["queuedCount"] == 1 and set(listed) == {"s0", "s1", "s2"}


class TellsItsReads(LocalStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads: list[tuple[str, str]] = []

    def record_read(self, session_id: str) -> dict[str, Any] | None:
        self.reads.append(("record", session_id))
        return super().record_read(session_id)

    def journal_read(self, session_id: str) -> list[dict[str, Any]]:
        self.reads.append(("journal", session_id))
        return super().journal_read(session_id)


def test_a_store_that_reads_one_session_at_a_time_holds_one_journal_at_a_time(tmp_path):
    expected = stored_summaries(stored(tmp_path, 3))
    store = TellsItsReads(tmp_path, fsync="never")
    assert stored_summaries(store) == expected
    # Each session read and summed up before the next: no batch of journals in memory together.
    assert store.reads == [(kind, s) for s in ("s0", "s1", "s2") for kind in ("record", "journal")]
