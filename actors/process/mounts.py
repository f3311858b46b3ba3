"""The mount table, as the daemon reads it: which file systems are local disks.

The disk reserve (:mod:`actors.process.disk`) and the scan for root-only files
(:mod:`actors.process.root_only`) both look at file systems a command can
reach; both stay off a network or FUSE one, where a ``statvfs`` or a walk can
hang for as long as its server is away, and which is not the host's disk.
"""

from __future__ import annotations

import os

# Local disks and memory file systems: not NFS, CIFS, FUSE (sshfs, rclone), 9p or the like.
LOCAL_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "vfat", "exfat", "ntfs",
                                "ntfs3", "tmpfs", "overlay", "jfs", "reiserfs", "bcachefs"})


def mount_table() -> list[tuple[str, str]]:
    """``(mount point, file system type)`` of every mount this process sees, in the kernel's order."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = [line.split() for line in f]
    except OSError:
        return []
    out = []
    for fields in lines:
        if "-" in fields:
            dash = fields.index("-")
            out.append((_unescape(fields[4]), fields[dash + 1]))
    return out


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def file_system_type(path: str, table: list[tuple[str, str]] | None = None) -> str | None:
    """The type of the file system ``path`` lies on (its deepest mount point), or ``None`` when unknown."""
    path = os.path.realpath(path)
    best, kind = "", None
    for point, fstype in table if table is not None else mount_table():
        if (path == point or path.startswith(point.rstrip(os.sep) + os.sep)) and len(point) >= len(best):
            best, kind = point, fstype
    return kind


def is_local(path: str, table: list[tuple[str, str]] | None = None) -> bool:
    """Whether ``path`` lies on a :data:`LOCAL_FILE_SYSTEMS` file system (unknown: not)."""
    return file_system_type(path, table) in LOCAL_FILE_SYSTEMS
