"""The disk a sandboxed command may fill: a reserve kept free on every file system it can write.

A command writes its cwd, its home and ``sandbox.writable``, and nothing else
bounds how much (there is no quota): ``yes > log`` filled the file system the
project shares with the host, and often with the daemon's state directory. So
each of those file systems keeps a reserve free for everyone else, by two
checks of its free space (``statvfs``: what an unprivileged writer may still
use):

    when                               below the reserve
    ---------------------------------  -----------------------------------------------
    a command starts (:meth:`admit`)   refused (:class:`DiskShortage`), naming the file
                                       system, its free space and the setting
    while commands run (:meth:`watch`) every command of the daemon is killed (their
                                       cgroups list them), and the foreground shell
                                       says why (:meth:`stopped_since`)

The reserve is ``sandbox.diskReserve`` MiB on every such file system (and
every one mounted below those paths: bwrap binds them recursively); by
default the smaller of :data:`DEFAULT_RESERVE` and :data:`DEFAULT_SHARE` of its
size; ``0`` turns both checks off. Free inodes are kept too
(:func:`inode_reserve`): empty files take no block, and every inode. The watch looks every :data:`INTERVAL`
seconds, only while a sandboxed command has processes: a command writing
faster than the reserve in that time can still pass it, and a daemon whose
commands have no cgroup (the start log says) only refuses at the start.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable, Iterable

import attrs
import trio

from .. import checked
from ..checked import Invalid
from .mounts import is_local, mount_table

log = logging.getLogger("trellis.sandbox")

MIB = 2**20
DEFAULT_RESERVE = 1024 * MIB
DEFAULT_SHARE = (1, 20)  # 5 % of the file system, when that is less
INTERVAL = 0.25
IDLE_TICKS = 8  # intervals with no command process before the watch rests
INODE_RESERVE = 100_000  # inodes kept free, or 5 % of the file system's when that is less
PATHS_PER_DEVICE = 8
MAX_RESERVE_MIB = 2**30  # a petabyte: a bound for the setting's check, never reached by a real disk


def _reserve_mib(value: int) -> bool:
    if value < 0 or value > MAX_RESERVE_MIB:
        raise Invalid(f"must be a number of MiB from 0 to {MAX_RESERVE_MIB} (0: no reserve)", value)
    return True


# sandbox.diskReserve: MiB kept free on every file system a command may write; 0: none.
ReserveMiB = checked.constrained("ReserveMiB", int, f"a number of MiB from 0 to {MAX_RESERVE_MIB}", _reserve_mib,
                                 schema={"minimum": 0, "maximum": MAX_RESERVE_MIB})


def reserve_for(setting_mib: int | None, size: int) -> int:
    """The bytes to keep free on a file system of ``size`` bytes: ``setting_mib`` MiB, or the default."""
    if setting_mib is None:
        return min(DEFAULT_RESERVE, size * DEFAULT_SHARE[0] // DEFAULT_SHARE[1])
    return setting_mib * MIB


class DiskShortage(OSError):
    """A command refused at its start: a file system it may write is below its reserve."""


def inode_reserve(files: int) -> int:
    """The inodes to keep free on a file system of ``files`` inodes (0: it does not count them, as btrfs)."""
    return min(INODE_RESERVE, files * DEFAULT_SHARE[0] // DEFAULT_SHARE[1])


@attrs.frozen
class Shortage:
    """``path``'s file system has ``free`` bytes (inodes, with ``inodes``), fewer than ``reserve``."""

    path: str
    free: int
    reserve: int
    inodes: bool = False

    def describe(self) -> str:
        if self.inodes:
            return (f"the file system holding {self.path} has {self.free:,} inodes free, under the "
                    f"{self.reserve:,} the sandbox keeps free there (sandbox.diskReserve)")
        return (f"the file system holding {self.path} has {self.free // MIB:,} MiB free, under the "
                f"{self.reserve // MIB:,} MiB the sandbox keeps free there (sandbox.diskReserve)")


def shortage(paths: Iterable[str], setting_mib: int | None) -> Shortage | None:
    """The first of ``paths`` whose file system is below its reserve of blocks or of inodes, or ``None``."""
    for path in paths:
        try:
            st = os.statvfs(path)
        except OSError:
            continue
        free, size = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        reserve = reserve_for(setting_mib, size)
        if free < reserve:
            return Shortage(path, free, reserve)
        inodes = inode_reserve(st.f_files)
        if st.f_favail < inodes:  # empty files take no block, and every inode (ENOSPC for everyone)
            return Shortage(path, st.f_favail, inodes, inodes=True)
    return None


def local_paths(paths: Iterable[str]) -> list[str]:
    """``paths`` and the mount points below them (a command may write all of them: bwrap binds recursively),
    those on a local disk only: a network or FUSE file system is not the host's disk, and its ``statvfs`` can
    hang while its server is away (:mod:`actors.process.mounts`)."""
    table = mount_table()
    paths = [os.path.realpath(p) for p in paths if p]
    below = [point for point, _ in table
             if any(point != p and point.startswith(p.rstrip(os.sep) + os.sep) for p in paths)]
    return [p for p in dict.fromkeys([*paths, *below]) if is_local(p, table)]


class DiskGuard:
    """The reserve of one daemon's sandboxed commands: ``setting_mib`` (``None``: the default), the
    processes of those commands listed by ``processes`` (their cgroups; ``None``: none can be listed)."""

    def __init__(self, setting_mib: int | None, processes: Callable[[], list[int]] | None) -> None:
        self.setting_mib = setting_mib
        self._processes = processes
        # A file system (st_dev) -> the paths on it commands were last admitted to write, newest last: one that
        # is gone (a closed session's home) must not leave its file system unwatched.
        self._paths: dict[int, list[str]] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None  # where the watch starts, at the first command admitted
        self._watching = False
        self._commands = trio.Event()  # set when a command started since the watch last found none running
        self._admitted = 0  # commands admitted: one about to start keeps the watch on before it has a process
        self.kills = 0  # how many times the watch killed the commands
        self.last: Shortage | None = None

    @property
    def enabled(self) -> bool:
        return self.setting_mib != 0

    @property
    def watched(self) -> bool:
        """Whether running commands are watched (their cgroups list them), not only checked at their start."""
        return self._processes is not None

    def describe(self) -> str:
        if not self.enabled:
            return "no disk reserve (sandbox.diskReserve is 0): a command can fill the disk it writes"
        amount = ("1,024 MiB, or 5 % of the file system when that is less" if self.setting_mib is None
                  else f"{self.setting_mib:,} MiB")
        if not self.watched:
            return (f"a disk reserve ({amount}) on each file system they write, checked when a command starts "
                    "only (no cgroup lists the commands: one running can still fill the disk)")
        return (f"a disk reserve ({amount}) on each file system they write, checked at each start and while "
                "they run")

    def admit(self, paths: Iterable[str]) -> None:
        """Before a command starts that may write ``paths``: :class:`DiskShortage` when one is below its
        reserve; else they are watched while it runs."""
        if not self.enabled:
            return
        paths = local_paths(paths)  # with a volume mounted below the cwd
        found = shortage(paths, self.setting_mib)
        if found is not None:
            raise DiskShortage(f"refusing to start a command: {found.describe()}. Free space there (or lower "
                               "sandbox.diskReserve) and try again")
        for path in paths:
            try:
                known = self._paths.setdefault(os.stat(path).st_dev, [])
            except OSError:
                continue
            if path in known:
                known.remove(path)
            known.append(path)
            del known[:-PATHS_PER_DEVICE]
        self._admitted += 1
        if self._token is None:
            return
        if not self._watching and self._nursery is not None:
            self._watching = True
            self._token.run_sync_soon(self._nursery.start_soon, self.watch)  # from any thread
        self._token.run_sync_soon(self._commands.set)

    def attach(self, nursery: trio.Nursery) -> None:
        """Watch from ``nursery`` (the daemon's) once a command is admitted: a daemon that runs none (a replay)
        has no task of it, so its scheduler's draws, and a seeded replay's interleaving, stay as they were."""
        if self.enabled and self._processes is not None:
            self._token = trio.lowlevel.current_trio_token()
            self._nursery = nursery

    def stopped_since(self, kills: int) -> str | None:
        """Why a command that started when :attr:`kills` was ``kills`` was stopped by the watch, if it was."""
        if self.kills == kills or self.last is None:
            return None
        return f"the command was killed: {self.last.describe()}"

    async def watch(self, *, interval: float = INTERVAL) -> None:
        """Look at the watched file systems every ``interval`` seconds while commands run; below a reserve,
        kill them all. Runs until cancelled (the daemon's nursery)."""
        if not self.enabled or self._processes is None:
            return
        self._token = trio.lowlevel.current_trio_token()
        self._watching = True
        while True:
            if not self._processes():  # else commands started before the watch did
                await self._commands.wait()
            self._commands = trio.Event()
            admitted, idle = self._admitted, 0
            while idle < IDLE_TICKS:  # a command admitted may take a while to have its first process
                await trio.sleep(interval)
                if not self._processes():
                    idle = 0 if self._admitted != admitted else idle + 1
                    admitted = self._admitted
                    continue
                idle = 0
                found = shortage(self._watched_paths(), self.setting_mib)
                if found is not None:
                    self.last, self.kills = found, self.kills + 1
                    log.warning("sandboxed commands killed: %s", found.describe())
                    kill_all(self._processes)


    def _watched_paths(self) -> list[str]:
        """A path that still exists on each watched file system (the newest admitted first)."""
        out = []
        for known in self._paths.values():
            alive = next((p for p in reversed(known) if os.path.exists(p)), None)
            if alive is not None:
                out.append(alive)
        return out


def kill_all(processes: Callable[[], list[int]], rounds: int = 3) -> None:
    """SIGKILL every process ``processes`` lists, again while new ones appear (a fork between read and kill)."""
    for _ in range(rounds):
        pids = processes()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
