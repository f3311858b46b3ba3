"""LocalStore: appends that survive, torn tails cut, failures that change nothing, atomic records."""

from __future__ import annotations

import os
import time

import pytest

from actors.storage import LocalStore, StorageError


def test_append_read_and_a_torn_tail_is_cut_before_the_next_append(tmp_path):
    store = LocalStore(tmp_path)
    store.journal_append("s", {"op": "admitted", "promptId": "a"})
    path = tmp_path / "sessions" / "s.journal.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"op": "admi')  # a crash mid-write
    assert store.journal_read("s") == [{"op": "admitted", "promptId": "a"}]
    store.journal_append("s", {"op": "admitted", "promptId": "b"})
    assert [r["promptId"] for r in store.journal_read("s")] == ["a", "b"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_torn_line_in_the_middle_is_an_error_naming_the_file(tmp_path):
    store = LocalStore(tmp_path)
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "s.journal.jsonl").write_bytes(b'{"op"\n{"op": "x"}\n')
    with pytest.raises(StorageError, match=r"s\.journal\.jsonl:1: invalid JSON"):
        store.journal_read("s")


def test_a_failed_append_raises_and_writes_nothing(tmp_path):
    store = LocalStore(tmp_path)
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "s.journal.jsonl").mkdir()  # cannot be opened as a file
    with pytest.raises(StorageError, match="cannot append to .*s.journal.jsonl"):
        store.journal_append("s", {"op": "x"})
    assert isinstance(StorageError("x"), OSError)


def test_records_rewrites_and_listing(tmp_path):
    store = LocalStore(tmp_path, fsync="never")
    store.record_write("s", {"cwd": "/w"})
    store.record_write("s", {"cwd": "/v"})
    assert store.record_read("s") == {"cwd": "/v"} and store.record_read("t") is None
    store.journal_append("t", {"op": "a"})
    store.journal_rewrite("t", [{"op": "b"}])
    assert store.journal_read("t") == [{"op": "b"}]
    (tmp_path / "sessions" / "u.jsonl").write_text("")
    assert store.session_ids() == ["s", "t", "u"] and store.exists("u") and not store.exists("v")
    assert not [n for n in os.listdir(tmp_path / "sessions") if n.endswith(".tmp")]


@pytest.mark.parametrize(("policy", "synced"), [("always", True), ("never", False)])
def test_replaced_files_are_fsynced_only_under_fsync_always(tmp_path, monkeypatch, policy, synced):
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    store = LocalStore(tmp_path, fsync=policy)
    store.record_write("s", {"cwd": "/w"})
    store.journal_rewrite("s", [{"op": "b"}])
    store.replay_rewrite("s", [[{"type": "x"}]])
    assert bool(calls) is synced
    assert store.record_read("s") == {"cwd": "/w"} and store.journal_read("s") == [{"op": "b"}]


def test_old_leftovers_of_cut_short_rewrites_are_swept_when_the_store_opens(tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    old = sessions / ".s.replay.jsonl.0a1b2c3d.tmp"
    fresh = sessions / ".t.session.json.4e5f6a7b.tmp"  # perhaps another process's write under way
    kept = [sessions / "s.replay.jsonl", sessions / "s.tmp", fresh]
    for path in (old, *kept):
        path.write_text("x")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    store = LocalStore(tmp_path)
    assert store.swept == 1 and not old.exists() and all(p.exists() for p in kept)


def test_an_unknown_fsync_policy_is_refused():
    with pytest.raises(ValueError, match="storage.fsync must be one of"):
        LocalStore("/nonexistent", fsync="sometimes")


def test_a_torn_record_longer_than_a_read_chunk_is_cut_whole(tmp_path):
    store = LocalStore(tmp_path)
    store.journal_append("s", {"op": "admitted", "promptId": "a"})
    with open(tmp_path / "sessions" / "s.journal.jsonl", "ab") as f:
        f.write(b'{"op": "admitted", "text": "' + b"x" * 200_000)  # a 10 MB body torn mid-write, say
    store.journal_append("s", {"op": "admitted", "promptId": "b"})
    assert [r["promptId"] for r in store.journal_read("s")] == ["a", "b"]
