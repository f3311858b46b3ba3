"""The checkpoint store and the file work: content-addressed objects, walking a tree, restoring one.

Everything here is plain blocking I/O; :mod:`.keeper` runs it in a worker thread.

    <state-dir>/checkpoints/objects/ab/cdef…   blobs and manifests, named by their sha256
    <state-dir>/checkpoints/sessions/<id>.json  a session's checkpoint log (replaced atomically)

An object is written under a temporary name (``O_EXCL``, 0600), fsynced when
``storage.fsync`` is ``always``, then renamed into place; one that exists
already is not written again (and costs its session nothing: the keeper counts
the bytes actually written against ``checkpoints.maxSessionBytes``, file
contents, manifests and conversation copies alike; :meth:`Store.put_within`
refuses a new object that does not fit).

The walk (:func:`snapshot`) goes under the session's cwd in name order: every
``.git`` entry is skipped (never read, never written), so are the daemon's
hidden paths (:meth:`~actors.tools.paths.Scope.is_hidden`: the state directory,
the settings file, the credentials in the home); ``.gitignore`` files are
honoured as the file tools honour them (:func:`~actors.tools.walk.ignores_above`),
symlinks are recorded, never followed. A file whose (size, mtime, inode, ctime)
are those the previous manifest recorded is not read again.

A restore (:func:`apply`) opens every parent directory component by component
from the cwd with ``O_NOFOLLOW`` and works through directory descriptors: a
symlink standing where the target has a directory is replaced by the directory,
never written through; a file is written to a temporary name beside it and
renamed over it.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ..storage import StorageError, replace_private
from ..tools.paths import Scope
from ..tools.walk import Abandoned, Budget, Ignores, TooSlow, ignores_above
from .manifest import DIR, FILE, LINK, MAX_IGNORED, Entry, Manifest, Plan

MAX_ENTRIES = 100_000  # directory entries one walk looks at; past that the manifest is incomplete
CHUNK = 1024 * 1024
MAX_DIFF_FILE_BYTES = 1024 * 1024  # a file larger than this is not shown line by line
MAX_DIFF_CHARS = 4 * 1024 * 1024  # one diff answer, in all
_OBJECT_NAME = re.compile(r"[0-9a-f]{64}")  # a sha256, as objects are named


class Store:
    """The objects and the session logs under ``root`` (``<state-dir>/checkpoints``)."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.sessions = self.root / "sessions"
        self.fsync = fsync
        # Between a sweep's look at an object and its unlink, no walk may find it and use it again (touch):
        # held for one object at a time.
        self._objects_lock = threading.Lock()
        for directory in (self.root, self.objects, self.sessions):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    # ------------------------------------------------------------- objects

    def path(self, sha: str) -> Path:
        return self.objects / sha[:2] / sha[2:]

    def has(self, sha: str) -> bool:
        return self.path(sha).exists()

    def touch(self, sha: str) -> bool:
        """Whether the object exists, marking it used now if so: a sweep spares what was used within its
        grace (:meth:`sweep`)."""
        with self._objects_lock:
            try:
                os.utime(self.path(sha))
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise StorageError(f"cannot touch checkpoint object {sha}: {exc.strerror or exc}") from None
        return True

    def get(self, sha: str) -> bytes:
        try:
            return self.path(sha).read_bytes()
        except OSError as exc:
            raise StorageError(f"checkpoint object {sha} unreadable: {exc.strerror or exc}") from None

    def put(self, data: bytes, sha: str | None = None) -> tuple[str, bool]:
        """Store ``data``; its sha256 and whether it was new."""
        sha = sha or hashlib.sha256(data).hexdigest()
        if self.touch(sha):  # there already: used again
            return sha, False
        final = self.path(sha)
        final.parent.mkdir(mode=0o700, exist_ok=True)
        temporary = final.with_name(f".{final.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if self.fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, final)
        except OSError as exc:
            try:
                temporary.unlink()
            except OSError:
                pass
            raise StorageError(f"cannot write checkpoint object {final}: {exc.strerror or exc}") from None
        return sha, True

    def put_within(self, data: bytes, room: int | None = None) -> tuple[str | None, int]:
        """Store ``data`` unless it is new and longer than ``room`` (None: whatever its length): its sha256
        (None: not stored, it did not fit) and the bytes written (0 when it was stored already: content
        addressed, it costs nothing again)."""
        sha = hashlib.sha256(data).hexdigest()
        if room is not None and len(data) > room and not self.touch(sha):
            return None, 0
        sha, new = self.put(data, sha)
        return sha, len(data) if new else 0

    def put_manifest(self, manifest: Manifest) -> str:
        data = manifest.to_bytes()
        return self.put(data, hashlib.sha256(data).hexdigest())[0]

    def manifest(self, manifest_id: str) -> Manifest:
        return Manifest.from_bytes(self.get(manifest_id))

    # ------------------------------------------------------------- session logs

    def log_path(self, session_id: str) -> Path:
        return self.sessions / f"{session_id}.json"

    def read_log(self, session_id: str) -> dict[str, Any]:
        try:
            data = orjson.loads(self.log_path(session_id).read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, orjson.JSONDecodeError) as exc:
            raise StorageError(f"checkpoint log {self.log_path(session_id)} unreadable: {exc}") from None
        return data if isinstance(data, dict) else {}

    def write_log(self, session_id: str, log: dict[str, Any]) -> int:
        """Replace the session's log with ``log``: the bytes it now takes."""
        data = orjson.dumps(log)
        replace_private(self.log_path(session_id), data, sync=self.fsync)
        return len(data)

    def delete_log(self, session_id: str) -> None:
        """A deleted session's log goes; its objects stay until :meth:`sweep` finds no log using them."""
        try:
            self.log_path(session_id).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {self.log_path(session_id)}: {exc.strerror or exc}") from None

    # ------------------------------------------------------------- sweeping

    def sweep(self, *, grace_seconds: float, now: float | None = None) -> tuple[int, int]:
        """Delete the objects no session's log reaches and nobody wrote or used in the last ``grace_seconds``;
        ``(objects, bytes)`` deleted.

        A walk running meanwhile may have stored objects its session's log does not name yet, and may use an
        existing object again (:meth:`put` touches it): the grace spares both. A log that cannot be read stops
        the sweep before it deletes anything, so an object is never lost to a log it could not see; so does a
        manifest a log names that is there but cannot be read (an I/O error, no permission, a directory or a
        symlink in its place): only one that is gone (no entry at all at its path) reaches nothing.
        """
        now = time.time() if now is None else now
        reached: set[str] = set()
        for path in sorted(self.sessions.glob("*.json")):
            try:
                log = orjson.loads(path.read_bytes())
            except FileNotFoundError:
                continue  # deleted meanwhile
            except (OSError, orjson.JSONDecodeError) as exc:
                raise StorageError(f"checkpoint log {path} unreadable, nothing swept: {exc}") from None
            manifests, blobs = log_references(log if isinstance(log, dict) else {})
            reached |= blobs
            for manifest_id in manifests - reached:
                reached.add(manifest_id)
                if not _OBJECT_NAME.fullmatch(manifest_id):
                    continue  # no object's name (a log of the wrong shape): it reaches nothing
                where = self.path(manifest_id)
                try:
                    data = where.read_bytes()
                except FileNotFoundError:
                    if not os.path.lexists(where):
                        continue  # gone already: nothing of it to keep
                    raise self._unreadable_manifest(where, "a dangling symbolic link") from None
                except OSError as exc:
                    # Not gone: unreadable (EIO, EACCES, a directory or a symlink loop in its place). What it
                    # reaches is not known, so nothing may be deleted: it could be that.
                    raise self._unreadable_manifest(where, exc.strerror or str(exc)) from None
                try:
                    manifest = Manifest.from_bytes(data)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:  # not a manifest's shape
                    raise StorageError(f"checkpoint manifest {manifest_id} unreadable, nothing swept: {exc}"
                                       ) from None
                reached.update(e.sha for e in manifest.entries.values() if e.sha is not None)
        deleted = freed = 0
        try:
            for shard in sorted(self.objects.iterdir()):
                if not shard.is_dir() or shard.is_symlink():
                    continue
                for obj in shard.iterdir():
                    name = obj.name
                    if shard.name + name in reached and not name.startswith("."):
                        continue
                    with self._objects_lock:
                        try:
                            st = obj.lstat()
                            if now - st.st_mtime < grace_seconds:
                                continue
                            obj.unlink()
                        except FileNotFoundError:
                            continue
                    deleted += 1
                    freed += st.st_size
        except OSError as exc:
            raise StorageError(f"checkpoint objects not swept past {deleted} ({self.objects}): "
                               f"{exc.strerror or exc}") from None
        return deleted, freed


    @staticmethod
    def _unreadable_manifest(where: Path, why: str) -> StorageError:
        return StorageError(f"checkpoint manifest {where} unreadable ({why}), nothing swept: it is left as it is, "
                            "and every object with it, since what it reaches is not known")


def log_references(log: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The manifests and the other objects a session's log names (see the log's shape in :mod:`.keeper`)."""
    manifests: set[Any] = set()
    blobs: set[Any] = set()
    entries, undos = log.get("entries"), log.get("undo")
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, dict):
            manifests.update(entry.get(k) for k in ("start", "end"))
    manifests.add(log.get("lastEnd"))
    for undo in undos if isinstance(undos, list) else ():
        if isinstance(undo, dict):
            manifests.update((undo.get("manifest"), undo.get("lastEnd")))
            blobs.add(undo.get("history"))
    return {m for m in manifests if isinstance(m, str)}, {b for b in blobs if isinstance(b, str)}


# ----------------------------------------------------------------- the walk


class Walker:
    """One walk of ``root``: a manifest, and the bytes of new objects it stored (``store`` None: read only, the
    files hashed but nothing stored)."""

    def __init__(self, root: str, scope: Scope, store: Store | None, previous: Manifest | None, *,
                 max_file_bytes: int, bytes_left: int, max_entries: int = MAX_ENTRIES) -> None:
        self.root = root
        self.scope = scope
        self.store = store
        self.previous = previous.entries if previous is not None else {}
        self.max_file_bytes = max_file_bytes
        self.bytes_left = bytes_left
        self.max_entries = max_entries
        self.entries: dict[str, Entry] = {}
        self.skipped: dict[str, str] = {}
        self.ignored: set[str] = set()
        self.complete = True
        self.looked_at = 0
        self.new_bytes = 0
        self.notes: list[str] = []

    def run(self) -> Manifest:
        budget = Budget()
        try:
            self._walk(self.root, "", ignores_above(self.root, self.scope, budget))
        except TooSlow as exc:
            self.complete = False
            self.notes.append(f"the walk stopped: {exc.explain(self.scope.shown)}")
        except Abandoned:
            self.complete = False
        return Manifest(self.entries, self.skipped, frozenset(self.ignored), self.complete)

    def _walk(self, directory: str, rel: str, ignores: Ignores) -> None:
        try:
            with os.scandir(directory) as it:
                found = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            if rel:
                self.skipped[rel] = f"unreadable directory ({exc.strerror or exc})"
            else:  # the cwd itself: nothing known, so a restore to this checkpoint must delete nothing
                self.complete = False
                self.notes.append(f"the working directory could not be read ({exc.strerror or exc})")
            return
        for entry in found:
            self.looked_at += 1
            if self.looked_at > self.max_entries:
                if self.complete:
                    self.notes.append(f"more than {self.max_entries:,} entries: the rest of the tree is not "
                                      f"covered")
                self.complete = False
                return
            name = entry.name
            if name == ".git":
                continue
            path = entry.path
            relpath = f"{rel}/{name}" if rel else name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # vanished
            is_dir = stat.S_ISDIR(st.st_mode)
            if self.scope.is_hidden(path):
                continue
            if ignores.ignored(path, is_dir):
                if len(self.ignored) >= MAX_IGNORED:
                    self.complete = False
                else:
                    self.ignored.add(relpath)
                continue
            if is_dir:
                self.entries[relpath] = Entry(DIR, mode=stat.S_IMODE(st.st_mode))
                self._walk(path, relpath, ignores.entering(path))
                if self.looked_at > self.max_entries:
                    return
            elif stat.S_ISLNK(st.st_mode):
                try:
                    self.entries[relpath] = Entry(LINK, target=os.readlink(path))
                except OSError as exc:
                    self.skipped[relpath] = f"unreadable link ({exc.strerror or exc})"
            elif stat.S_ISREG(st.st_mode):
                self._file(path, relpath, st)
            else:
                self.skipped[relpath] = "not a regular file (a socket, a pipe or a device)"

    def _file(self, path: str, relpath: str, st: os.stat_result) -> None:
        mode = stat.S_IMODE(st.st_mode)
        key = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        old = self.previous.get(relpath)
        if old is not None and old.kind == FILE and old.stat == key and (self.store is None or self.store.has(old.sha)):
            self.entries[relpath] = Entry(FILE, sha=old.sha, size=old.size, mode=mode, stat=key)
            return
        if st.st_size > self.max_file_bytes:
            self.skipped[relpath] = f"over the per-file cap ({st.st_size:,} bytes > {self.max_file_bytes:,})"
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            self.skipped[relpath] = f"unreadable ({exc.strerror or exc})"
            return
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode):
                self.skipped[relpath] = "not a regular file"
                return
            parts, total = [], 0
            while True:
                chunk = os.read(fd, CHUNK)
                if not chunk:
                    break
                parts.append(chunk)
                total += len(chunk)
                if total > self.max_file_bytes:
                    self.skipped[relpath] = f"over the per-file cap (more than {self.max_file_bytes:,} bytes)"
                    return
        except OSError as exc:
            self.skipped[relpath] = f"unreadable ({exc.strerror or exc})"
            return
        finally:
            os.close(fd)
        data = b"".join(parts)
        sha = hashlib.sha256(data).hexdigest()
        if self.store is not None and not self.store.touch(sha):  # touched: a sweep spares content used again
            if len(data) > self.bytes_left - self.new_bytes:
                self.skipped[relpath] = "the session's checkpoint cap (checkpoints.maxSessionBytes) is reached"
                return
            _, new = self.store.put(data, sha)
            if new:
                self.new_bytes += len(data)
        key = (opened.st_size, opened.st_mtime_ns, opened.st_ino, opened.st_ctime_ns)
        self.entries[relpath] = Entry(FILE, sha=sha, size=len(data), mode=stat.S_IMODE(opened.st_mode), stat=key)


def walk_tree(root: str, scope: Scope, store: Store | None, previous: Manifest | None, *, max_file_bytes: int,
              bytes_left: int) -> tuple[Manifest, int, list[str]]:
    """Walk ``root``: its manifest (not stored: the caller decides whether it fits the session's cap), the
    bytes of the new file contents stored (at most ``bytes_left``), and notes."""
    walker = Walker(root, scope, store, previous, max_file_bytes=max_file_bytes, bytes_left=bytes_left)
    manifest = walker.run()
    return manifest, walker.new_bytes, walker.notes


def snapshot(root: str, scope: Scope, store: Store | None, previous: Manifest | None, *, max_file_bytes: int,
             bytes_left: int) -> tuple[Manifest, str | None, int, list[str]]:
    """Walk ``root``: its manifest, the manifest's id when stored (whatever its size), the bytes of new file
    contents, and notes. The keeper uses :func:`walk_tree` and stores the manifest within the session's cap."""
    manifest, new_bytes, notes = walk_tree(root, scope, store, previous, max_file_bytes=max_file_bytes,
                                           bytes_left=bytes_left)
    manifest_id = store.put_manifest(manifest) if store is not None else None
    return manifest, manifest_id, new_bytes, notes


# ----------------------------------------------------------------- restoring


class _Tree:
    """The cwd, reached through directory descriptors, never through a symlink."""

    def __init__(self, root: str) -> None:
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._open: list[int] = []

    def close(self) -> None:
        for fd in self._open:
            os.close(fd)
        os.close(self.fd)

    def parent(self, relpath: str, *, create: bool, modes: dict[str, int]) -> tuple[int, str] | None:
        """A descriptor of ``relpath``'s parent and its last name; None when a parent is missing (or is not a
        directory) and ``create`` is false. With ``create`` a symlink or file in a parent's place is replaced by
        a directory."""
        parts = relpath.split("/")
        if any(part in ("", ".", "..", ".git") for part in parts):
            raise ValueError(f"refusing the path {relpath!r}")
        fd = self.fd
        for n, part in enumerate(parts[:-1]):
            try:
                fd = self._opendir(part, fd)
            except OSError as exc:
                if not create:
                    return None
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink where a directory goes: replaced
                    if not stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise  # a file: never removed here (the plan deletes what it knows of)
                    os.unlink(part, dir_fd=fd)
                elif exc.errno != errno.ENOENT:
                    raise
                os.mkdir(part, modes.get("/".join(parts[:n + 1]), 0o755), dir_fd=fd)
                fd = self._opendir(part, fd)
        return fd, parts[-1]

    def _opendir(self, name: str, fd: int) -> int:
        new = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        self._open.append(new)
        return new


def apply(root: str, plan: Plan, target: Manifest, store: Store) -> tuple[list[str], list[str], dict[str, str]]:
    """Carry ``plan`` out under ``root``: the paths restored (written or made), deleted, and left alone."""
    restored: list[str] = []
    deleted: list[str] = []
    skipped = dict(plan.skipped)
    modes = {p: e.mode for p, e in target.entries.items() if e.kind == DIR}
    tree = _Tree(root)
    try:
        for path in plan.deletes:
            try:
                found = tree.parent(path, create=False, modes=modes)
                if found is not None:
                    os.unlink(found[1], dir_fd=found[0])
                deleted.append(path)
            except FileNotFoundError:
                deleted.append(path)
            except OSError as exc:
                skipped[path] = f"could not delete it ({exc.strerror or exc})"
        for path in plan.rmdirs:
            try:
                found = tree.parent(path, create=False, modes=modes)
                if found is not None:
                    os.rmdir(found[1], dir_fd=found[0])
                deleted.append(path)
            except FileNotFoundError:
                deleted.append(path)
            except OSError as exc:
                reason = "not empty (it holds files the checkpoint does not cover)" \
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST) else (exc.strerror or str(exc))
                skipped[path] = f"directory left: {reason}"
        for path in plan.mkdirs:
            try:
                fd, name = tree.parent(path, create=True, modes=modes)  # type: ignore[misc]
                try:
                    os.mkdir(name, target.entries[path].mode or 0o755, dir_fd=fd)
                except FileExistsError:
                    if not stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                        os.unlink(name, dir_fd=fd)
                        os.mkdir(name, target.entries[path].mode or 0o755, dir_fd=fd)
                restored.append(path)
            except OSError as exc:
                skipped[path] = f"could not make the directory ({exc.strerror or exc})"
        for path in plan.writes:
            try:
                _write(tree, path, target.entries[path], store, modes)
                restored.append(path)
            except (OSError, StorageError) as exc:
                skipped[path] = f"could not restore it ({getattr(exc, 'strerror', None) or exc})"
    finally:
        tree.close()
    return restored, deleted, skipped


def _write(tree: _Tree, path: str, entry: Entry, store: Store, modes: dict[str, int]) -> None:
    fd, name = tree.parent(path, create=True, modes=modes)  # type: ignore[misc]
    temporary = f".{name[:64]}.trellis-restore.{secrets.token_hex(4)}"
    if entry.kind == LINK:
        os.symlink(entry.target or "", temporary, dir_fd=fd)
    else:
        assert entry.sha is not None
        data = store.get(entry.sha)
        out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
            os.fchmod(out, entry.mode & 0o7777)
        finally:
            os.close(out)
    try:
        try:
            os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        except IsADirectoryError:
            os.rmdir(name, dir_fd=fd)  # an empty directory in its place; one not empty stays (and we fail)
            os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        try:
            os.unlink(temporary, dir_fd=fd)
        except OSError:
            pass
        raise


# ----------------------------------------------------------------- diffs


def read_tree_file(root: str, relpath: str, limit: int) -> bytes | None:
    """A file of the tree as it is now (no symlink followed), or None; at most ``limit`` + 1 bytes."""
    tree = _Tree(root)
    try:
        found = tree.parent(relpath, create=False, modes={})
        if found is None:
            return None
        fd = os.open(found[1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=found[0])
        try:
            return os.read(fd, limit + 1)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None
    finally:
        tree.close()


def unified_diff(before: Manifest, after: Manifest, paths: list[str], old: Callable[[Entry], bytes | None],
                 new: Callable[[str, Entry], bytes | None]) -> str:
    """A unified diff of ``paths`` between two manifests; ``old(entry)`` and ``new(path, entry)`` give a file's
    bytes. Binary and large files are named, not shown."""
    out: list[str] = []
    size = 0
    for path in paths:
        a, b = before.entries.get(path), after.entries.get(path)
        if (a is None or a.kind == DIR) and (b is None or b.kind == DIR):
            continue
        text = _file_diff(path, a, b, old, new)
        size += len(text)
        if size > MAX_DIFF_CHARS:
            out.append(f"[the diff is cut here: more than {MAX_DIFF_CHARS:,} characters]\n")
            break
        out.append(text)
    return "".join(out)


def _lines(path: str, entry: Entry | None, get: Callable[[], bytes | None]) -> list[str] | str:
    if entry is None or entry.kind == DIR:
        return []
    if entry.kind == LINK:
        return [f"symlink -> {entry.target}\n"]
    if entry.size > MAX_DIFF_FILE_BYTES:
        return "large"
    data = get()
    if data is None:
        return "unreadable"
    if b"\0" in data:
        return "binary"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "binary"
    return text.splitlines(keepends=True)


def _file_diff(path: str, a: Entry | None, b: Entry | None, old: Callable[[Entry], bytes | None],
               new: Callable[[str, Entry], bytes | None]) -> str:
    left = _lines(path, a, lambda: old(a) if a is not None else None)
    right = _lines(path, b, lambda: new(path, b) if b is not None else None)
    name_a = f"a/{path}" if a is not None and a.kind != DIR else "/dev/null"
    name_b = f"b/{path}" if b is not None and b.kind != DIR else "/dev/null"
    if isinstance(left, str) or isinstance(right, str):
        why = left if isinstance(left, str) else right
        return f"diff --trellis {name_a} {name_b}\n{'Binary' if why == 'binary' else why.capitalize()} files " \
               f"{name_a} and {name_b} differ\n"
    lines = list(difflib.unified_diff(left, right, name_a, name_b))
    mode = ""
    if a is not None and b is not None and a.kind == b.kind == FILE and (a.mode & 0o777) != (b.mode & 0o777):
        mode = f"old mode {a.mode & 0o777:o}\nnew mode {b.mode & 0o777:o}\n"
    if not lines and not mode:
        return ""
    body = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return f"diff --trellis {name_a} {name_b}\n{mode}{body}"


__all__ = ["MAX_ENTRIES", "Store", "Walker", "apply", "read_tree_file", "snapshot", "unified_diff", "walk_tree"]
