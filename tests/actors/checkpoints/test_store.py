"""The checkpoint store, the walk and a restore, on real files: every kind of change, and what is never touched."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from actors.checkpoints import Store
from actors.checkpoints.manifest import FILE, Entry, Manifest, changed_outside, changes, plan_restore
from actors.checkpoints.store import apply, snapshot
from actors.storage import StorageError
from actors.tools.paths import Scope

CAP = 1024


def tree_state(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = f"{st.st_mode & 0o777:o}:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def world(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / ".git" / "refs").mkdir(parents=True)
    (work / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (work / ".git" / "index").write_bytes(os.urandom(300))
    (work / ".gitignore").write_text("*.log\nbuild/\n")
    (work / "src").mkdir()
    (work / "src" / "a.py").write_text("print('a')\n")
    (work / "notes.txt").write_text("notes\n")
    (work / "keep.txt").write_text("keep\n")
    (work / "tool.sh").write_text("#!/bin/sh\n")
    (work / "tool.sh").chmod(0o755)
    (work / "app.log").write_text("ignored\n")
    (work / "build").mkdir()
    (work / "build" / "out.bin").write_bytes(b"\0" * 10)
    store = Store(tmp_path / "state" / "checkpoints", fsync=False)
    return work, store


def take(work: Path, store: Store, previous=None, *, cap=CAP, left=10**9, scope=None):
    manifest, manifest_id, new, notes = snapshot(str(work), scope or Scope(str(work)), store, previous,
                                                 max_file_bytes=cap, bytes_left=left)
    return manifest


def restore(work: Path, store: Store, target: Manifest):
    current = take(work, store)
    plan = plan_restore(current, target)
    return apply(str(work), plan, target, store)


def git_bytes(work: Path) -> dict[str, str]:
    return tree_state(work / ".git")


def roundtrip(world, change) -> tuple[dict, dict, tuple]:
    """Snapshot, ``change`` the tree, restore: (state before, state after the restore, apply's answer)."""
    work, store = world
    before = tree_state(work)
    git = git_bytes(work)
    target = take(work, store)
    change(work)
    answer = restore(work, store, target)
    assert git_bytes(work) == git
    return before, tree_state(work), answer


def test_the_walk_skips_git_and_ignored_paths_and_records_kinds(world):
    work, store = world
    os.symlink("notes.txt", work / "link")
    manifest = take(work, store)
    assert ".git" not in manifest.entries and not any(p.startswith(".git/") for p in manifest.entries)
    assert "app.log" not in manifest.entries and "build" not in manifest.entries
    assert {"app.log", "build"} <= manifest.ignored
    assert manifest.entries["link"] == Entry("link", target="notes.txt")
    assert manifest.entries["src"].kind == "dir"
    assert manifest.entries["tool.sh"].mode & 0o111
    assert store.get(manifest.entries["notes.txt"].sha) == b"notes\n"


def test_a_write_an_edit_and_a_sed_are_restored(world):
    def change(work):
        (work / "notes.txt").write_text("overwritten\n")
        (work / "src" / "a.py").write_text("print('edited')\n")
        subprocess.run(["sed", "-i", "s/keep/sedded/", str(work / "keep.txt")], check=True)
    before, after, (restored, deleted, skipped) = roundtrip(world, change)
    assert after == before
    assert sorted(restored) == ["keep.txt", "notes.txt", "src/a.py"] and not deleted and not skipped


def test_a_deleted_file_comes_back_and_a_new_directory_goes(world):
    def change(work):
        (work / "keep.txt").unlink()
        (work / "fresh" / "deeper").mkdir(parents=True)
        (work / "fresh" / "deeper" / "x.txt").write_text("x")
        (work / "new.txt").write_text("new")
    before, after, (restored, deleted, skipped) = roundtrip(world, change)
    assert after == before
    assert restored == ["keep.txt"]
    assert set(deleted) == {"fresh", "fresh/deeper", "fresh/deeper/x.txt", "new.txt"}


def test_a_directory_holding_ignored_files_is_left_with_them(world):
    def change(work):
        (work / "made").mkdir()
        (work / "made" / "tracked.txt").write_text("t")
        (work / "made" / "debug.log").write_text("ignored, never deleted")
    _, after, (_, deleted, skipped) = roundtrip(world, change)
    assert deleted == ["made/tracked.txt"]
    assert "made" in skipped and "not empty" in skipped["made"]
    assert after["made/debug.log"]


def test_binary_files_modes_and_symlinks(world):
    work, store = world
    (work / "blob.bin").write_bytes(bytes(range(256)) * 3)
    os.symlink("notes.txt", work / "link")

    def change(work):
        (work / "blob.bin").write_bytes(b"\xff\x00" * 10)
        (work / "tool.sh").chmod(0o644)
        (work / "link").unlink()
        os.symlink("/etc/passwd", work / "link")
        os.symlink("src", work / "dirlink")
    before, after, _ = roundtrip(world, change)
    assert after == before


def test_a_symlinked_parent_is_replaced_never_written_through(world, tmp_path):
    work, store = world
    outside = tmp_path / "outside"
    outside.mkdir()
    target = take(work, store)

    import shutil
    shutil.rmtree(work / "src")
    os.symlink(outside, work / "src")  # src/ now leads out of the tree
    restore(work, store, target)
    assert not (work / "src").is_symlink() and (work / "src" / "a.py").read_text() == "print('a')\n"
    assert list(outside.iterdir()) == []  # nothing written through the link


def test_a_file_over_the_cap_is_noticed_and_left_alone(world):
    work, store = world
    (work / "big.bin").write_bytes(b"b" * (CAP + 1))
    target = take(work, store)
    assert "big.bin" in target.skipped and "cap" in target.skipped["big.bin"]
    (work / "big.bin").write_bytes(b"c" * (CAP + 5))
    (work / "notes.txt").write_text("changed\n")
    restored, deleted, skipped = restore(work, store, target)
    assert (work / "big.bin").read_bytes() == b"c" * (CAP + 5)  # left alone
    assert restored == ["notes.txt"]


def test_a_file_grown_over_the_cap_since_is_left_alone_too(world):
    work, store = world
    target = take(work, store)
    (work / "notes.txt").write_bytes(b"n" * (CAP + 1))
    restored, _, skipped = restore(work, store, target)
    assert (work / "notes.txt").read_bytes() == b"n" * (CAP + 1)
    assert "notes.txt" in skipped


def test_the_session_cap_stops_storing_new_files(world):
    work, store = world
    (work / "one.txt").write_text("1" * 100)
    manifest = take(work, store, left=50)
    assert "one.txt" in manifest.skipped and "maxSessionBytes" in manifest.skipped["one.txt"]


def test_hidden_paths_are_never_walked_nor_deleted(world):
    work, store = world
    hidden = work / "state-inside"
    hidden.mkdir()
    (hidden / "token").write_text("secret")
    scope = Scope(str(work), hidden=(str(hidden),))
    target = take(work, store, scope=scope)
    assert not any(p.startswith("state-inside") for p in target.entries)
    plan = plan_restore(take(work, store, scope=scope), target)
    assert not any(p.startswith("state-inside") for p in plan.touched)


def test_an_unchanged_file_is_not_read_again(world):
    work, store = world
    first = take(work, store)
    entry = first.entries["notes.txt"]
    fake, _ = store.put(b"not what the file holds")
    forged = Manifest({**first.entries, "notes.txt": Entry(FILE, sha=fake, size=entry.size, mode=entry.mode,
                                                            stat=entry.stat)}, first.skipped, first.ignored)
    again = take(work, store, previous=forged)
    assert again.entries["notes.txt"].sha == fake  # its stat matched: its hash was reused, the file not read
    os.utime(work / "notes.txt", ns=(1, 1))
    assert take(work, store, previous=forged).entries["notes.txt"].sha == entry.sha


def test_changes_and_outside_changes(world):
    work, store = world
    start = take(work, store)
    (work / "notes.txt").write_text("turn\n")
    (work / "keep.txt").unlink()
    end = take(work, store)
    assert [(c.path, c.change) for c in changes(start, end)] == [("keep.txt", "deleted"), ("notes.txt", "modified")]
    (work / "notes.txt").write_text("user\n")
    now = take(work, store)
    plan = plan_restore(now, start)
    assert changed_outside(end, now, plan.touched) == ["notes.txt"]


def test_objects_are_deduplicated_and_manifests_stored(world):
    work, store = world
    (work / "copy.txt").write_text("notes\n")
    manifest, manifest_id, new, _ = snapshot(str(work), Scope(str(work)), store, None, max_file_bytes=CAP,
                                             bytes_left=10**9)
    assert manifest.entries["copy.txt"].sha == manifest.entries["notes.txt"].sha
    assert store.manifest(manifest_id) == manifest
    assert new == sum(len(store.get(s)) for s in {e.sha for e in manifest.entries.values() if e.sha})
    again = snapshot(str(work), Scope(str(work)), store, None, max_file_bytes=CAP, bytes_left=10**9)
    assert again[2] == 0  # nothing new


def test_nested_repositories_and_worktree_git_files_are_never_read_nor_written(world):
    work, store = world
    (work / "sub" / ".git" / "objects").mkdir(parents=True)
    (work / "sub" / ".git" / "config").write_text("[core]\n")
    (work / "wt").mkdir()
    (work / "wt" / ".git").write_text("gitdir: /elsewhere\n")
    before = {p: tree_state(work / p) if (work / p).is_dir() else (work / p).read_bytes()
              for p in ("sub/.git", "wt/.git")}
    target = take(work, store)
    assert not any(".git" in p.split("/") for p in target.entries)
    (work / "sub" / "x.txt").write_text("new")
    restore(work, store, target)
    assert not (work / "sub" / "x.txt").exists()
    after = {p: tree_state(work / p) if (work / p).is_dir() else (work / p).read_bytes()
             for p in ("sub/.git", "wt/.git")}
    assert after == before


def test_a_missing_cwd_makes_an_incomplete_checkpoint_that_deletes_nothing(tmp_path):
    store = Store(tmp_path / "state", fsync=False)
    manifest, _, _, notes = snapshot(str(tmp_path / "gone"), Scope(str(tmp_path / "gone")), store, None,
                                     max_file_bytes=CAP, bytes_left=10**9)
    assert not manifest.complete and notes
    assert plan_restore(Manifest({"a": Entry(FILE, sha="x")}), manifest).deletes == ()


def test_the_settings_group():
    from actors.settings import Settings
    from actors.settings_file import settings_from_dict

    assert Settings().checkpoints_enabled and Settings().checkpoint_max_file_bytes == 8 * 1024 * 1024
    s = settings_from_dict({"checkpoints": {"enabled": False, "maxFileBytes": 10, "maxSessionBytes": 20}})
    assert (s.checkpoints_enabled, s.checkpoint_max_file_bytes, s.checkpoint_max_session_bytes) == (False, 10, 20)


def _age(path: Path, seconds: float) -> None:
    st = path.stat()
    os.utime(path, (st.st_atime - seconds, st.st_mtime - seconds))


def test_a_sweep_deletes_only_old_objects_no_log_reaches(tmp_path):
    store = Store(tmp_path / "cp", fsync=False)
    kept_blob, _ = store.put(b"kept content")
    lost_blob, _ = store.put(b"content of a deleted session")
    history, _ = store.put(b"[]")
    kept = store.put_manifest(Manifest({"a.txt": Entry(kind=FILE, sha=kept_blob, size=12)}, {}, frozenset(), True))
    store.write_log("live", {"entries": [{"id": "e1", "start": kept, "end": None}], "lastEnd": None,
                            "undo": [{"id": "u1", "manifest": None, "history": history, "lastEnd": None}]})
    for obj in (kept_blob, lost_blob, history, kept):
        _age(store.path(obj), 7200)
    fresh, _ = store.put(b"written by a walk its log does not name yet")

    assert store.sweep(grace_seconds=3600) == (1, len(b"content of a deleted session"))
    assert not store.path(lost_blob).exists()
    assert all(store.path(o).exists() for o in (kept_blob, history, kept, fresh))


def test_using_an_object_again_spares_it_and_an_unreadable_log_stops_the_sweep(tmp_path):
    store = Store(tmp_path / "cp", fsync=False)
    blob, _ = store.put(b"old content")
    _age(store.path(blob), 7200)
    assert store.put(b"old content") == (blob, False)  # a walk stored the same content again
    assert store.sweep(grace_seconds=3600) == (0, 0)

    _age(store.path(blob), 7200)
    store.log_path("broken").write_bytes(b"{not json")
    with pytest.raises(StorageError, match="broken.json unreadable, nothing swept"):
        store.sweep(grace_seconds=3600)
    assert store.path(blob).exists()
    store.delete_log("broken")
    store.delete_log("broken")  # gone already is fine
    assert store.sweep(grace_seconds=3600) == (1, len(b"old content"))


def test_content_a_walk_finds_stored_already_is_spared_by_the_next_sweep(tmp_path):
    """A deleted session's object whose content another session's walk meets again: the walk uses it (no new
    copy) and marks it used, so a sweep that read the logs before the walk's log was written spares it."""
    store = Store(tmp_path / "cp", fsync=False)
    blob, _ = store.put(b"shared content\n")  # once a deleted session's, now no log reaches it
    _age(store.path(blob), 7200)
    work = tmp_path / "work"
    work.mkdir()
    (work / "f.txt").write_bytes(b"shared content\n")
    manifest = take(work, store)
    assert manifest.entries["f.txt"].sha == blob
    assert store.sweep(grace_seconds=3600) == (0, 0)  # its log is not written yet: the grace keeps it
    assert store.path(blob).exists()


def test_a_log_of_the_wrong_shape_reaches_nothing_and_breaks_no_sweep(tmp_path):
    store = Store(tmp_path / "cp", fsync=False)
    blob, _ = store.put(b"x")
    _age(store.path(blob), 7200)
    store.write_log("odd", {"entries": ["not an entry", 3, None], "undo": "nope", "lastEnd": 7})
    assert store.sweep(grace_seconds=3600) == (1, 1)
