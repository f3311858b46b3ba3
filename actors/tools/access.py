"""File access for the built-in file tools: one small interface, local files behind it.

The tools never open a file themselves to read or write it: they ask a
:class:`FileAccess`, which the session lends them as ``services.files``; a
session that lends none gets :data:`LOCAL` (:class:`LocalFiles`, the daemon's
own filesystem). The seam is there so the backend can be swapped: an ACP
client that advertises ``fs.readTextFile``/``fs.writeTextFile`` serves
``fs/read_text_file``/``fs/write_text_file`` (``transport/acp/client_fs.py``,
lent through :class:`~actors.session.client.ClientServices`) — then an
editor's unsaved buffers are what the model reads and edits. Such a backend
implements the two methods below and raises the same errors; the tools need
nothing else.

Rules every backend keeps:

* Paths are absolute and already checked (:mod:`.paths` resolves them against
  the session's cwd and refuses what the tools must not touch); a backend does
  not second-guess them.
* ``read_text`` returns the whole file as text, its line endings as they are
  (``\\r\\n`` stays, so an edit writes back exactly what it did not change).
  A file with a NUL byte in its first 8 KiB, or that is not UTF-8, is
  :class:`NotText`; one over ``max_bytes`` is :class:`TooLarge`. A missing
  file is :class:`FileNotFoundError`, a directory :class:`IsADirectoryError`,
  as ``open`` raises them (any other :class:`OSError` likewise).
* ``write_text`` creates or overwrites the file, creating missing parent
  directories, and writes the text as UTF-8 with no newline translation.
* Local files are opened without following any symlink (:func:`open_beneath`):
  the paths were resolved when they were checked, so a link met later is one
  swapped in since, and the access fails (``ELOOP``) instead of following it.
* Only regular files are read or written (:class:`NotRegularFile`, naming the
  kind: a named pipe, a socket, a device). A FIFO blocks ``open`` until a
  writer comes and ``/dev/zero`` never ends, so the file is looked at before it
  is opened, opened with ``O_NONBLOCK`` and looked at again through the
  descriptor (one swapped in between is refused too).
* Local files are read and written in worker threads of the tools' own
  :func:`tool_threads` limiter (:data:`FILE_THREADS`), not trio's default one
  that storage shares: a thread stuck in the kernel (a hung network mount)
  holds one of those only. A cancelled read is abandoned; a write, once
  begun, runs to its end.

Listing and searching (``glob``, ``grep``) walk the local tree directly: ACP's
client filesystem has no listing, so those stay local whatever the backend.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Protocol

import trio

SNIFF_BYTES = 8192  # as git: a NUL byte in the first 8 KiB makes a file binary
# Worker threads the file tools (reads, writes, glob and grep walks) may hold at once, daemon-wide. Their own
# limiter, so no number of stuck or slow tool calls can take trio's default one, which storage needs.
FILE_THREADS = 16


class FileAccessError(Exception):
    """A file the tools cannot use; the message is for the model."""


class NotRegularFile(FileAccessError):
    """A named pipe, socket, device...: opening or reading one may block forever or never end."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"it is {kind}, not a regular file; the file tools use regular files only")
        self.kind = kind


class NotText(FileAccessError):
    """A binary file (NUL bytes) or one that is not UTF-8 text."""


class TooLarge(FileAccessError):
    """A file over the size the caller allows."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size:,} bytes, over the limit of {limit:,}")
        self.size = size
        self.limit = limit


class FileAccess(Protocol):
    """Where the file tools read and write text (see the module docstring for the rules)."""

    async def read_text(self, path: str, *, max_bytes: int | None = None) -> str: ...

    async def write_text(self, path: str, text: str) -> None: ...


def is_binary(head: bytes) -> bool:
    """Git's rule: a NUL byte in the first :data:`SNIFF_BYTES` bytes."""
    return b"\0" in head[:SNIFF_BYTES]


def decode_text(data: bytes) -> str:
    """``data`` as text, or :class:`NotText` saying why it is not."""
    if is_binary(data):
        raise NotText("it is a binary file (it has NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotText(f"it is not UTF-8 text (byte {exc.start} cannot be decoded)") from None


def file_kind(mode: int) -> str:
    """What a file that is not regular is, for a message: ``a named pipe (FIFO)``, ``a socket``..."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "a special file"


def require_regular(st: os.stat_result, path: str) -> None:
    """Nothing when ``st`` is a regular file's; else the error the tools report (a directory and a symlink as
    ``open`` reports them: ``EISDIR``, ``ELOOP``)."""
    if stat.S_ISREG(st.st_mode):
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
    raise NotRegularFile(file_kind(st.st_mode))


def open_regular(name: str, flags: int = os.O_RDONLY, mode: int = 0o666, *, dir_fd: int | None = None,
                 follow: bool = False) -> int:
    """``os.open`` of a regular file only (:class:`NotRegularFile` otherwise), never blocking on what is not one.

    Looked at first (opening a device may act on it), then opened with ``O_NONBLOCK`` (a FIFO swapped in since
    would block ``open`` until a writer came) and checked again through the descriptor; ``O_NONBLOCK`` is then
    cleared, though a regular file ignores it. ``follow`` follows a symlink at ``name`` (else ``ELOOP``).
    """
    nofollow = 0 if follow else os.O_NOFOLLOW
    try:
        require_regular(os.stat(name, dir_fd=dir_fd, follow_symlinks=follow), name)
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            raise
    try:
        fd = os.open(name, flags | nofollow | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: a FIFO with no reader (or a device) swapped in for a write
            raise
        require_regular(os.stat(name, dir_fd=dir_fd, follow_symlinks=follow), name)
        raise
    try:
        require_regular(os.fstat(fd), name)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


_PATH = getattr(os, "O_PATH", os.O_RDONLY)  # O_PATH: a directory we may enter but not list still opens


def open_beneath(path: str, flags: int = os.O_RDONLY, mode: int = 0o666, *, make_dirs: bool = False) -> int:
    """``os.open`` of a resolved absolute ``path``, refusing every symlink on the way (``ELOOP``).

    The tools resolve symlinks before they check a path, so a link met here appeared since (a
    background command swapped a directory for a link out of the cwd while a call awaited
    approval, say): walking down from ``/`` with ``O_NOFOLLOW`` at each step refuses it rather than
    writing where the check never looked. ``make_dirs`` creates missing directories on the way. The file
    itself must be a regular one (:func:`open_regular`).
    """
    parts = [p for p in path.split("/") if p]
    if not os.path.isabs(path) or not parts:
        raise ValueError(f"{path!r} is not an absolute path to a file")
    fd = os.open("/", _PATH | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                step = os.open(part, _PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not make_dirs:
                    raise
                os.mkdir(part, dir_fd=fd)
                step = os.open(part, _PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except NotADirectoryError:  # Linux says ENOTDIR for a link to a directory here: say ELOOP
                if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path) from None
                raise
            os.close(fd)
            fd = step
        return open_regular(parts[-1], flags, mode, dir_fd=fd)
    finally:
        os.close(fd)


def _read(path: str, max_bytes: int | None) -> str:
    with open(open_beneath(path), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if max_bytes is not None and size > max_bytes:
            raise TooLarge(size, max_bytes)
        # Read at most one byte past the limit: a file that grew since fstat is still caught.
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise TooLarge(len(data), max_bytes)
    return decode_text(data)


def _write(path: str, text: str) -> None:
    # In place, not through a temporary file and a rename: the file keeps its mode, owner and links.
    fd = open_beneath(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, make_dirs=True)
    with open(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)


_THREADS: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("trellis_file_tool_threads")


def tool_threads() -> trio.CapacityLimiter:
    """The file tools' worker-thread limiter (:data:`FILE_THREADS`), one per trio run as trio's default is."""
    try:
        return _THREADS.get()
    except LookupError:
        limiter = trio.CapacityLimiter(FILE_THREADS)
        _THREADS.set(limiter)
        return limiter


class LocalFiles:
    """The daemon's own filesystem, each call in a worker thread (the event loop never waits on a disk)."""

    async def read_text(self, path: str, *, max_bytes: int | None = None) -> str:
        # Abandoned when cancelled: a read changes nothing, and the turn must not wait on a stuck disk.
        return await trio.to_thread.run_sync(_read, path, max_bytes, abandon_on_cancel=True, limiter=tool_threads())

    async def write_text(self, path: str, text: str) -> None:
        # Not abandoned: a write once begun ends before the call does, so nothing lands after a cancel.
        await trio.to_thread.run_sync(_write, path, text, limiter=tool_threads())


LOCAL = LocalFiles()


def files_of(services: Any) -> FileAccess:
    """The backend a session lends its tools (``services.files``), else the local filesystem."""
    files = getattr(services, "files", None)
    return files if files is not None else LOCAL


def describe_os_error(exc: OSError, shown: str) -> str:
    """An :class:`OSError` from a backend as a sentence for the model."""
    if isinstance(exc, FileNotFoundError):
        return f"{shown} does not exist"
    if isinstance(exc, IsADirectoryError):
        return f"{shown} is a directory, not a file"
    if isinstance(exc, NotADirectoryError):
        return f"a parent of {shown} is not a directory"
    if isinstance(exc, PermissionError):
        return f"permission denied: {shown}"
    if exc.errno == errno.ELOOP:
        return f"{shown}: a symlink appeared in its path since it was checked; nothing was done"
    return f"cannot use {shown}: {exc.strerror or exc}"


__all__ = ["FILE_THREADS", "LOCAL", "FileAccess", "FileAccessError", "LocalFiles", "NotRegularFile", "NotText",
           "TooLarge", "decode_text", "describe_os_error", "file_kind", "files_of", "is_binary", "open_beneath",
           "open_regular", "require_regular", "tool_threads"]
