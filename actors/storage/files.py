"""Append-only files kept open between appends.

A session appends to its journal, transcript and compacted replay many times
a turn; opening each file per record cost a ``mkdir``, an ``open``, a read of
the last byte and a ``close`` every time. :class:`AppendFiles` keeps the
descriptor instead:

- opened on the first append (``O_APPEND``, mode 0600, its directory made);
  before each append a torn last line (a crash mid-write, by this process or
  an earlier one) is cut — an ``lseek`` to the end that finds the size this
  descriptor last left, or else a one-byte ``pread`` of the last byte;
- kept open until the session closes (:meth:`close`), the file is replaced or
  removed (:meth:`forget`, which a rewrite calls before its rename), or more
  than ``limit`` files are open: then the least recently used is closed (a
  thousand idle sessions do not hold three thousand descriptors);
- on any error the descriptor is closed and dropped, so the next append opens
  the file afresh.

A file's name is durable once its directory is fsynced: a new file's first
durable append (or sync) does that too. A file renamed into place (a
journal's compaction, :meth:`mark_directory_unsynced`) is treated the same
until its directory sync is done; a descriptor closed before that passes the
debt on to the next one opened for the path. A renamed file's debt outlives
its session's close (a journal reloaded in the same daemon still pays it);
a new file's dies with it, as its first durable write would have paid it.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

DEFAULT_LIMIT = 256


class AppendFiles:
    """Open append descriptors by path, at most ``limit`` at a time (least recently used closed first)."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self._open: OrderedDict[Path, _Handle] = OrderedDict()
        # Paths whose name may not be durable yet and that have no descriptor open here (dropped with a
        # session's close: at most its few files each) ...
        self._directory_unsynced: set[Path] = set()
        # ... and those renamed into place whose directory sync has not been seen to work (kept past a close:
        # only a failed sync leaves one for long).
        self._renamed_unsynced: set[Path] = set()

    def __len__(self) -> int:
        return len(self._open)

    def append(self, path: Path, data: bytes, *, fsync: bool) -> int:
        """Write ``data`` at the end of ``path`` whole, then ``fsync`` it if asked; the file's size after it.
        ``OSError`` if it cannot.

        A short write (disk full) is cut off again before the error is raised: the
        file is left as it was.
        """
        handle = self._handle(path)
        try:
            fd = handle.fd
            size = os.lseek(fd, 0, os.SEEK_END)
            if size != handle.size:  # written by someone else since (or just opened): maybe torn
                size = cut_torn_tail(fd)
            written = os.write(fd, data)
            if written != len(data):
                os.ftruncate(fd, size)
                raise OSError(28, "short write (is the disk full?)")
            handle.size = size + written
            if fsync:
                os.fsync(handle.fd)
                if handle.owes_directory:  # a new file's name is durable only once its directory is
                    owed = handle.owed
                    fsync_directory(path.parent)
                    handle.paid = owed
                    self._renamed_unsynced.discard(path)
        except OSError:
            self.forget(path)
            raise
        return handle.size

    def syncer(self, path: Path) -> Callable[[], None]:
        """What makes ``path``'s appends durable, to run in a worker thread: an ``fsync`` (and its directory's,
        for a new file) of a duplicate of its descriptor, closed after, as the event loop may close the
        original meanwhile; of the file opened afresh when it is not open here. ``OSError`` when it cannot."""
        handle = self._open.get(path)
        if handle is not None:
            fd = os.dup(handle.fd)
            directory = path.parent if handle.owes_directory else None
            owed = handle.owed
        else:  # closed since the append (a failed one after it, a rewrite that failed): synced by name
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            directory = path.parent

        def sync() -> None:
            try:
                os.fsync(fd)
                if directory is not None:
                    fsync_directory(directory)
                    if handle is not None:
                        # Paid only once done, and only the debt seen at the start: a descriptor closed
                        # meanwhile passed the debt on, and a rename since owes its own sync.
                        handle.paid = max(handle.paid, owed)
            finally:
                os.close(fd)

        return sync

    def forget(self, path: Path) -> None:
        """Close ``path``'s descriptor if it is open (before the file is replaced or removed)."""
        handle = self._open.pop(path, None)
        if handle is not None:
            self._closed(path, handle)

    def mark_directory_unsynced(self, path: Path) -> None:
        """``path`` was just renamed into place: its next durable append or sync fsyncs its directory too,
        unless :meth:`directory_synced` says that was done first."""
        self._renamed_unsynced.add(path)
        handle = self._open.get(path)
        if handle is not None:
            handle.owed += 1
        else:
            self._directory_unsynced.add(path)

    def directory_synced(self, path: Path) -> None:
        """``path``'s directory was fsynced (by a worker thread) since it was renamed into place."""
        self._directory_unsynced.discard(path)
        self._renamed_unsynced.discard(path)
        handle = self._open.get(path)
        if handle is not None:
            handle.paid = handle.owed

    def close(self, paths: list[Path]) -> None:
        """Close the descriptors of ``paths`` (a session's files, when it closes)."""
        for path in paths:
            self.forget(path)
            self._directory_unsynced.discard(path)

    def close_all(self) -> None:
        for path in list(self._open):
            self.forget(path)

    def _handle(self, path: Path) -> _Handle:
        handle = self._open.get(path)
        if handle is not None:
            self._open.move_to_end(path)
            return handle
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        unsynced = path in self._directory_unsynced or path in self._renamed_unsynced
        self._directory_unsynced.discard(path)  # the handle carries it from here
        handle = self._open[path] = _Handle(fd, directory_synced=existed and not unsynced)
        while len(self._open) > self.limit:
            self._closed(*self._open.popitem(last=False))
        return handle

    def _closed(self, path: Path, handle: _Handle) -> None:
        os.close(handle.fd)
        if handle.owes_directory:  # a worker thread's directory sync still in flight counts as owed
            self._directory_unsynced.add(path)


class _Handle:
    """An open descriptor, its size after its last append, and its directory's debt: ``owed`` counts the
    debts (a new file, each rename into place), ``paid`` the last of them a directory sync was seen to
    finish for. A worker thread only ever raises ``paid`` to a debt it saw before its sync began, after it."""

    __slots__ = ("fd", "size", "owed", "paid")

    def __init__(self, fd: int, *, directory_synced: bool) -> None:
        self.fd = fd
        self.size = -1  # the file's size after this descriptor's last append; -1: not known yet
        self.owed = 0 if directory_synced else 1
        self.paid = 0

    @property
    def owes_directory(self) -> bool:
        return self.paid < self.owed


def cut_torn_tail(fd: int) -> int:
    """A crash mid-append left a partial last line: cut it, so the next record starts clean; the new size."""
    size = os.fstat(fd).st_size
    if not size or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:  # back, a chunk at a time, to the last whole line (a prompt body may be megabytes)
        start = max(0, end - 65536)
        cut = os.pread(fd, end - start, start).rfind(b"\n")
        if cut >= 0:
            os.ftruncate(fd, start + cut + 1)
            return start + cut + 1
        end = start
    os.ftruncate(fd, 0)
    return 0


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
