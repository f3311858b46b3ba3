"""qwen serve, the peer of ``bench/peer_qwen.py``: installed with npm when asked, run in an isolated ``HOME``,
measured over its whole process tree (it spawns a ``qwen --acp`` child per workspace)."""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import cpu_layout, pin_client  # noqa: E402
from _timed_fake import TIMEOUT, TimedFake  # noqa: E402

QWEN_PACKAGE = "@qwen-code/qwen-code"
QWEN_VERSION = "0.24.4"
PEER = f"qwen serve {QWEN_VERSION}"
DEFAULT_QWEN_DIR = Path(tempfile.gettempdir()) / f"trellis-peer-qwen-{QWEN_VERSION}"
# What qwen serve needs to run the canonical guard turn against a loopback OpenAI server and make
# no model call of its own beyond it (follow-up suggestions and the memory subagent would).
QWEN_SETTINGS: dict[str, Any] = {
    "security": {"auth": {"selectedType": "openai"}},
    "experimental": {"todoStopGuard": True},
    "tools": {"todoWrite": {"enabled": True}},  # in 0.24.4 the guard stays off without the tool
    "ui": {"enableFollowupSuggestions": False},
    "memory": {"enableManagedAutoMemory": False},
    "telemetry": {"enabled": False},
    "privacy": {"usageStatisticsEnabled": False},
    "general": {"enableAutoUpdate": False},
}


# ----------------------------------------------------------------- qwen-code, installed


def qwen_cli(qwen_dir: Path) -> Path | None:
    """``cli.js`` of qwen-code ``QWEN_VERSION`` installed under ``qwen_dir``, if it is."""
    package = qwen_dir / "node_modules" / "@qwen-code" / "qwen-code"
    try:
        version = json.loads((package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    cli = package / "cli.js"
    return cli if version == QWEN_VERSION and cli.is_file() else None


def install_qwen(qwen_dir: Path) -> str | None:
    """``npm install`` qwen-code into ``qwen_dir``; the reason it could not, or None."""
    npm = shutil.which("npm")
    if npm is None:
        return "npm not found"
    qwen_dir.mkdir(parents=True, exist_ok=True)
    print(f"installing {QWEN_PACKAGE}@{QWEN_VERSION} into {qwen_dir} (npm, about 144 MB) ...", file=sys.stderr)
    try:
        done = subprocess.run([npm, "install", "--prefix", str(qwen_dir), "--save-exact", "--no-audit", "--no-fund",
                               "--loglevel=error", f"{QWEN_PACKAGE}@{QWEN_VERSION}"],
                              capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"npm install failed: {exc}"
    if done.returncode != 0:
        return f"npm install failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}"
    return None


def find_qwen(install: bool, qwen_dir: Path | None) -> tuple[Path | None, str]:
    """qwen-code's ``cli.js``, installing it when asked; or None and why the benchmark is skipped."""
    if shutil.which("node") is None:
        return None, "node not found (qwen serve runs on Node.js)"
    where = qwen_dir or DEFAULT_QWEN_DIR
    cli = qwen_cli(where)
    if cli is None and install:
        reason = install_qwen(where)
        if reason:
            return None, reason
        cli = qwen_cli(where)
    if cli is None:
        return None, (f"{QWEN_PACKAGE}@{QWEN_VERSION} is not installed in {where}: run with --install "
                      "(npm, about 144 MB) or give --qwen-dir")
    return cli, ""


# ----------------------------------------------------------------- process trees


def tree_pids(root: int) -> list[int]:
    """``root`` and its live descendants (walks ``/proc/*/stat`` for parent ids)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo.extend(parents.get(pid, ()))
    return pids


_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU of the live process tree, each with what it reaped of exited children."""
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return total / _TICKS


def _tree_status(root: int, key: str) -> int:
    total = 0
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith(key)), 0)
        except OSError:
            continue
    return total


def tree_peak_rss_kib(root: int) -> int:
    """The sum of ``VmHWM`` over the live process tree (each process's own peak), in KiB."""
    return _tree_status(root, "VmHWM:")


def tree_rss_kib(root: int) -> int:
    return _tree_status(root, "VmRSS:")



class QwenSide:
    """``node cli.js serve`` with an isolated ``HOME`` (settings above), on its fake; loopback, no token."""

    name = "qwen"

    def __init__(self, fake: TimedFake, cli: Path) -> None:
        self.fake = fake
        self.cli = cli
        self._tmp = tempfile.TemporaryDirectory(prefix="trellis-peer-qwen-run-")
        root = Path(self._tmp.name)
        self.home = root / "home"
        self.workspace = str(root / "workspace")
        (self.home / ".qwen").mkdir(parents=True)
        (self.home / ".qwen" / "settings.json").write_text(json.dumps(QWEN_SETTINGS, indent=2))
        os.mkdir(self.workspace)
        self.log = root / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.headers: dict[str, str] = {}  # a loopback bind is trusted: qwen serve wants no token

    def start(self) -> float:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home), "LANG": "C.UTF-8",
               "TMPDIR": str(Path(self._tmp.name)), "NO_COLOR": "1",
               "OPENAI_BASE_URL": self.fake.url, "OPENAI_API_KEY": "bench", "OPENAI_MODEL": "fake"}
        pin_client()
        start = time.monotonic()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                ["node", str(self.cli), "serve", "--port", "0", "--hostname", "127.0.0.1",
                 "--workspace", self.workspace, "--no-web"],
                stdout=subprocess.PIPE, stderr=log, env=env, cwd=self.workspace,
                preexec_fn=_die_with_parent)  # noqa: PLW1509 (it calls two libc functions, takes no lock)
        assert self.proc.stdout is not None
        deadline = start + TIMEOUT
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode(errors="replace")
            if not line:
                break
            found = re.search(r"qwen serve listening on (http://\S+)", line)
            if found:
                self.url = found.group(1)
                # qwen keeps printing to stdout: drain it into the log so it never blocks on a full pipe.
                threading.Thread(target=_drain, args=(self.proc.stdout, self.log), daemon=True).start()
                return time.monotonic() - start
        self.stop()
        raise SystemExit(f"qwen serve did not start; its log:\n{self.log.read_text(errors='replace')[-3000:]}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None:
            family = tree_pids(self.proc.pid)
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)  # it drains and stops its qwen --acp child
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            for pid in family[1:]:  # what it started and left behind (only this daemon's own tree)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.proc = None
        self._tmp.cleanup()


try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
    _PRCTL = _LIBC.prctl  # looked up here: the child between fork and exec only calls it
except (OSError, AttributeError):
    _LIBC = _PRCTL = None


def _affinity_call() -> Any:
    """``sched_setaffinity(0, size, mask)`` for the CPU our daemon runs on, built here (bench/_common.py
    ``cpu_layout``): in the child it is one libc call on a mask made before the fork."""
    layout = cpu_layout()
    if layout is None or _LIBC is None or not hasattr(_LIBC, "sched_setaffinity"):
        return None
    words = (max(layout[0]) // 64) + 1
    mask = (ctypes.c_uint64 * words)()
    for cpu in layout[0]:
        mask[cpu // 64] |= 1 << (cpu % 64)
    setaffinity = _LIBC.sched_setaffinity
    size = ctypes.sizeof(mask)
    return lambda: setaffinity(0, size, mask)


_PIN_TO_SERVER_CPU = _affinity_call()  # qwen serve runs where our daemon does


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the benchmark dies, so qwen serve (and then its child) stops;
    and the CPU of the process under test, as our daemon gets (``bench/_common.py`` ``cpu_layout``).

    The death signal follows the *thread* that forked, so qwen serve is started from the main thread.
    """
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if _PIN_TO_SERVER_CPU is not None:
        _PIN_TO_SERVER_CPU()  # a failure (a CPU set the container forbids) leaves it unpinned


def _drain(stream: Any, path: Path) -> None:
    with open(path, "ab") as log:
        shutil.copyfileobj(stream, log)
