"""Daemon.list_sessions: live sessions from their handles, stored ones read from the store in a worker thread,
so a state directory of thousands does not hold the event loop for all of their reads."""

from __future__ import annotations

import threading
from typing import Any

import trio

from actors import ScriptedModel, open_daemon
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
