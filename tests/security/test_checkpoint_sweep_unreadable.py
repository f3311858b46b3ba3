"""The checkpoint sweep took a manifest it could not read (an I/O error, no permission) as gone: what it reached
was then reached by nothing, and the sweep deleted it — a live session's checkpointed file contents, lost to a
read error. Now only a manifest with no entry at all at its path is gone; one that is there but cannot be read
stops the sweep before it deletes anything (as an unreadable log does), and the daemon logs a warning naming
the manifest's path.

As root, permission bits do not stop a read, so the manifest is made unreadable by what stands at its path: a
directory (EISDIR), a symlink loop (ELOOP), a dangling symlink. The store directly, then the real daemon's sweep
after a deletion. Each fails on the code before the fix: the live session's contents were deleted.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import pytest
import trio

from actors import load_script
from actors.checkpoints.manifest import FILE, Entry, Manifest
from actors.checkpoints.store import Store, log_references
from actors.storage import StorageError
from tests.conftest import live_daemon
from tests.e2e.test_checkpoints_e2e import call, prompt_and_wait
from tests.e2e.test_delete_sessions import age_every_object, object_path


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)


def make_unreadable(path: Path, how: str) -> None:
    """Something at ``path`` that is not gone, yet cannot be read as a file."""
    path.unlink()
    if how == "directory":
        path.mkdir()
    elif how == "symlink loop":
        path.symlink_to(path.name)  # itself
    elif how == "dangling symlink":
        path.symlink_to(path.with_name("nothing-here"))
    else:
        raise ValueError(how)


HOWS = ["directory", "symlink loop", "dangling symlink"]
SWEPT = ("checkpoint objects not swept", "checkpoint sweep deleted")  # how the daemon's sweep ends, either way


@pytest.mark.parametrize("how", HOWS)
def test_an_unreadable_manifest_stops_the_sweep_and_its_contents_stay(tmp_path: Path, how: str) -> None:
    store = Store(tmp_path / "cp", fsync=False)
    blob, _ = store.put(b"a live session's file\n")
    unreached, _ = store.put(b"no log reaches this\n")
    manifest = store.put_manifest(Manifest({"a.txt": Entry(kind=FILE, sha=blob, size=22)}, {}, frozenset(), True))
    store.write_log("live", {"entries": [{"id": "e1", "start": None, "end": manifest}], "lastEnd": manifest})
    for obj in (blob, unreached, manifest):
        _age(store.path(obj), 7200)
    make_unreadable(store.path(manifest), how)

    with pytest.raises(StorageError) as info:
        store.sweep(grace_seconds=3600)
    message = str(info.value)
    assert f"checkpoint manifest {store.path(manifest)} unreadable" in message and "nothing swept" in message, \
        message
    # Nothing deleted: not the manifest's contents, not even what no log reaches (it might be what it reaches).
    assert store.path(blob).exists() and store.path(unreached).exists()
    assert os.path.lexists(store.path(manifest))

    # Readable again, the sweep goes on: what no log reaches goes, the live session's content stays.
    target = store.path(manifest)
    shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
    store.put_manifest(Manifest({"a.txt": Entry(kind=FILE, sha=blob, size=22)}, {}, frozenset(), True))
    assert store.sweep(grace_seconds=3600) == (1, len(b"no log reaches this\n"))
    assert store.path(blob).exists() and not store.path(unreached).exists()


def test_a_manifest_that_is_gone_still_reaches_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "cp", fsync=False)
    blob, _ = store.put(b"old")
    _age(store.path(blob), 7200)
    store.write_log("s", {"entries": [{"id": "e1", "start": "0" * 64, "end": "ab"}], "lastEnd": "../../x"})
    assert store.sweep(grace_seconds=3600) == (1, 3)


@pytest.mark.parametrize("how", ["directory", "symlink loop"])
async def test_the_daemons_sweep_after_a_deletion_keeps_a_live_sessions_contents_and_warns(
        tmp_path: Path, caplog, how: str) -> None:
    state, work_a, work_b = tmp_path / "state", tmp_path / "a", tmp_path / "b"
    work_a.mkdir()
    work_b.mkdir()
    script = [[call("write_file", path="a.txt", content="only in A\n")], [{"text": "A wrote"}],
              [call("write_file", path="b.txt", content="only in B\n")], [{"text": "B wrote"}],
              [call("write_file", path="b.txt", content="B again\n")], [{"text": "B changed it"}]]
    caplog.set_level(logging.INFO)
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), state_dir=state) as (daemon, client):
            a = (await client.post("/session", json={"cwd": str(work_a), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, a, "write")
            b = (await client.post("/session", json={"cwd": str(work_b), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, b, "write")
            await prompt_and_wait(client, b, "change")  # its checkpoint before this turn holds b.txt's first text
            only_a, only_b = object_path(state, b"only in A\n"), object_path(state, b"only in B\n")
            assert only_a.exists() and only_b.exists()

            store = daemon.runtime.checkpoint_store
            manifests, _ = log_references(store.read_log(b))
            assert manifests
            age_every_object(state, 7200)
            for manifest in manifests:  # B's checkpoints can no longer be read (an I/O error, say)
                make_unreadable(store.path(manifest), how)

            # Deleting A sweeps (in the background): B's content must not go with A's.
            answer = await client.post("/sessions/delete", json={"sessionIds": [a]})
            assert answer.json()["removed"] == [a]
            while not any(r.getMessage().startswith(SWEPT) for r in caplog.records):
                await trio.sleep(0.02)
    assert only_b.exists(), "a live session's checkpointed content was deleted"
    [warning] = [r for r in caplog.records if r.getMessage().startswith(SWEPT)]
    assert "checkpoint objects not swept" in warning.getMessage(), warning.getMessage()
    assert warning.levelno == logging.WARNING
    assert any(f"checkpoint manifest {store.path(m)} unreadable" in warning.getMessage() for m in manifests), \
        warning.getMessage()
    assert only_a.exists()  # nothing at all was swept
