"""A session's compacted replay on disk: rewritten off the event loop in the daemon once it passes twice its
bound, turns folded meanwhile appended after it, even when the session closes during the rewrite
(actors/session/persistence.py ``ReplayWriter``)."""

from __future__ import annotations

import threading

import attrs
import pytest
import trio

from actors import CountingIds, Settings, load_script, open_daemon
from actors.settings import Limits
from actors.storage.local import LocalStore

LIMIT = 30
BOUND = 6000  # bytes of compacted replay kept; a turn below folds to about 1 KB
TURNS = 24


class GatedRewrites:
    """``LocalStore.replay_rewriter`` whose first rewrite waits in its worker thread until :meth:`open` (a
    slow disk), noting which thread ran each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.on_main: list[bool] = []
        real = LocalStore.replay_rewriter

        def replay_rewriter(store: LocalStore, session_id: str):
            rewrite = real(store, session_id)

            def gated(segments):
                self.on_main.append(threading.current_thread() is threading.main_thread())
                if len(self.on_main) == 1:
                    self.entered.set()
                    self.gate.wait(LIMIT)
                rewrite(segments)

            return gated

        monkeypatch.setattr(LocalStore, "replay_rewriter", replay_rewriter)

    def open(self) -> None:
        self.gate.set()


def settings() -> Settings:
    return attrs.evolve(Settings(), limits=attrs.evolve(Limits(), replay_bytes=BOUND))


def turns(segments: list[list[dict]]) -> list[list[dict]]:
    """The folded turns of a replay, without its ``history_truncated`` marker."""
    return [s for s in segments if s[0]["type"] != "history_truncated"]


def assert_ends_with_what_is_kept(on_disk: list[list[dict]], kept: list[list[dict]]) -> None:
    # The file may hold more before them (turns appended since the last rewrite); a reader trims it.
    assert len(turns(kept)) > 1 and turns(on_disk)[-len(turns(kept)):] == turns(kept)


async def one_turn(handle, events, n: int) -> None:
    await handle.prompt(f"question {n}")
    async for event in events:
        if event.type == "turn_complete":
            return


async def run(tmp_path, gated: GatedRewrites, *, sync_in_thread: bool, close_while_rewriting: bool = False):
    """Turns until the first rewrite starts, three more while it is held, then the rest; the replay on disk
    and what the compactor kept, read once the session has closed."""
    model = load_script({"responses": [[{"text": f"answer {n} " + "x" * 400}] for n in range(TURNS)]})
    with trio.fail_after(LIMIT):
        async with open_daemon(settings(), model=model, ids=CountingIds(), state_dir=tmp_path / "state",
                               workspace=str(tmp_path), sync_in_thread=sync_in_thread) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            events = handle.subscribe()
            n = 0
            while not gated.on_main and n < TURNS:
                await one_turn(handle, events, n)
                n += 1
            assert gated.on_main, "no rewrite"
            if sync_in_thread:
                await trio.to_thread.run_sync(gated.entered.wait, LIMIT)
                for _ in range(3):  # folded while the rewrite is held
                    await one_turn(handle, events, n)
                    n += 1
            kept = [[e.to_dict() for e in s] for s in handle._session.bus.compactor.kept()]
            if close_while_rewriting:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(daemon.close_session, handle.session_id)
                    await trio.sleep(0.05)
                    gated.open()
            else:
                gated.open()
                await daemon.close_session(handle.session_id)
            on_disk = daemon.runtime.store.replay_read(handle.session_id)
    return kept, on_disk


async def test_in_the_daemon_the_rewrite_runs_in_a_thread_and_turns_folded_meanwhile_follow_it(tmp_path,
                                                                                               monkeypatch):
    gated = GatedRewrites(monkeypatch)
    kept, on_disk = await run(tmp_path, gated, sync_in_thread=True)
    assert gated.on_main and not any(gated.on_main)
    assert_ends_with_what_is_kept(on_disk, kept)


async def test_a_session_closed_during_the_rewrite_still_gets_the_turns_folded_meanwhile(tmp_path, monkeypatch):
    gated = GatedRewrites(monkeypatch)
    kept, on_disk = await run(tmp_path, gated, sync_in_thread=True, close_while_rewriting=True)
    assert_ends_with_what_is_kept(on_disk, kept)


async def test_an_embedders_daemon_rewrites_on_the_loop_as_before(tmp_path, monkeypatch):
    gated = GatedRewrites(monkeypatch)
    gated.open()  # on the loop a held rewrite would hold everything
    kept, on_disk = await run(tmp_path, gated, sync_in_thread=False)
    assert gated.on_main and all(gated.on_main)
    assert_ends_with_what_is_kept(on_disk, kept)
