"""Red team, sixth round: the processes the model starts, against the real daemon and a real bwrap, as root.

Findings, each as the safe behaviour (report: /tmp/w/redteam6_processes.md):

1. The kernel's settings were writable. A root daemon's commands run as uid 0 (the user namespace maps it to the
   host's root), and a sysctl's write check is the uid, not a capability; bwrap covers ``/proc/sys`` only when
   ``access(W_OK)`` says it is writable, which the directory itself never is. A command set
   ``kernel.core_pattern`` to ``|<a script in its cwd>`` and crashed a process: the kernel ran the script as the
   host's root, every capability, outside every namespace. ``/proc/sys`` is now bound read-only.
2. A root daemon's commands read ``/etc/shadow`` (and every file only root may read: host keys, TLS keys): uid 0
   owns them, no ``CAP_DAC_OVERRIDE`` needed. The well-known ones are hidden now
   (``actors/process/home_secrets.py``, ``SYSTEM_SECRETS``).
3. A command left a setuid-root shell in its cwd (``cp /bin/sh x; chmod 4755 x``): the sandbox's mounts are
   ``nosuid``, the host's are not, and any host user who reached the project ran it as root. A seccomp filter now
   refuses every setuid and setgid bit (``actors/process/seccomp.py``).
4. No bound on memory: one command filled its private ``/tmp`` (a tmpfs of half the RAM, per command) or
   allocated until the host's OOM killer chose among every process, the daemon included. All sandboxed commands
   of a daemon now share a memory cgroup of 3/4 of what the daemon may use (``actors/process/limits.py``).

Nothing here changes the host: a sysctl is opened for writing and closed unwritten, the fill is bounded.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio

from actors.process import limits
from actors.process.sandbox import SandboxSetting, make_home, resolve_sandbox
from tests.e2e.isolation_harness import HAVE_BWRAP, hostile_daemon, needs_bwrap, shell

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the finding is about a daemon run as root (CI runs as root)")


# ------------------------------------------------------------------ 1. the kernel's settings

SYSCTLS = ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/proc/sys/vm/overcommit_ratio")
# Opened read-write and closed at once (no O_TRUNC, nothing written): the value is never changed.
OPEN_FOR_WRITING = "; ".join(f"if (exec 3<>{f}) 2>/dev/null; then echo 'writable {f}'; else echo 'refused {f}'; fi"
                             for f in SYSCTLS) + "; echo END"


@needs_root
@needs_bwrap
def test_a_root_daemons_command_cannot_change_the_kernels_settings(answered):
    seen = answered.results[OPEN_FOR_WRITING]
    assert "END" in seen, seen
    assert "writable" not in seen, seen
    for f in SYSCTLS:
        assert f"refused {f}" in seen, seen
    assert [Path(f).read_text() for f in SYSCTLS] == answered.sysctls


# ------------------------------------------------------------------ 2. what only root may read


READ_SHADOW = "cat /etc/shadow /etc/gshadow; echo END"


@needs_root
@needs_bwrap
def test_a_root_daemons_command_cannot_read_the_password_hashes(answered):
    shadow = Path("/etc/shadow")
    if not shadow.is_file() or not shadow.read_text().strip():
        pytest.skip("no /etc/shadow here")
    lines = [line for line in shadow.read_text().splitlines() if line.strip()]
    seen = answered.results[READ_SHADOW]
    assert "END" in seen, seen
    for line in lines:
        assert line not in seen, seen


# ------------------------------------------------------------------ 3. setuid and setgid files


def set_id_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if not p.is_symlink() and p.stat().st_mode & (stat.S_ISUID | stat.S_ISGID) and not p.is_dir())


CREATE = ("import os\nfor name, mode in (('o4', 0o4755), ('o2', 0o2755)):\n"
          "    try: os.close(os.open(name, os.O_CREAT | os.O_WRONLY, mode))\n"
          "    except OSError as e: print(name, e)\n")
MAKE_SET_ID = ("mkdir -p setid && cd setid && cp /bin/sh ./u; chmod 4755 ./u; chmod u+s ./u; cp /bin/sh ./g; "
               "chmod 2755 ./g; mkdir -p d; cp /bin/sh d/t; chmod 6755 d/t; "
               f"{shlex.quote(sys.executable)} -c {shlex.quote(CREATE)}; ls -l u g d/t; echo END")


@needs_bwrap
def test_a_command_cannot_leave_a_setuid_or_setgid_file_for_the_host(answered):
    seen, work = answered.results[MAKE_SET_ID], answered.work / "setid"
    assert "END" in seen, seen
    assert set_id_files(work) == [], (set_id_files(work), seen)
    assert (work / "u").is_file() and os.access(work / "u", os.X_OK)  # ordinary modes still work


# ------------------------------------------------------------------ 4. memory


def _memory_cgroup_possible() -> bool:
    """Whether this process could make a memory cgroup: root, with the memory controller in its hierarchy."""
    if os.geteuid() != 0:
        return False
    text = Path("/proc/self/cgroup").read_text()
    if any(line.split(":")[1] and "memory" in line.split(":")[1].split(",") for line in text.splitlines()):
        return True
    return "memory" in (Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
                        if Path("/sys/fs/cgroup/cgroup.controllers").exists() else [])


# The command reads the memory limit of the cgroup it runs in (v1: its memory group; v2: the parent of its group).
READ_LIMIT = ("m=$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup); "
              "if [ -n \"$m\" ]; then echo limit=$(cat /sys/fs/cgroup/memory$m/memory.limit_in_bytes); "
              "else u=$(sed -n 's/^0:://p' /proc/self/cgroup); "
              "echo limit=$(cat /sys/fs/cgroup$(dirname $u)/memory.max); fi; echo END")


@needs_bwrap
def test_the_daemons_commands_run_under_a_memory_bound(answered):
    if not _memory_cgroup_possible():
        pytest.skip("no memory cgroup can be made here")
    seen = answered.results[READ_LIMIT]
    assert "END" in seen, seen
    total = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                 if line.startswith("MemTotal:"))
    limit = seen.split("limit=")[1].split()[0]
    assert limit.isdigit() and int(limit) <= total * 3 // 4, seen


FILL = "dd if=/dev/zero of=/tmp/fill bs=1M count=256 2>/dev/null; echo size=$(stat -c %s /tmp/fill); echo END"


@needs_bwrap
def test_a_command_cannot_fill_its_tmp_past_the_memory_bound(tmp_path, monkeypatch):
    if not _memory_cgroup_possible():
        pytest.skip("no memory cgroup can be made here")
    bound = 64 * 2**20
    monkeypatch.setattr(limits, "memory_bound", lambda own_limit=None: bound, raising=False)
    try:
        sandbox = resolve_sandbox(SandboxSetting("bwrap", max_processes=64))
        sandbox = sandbox.with_home(make_home(tmp_path / "state", "s/commands"))
        work = tmp_path / "work"
        work.mkdir()
        done = subprocess.run(sandbox.wrap(["/bin/sh", "-c", FILL], str(work)), cwd=work, capture_output=True,
                              text=True, timeout=60, start_new_session=True)
    finally:
        monkeypatch.undo()
        resolve_sandbox(SandboxSetting("bwrap", max_processes=64))  # the shared group gets its own bound back
    assert "END" in done.stdout, done
    assert int(done.stdout.split("size=")[1].split()[0]) <= bound, done


# ------------------------------------------------------------------ one daemon for the commands above


@attrs.frozen
class Answered:
    results: dict[str, str]  # command -> what the model was told it returned
    work: Path  # the session's cwd on the host
    sysctls: list[str]  # the values of SYSCTLS before the commands ran


COMMANDS = (OPEN_FOR_WRITING, READ_SHADOW, MAKE_SET_ID, READ_LIMIT)


@pytest.fixture(scope="module")
def answered(tmp_path_factory) -> Answered:
    """One daemon (sandbox required), one session, the model's shell calls :data:`COMMANDS` in turn: one start
    for the four findings (a daemon takes seconds to start and stop on a loaded 2-core machine)."""
    if not HAVE_BWRAP:
        pytest.skip("bubblewrap is not usable here (CI installs it)")
    tmp_path = tmp_path_factory.mktemp("round6")
    sysctls = [Path(f).read_text() for f in SYSCTLS]

    async def run() -> Answered:
        responses = [*([shell(c)] for c in COMMANDS), [{"text": "done"}]]
        async with hostile_daemon(tmp_path, responses, settings={"sandbox": "bwrap"}) as d:
            with trio.fail_after(60):
                sid = await d.open_session()
                record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=60)
            assert record["state"] == "completed", record
            seen = d.tool_results()
            assert len(seen) == len(COMMANDS), seen
            return Answered(dict(zip(COMMANDS, seen)), d.work, sysctls)

    return trio.run(run)
