"""The single daemon's store: files under ``<state-dir>/sessions/``.

    <id>.jsonl          the transcript (see actors.session.transcript)
    <id>.journal.jsonl  the prompt journal, one JSON record a line
    <id>.session.json   the session record
    <id>.replay.jsonl   the compacted replay: one folded turn (a JSON array of events) a line

A file's name is the session's id and one of :data:`SUFFIXES`. Every suffix
starts with a dot and an id has none (:func:`~actors.session.transcript.is_safe_session_id`),
so a name reads back one way only, the id being what comes before its first
dot: two sessions never share a file. The store names no file by an id outside
that rule (``ValueError``; the daemon refuses one before, ``invalid_session_id``)
and lists no file whose name does not read back so.

The compacted replay is what a restored session shows its clients of earlier
turns (:mod:`actors.events.compaction`). It is appended without ``fsync``: it
is a view, not a promise; the transcript stays the record of the conversation,
and a session whose replay was lost is replayed from its transcript instead.

Journal appends are ``write(2)`` on a file opened with ``O_APPEND`` and kept
open between appends (:class:`~actors.storage.files.AppendFiles`, closed
with the session), then ``fsync`` when the policy is ``"always"`` (the
default) and the record is one a promise rests on (admissions, starts,
aborts, waiting input; a model call's usage and a turn's normal end are
written, not synced, and the next synced record makes them durable): a 202
survives a machine crash. ``"never"`` skips the fsync: a 202 still survives
the daemon being killed (the kernel has the bytes), not a power cut. An
fsync takes 0.15 ms to a few ms by the disk (``bench/bench_journal.py``
measures it), and a busy disk can hold one for 50-250 ms, once here 1.27 s;
on the event loop that stalls every session. So the daemon
(``sync_in_thread``) lets a prompt FIFO write its records unsynced and sync
them in a worker thread before it answers
(:class:`~actors.storage.writer.JournalWriter`), and writes a session's
record there, new or changed. A hand-off costs about 0.1 ms of CPU here:
one a turn for a prompt to an idle session (its admission and start share a
sync, see :func:`~actors._actor.serve_mailbox`), two for one queued behind a
turn; an earlier version kept fast syncs on the loop and went to a thread for
30 s after a slow one, and the first slow one of each spell held the loop
(48 ms, 1.27 s). An embedder or a test under virtual time keeps every sync
on the loop. The journal's compaction is split the same way
(:class:`FileJournalCompaction`). A torn last line — a crash mid-write — is
cut before the next append and skipped on read; a torn line elsewhere is an
error naming the file and line. The session record is replaced atomically
(temporary file, fsync, rename; no fsync under ``never``); the temporary
files of replacements a crash cut short are removed when the store opens,
once ten minutes old (:func:`sweep_leftovers`).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ..session.transcript import SESSION_ID_RULE, TRANSCRIPT_SUFFIX, Transcript, is_safe_session_id
from .base import StorageError
from .files import AppendFiles, fsync_directory

FSYNC_POLICIES = ("always", "never")

JOURNAL_SUFFIX = ".journal.jsonl"
RECORD_SUFFIX = ".session.json"
REPLAY_SUFFIX = ".replay.jsonl"
# Every file a session has here is ``<id><suffix>``, one of these.
SUFFIXES = (TRANSCRIPT_SUFFIX, JOURNAL_SUFFIX, RECORD_SUFFIX, REPLAY_SUFFIX)


def session_file(directory: Path, session_id: str, suffix: str) -> Path:
    """``<directory>/<session_id><suffix>``; ``ValueError`` for an id that is not a session id, which could name
    another session's file (``<id>.journal`` + ``.jsonl`` is ``<id>``'s journal)."""
    if not is_safe_session_id(session_id):
        raise ValueError(f"not a session id: {session_id!r} (a session id is {SESSION_ID_RULE})")
    return directory / f"{session_id}{suffix}"


def session_of(name: str) -> str | None:
    """The session whose file ``name`` is, if it is one: its id before the first dot, a suffix after it."""
    session_id, dot, rest = name.partition(".")
    return session_id if dot and dot + rest in SUFFIXES and is_safe_session_id(session_id) else None


class LocalStore:
    """:class:`~actors.storage.base.SessionStore` on local files."""

    def __init__(self, state_dir: str | os.PathLike[str], *, fsync: str = "always", sync_in_thread: bool = False
                 ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"storage.fsync must be one of {list(FSYNC_POLICIES)}, got {fsync!r}")
        self.directory = Path(state_dir) / "sessions"
        self.fsync = fsync == "always"
        self._sync_in_thread = sync_in_thread and self.fsync  # nothing to sync without fsync
        self.files = AppendFiles()  # journals, transcripts and replays stay open between appends
        # The journal paths appended to, built once (a Path joined and hashed per append cost more).
        self._journals: dict[str, Path] = {}
        self.swept = sweep_leftovers(self.directory)  # what crashed rewrites left

    def transcript(self, session_id: str) -> Transcript:
        session_file(self.directory, session_id, TRANSCRIPT_SUFFIX)  # refuses an id that is not one
        return Transcript(self.directory.parent, session_id, files=self.files)

    def close(self, session_id: str) -> None:
        """The session closed: its files are closed too (they reopen if it is restored)."""
        self.files.close([self._journal(session_id), self._replay(session_id), self._transcript(session_id)])
        self._journals.pop(session_id, None)

    def _transcript(self, session_id: str) -> Path:
        return session_file(self.directory, session_id, TRANSCRIPT_SUFFIX)

    def _journal(self, session_id: str) -> Path:
        return session_file(self.directory, session_id, JOURNAL_SUFFIX)

    def _record(self, session_id: str) -> Path:
        return session_file(self.directory, session_id, RECORD_SUFFIX)

    # ------------------------------------------------------------- journal

    def journal_append(self, session_id: str, record: dict[str, Any], *, durable: bool = True) -> None:
        path = self._journals.get(session_id)
        if path is None:
            if len(self._journals) >= self.files.limit:  # bounded as the open files are
                self._journals.clear()
            path = self._journals[session_id] = self._journal(session_id)
        self._append(path, orjson.dumps(record) + b"\n", fsync=durable and self.fsync)

    @property
    def sync_in_thread(self) -> bool:
        """Whether durable writes sync in a worker thread (asked for, and ``storage.fsync`` ``always``)."""
        return self._sync_in_thread

    def journal_syncer(self, session_id: str) -> Callable[[], None] | None:
        """After appends with ``durable=False``: what makes them durable, to run in a worker thread (None when
        this store does not sync off the event loop: its durable appends sync themselves)."""
        if not self._sync_in_thread:
            return None
        try:
            return self.files.syncer(self._journal(session_id))
        except OSError as exc:
            raise StorageError(f"cannot sync {self._journal(session_id)}: {exc.strerror or exc}") from None

    def _append(self, path: Path, line: bytes, *, fsync: bool) -> int:
        try:
            return self.files.append(path, line, fsync=fsync)
        except OSError as exc:
            raise StorageError(f"cannot append to {path}: {exc.strerror or exc}") from None

    def journal_read(self, session_id: str) -> list[dict[str, Any]]:
        return [r for r in _read_lines(self._journal(session_id)) if isinstance(r, dict)]

    def journal_rewrite(self, session_id: str, records: list[dict[str, Any]]) -> None:
        self.files.forget(self._journal(session_id))
        replace_private(self._journal(session_id), json_lines(records), sync=self.fsync)

    def journal_compaction(self, session_id: str) -> FileJournalCompaction | None:
        """A rewrite of the journal whose fsyncs run in worker threads (``None`` unless this store syncs in
        threads: then :meth:`journal_rewrite` on the loop)."""
        if not self._sync_in_thread:
            return None
        return FileJournalCompaction(self.files, self._journal(session_id))

    # ------------------------------------------------------------- compacted replay

    def _replay(self, session_id: str) -> Path:
        return session_file(self.directory, session_id, REPLAY_SUFFIX)

    def replay_append(self, session_id: str, segment: list[dict[str, Any]]) -> int:
        return self._append(self._replay(session_id), orjson.dumps(segment) + b"\n", fsync=False)

    def replay_read(self, session_id: str) -> list[list[dict[str, Any]]] | None:
        path = self._replay(session_id)
        if not path.exists():
            return None
        return [s for s in _read_lines(path) if isinstance(s, list)]

    def replay_rewrite(self, session_id: str, segments: list[list[dict[str, Any]]]) -> None:
        self.replay_rewriter(session_id)(segments)

    def replay_rewriter(self, session_id: str) -> Callable[[list[list[dict[str, Any]]]], None]:
        path = self._replay(session_id)
        self.files.forget(path)  # here: the open descriptors are the event loop's

        def rewrite(segments: list[list[dict[str, Any]]]) -> None:
            replace_private(path, json_lines(segments), sync=self.fsync)

        return rewrite

    # ------------------------------------------------------------- session record

    def record_write(self, session_id: str, record: dict[str, Any]) -> None:
        replace_private(self._record(session_id), orjson.dumps(record) + b"\n", sync=self.fsync)

    def record_read(self, session_id: str) -> dict[str, Any] | None:
        try:
            data = orjson.loads(self._record(session_id).read_bytes())
        except (FileNotFoundError, orjson.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    # ------------------------------------------------------------- listing

    def session_ids(self) -> list[str]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted({s for s in map(session_of, names) if s is not None})

    def exists(self, session_id: str) -> bool:
        """Whether the session has a transcript, journal or record (one made, never prompted, has only a
        record; one whose first prompt is queued, a journal too); ``ValueError`` if it is no session id."""
        return any(p.exists() for p in (self._journal(session_id), self._record(session_id),
                                        self._transcript(session_id)))

    def delete(self, session_id: str) -> None:
        """Delete every file of a closed session. The journal goes first, so a crash half-way never leaves
        queued prompts a restart would run; the record last, so what is left is still listed and can be
        deleted again. Safe in a worker thread: it touches no open file (the session's were closed, on the
        loop, by :meth:`close`)."""
        paths = (self._journal(session_id), self._transcript(session_id), self._replay(session_id),
                 self._record(session_id))
        for path in paths:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"cannot delete {path}: {exc.strerror or exc}") from None
        if self.fsync:
            try:
                fsync_directory(self.directory)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"cannot sync {self.directory}: {exc.strerror or exc}") from None


def _read_lines(path: Path) -> list[Any]:
    """Every JSON line of ``path`` (none if it is missing); a torn last line is skipped, any other is an error."""
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            if n == len(lines):
                break  # torn by a crash mid-write
            raise StorageError(f"{path}:{n}: invalid JSON") from None
    return out


class FileJournalCompaction:
    """One journal rewritten with its fsyncs off the event loop, every record appended meanwhile kept.

    1. :meth:`write` (a worker thread): the snapshot's records encoded to a
       fresh temporary file (``O_EXCL``, 0600), fsynced. The journal itself is untouched: records
       appended meanwhile go to it as before, durable ones synced as before.
    2. :meth:`install` (the event loop, no checkpoint): those records appended
       to the temporary file (fsynced there if one of them is durable: a
       timer's record, rarely), which is then renamed over the journal. A
       crash before the rename leaves the old journal, which holds everything;
       after it, the new one, which does too.
    3. :meth:`sync_directory` (a worker thread): the rename made durable,
       before the FIFO answers (if it fails, the journal is synced again by
       name, directory included, as a plain commit does). Until it is done
       the journal's next durable append or sync fsyncs the directory as well
       (:meth:`AppendFiles.mark_directory_unsynced`, kept past the session's
       close), so a power cut can take the journal back to the old file only
       with nothing promised since.

    :meth:`abandon` removes the temporary file of a compaction that stops
    before step 2.
    """

    def __init__(self, files: AppendFiles, path: Path) -> None:
        self._files = files
        self.path = path
        self.temporary = _temporary_for(path)

    def write(self, records: list[dict[str, Any]]) -> None:
        """Step 1, in a worker thread: ``StorageError`` naming the file if it cannot."""
        try:
            _write_private(self.temporary, json_lines(records), sync=True)
        except OSError as exc:
            self.abandon()
            raise StorageError(f"cannot compact {self.path}: {exc.strerror or exc}") from None

    def install(self, tail: list[dict[str, Any]], *, sync: bool) -> None:
        """Step 2, on the event loop: ``tail`` (the records appended since the snapshot) carried over, fsynced
        if ``sync``, and the file renamed into place. ``StorageError`` (the old journal kept) if it cannot."""
        try:
            if tail:
                fd = os.open(self.temporary, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    _write_all(fd, json_lines(tail))
                    if sync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
            self._files.forget(self.path)  # the old file's descriptor: appends after this open the new one
            os.replace(self.temporary, self.path)
        except OSError as exc:
            self.abandon()
            raise StorageError(f"cannot compact {self.path}: {exc.strerror or exc}") from None
        self._files.mark_directory_unsynced(self.path)

    def sync_directory(self) -> None:
        """Step 3, in a worker thread; ``StorageError`` if it cannot (the next durable write tries again)."""
        try:
            fsync_directory(self.path.parent)
        except OSError as exc:
            raise StorageError(f"cannot sync {self.path.parent}: {exc.strerror or exc}") from None

    def directory_synced(self) -> None:
        """After step 3, on the event loop: nothing left to make durable."""
        self._files.directory_synced(self.path)

    def abandon(self) -> None:
        try:
            self.temporary.unlink()
        except OSError:
            pass


def json_lines(items: list[Any]) -> bytes:
    """One JSON document a line: a journal's records, a replay's segments."""
    return b"".join(orjson.dumps(item) + b"\n" for item in items)


def _temporary_for(path: Path) -> Path:
    """A fresh temporary name beside ``path`` (the pattern :func:`sweep_leftovers` removes)."""
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def _write_private(path: Path, data: bytes, *, sync: bool, mode: int = 0o600) -> None:
    """``data`` to a new file ``path`` (``O_EXCL``, mode exactly ``mode`` whatever the umask), fsynced if ``sync``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, mode)
        _write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def replace_private(path: Path, data: bytes, *, sync: bool = True, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically, mode exactly 0600 (or ``mode``, set before the rename: never
    by path, which a symlink swapped in could redirect); ``StorageError`` naming it on failure.

    Written under a fresh temporary name (``O_EXCL``, never readable by others),
    fsynced, renamed over the old file, the directory fsynced: a reader sees the
    old content or the new, never a part. ``sync=False`` (``storage.fsync:
    never``) leaves out both fsyncs: the replacement is as atomic to a reader, and
    survives the daemon being killed; after a power cut the file may be the old
    one, or on some filesystems empty.
    """
    temporary = _temporary_for(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(temporary, data, sync=sync, mode=mode)
        os.replace(temporary, path)
        if sync:
            fsync_directory(path.parent)
    except OSError as exc:
        try:
            temporary.unlink()
        except OSError:
            pass
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from None


LEFTOVER_AGE = 600.0  # seconds: a temporary file older than this is a rewrite a killed daemon left


def sweep_leftovers(directory: Path, *, older_than: float = LEFTOVER_AGE) -> int:
    """Remove the temporary files (``.<name>.<hex>.tmp``) of replacements cut short by a crash, old enough
    not to be another process's write under way; how many. Nothing reads them (restores open the real
    names), but a replay's rewrite leaves megabytes."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    removed = 0
    now = time.time()
    for name in names:
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        path = directory / name
        try:
            if now - path.lstat().st_mtime > older_than:
                path.unlink()
                removed += 1
        except OSError:
            continue  # gone already, or not ours to remove: left as it is
    return removed
