"""The files of the system only root may read, found by their mode: hidden from a root daemon's commands.

A daemon run as root runs its commands as uid 0 with no capability. Uid 0 still
*owns* every root-owned file, so a file of mode 0600 or 0640 owned by root
(``/var/cache/debconf/passwords.dat``, ``/var/log/btmp``, a service's key in
``/etc``, systemd's ``/var/lib/private``) is readable by the owner bit alone: no
``CAP_DAC_OVERRIDE`` is needed. A list (:data:`~actors.process.home_secrets.SYSTEM_SECRETS`)
names the well-known ones; this scan finds the rest by the rule the kernel
applies, on the directories where a system keeps its state::

    entry (not a symlink)                            hidden when
    -----------------------------------------------  ---------------------------------------------
    a file (or socket, FIFO, device node)            others may not read it, and uid 0 may by its
                                                     owner bit or gid 0 by its group bit
    a directory                                      the same with search (x) instead of read: the
                                                     whole directory, not descended into

A directory anyone may search is descended into (a volume mounted below, when
it is a local file system), at most :data:`ENTRY_LIMIT` entries in all. A
command must not steer the walk (:func:`scan`): where commands write is not
walked, a directory anyone may write is bounded, a walk stopped at the limit
keeps hiding what an earlier one found, and a directory full of hidden
entries is hidden whole (:func:`coalesce`: each entry is a mount of every
command). What the scan found is what a command started later does not see.

The scan takes a tenth of a second or more, so it is not made per command:
the first command waits for the first scan (:meth:`RootOnlyFiles.start` begins
it when the daemon resolves its sandbox), and later commands use the last one
while a thread makes the next once it is :data:`REFRESH_SECONDS` old. A
root-only file created in between is visible to commands for that long.

A hidden directory that holds the session's cwd, a home or the daemon's Python
is not hidden (the command works there): every entry along the way to it is
hidden instead (:func:`around`). What lies inside one of them stays: the
project's files are the project's, a home's credentials are
:mod:`~actors.process.home_secrets`'s.
"""

from __future__ import annotations

import collections
import logging
import os
import stat
import threading
import time
from collections.abc import Iterable, Sequence

from .mounts import LOCAL_FILE_SYSTEMS, mount_table

log = logging.getLogger("trellis.sandbox")

# Where a system keeps configuration, state, logs and caches. Not /usr (packages' files, world-readable, and
# 100,000s of entries), /root and /home (homes: their credentials are home_secrets', and uid 0 cannot read
# another user's private files), /proc, /sys, /dev, /run and /tmp (the sandbox mounts its own or none).
SCANNED_ROOTS = ("/etc", "/boot", "/var", "/srv", "/opt", "/usr/local", "/mnt", "/media", "/proc", "/sys/firmware",
                 "/sys/kernel")
# Listed, not walked: /proc's own files (slabinfo, timer_list), not the processes' (the sandbox has its own);
# /sys/kernel's debug, tracing and security directories, not the thousands of 0600 knobs below (slab, damon).
SHALLOW_ROOTS = ("/proc", "/sys/kernel")
ENTRY_LIMIT = 200_000
DIRECTORY_LIMIT = 10_000  # entries listed of a directory anyone may write
COALESCE_AT = 64  # a directory holding more hidden entries than this is hidden whole
MOUNT_LIMIT = 2048  # hidden entries at most, the fullest directories hidden whole past it
REFRESH_SECONDS = 60.0
AROUND_LIMIT = 4096  # entries hidden along the way to a cwd inside a hidden directory


def private_to(st: os.stat_result, uid: int = 0, gid: int = 0) -> bool:
    """Whether the entry ``st`` is one ``uid``/``gid`` may read (search, for a directory) and others may not."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        other, owner, group = stat.S_IXOTH, stat.S_IXUSR, stat.S_IXGRP
    else:
        other, owner, group = stat.S_IROTH, stat.S_IRUSR, stat.S_IRGRP
    if mode & other:
        return False
    return bool((st.st_uid == uid and mode & owner) or (st.st_gid == gid and mode & group))


def scan(roots: Iterable[str] = SCANNED_ROOTS, *, uid: int = 0, gid: int = 0, limit: int = ENTRY_LIMIT,
         skip: Iterable[str] = ()) -> tuple[list[str], bool]:
    """The entries under ``roots`` private to ``uid``/``gid`` (see the module's table), and whether the walk
    stopped at ``limit`` entries before it was done.

    Roots are walked in their order. :data:`SHALLOW_ROOTS` are listed, not walked. The walk enters another
    file system only of a :data:`LOCAL_FILE_SYSTEMS` type; lists at most :data:`DIRECTORY_LIMIT` entries of a
    directory anyone may write (``/var/tmp``) and enters only its directories ``uid`` owns (another user's could
    be made only to make the walk long); and never enters ``skip`` (where commands write, for the same
    reason)."""
    found: list[str] = []
    skipped = {os.path.realpath(p) for p in skip}
    local = {point for point, fstype in mount_table() if fstype in LOCAL_FILE_SYSTEMS}
    roots = list(dict.fromkeys(os.path.realpath(r) for r in roots))
    stack: list[tuple[str, int]] = []
    for root in reversed(roots):  # a stack: the first root is walked first
        try:
            st = os.lstat(root)
        except OSError:
            continue
        if private_to(st, uid, gid):
            found.append(root)
        elif stat.S_ISDIR(st.st_mode):
            stack.append((root, st.st_dev))
    seen = 0
    while stack:
        directory, device = stack.pop()
        shallow = directory in SHALLOW_ROOTS
        try:
            mode = os.lstat(directory).st_mode
            entries = os.scandir(directory)
        except OSError:
            continue
        shared = bool(mode & stat.S_IWOTH)  # anyone may make entries here: bounded, and only root's entered
        with entries:
            for listed, entry in enumerate(entries):
                seen += 1
                if seen > limit:
                    return found, True
                if shared and listed >= DIRECTORY_LIMIT:
                    break
                if shallow and (entry.name.isdigit() or entry.name in ("self", "thread-self")):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    continue
                if private_to(st, uid, gid):
                    found.append(entry.path)
                elif (stat.S_ISDIR(st.st_mode) and not shallow and entry.path not in skipped
                      and (not shared or st.st_uid == uid) and (st.st_dev == device or entry.path in local)):
                    stack.append((entry.path, st.st_dev))
    return found, False


def coalesce(paths: Sequence[str], *, per_directory: int = COALESCE_AT, total: int = MOUNT_LIMIT,
             roots: Iterable[str] = SCANNED_ROOTS) -> list[str]:
    """``paths`` with a directory holding more than ``per_directory`` of them hidden whole instead, and then the
    fullest directories until at most ``total`` are left: each is one mount of every command, and a command that
    made 30,000 root-only files must not stop every other session's commands (an argument list too long). A
    root (``/etc``) and what holds one are never hidden whole: commands need them. Linear in ``paths`` a round,
    and every round leaves fewer."""
    kept = {os.path.realpath(r) for r in roots}
    kept |= {os.path.dirname(r) for r in list(kept)} | {os.sep}
    out = list(dict.fromkeys(paths))
    while True:
        counts = collections.Counter(os.path.dirname(p) for p in out)
        full = {d for d, n in counts.items() if n > per_directory and d not in kept}
        if not full and len(out) > total:
            excess = len(out) - total
            for directory, n in counts.most_common():
                if directory in kept or n < 2:
                    continue
                full.add(directory)
                excess -= n - 1
                if excess <= 0:
                    break
        if not full:
            return out
        out = list(dict.fromkeys([*(p for p in out if not _below_any(p, full)), *sorted(full)]))
        out = [p for p in out if not _below_any(p, full)]


def _below_any(path: str, directories: set[str]) -> bool:
    """Whether a directory above ``path`` (not ``path`` itself) is one of ``directories``."""
    current = os.path.dirname(path)
    while True:
        if current in directories:
            return True
        parent = os.path.dirname(current)
        if parent == current:
            return False
        current = parent


def around(hidden: Sequence[str], keep: Iterable[str]) -> list[str]:
    """``hidden`` as a command should see it hidden when ``keep`` (its cwd, its home, the daemon's Python) must
    stay: an entry inside a kept path stays (a project's files are the project's, a home's are
    :mod:`~actors.process.home_secrets`'s); one that holds a kept path is replaced by every entry along the way
    down to it but the way itself (``/opt/private`` holding the cwd ``/opt/private/app`` hides
    ``/opt/private/keys``, not ``app``). Raises :class:`OSError` past :data:`AROUND_LIMIT` entries."""
    kept = [k for k in dict.fromkeys(os.path.normpath(k) for k in keep if k) if k != os.sep]  # HOME=/ keeps all
    out: list[str] = []
    for path in hidden:
        if any(_within(path, k) for k in kept):
            continue
        inside = [k for k in kept if _within(k, path)]
        if not inside:
            out.append(path)
            continue
        _hide_beside(path, inside, out)
    return out


def _hide_beside(directory: str, kept: list[str], out: list[str]) -> None:
    """Every entry of ``directory`` but the kept paths (all within it) and the way to them, into ``out``."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return
    for name in names:
        entry = os.path.join(directory, name)
        below = [k for k in kept if _within(k, entry)]
        if not below:
            out.append(entry)
        elif entry not in below:
            _hide_beside(entry, below, out)
        if len(out) > AROUND_LIMIT:
            raise OSError(f"{directory} holds {kept[0]} and is readable only by root; hiding the rest of it "
                          f"would take more than {AROUND_LIMIT} mounts")


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


class RootOnlyFiles:
    """The last :func:`scan` of ``roots``, remade in a thread once it is ``refresh`` seconds old."""

    def __init__(self, roots: Iterable[str] = SCANNED_ROOTS, *, refresh: float = REFRESH_SECONDS,
                 limit: int = ENTRY_LIMIT, uid: int = 0, gid: int = 0) -> None:
        self.roots = tuple(roots)
        self.uid, self.gid = uid, gid
        self.refresh = refresh
        self.limit = limit
        self._lock = threading.Lock()
        self._first = threading.Event()
        self._paths: tuple[str, ...] = ()
        self._scanned_at = 0.0
        self._scanning = False
        self._failure = ""  # why no scan has completed yet, once one failed: commands are refused, not let see
        self._writable: dict[str, None] = {}  # where commands write, newest last (not walked: see scan)

    def note_writable(self, paths: Iterable[str]) -> None:
        """Commands may write ``paths`` (a cwd, a home, sandbox.writable): later scans do not walk them."""
        with self._lock:
            for path in paths:
                if path:
                    self._writable.pop(path, None)
                    self._writable[path] = None
            while len(self._writable) > WRITABLE_KEPT:
                del self._writable[next(iter(self._writable))]

    def start(self) -> None:
        """Begin a scan in a thread unless one is under way or the last is fresh."""
        with self._lock:
            if self._scanning or (self._first.is_set() and time.monotonic() - self._scanned_at < self.refresh):
                return
            self._scanning = True
        threading.Thread(target=self._scan, name="trellis-root-only-scan", daemon=True).start()

    def paths(self) -> tuple[str, ...]:
        """The entries only root may read, as of the last scan (the first call waits for the first).

        Raises :class:`OSError` while no scan has completed and the last one failed: hiding nothing of what
        the scan would find is not a sandbox (the next call starts another)."""
        self.start()
        self._first.wait()
        with self._lock:
            if self._failure and not self._scanned_at:
                raise OSError(f"the scan for files only root may read failed ({self._failure}); "
                              "no sandboxed command starts until one completes")
            return self._paths

    def _scan(self) -> None:
        try:
            with self._lock:
                skip = list(self._writable)
            found, stopped = scan(self.roots, uid=self.uid, gid=self.gid, limit=self.limit, skip=skip)
            if stopped:
                log.warning("sandboxed commands: the scan for files only root may read stopped after %d "
                            "entries of %s; what lies beyond is hidden only if an earlier scan found it",
                            self.limit, ", ".join(self.roots))
            if stopped:  # an entry found before stays hidden: a walk made long must not uncover it
                found = [*found, *(p for p in self._paths if os.path.lexists(p))]
            found = coalesce(found, roots=self.roots)  # outside the lock: a command start waits on it
            with self._lock:
                self._paths = tuple(found)
                self._scanned_at = time.monotonic()
                self._failure = ""
        except Exception as exc:
            log.exception("sandboxed commands: the scan for files only root may read failed")
            with self._lock:
                self._failure = f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                self._scanning = False
            self._first.set()


_SYSTEM = RootOnlyFiles()
WRITABLE_KEPT = 1024


def note_writable(paths: Iterable[str]) -> None:
    """A root daemon's command may write ``paths``: the scan does not walk them (what a command makes there
    could only make the walk long)."""
    if os.geteuid() == 0:
        _SYSTEM.note_writable(paths)


def root_only_paths() -> tuple[str, ...]:
    """What only root may read under :data:`SCANNED_ROOTS`; empty unless this process runs as root (no other
    user's commands can read those files anyway)."""
    if os.geteuid() != 0:
        return ()
    return _SYSTEM.paths()


def start_scan() -> None:
    """Begin the first scan early (a root daemon resolving its sandbox), so the first command need not wait."""
    if os.geteuid() == 0:
        _SYSTEM.start()
