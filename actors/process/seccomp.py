"""A seccomp filter for sandboxed commands: no setuid or setgid file is made.

A sandboxed command runs as the daemon's user (uid 0 for a root daemon), and the
files it makes in its cwd are that user's. The sandbox's own mounts are
``nosuid``, but the bits live in the file, and the host honours them: a command
that ran ``cp /bin/sh ./x; chmod 4755 ./x`` left a setuid-root shell in the
project, which any user of the host who can reach the directory ran as root.

The filter makes every way of setting ``S_ISUID`` or ``S_ISGID`` on a file fail
with ``EPERM``: ``chmod``, ``fchmod``, ``fchmodat``, ``fchmodat2``, and a mode
given when a file is created (``open``, ``openat``, ``creat``, ``mknod``,
``mknodat``). ``openat2`` and ``io_uring_setup`` are refused with ``ENOSYS``
(the mode of the first is in memory a filter cannot read, and an io_uring
``openat`` does not pass through it; C libraries fall back on ``ENOSYS``), as
is every call of another ABI than the machine's own (32-bit and x32 calls on
x86-64: their numbers differ). ``mkdir`` needs nothing: the kernel keeps only
the permission bits and the sticky bit of its mode. Setting file capabilities
(``security.capability``) already needs ``CAP_SETFCAP``, which no command holds.

Where the sandbox keeps a disk reserve (:mod:`actors.process.disk`),
``fallocate`` is refused with ``EOPNOTSUPP``, as a file system without it
answers, and so are the ioctls that preallocate the same way
(:data:`PREALLOCATING_IOCTLS`, XFS's ``FS_IOC_RESVSP`` family, which the
kernel answers for every file system with fallocate): one call takes any size at once (``fallocate -l 70G x``), faster than
any watch of the free space, while a write goes at the disk's speed. The C
library's ``posix_fallocate`` then writes the blocks instead, so programs
that preallocate keep working.

bwrap loads the program (``--seccomp FD``) just before it executes the command;
:func:`program_path` writes it once per daemon process into a private directory
and :meth:`actors.process.sandbox.Sandbox.wrap` opens it on the way to bwrap.
Machines other than x86-64 and AArch64 get no filter (:func:`program` is
``None``), and the start log says so.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import platform
import shutil
import struct
import tempfile
import threading

# Classic BPF, as seccomp reads it.
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


def _arg(index: int) -> int:
    return 16 + 8 * index  # the low 32 bits of args[index] (little-endian)


SET_ID_BITS = 0o6000  # S_ISUID | S_ISGID

# (audit arch, x32 bit or 0, {syscall: index of its mode argument}, syscalls refused outright, (fallocate, ioctl))
_TABLES: dict[str, tuple[int, int, dict[int, int], tuple[int, ...], tuple[int, int]]] = {
    "x86_64": (0xC000003E, 0x40000000,
               {90: 1, 91: 1, 268: 2, 452: 2,  # chmod fchmod fchmodat fchmodat2
                2: 2, 257: 3, 85: 1, 133: 1, 259: 2},  # open openat creat mknod mknodat
               (437, 425),  # openat2 io_uring_setup
               (285, 16)),
    "aarch64": (0xC00000B7, 0,
                {52: 1, 53: 2, 452: 2,  # fchmod fchmodat fchmodat2
                 56: 3, 33: 2},  # openat mknodat
                (437, 425),
                (47, 29)),
}
# The ioctls that preallocate as fallocate does (fs/ioctl.c answers them for every file system with fallocate:
# ext4, tmpfs, btrfs, xfs): XFS's FS_IOC_RESVSP, FS_IOC_RESVSP64, FS_IOC_ZERO_RANGE, and the old ALLOCSP pair.
PREALLOCATING_IOCTLS = (0x40305828, 0x4030582A, 0x40305839, 0x4030580A, 0x40305824)
_MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def program(machine: str | None = None, *, fallocate: bool = True) -> bytes | None:
    """The filter for ``machine`` (this one's by default), as the bytes ``--seccomp`` reads; ``None`` where
    there is no table for it. ``fallocate=False``: ``fallocate`` refused with ``EOPNOTSUPP`` too."""
    table = _TABLES.get(_MACHINES.get((machine or platform.machine()).lower(), ""))
    if table is None:
        return None
    arch, x32, modes, refused, (fallocate_nr, ioctl_nr) = table
    checks = sorted(modes.items())
    # Layout: arch check, nr load, [x32 check], one jeq per checked and refused call, allow,
    # then one "load the mode, test the bits" pair per argument index, then the three returns.
    indexes = sorted(set(modes.values()))
    head = 3 + (1 if x32 else 0)  # ld arch, jeq arch, ld nr, [jge x32]
    n_jumps = len(checks) + len(refused) + (0 if fallocate else 2)
    first_check = head + n_jumps + 1  # after the jumps and the "allow" return
    check_at = {index: first_check + 2 * i for i, index in enumerate(indexes)}
    ioctl_check = first_check + 2 * len(indexes)  # load the request, one jeq per ioctl, allow
    eperm = ioctl_check + (0 if fallocate else 2 + len(PREALLOCATING_IOCTLS))
    enosys = eperm + 1
    unsupported = eperm + 2
    allow = eperm + 3
    code: list[tuple[int, int, int, int]] = []

    def jump(target: int) -> int:
        offset = target - (len(code) + 1)
        assert 0 <= offset < 256, offset
        return offset

    code.append((_LD_W_ABS, 0, 0, _ARCH))
    code.append((_JEQ_K, 0, jump(enosys), arch))
    code.append((_LD_W_ABS, 0, 0, _NR))
    if x32:
        code.append((_JGE_K, jump(enosys), 0, x32))
    for nr, index in checks:
        code.append((_JEQ_K, jump(check_at[index]), 0, nr))
    for nr in refused:
        code.append((_JEQ_K, jump(enosys), 0, nr))
    if not fallocate:
        code.append((_JEQ_K, jump(unsupported), 0, fallocate_nr))
        code.append((_JEQ_K, jump(ioctl_check), 0, ioctl_nr))
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    for index in indexes:
        assert len(code) == check_at[index]
        code.append((_LD_W_ABS, 0, 0, _arg(index)))
        code.append((_JSET_K, jump(eperm), jump(allow), SET_ID_BITS))
    if not fallocate:
        assert len(code) == ioctl_check
        code.append((_LD_W_ABS, 0, 0, _arg(1)))  # an ioctl's request is an unsigned int: its low 32 bits
        for request in PREALLOCATING_IOCTLS:
            code.append((_JEQ_K, jump(unsupported), 0, request))
        code.append((_RET_K, 0, 0, _RET_ALLOW))
    assert len(code) == eperm
    code.append((_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))
    code.append((_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS))
    code.append((_RET_K, 0, 0, _RET_ERRNO | errno.EOPNOTSUPP))
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(struct.pack("<HBBI", *insn) for insn in code)


_lock = threading.Lock()
_written: dict[tuple[int, bool], str] = {}  # (this process's pid, fallocate) -> its file (a fork writes its own)


def program_path(*, fallocate: bool = True) -> str | None:
    """A file holding :func:`program`, private to this process and written again when it went missing (a
    cleaner of the temporary directory); ``None`` where there is no filter for this machine."""
    data = program(fallocate=fallocate)
    if data is None:
        return None
    with _lock:
        key = (os.getpid(), fallocate)
        path = _written.get(key)
        if path is not None and os.path.isfile(path):
            return path
        directory = tempfile.mkdtemp(prefix="trellis-seccomp-")
        path = os.path.join(directory, "no-setid.bpf" if fallocate else "no-setid-no-fallocate.bpf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if not _written:
            atexit.register(_remove_all)
        _written[key] = path
        return path


def _remove_all() -> None:
    for key in [k for k in _written if k[0] == os.getpid()]:
        with contextlib.suppress(OSError):
            shutil.rmtree(os.path.dirname(_written.pop(key)))
