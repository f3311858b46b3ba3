"""The scan for files only root may read (``actors/process/root_only.py``): its rule, its walk, what stays.

Run as any user: the scan is asked about this process's own uid and gid, which is the same rule the daemon applies
to uid 0 and gid 0 when it runs as root.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from actors.process.root_only import RootOnlyFiles, around, private_to, scan

UID, GID = os.getuid(), os.getgid()


def made(path: Path, mode: int, *, directory: bool = False) -> Path:
    if directory:
        path.mkdir(parents=True, exist_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    path.chmod(mode)
    return path


@pytest.mark.parametrize(("mode", "directory", "private"), [
    (0o600, False, True),    # only the owner reads it
    (0o640, False, True),    # the owner and the group (the group is ours too)
    (0o644, False, False),   # anyone reads it
    (0o604, False, False),
    (0o200, False, False),   # nobody reads it: nothing to hide
    (0o700, True, True),     # only the owner enters it
    (0o711, True, False),    # anyone enters it (its names are not listed, its files are reachable)
    (0o755, True, False),
    (0o750, True, True),
])
def test_the_rule_is_what_the_owner_or_group_may_read_and_others_may_not(tmp_path, mode, directory, private):
    path = made(tmp_path / "entry", mode, directory=directory)
    assert private_to(os.lstat(path), UID, GID) is private
    # someone else's entry is never ours to hide: uid 0 without a capability cannot read it either
    assert private_to(os.lstat(path), UID + 1, GID + 1) is False


def test_the_walk_finds_private_entries_and_does_not_enter_a_private_directory(tmp_path):
    root = made(tmp_path / "etc", 0o755, directory=True)
    secret = made(root / "app" / "secret.conf", 0o600)
    made(root / "app" / "public.conf", 0o644)
    vault = made(root / "vault", 0o700, directory=True)
    made(vault / "inside", 0o600)  # not listed: the directory hides it
    (root / "link").symlink_to(secret)  # a symlink is never hidden (bwrap would follow it)
    found, stopped = scan([str(root)], uid=UID, gid=GID)
    assert sorted(found) == sorted([str(secret), str(vault)])
    assert stopped is False


def test_a_private_root_is_hidden_whole_and_a_missing_one_skipped(tmp_path):
    root = made(tmp_path / "srv", 0o700, directory=True)
    made(root / "x", 0o600)
    assert scan([str(root), str(tmp_path / "absent")], uid=UID, gid=GID) == ([str(root)], False)


def test_the_walk_stops_at_its_entry_limit_and_says_so(tmp_path):
    root = made(tmp_path / "var", 0o755, directory=True)
    for n in range(20):
        made(root / f"f{n}", 0o600)
    found, stopped = scan([str(root)], uid=UID, gid=GID, limit=5)
    assert stopped is True and len(found) == 5
    found, stopped = scan([str(root)], uid=UID, gid=GID, limit=20)  # exactly its entries: done
    assert stopped is False and len(found) == 20


def test_around_keeps_the_cwd_and_hides_everything_else_of_a_private_directory_holding_it(tmp_path):
    private = made(tmp_path / "opt" / "private", 0o700, directory=True)
    made(private / "keys" / "id", 0o644)
    made(private / "app" / "other" / "notes", 0o644)
    work = made(private / "app" / "work", 0o755, directory=True)
    made(work / "project.env", 0o600)
    elsewhere = str(tmp_path / "etc" / "shadow")
    hidden = around([str(private), elsewhere, str(work / "project.env")], [str(work)])
    assert sorted(hidden) == sorted([elsewhere, str(private / "keys"), str(private / "app" / "other")])


def test_around_keeps_several_paths_and_never_the_whole_tree(tmp_path):
    private = made(tmp_path / "private", 0o700, directory=True)
    home = made(private / "home", 0o700, directory=True)
    work = made(private / "work", 0o755, directory=True)
    made(private / "state", 0o700, directory=True)
    assert around([str(private)], [str(work), str(home)]) == [str(private / "state")]
    # a HOME of "/" would keep everything: it keeps nothing
    assert around([str(private)], ["/"]) == [str(private)]


def test_around_refuses_past_its_limit_naming_the_directory(tmp_path, monkeypatch):
    from actors.process import root_only

    private = made(tmp_path / "private", 0o700, directory=True)
    for n in range(10):
        made(private / f"f{n}", 0o644)
    work = made(private / "work", 0o755, directory=True)
    monkeypatch.setattr(root_only, "AROUND_LIMIT", 5)
    with pytest.raises(OSError, match=f"{private} holds {work} and is readable only by root"):
        around([str(private)], [str(work)])


def test_the_last_scan_is_served_and_remade_in_a_thread_once_stale(tmp_path):
    root = made(tmp_path / "etc", 0o755, directory=True)
    first = made(root / "a", 0o600)
    files = RootOnlyFiles([str(root)], refresh=3600, uid=UID, gid=GID)
    assert files.paths() == (str(first),)
    second = made(root / "b", 0o600)
    assert files.paths() == (str(first),)  # fresh: not scanned again
    files.refresh = 0
    files.paths()  # stale: serves the last scan, starts the next in a thread
    deadline = time.monotonic() + 30
    while set(files.paths()) != {str(first), str(second)}:
        assert time.monotonic() < deadline, files.paths()
        time.sleep(0.01)
    assert all(t.name != "trellis-root-only-scan" or t.daemon for t in threading.enumerate())


def test_a_directory_full_of_hidden_entries_is_hidden_whole_but_never_a_root(tmp_path):
    from actors.process.root_only import coalesce

    root = tmp_path / "var"
    many = [str(root / "log" / f"f{n}") for n in range(70)]
    few = [str(root / "cache" / f"c{n}") for n in range(3)]
    assert sorted(coalesce([*many, *few], roots=[str(root)])) == sorted([str(root / "log"), *few])
    # past the total, the fullest directories go whole one at a time; the root itself never
    direct = [str(root / f"d{n}") for n in range(100)]
    assert coalesce(direct, roots=[str(root)]) == direct
    assert len(coalesce([*few, *(str(root / "x" / f"y{n}") for n in range(5))], per_directory=64, total=4,
                        roots=[str(root)])) <= 4


def test_the_walk_does_not_enter_where_commands_write_nor_others_directories_in_a_shared_one(tmp_path):
    root = made(tmp_path / "srv", 0o755, directory=True)
    work = made(root / "work", 0o755, directory=True)
    made(work / "made-by-a-command", 0o600)
    shared = made(root / "tmp", 0o1777, directory=True)
    mine = made(shared / "mine", 0o755, directory=True)
    made(mine / "key", 0o600)
    assert sorted(scan([str(root)], uid=UID, gid=GID, skip=[str(work)])[0]) == [str(mine / "key")]
    if UID == 0:  # another user's directory in the shared one is not entered (it could be made to be long)
        os.chown(mine, 12345, 12345)
        assert scan([str(root)], uid=UID, gid=GID, skip=[str(work)])[0] == []


def test_a_failed_first_scan_refuses_instead_of_hiding_nothing(tmp_path, caplog):
    root = made(tmp_path / "etc", 0o755, directory=True)
    secret = made(root / "key", 0o600)
    files = RootOnlyFiles([str(root), "/srv/a\0b"], refresh=0, uid=UID, gid=GID)  # a root the walk cannot take
    with pytest.raises(OSError, match=r"the scan for files only root may read failed \(ValueError: .*null"):
        files.paths()
    assert "the scan for files only root may read failed" in caplog.text
    files.roots = (str(root),)  # the next call scans again; once one completes, its finds are served
    deadline = time.monotonic() + 30
    while True:
        try:
            if files.paths() == (str(secret),):
                break
        except OSError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_failed_later_scan_keeps_serving_the_last_one(tmp_path):
    root = made(tmp_path / "etc", 0o755, directory=True)
    secret = made(root / "key", 0o600)
    files = RootOnlyFiles([str(root)], refresh=0, uid=UID, gid=GID)
    assert files.paths() == (str(secret),)
    files.roots = (str(root), "/srv/a\0b")
    for _ in range(20):  # each call starts another scan, each fails
        assert files.paths() == (str(secret),)
        time.sleep(0.005)
