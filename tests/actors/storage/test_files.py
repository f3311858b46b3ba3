"""AppendFiles: descriptors kept open between appends, bounded, dropped on replace, closed with the session."""

from __future__ import annotations

import os

import pytest
import trio

from actors import CountingIds, load_script, open_daemon
from actors.model import ChatMessage
from actors.storage.files import AppendFiles
from actors.storage.local import LocalStore
from tests.actors.session.guard.harness import run_prompt


def open_fds(under: os.PathLike[str]) -> int:
    """This process's descriptors open on something under ``under``: the test's own files. (A count of all of
    them moves with other tests' threads still closing theirs.)"""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target == str(under) or target.startswith(f"{under}/")
    return count


def test_a_file_is_opened_once_for_many_appends(tmp_path):
    files = AppendFiles()
    path = tmp_path / "new" / "a.jsonl"
    before = open_fds(tmp_path)
    for n in range(100):
        files.append(path, b"%d\n" % n, fsync=False)
    assert open_fds(tmp_path) == before + 1 and len(files) == 1
    assert path.read_bytes().splitlines() == [b"%d" % n for n in range(100)]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    files.close_all()
    assert open_fds(tmp_path) == before


def test_no_more_than_limit_files_stay_open_least_recently_used_closed_first(tmp_path):
    files = AppendFiles(limit=3)
    before = open_fds(tmp_path)
    for name in "abcd":
        files.append(tmp_path / name, b"x\n", fsync=False)
    assert len(files) == 3 and open_fds(tmp_path) == before + 3
    files.append(tmp_path / "a", b"y\n", fsync=True)  # "a" was closed: reopened, and "b" closes
    assert (tmp_path / "a").read_bytes() == b"x\ny\n"
    assert len(files) == 3
    files.close_all()


def test_a_torn_tail_written_behind_the_open_descriptor_is_cut_before_the_next_line(tmp_path):
    files = AppendFiles()
    path = tmp_path / "j.jsonl"
    files.append(path, b'{"a":1}\n', fsync=False)
    with open(path, "ab") as f:
        f.write(b'{"torn')
    files.append(path, b'{"b":2}\n', fsync=False)
    assert path.read_bytes() == b'{"a":1}\n{"b":2}\n'
    files.close_all()


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="limit must be at least 1, got 0"):
        AppendFiles(limit=0)


def test_a_rewritten_journal_and_transcript_take_the_next_append_in_the_new_file(tmp_path):
    store = LocalStore(tmp_path, fsync="never")
    store.journal_append("s", {"op": "admitted", "promptId": "a"})
    store.journal_rewrite("s", [{"op": "admitted", "promptId": "b"}])
    store.journal_append("s", {"op": "admitted", "promptId": "c"})
    assert [r["promptId"] for r in store.journal_read("s")] == ["b", "c"]
    transcript = store.transcript("s")
    transcript.append(ChatMessage("user", "one"))
    transcript.rewrite([ChatMessage("user", "two")])
    transcript.append(ChatMessage("assistant", "three"))
    assert [m.content for m in store.transcript("s").messages()] == ["two", "three"]
    store.close("s")
    assert len(store.files) == 0


def test_closing_a_session_closes_its_files_and_a_later_append_reopens_them(tmp_path):
    store = LocalStore(tmp_path, fsync="never")
    before = open_fds(tmp_path)
    store.journal_append("s", {"op": "admitted", "promptId": "a"})
    store.transcript("s").append(ChatMessage("user", "hi"))
    store.replay_append("s", [{"type": "turn_complete"}])
    assert open_fds(tmp_path) == before + 3
    store.close("s")
    assert open_fds(tmp_path) == before
    store.journal_append("s", {"op": "admitted", "promptId": "b"})
    assert [r["promptId"] for r in store.journal_read("s")] == ["a", "b"]
    store.close("s")


async def test_a_session_holds_its_files_open_while_it_lives_and_closes_them_with_itself(tmp_path):
    state = tmp_path / "state"

    def held() -> set[str]:
        out = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            # the sandbox homes are not the session's files: a thread nobody awaits may still be deleting one
            if target.startswith(str(state)) and not target.startswith(str(state / "homes")):
                out.add(os.path.basename(target))
        return out

    model = load_script([[{"text": "one"}], [{"text": "two"}]])
    with trio.fail_after(30):
        async with open_daemon(model=model, ids=CountingIds(), state_dir=state) as daemon:
            session, _ = await daemon.create_session()
            await run_prompt(session, "first")
            await run_prompt(session, "second")
            sid = session.session_id
            assert {f"{sid}.jsonl", f"{sid}.journal.jsonl"} <= held()
            await daemon.close_session(sid)
            assert held() == set()


def test_a_syncer_syncs_its_own_descriptor_and_a_new_files_directory_even_after_the_file_is_forgotten(
        tmp_path, monkeypatch):
    files = AppendFiles()
    path = tmp_path / "new" / "a.journal.jsonl"
    files.append(path, b"one\n", fsync=False)
    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    before = open_fds(tmp_path)
    sync = files.syncer(path)
    files.forget(path)  # the loop may close the original while a worker thread syncs
    sync()
    assert synced == [str(path), str(path.parent)]
    assert open_fds(tmp_path) == before - 1  # the duplicate closed too, and the forgotten original
    files.append(path, b"two\n", fsync=False)
    synced.clear()
    files.syncer(path)()
    # The descriptor was closed while its directory's sync was in flight, so the debt passed on and is paid
    # again (it could have failed): once, then no more.
    assert synced == [str(path), str(path.parent)]
    synced.clear()
    files.syncer(path)()
    assert synced == [str(path)]
    files.forget(path)
    synced.clear()
    files.syncer(path)()  # closed since (a failed append, a failed rewrite): synced by name, directory too
    assert synced == [str(path), str(path.parent)]
    with pytest.raises(FileNotFoundError):
        files.syncer(tmp_path / "never-written.jsonl")


def test_a_store_syncs_in_a_thread_only_when_asked_and_when_it_syncs_at_all(tmp_path):
    assert LocalStore(tmp_path).journal_syncer("s") is None
    assert LocalStore(tmp_path, fsync="never", sync_in_thread=True).journal_syncer("s") is None
    store = LocalStore(tmp_path, sync_in_thread=True)
    store.journal_append("s", {"op": "x"}, durable=False)
    sync = store.journal_syncer("s")
    assert sync is not None
    sync()


def directory_syncs(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each ``os.fsync`` from here on, as whether it synced a directory."""
    import stat

    calls: list[bool] = []
    real = os.fsync

    def noting(fd: int) -> None:
        calls.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real(fd)

    monkeypatch.setattr(os, "fsync", noting)
    return calls


def test_a_file_renamed_into_place_syncs_its_directory_with_its_next_durable_append(tmp_path, monkeypatch):
    files = AppendFiles()
    path = tmp_path / "a.jsonl"
    files.append(path, b"old\n", fsync=True)  # a new file: its directory synced then
    files.forget(path)
    (tmp_path / ".a.tmp").write_bytes(b"new\n")
    os.replace(tmp_path / ".a.tmp", path)
    files.mark_directory_unsynced(path)
    calls = directory_syncs(monkeypatch)
    files.append(path, b"1\n", fsync=True)
    files.append(path, b"2\n", fsync=True)
    assert calls == [False, True, False]  # the directory once, with the first
    files.mark_directory_unsynced(path)  # open this time
    files.directory_synced(path)  # ... and a worker thread synced the directory meanwhile
    calls.clear()
    files.append(path, b"3\n", fsync=True)
    assert calls == [False]
    files.close_all()


def test_a_descriptor_closed_while_its_directory_owes_a_sync_hands_the_debt_to_the_next(tmp_path, monkeypatch):
    files = AppendFiles(limit=1)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    files.append(first, b"x\n", fsync=False)  # a new file, its name not durable yet
    files.append(second, b"y\n", fsync=False)  # the first's descriptor closed (the limit)
    calls = directory_syncs(monkeypatch)
    files.append(first, b"z\n", fsync=True)  # reopened: it existed, but its directory was never synced
    assert calls == [False, True]
    files.close_all()


def test_a_failed_sync_of_a_descriptor_closed_meanwhile_still_leaves_its_directory_owed(tmp_path, monkeypatch):
    files = AppendFiles(limit=1)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    files.append(first, b"x\n", fsync=False)  # a new file, its name not durable yet
    sync = files.syncer(first)  # to run in a worker thread ...
    files.append(second, b"y\n", fsync=False)  # ... while the loop closes the first's descriptor (the limit)
    real = os.fsync

    def failing(fd: int) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "fsync", failing)
    with pytest.raises(OSError):
        sync()
    monkeypatch.setattr(os, "fsync", real)
    calls = directory_syncs(monkeypatch)
    files.append(first, b"z\n", fsync=True)  # reopened: its directory was never synced, so it is now
    assert calls == [False, True]
    files.close_all()
