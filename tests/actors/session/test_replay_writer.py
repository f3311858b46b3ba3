"""A session's compacted replay on disk: rewritten off the event loop in the daemon once it passes twice its
bound, turns folded meanwhile not lost (actors/session/persistence.py ``ReplayWriter``)."""

from __future__ import annotations

import os
import threading
import time

import attrs
import trio

from actors import CountingIds, Settings, load_script, open_daemon
from actors.settings import Limits

LIMIT = 30
BOUND = 2000  # bytes of compacted replay kept; a turn below folds to about 700


class SlowReplayDisk:
    """``os.fsync`` taking 200 ms for the replay's rewrite, noting which thread ran it."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.rewrites_on_main: list[bool] = []
        self.syncing = 0
        self.turns_while_rewriting = 0

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if ".replay.jsonl." in path:  # the rewrite's temporary file
            self.syncing += 1
            try:
                time.sleep(0.2)
            finally:
                self.syncing -= 1
            self.rewrites_on_main.append(threading.current_thread() is threading.main_thread())
        self.real(fd)


def settings() -> Settings:
    return attrs.evolve(Settings(), limits=attrs.evolve(Limits(), replay_bytes=BOUND))


async def run_turns(tmp_path, monkeypatch, *, sync_in_thread: bool, turns: int):
    disk = SlowReplayDisk()
    monkeypatch.setattr(os, "fsync", disk)
    model = load_script({"responses": [[{"text": f"answer {n} " + "x" * 400}] for n in range(turns)]})
    with trio.fail_after(LIMIT):
        async with open_daemon(settings(), model=model, ids=CountingIds(), state_dir=tmp_path / "state",
                               workspace=str(tmp_path), sync_in_thread=sync_in_thread) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            events = handle.subscribe()
            for n in range(turns):
                await handle.prompt(f"question {n}")
                async for event in events:
                    if event.type == "turn_complete":
                        disk.turns_while_rewriting += bool(disk.syncing)
                        break
            store = daemon.runtime.store
            kept = [[e.to_dict() for e in s] for s in handle._session.bus.compactor.kept()]
            while disk.syncing:  # a rewrite still under way finishes before the daemon closes
                await trio.sleep(0.01)
            await trio.sleep(0.3)
            on_disk = store.replay_read(handle.session_id)
    monkeypatch.setattr(os, "fsync", disk.real)
    return disk, kept, on_disk


def turns(segments: list[list[dict]]) -> list[list[dict]]:
    """The folded turns of a replay, without its ``history_truncated`` marker."""
    return [s for s in segments if s[0]["type"] != "history_truncated"]


def assert_ends_with_what_is_kept(on_disk: list[list[dict]], kept: list[list[dict]]) -> None:
    # The file may hold more before them (turns appended since the last rewrite); a reader trims it.
    assert turns(kept) and turns(on_disk)[-len(turns(kept)):] == turns(kept)


async def test_in_the_daemon_the_rewrite_runs_in_a_thread_and_turns_folded_meanwhile_are_kept(tmp_path, monkeypatch):
    disk, kept, on_disk = await run_turns(tmp_path, monkeypatch, sync_in_thread=True, turns=12)
    assert disk.rewrites_on_main and not any(disk.rewrites_on_main)
    assert disk.turns_while_rewriting > 0  # the loop, and the session's turns, went on meanwhile
    assert_ends_with_what_is_kept(on_disk, kept)  # the turns folded during a rewrite were not lost


async def test_an_embedders_daemon_rewrites_on_the_loop_as_before(tmp_path, monkeypatch):
    disk, kept, on_disk = await run_turns(tmp_path, monkeypatch, sync_in_thread=False, turns=12)
    assert disk.rewrites_on_main and all(disk.rewrites_on_main)
    assert disk.turns_while_rewriting == 0
    assert_ends_with_what_is_kept(on_disk, kept)
