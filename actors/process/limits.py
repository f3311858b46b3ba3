"""How many processes a session's sandboxed commands may have at once (a fork bomb must not take the host's pids).

One mechanism, chosen once at daemon start (:func:`resolve_process_limit`):
**a pids cgroup** where the daemon can make one: every session (every
  sandbox home, :meth:`~actors.process.sandbox.Sandbox.with_home`) gets a group
  ``<the daemon's pids cgroup>/trellis-<daemon pid>/<home digest>`` whose
  ``pids.max`` is the limit; each command joins it before ``bwrap`` starts (a
  two-word ``/bin/sh`` wrapper writes its own pid to ``cgroup.procs``, then
  ``exec``\\ s bwrap), so everything the command forks is counted, threads
  included. It binds root too. cgroup v1 with the ``pids`` controller, or
  cgroup v2 where the daemon's cgroup can give its children ``pids`` (the root
  of a container's cgroup namespace). Without one the commands have no process
  limit, and the start log says so: RLIMIT_NPROC is no substitute, as the kernel
  counts it over every process and thread of the daemon's user on the host (a
  desktop's browser alone may pass the default, failing every command) and never
  applies it to root.

Memory, the same way (:func:`_memory_limit`, no setting): every sandboxed command of the daemon joins one memory
cgroup bounded to :data:`MEMORY_SHARE` of what the daemon may use (a v1 ``memory`` group of its own,
``trellis-memory-<pid>``; on cgroup v2 ``memory.max`` on the parent of the pids groups). A tmpfs's pages are
charged to the group of the process that wrote them, so a command's private ``/tmp`` counts too.

The limit is the ``sandbox.maxProcesses`` setting (:data:`ProcessCount`, default
:data:`DEFAULT_MAX_PROCESSES`; ``0``: no limit), checked when the settings are read.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import threading
import time

import attrs

from .. import checked
from ..checked import Invalid

log = logging.getLogger("trellis.sandbox")

DEFAULT_MAX_PROCESSES = 1024
MIN_PROCESSES = 8  # bwrap, its init, a shell and the command's first children
MAX_PROCESSES = 4_194_304  # the kernel's own ceiling of pid_max
_PREFIX = "trellis-"
# The wrapper: join the group, then become bwrap (no fork, nothing of the command's runs before it joined).
_JOIN = 'echo $$ > "$0" && exec "$@"'
_JOIN_TWO = 'echo $$ > "$0" && echo $$ > "$1" && shift && exec "$@"'  # a pids group and a (v1) memory group
# The memory all sandboxed commands of a daemon may hold together (anonymous memory and their /tmp, a tmpfs:
# its pages are charged to the writer's group), as a share of what the daemon itself may use (the host's RAM,
# or its own cgroup's limit when lower): past it the kernel kills inside the group, never the daemon, and a
# write to /tmp fails. Without it, one command filling its /tmp (a tmpfs of half the RAM, per command) or
# allocating took the host's memory, and the OOM killer chose among the daemon and every other process.
MEMORY_SHARE = (3, 4)
_MEMORY_PREFIX = "trellis-memory-"


def _process_count(count: int) -> bool:
    if count < 0 or count > MAX_PROCESSES:
        raise Invalid(f"must be a number of processes from {MIN_PROCESSES} to {MAX_PROCESSES} (0: no limit)", count)
    if 0 < count < MIN_PROCESSES:
        raise Invalid(f"{count} is too few for bwrap and a shell (at least {MIN_PROCESSES}; 0: no limit)")
    return True


# sandbox.maxProcesses: 0 (no limit), or MIN_PROCESSES to MAX_PROCESSES.
ProcessCount = checked.constrained(
    "ProcessCount", int, f"a number of processes from {MIN_PROCESSES} to {MAX_PROCESSES} (0: no limit)",
    _process_count, schema={"minimum": 0, "maximum": MAX_PROCESSES, "not": {"enum": list(range(1, MIN_PROCESSES))}})


@attrs.frozen
class MemoryLimit:
    """The memory every sandboxed command of this daemon has together: ``limit`` bytes in the group whose
    ``cgroup.procs`` is ``procs`` (a v1 memory group; on cgroup v2 the limit is on the pids groups' parent and
    ``procs`` is ``None``), or none (``limit`` 0, ``reason`` says why)."""

    limit: int = 0
    procs: str | None = None
    reason: str = ""

    def describe(self) -> str:
        if not self.limit:
            return f"no memory limit ({self.reason})"
        return f"at most {self.limit // 2**20:,} MiB of memory, /tmp included, for all of them together (memory cgroup)"


@attrs.frozen
class ProcessLimit:
    """``how``: ``"cgroup"`` or ``"none"`` (``reason`` says why); ``memory``: the memory bound of all commands."""

    count: int = 0
    how: str = "none"
    base: str | None = None  # cgroup: this daemon's directory, a group per home below it
    reason: str = ""
    memory: MemoryLimit = MemoryLimit(reason="not resolved")

    def describe(self) -> str:
        if self.how == "none":
            return f"no process limit ({self.reason})"
        return f"at most {self.count} processes per session (pids cgroup)"

    def prefix(self, home: str | None) -> list[str]:
        """What goes before bwrap's argv so that the command runs under the limits (a session's group: ``home``)."""
        groups = []
        if self.how == "cgroup":
            groups.append(os.path.join(self._group(home), "cgroup.procs"))
        if self.memory.procs is not None:
            groups.append(self.memory.procs)
        if len(groups) == 2:
            return ["/bin/sh", "-c", _JOIN_TWO, *groups]
        if groups:
            return ["/bin/sh", "-c", _JOIN, *groups]
        return []

    @property
    def listed(self) -> bool:
        """Whether :meth:`processes` can list the commands (they join a cgroup)."""
        return self.how == "cgroup" or self.memory.procs is not None

    def processes(self) -> list[int]:
        """Every process of this daemon's sandboxed commands now: the members of its groups."""
        files = [self.memory.procs] if self.memory.procs is not None else []
        if self.how == "cgroup" and self.base is not None:
            with contextlib.suppress(OSError):
                files += [os.path.join(self.base, name, "cgroup.procs") for name in os.listdir(self.base)]
        pids: set[int] = set()
        for path in files:
            with contextlib.suppress(OSError), open(path) as f:
                pids.update(int(line) for line in f if line.strip())
        return sorted(pids)

    def _group(self, home: str | None) -> str:
        assert self.base is not None
        key = hashlib.sha256((home or "").encode()).hexdigest()[:16]
        group = os.path.join(self.base, key)
        if group not in _GROUPS.values() or not os.path.isdir(group):
            with contextlib.suppress(FileExistsError):
                os.mkdir(group)
            with open(os.path.join(group, "pids.max"), "w") as f:
                f.write(str(self.count))
            if home is not None:
                _GROUPS[home] = group
        return group


_GROUPS: dict[str, str] = {}  # a sandbox home -> its session's group (removed with the home)


RELEASE_SECONDS = 10.0  # how long a group still holding dying processes is waited for, in a thread


def release(path: str) -> None:
    """The homes at or under ``path`` are being removed: remove their groups. One still holding a process
    (the sandbox's last ones die just after its init: the kernel kills them) goes once it is empty, from a
    thread nobody awaits; what outlives :data:`RELEASE_SECONDS` is left to the sweep at the next start."""
    path = os.path.realpath(path)
    for home, group in list(_GROUPS.items()):
        if home == path or home.startswith(path.rstrip("/") + "/"):
            del _GROUPS[home]
            try:
                os.rmdir(group)
            except FileNotFoundError:
                pass
            except OSError:
                threading.Thread(target=_remove_when_empty, args=(group,), name="trellis-release-group",
                                 daemon=True).start()


def _remove_when_empty(group: str) -> None:
    deadline = time.monotonic() + RELEASE_SECONDS
    while time.monotonic() < deadline:
        try:
            os.rmdir(group)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, fstype, super options) of the cgroup file systems."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            dash = fields.index("-")
            fstype, options = fields[dash + 1], set(fields[dash + 3].split(","))
            if fstype in ("cgroup", "cgroup2"):
                found.append((fields[3], fields[4].replace("\\040", " "), fstype, options))
    return found


def _own_pids_cgroup() -> tuple[str, int] | None:
    """The directory of this process's cgroup in a hierarchy with the pids controller, and its version."""
    return _own_cgroup("pids")


def _own_cgroup(controller: str) -> tuple[str, int] | None:
    """The directory of this process's cgroup in a hierarchy with ``controller``, and its version."""
    mounts = _mounts()
    with open("/proc/self/cgroup") as f:
        lines = [line.rstrip("\n").split(":", 2) for line in f]
    for _, controllers, path in lines:
        if controller in controllers.split(","):
            for root, point, fstype, options in mounts:
                if fstype == "cgroup" and controller in options and (path + "/").startswith(root.rstrip("/") + "/"):
                    return os.path.join(point, path[len(root.rstrip("/")):].lstrip("/")), 1
    for hierarchy, controllers, path in lines:
        if hierarchy == "0" and controllers == "":
            for root, point, fstype, _ in mounts:
                if fstype == "cgroup2" and (path + "/").startswith(root.rstrip("/") + "/"):
                    return os.path.join(point, path[len(root.rstrip("/")):].lstrip("/")), 2
    return None


def _sweep(parent: str, prefix: str = _PREFIX) -> None:
    """Remove the groups of daemons that are gone (killed before they could), where they are empty."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        pid = name.removeprefix(prefix)
        if not name.startswith(prefix) or not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
            continue
        _remove_base(os.path.join(parent, name))


def _cgroup_base() -> tuple[str | None, str]:
    """This daemon's directory for its groups, made now, or ``None`` and why not."""
    try:
        found = _own_pids_cgroup()
    except (OSError, ValueError) as exc:
        return None, f"the cgroups could not be read: {exc}"
    if found is None:
        return None, "no cgroup hierarchy with the pids controller"
    parent, version = found
    _sweep(parent)
    base = os.path.join(parent, f"{_PREFIX}{os.getpid()}")
    try:
        os.makedirs(base, exist_ok=True)
    except OSError as exc:
        return None, f"cannot make a cgroup in {parent}: {exc.strerror}"
    if version == 2 and not _v2_pids_for_children(parent, base):
        with contextlib.suppress(OSError):
            os.rmdir(base)
        return None, (f"the cgroup v2 group {parent} does not give its children the pids controller "
                      "(run the daemon where it can: the root of a container's cgroup namespace)")
    _remove_at_exit(base)  # a killed daemon's is swept at the next start
    return base, ""


_AT_EXIT: set[str] = set()


def _remove_at_exit(group: str) -> None:
    """Remove ``group`` when this process exits, registered once however many daemons it opens (tests open
    thousands, each resolving its limits)."""
    if group not in _AT_EXIT:
        _AT_EXIT.add(group)
        atexit.register(_remove_base, group)


def _remove_base(base: str) -> None:
    with contextlib.suppress(OSError):
        for child in os.listdir(base):
            if os.path.isdir(os.path.join(base, child)):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(base, child))
        os.rmdir(base)


def _v2_pids_for_children(parent: str, base: str) -> bool:
    def has_pids(group: str) -> bool:
        with open(os.path.join(group, "cgroup.controllers")) as f:
            return "pids" in f.read().split()

    try:
        if not has_pids(base):
            with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                f.write("+pids")  # only where the parent holds no process itself (or is the root)
            with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                f.write("+pids")
        elif "pids" not in open(os.path.join(base, "cgroup.subtree_control")).read().split():
            with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                f.write("+pids")
        return has_pids(base)
    except OSError:
        return False


def _memory_total() -> int:
    """The bytes of RAM of the host (``MemTotal``)."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise ValueError("no MemTotal in /proc/meminfo")


def _read_limit(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (v2): none


def memory_bound(own_limit: int | None = None) -> int:
    """:data:`MEMORY_SHARE` of what the daemon may use: the host's RAM, or ``own_limit`` (its cgroup's) when lower."""
    available = _memory_total()
    if own_limit is not None and 0 < own_limit < available:
        available = own_limit
    return available * MEMORY_SHARE[0] // MEMORY_SHARE[1]


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _memory_limit(pids_base: str | None) -> MemoryLimit:
    """The memory group of this daemon's sandboxed commands, made now with its limit, or none and why."""
    try:
        found = _own_cgroup("memory")
        if found is None:
            return MemoryLimit(reason="no cgroup hierarchy with the memory controller")
        parent, version = found
        if version == 2:  # one hierarchy: the limit goes on the parent of the pids groups, which commands join
            if pids_base is None:
                return MemoryLimit(reason="on cgroup v2 the memory limit is set on the parent of the pids groups, "
                                          "and there is none (sandbox.maxProcesses 0, or no pids controller)")
            with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                enabled = "memory" in f.read().split()
            if not enabled:
                _write(os.path.join(parent, "cgroup.subtree_control"), "+memory")
            limit = memory_bound(_read_limit(os.path.join(parent, "memory.max")))
            _write(os.path.join(pids_base, "memory.max"), str(limit))
            return MemoryLimit(limit)
        _sweep(parent, _MEMORY_PREFIX)
        group = os.path.join(parent, f"{_MEMORY_PREFIX}{os.getpid()}")
        os.makedirs(group, exist_ok=True)
        limit = memory_bound(_read_limit(os.path.join(parent, "memory.limit_in_bytes")))
        _write(os.path.join(group, "memory.limit_in_bytes"), str(limit))
        _remove_at_exit(group)  # a killed daemon's is swept at the next start
        return MemoryLimit(limit, os.path.join(group, "cgroup.procs"))
    except (OSError, ValueError) as exc:
        return MemoryLimit(reason=f"cannot make a memory cgroup: {exc}")


def resolve_process_limit(count: int = DEFAULT_MAX_PROCESSES) -> ProcessLimit:
    """The limit sandboxed commands run under here, at most ``count`` processes a session (``0``: none);
    a ``ValueError`` naming ``sandbox.maxProcesses`` for a count the settings would have refused."""
    checked.structure(count, ProcessCount, "sandbox.maxProcesses")  # a SandboxSetting made in code
    if count == 0:
        return ProcessLimit(reason="sandbox.maxProcesses is 0", memory=_memory_limit(None))
    base, why = _cgroup_base()
    if base is not None:
        return ProcessLimit(count, "cgroup", base=base, memory=_memory_limit(base))
    return ProcessLimit(count, reason=why, memory=_memory_limit(None))
