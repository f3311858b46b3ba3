"""What every benchmark shares: interleaved rounds, the figures table, and the processes it measures.

A figure is ours beside its floor (or peer) from the same run: the variants of
one figure are timed A B A B … for at least five rounds and compared by their
medians, so a noisy machine moves both alike and only the ratio is read.

- :func:`interleave` / :func:`ainterleave` run the rounds and return each
  variant's samples;
- :class:`Figure` is one row (ours, floor, ratio, target) and :func:`print_figures`
  the table; every benchmark's ``measure(quick)`` returns its figures so
  ``bench/run_all.py`` can print one table of all of them;
- :class:`Daemon` and :class:`FakeModel` start the real daemon and the
  loopback fake OpenAI server as subprocesses, so neither's CPU time is charged
  to the other or to the client; :func:`cpu_seconds` and :func:`peak_rss_kib`
  read a process's own counters from ``/proc``;
- :func:`cpu_layout` keeps the process under test (the daemon, a floor, the
  peer) on one CPU and its load (the fake model, the client) on the others.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MIN_ROUNDS = 5


# ----------------------------------------------------------------- rounds


def interleave(rounds: int, variants: dict[str, Callable[[], float]]) -> dict[str, list[float]]:
    """Each variant once per round, in turn (A B A B …); its samples by name."""
    rounds = max(rounds, MIN_ROUNDS)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            samples[name].append(run())
    return samples


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of sessions, turns, rounds)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


async def ainterleave(rounds: int, variants: dict[str, Callable[[], Awaitable[float]]]) -> dict[str, list[float]]:
    """:func:`interleave` for async variants, inside one Trio run."""
    rounds = max(rounds, MIN_ROUNDS)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, run in variants.items():
            samples[name].append(await run())
    return samples


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


# ----------------------------------------------------------------- figures


@attrs.frozen
class Figure:
    """One row: ours beside its floor or peer, with the target the ratio must meet.

    ``ratio`` is ours / floor. ``target`` reads as "ratio <= target" when
    ``lower_is_better`` (times, bytes) and "ratio >= target" otherwise (rates).
    ``target_is_absolute`` compares ``ours`` itself with the target (a budget in
    the figure's unit, such as 7 ms of CPU a turn) instead of the ratio.
    """

    bench: str
    name: str
    ours: float
    floor: float | None
    unit: str
    floor_name: str = ""
    target: float | None = None
    lower_is_better: bool = True
    target_is_absolute: bool = False

    @property
    def ratio(self) -> float | None:
        if self.floor is None or self.floor == 0:
            return None
        return self.ours / self.floor

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        value = self.ours if self.target_is_absolute else self.ratio
        if value is None:
            return None
        return value <= self.target if self.lower_is_better else value >= self.target

    def target_text(self) -> str:
        if self.target is None:
            return ""
        sign = "<=" if self.lower_is_better else ">="
        if self.target_is_absolute:
            return f"{sign} {_number(self.target)} {self.unit}"
        return f"ratio {sign} {self.target:g}"

    def as_json(self) -> dict[str, Any]:
        return {"bench": self.bench, "name": self.name, "ours": self.ours, "floor": self.floor,
                "floorName": self.floor_name, "unit": self.unit, "ratio": self.ratio,
                "target": self.target_text() or None, "met": self.met}


def _number(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def print_figures(figures: Sequence[Figure], *, title: str = "", file: Any = None) -> None:
    """The table: figure, ours, floor (named), ratio, target and whether it is met."""
    out = file or sys.stdout
    if title:
        print(title, file=out)
    headers = ("figure", "ours", "floor / peer", "ratio", "target", "met")
    rows = []
    for f in figures:
        floor = "" if f.floor is None else f"{_number(f.floor)} {f.unit}"
        if f.floor_name:
            floor = f"{floor} ({f.floor_name})" if floor else f.floor_name
        ratio = "" if f.ratio is None else f"{f.ratio:.2f}"
        met = {None: "", True: "yes", False: "NO"}[f.met]
        rows.append((f"{f.bench}: {f.name}", f"{_number(f.ours)} {f.unit}", floor, ratio, f.target_text(), met))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line, file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)


def emit(figures: Sequence[Figure], *, title: str, as_json: bool = False) -> None:
    """A benchmark's output: the table, or one JSON object per figure."""
    if as_json:
        for f in figures:
            print(json.dumps(f.as_json()))
    else:
        print_figures(figures, title=title)
        note = layout_note()
        if note:
            print(note)


# ----------------------------------------------------------------- processes


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    from transport.process_image import SECRET_ENV

    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}  # the daemon mints its own token
    env.update(extra or {})
    return env


def die_with_parent() -> None:
    """In a child before it execs: SIGTERM when the benchmark dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``)."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


# ----------------------------------------------------------------- CPUs

PIN_ENV = "TRELLIS_BENCH_PIN"  # "0": every process runs wherever the scheduler puts it; "1" (the default): pinned


def _pin_wanted() -> bool:
    value = os.environ.get(PIN_ENV, "1")
    if value not in ("0", "1"):
        raise SystemExit(f"{PIN_ENV} must be 0 (leave processes to the scheduler) or 1 (pin them), got {value!r}")
    return value == "1"


def _allowed() -> frozenset[int] | None:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _initial_layout(allowed: frozenset[int] | None) -> tuple[frozenset[int], frozenset[int]] | None:
    if not _pin_wanted() or allowed is None or len(allowed) < 2:
        return None
    ordered = sorted(allowed)
    return frozenset(ordered[:1]), frozenset(ordered[1:])


# Read once, at import: the client pins itself later, which narrows its own affinity.
_ALLOWED = _allowed()
_LAYOUT = _initial_layout(_ALLOWED)
_client_pinned = False  # this process moved itself onto the load CPUs (and the table's note says so)


def cpu_layout() -> tuple[frozenset[int], frozenset[int]] | None:
    """The CPU of the process under test and the CPUs of its load, or ``None`` (one CPU, or ``TRELLIS_BENCH_PIN=0``).

    The process under test — the daemon, a bare floor, the peer — runs on the
    first CPU this benchmark may use; the load — the fake model, subscriber
    processes, this client — on the rest. Left to the scheduler, three busy
    processes on this two-core machine moved the daemon between the cores,
    and a process that moves runs on a cold cache, most often when the load
    had the most to do. A 500-turn conversation's calls (440 KB requests the
    fake model parses) then measured 1.04-1.27x the CPU of turn 10's across
    runs; with this layout, 1.07-1.09x, run after run: the daemon's own work
    per call hardly grows (it executes no more bytecode at turn 500). Floors
    and peers get the same layout as ours, so ratios compare like with like.
    In-process benchmarks (``bench_stream.py``, ``bench_replay.py``, …) and
    cluster nodes (``bench_cluster.py``: several daemons, PostgreSQL, Redis)
    are left to the scheduler; ``bench/run_all.py`` gives the client its
    original CPUs back (:func:`unpin_client`) before each benchmark. On two
    CPUs the fake model shares its CPU with the client, so
    ``bench_turn_cpu.py``'s floor (the fake's CPU) runs on a shared core and
    the daemon on one of its own.
    """
    return _LAYOUT


def _pin(cpus: frozenset[int], tid: int = 0) -> bool:
    """Thread ``tid`` (0: the caller) onto ``cpus``; whether it worked."""
    try:
        os.sched_setaffinity(tid, cpus)
    except OSError:  # a CPU set the container forbids (or a thread gone): measured unpinned, as before
        return False
    return True


def server_child() -> None:
    """``preexec_fn`` of a process under test: :func:`die_with_parent`, on the server CPU (threads and execs inherit it)."""
    die_with_parent()
    if _LAYOUT is not None:
        _pin(_LAYOUT[0])


def load_child() -> None:
    """``preexec_fn`` of a load process (the fake model, a subscriber): :func:`die_with_parent`, on the load CPUs."""
    die_with_parent()
    if _LAYOUT is not None:
        _pin(_LAYOUT[1])


def pin_client() -> None:
    """This process, the benchmark's client, onto the load CPUs (done when a process under test starts)."""
    global _client_pinned
    if _LAYOUT is not None and _pin(_LAYOUT[1]):
        _client_pinned = True


def unpin_client() -> None:
    """This process back on every CPU it had at start (``run_all.py``, between benchmarks)."""
    global _client_pinned
    if _ALLOWED is not None:
        _pin(_ALLOWED)
    _client_pinned = False


def client_pinned() -> bool:
    """Whether this process is on the load CPUs (a process under test was started since the last unpin)."""
    return _client_pinned


def pin_load(pid: int) -> None:
    """A load process started without :func:`load_child` (every thread it has) onto the load CPUs."""
    if _LAYOUT is None:
        return
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        _pin(_LAYOUT[1], int(tid))


def layout_note(*, pinned: bool | None = None) -> str:
    """One line saying where the processes ran, for a table's footer ("" when nothing was pinned here).

    ``pinned``: whether any benchmark pinned (``run_all.py``); by default, whether this process is pinned now.
    """
    if not (_client_pinned if pinned is None else pinned):
        return "" if _LAYOUT is not None else "CPUs: not pinned (one CPU, or TRELLIS_BENCH_PIN=0)"
    assert _LAYOUT is not None
    cpus = lambda s: ",".join(str(c) for c in sorted(s))  # noqa: E731
    return (f"CPUs: processes under test (daemon, floors, peer) on {cpus(_LAYOUT[0])}; fake model and clients "
            f"on {cpus(_LAYOUT[1])}; in-process benchmarks and cluster nodes unpinned (TRELLIS_BENCH_PIN=0: none)")


class Daemon:
    """The real daemon in a subprocess: ``python -m transport --port 0`` and what it printed."""

    def __init__(self, *args: str, state_dir: str | None = None, env: dict[str, str] | None = None,
                 settings: dict[str, Any] | None = None, wrapper: Sequence[str] = (), root: Path = ROOT) -> None:
        # root: the source tree whose daemon runs (issue_day_tree(): the daemon as it was when issue 17 was filed)
        self._tmp = None if state_dir else tempfile.TemporaryDirectory(prefix="trellis-bench-")
        self.state_dir = state_dir or self._tmp.name  # type: ignore[union-attr]
        # wrapper: a command the interpreter runs under (bench_turn_instructions: valgrind)
        self._stop_seconds = 120 if wrapper else 20
        argv = [*wrapper, sys.executable, "-m", "transport", "--port", "0", "--state-dir", self.state_dir, *args]
        if settings is not None:
            Path(self.state_dir).mkdir(parents=True, exist_ok=True)
            path = Path(self.state_dir) / "bench-settings.json"  # removed with the state directory
            path.write_text(json.dumps(settings))
            argv += ["--settings", str(path)]
        # stderr to a file, not a pipe nobody reads while it runs (a chatty daemon would block on it)
        self._stderr = tempfile.TemporaryFile("w+")
        pin_client()
        if root != ROOT:  # its packages first (-m looks in the working directory), then this venv's
            env = {**(env or {}), "PYTHONPATH": str(root)}
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env=_clean_env(env), cwd=str(root), preexec_fn=server_child)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            self.proc.wait()
            raise SystemExit(f"daemon did not start: {line!r} {self._read_stderr()[-2000:]}")
        self.url = line.split()[-1]
        from transport.auth import read_token_file

        self.token = read_token_file(self.state_dir)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> str:
        """SIGTERM, wait, and return what it wrote on stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.communicate(timeout=self._stop_seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return self._read_stderr()

    def _read_stderr(self) -> str:
        if self._stderr.closed:
            return self._stderr_text
        self._stderr.seek(0)
        self._stderr_text = self._stderr.read()
        self._stderr.close()
        return self._stderr_text

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# The daemon of the day issue 17 ("performance at the floor") was filed: the commit before its first change.
# Its target "7 ms of daemon CPU a turn, a third of today" (today: 20.7 ms) is this daemon's CPU over 2.96.
ISSUE_DAY_COMMIT = "09c64bc"
ISSUE_DAY_SHARE = 7.0 / 20.7


def issue_day_tree() -> Path | None:
    """The source tree at :data:`ISSUE_DAY_COMMIT`, exported once from this clone's history into the temporary
    directory (``git archive``; reused after); ``None``, with the reason on stderr, without git or that commit
    (a shallow clone). It runs on this venv's packages, as the day's daemon ran on the same dependencies."""
    tree = Path(tempfile.gettempdir()) / f"trellis-bench-issue-day-{ISSUE_DAY_COMMIT}"
    if (tree / "transport" / "__main__.py").exists():
        return tree
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ISSUE_DAY_COMMIT],
                                 capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"the baseline daemon is not available: git failed: {exc}", file=sys.stderr)
        return None
    if archive.returncode != 0:
        print(f"the baseline daemon is not available: commit {ISSUE_DAY_COMMIT} is not in this clone's history "
              f"({archive.stderr.decode(errors='replace').strip()[:200]})", file=sys.stderr)
        return None
    partial = Path(tempfile.mkdtemp(prefix=f"{tree.name}-", dir=tree.parent))
    subprocess.run(["tar", "-x", "-C", str(partial)], input=archive.stdout, check=True)
    try:
        partial.rename(tree)  # whole or not at all; another run that got there first wins
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
    return tree


class FakeModel:
    """``python -m transport.fake_openai`` in a subprocess, playing ``responses`` in order."""

    def __init__(self, responses: list[Any], wrapper: Sequence[str] = ()) -> None:
        self._file = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump(responses, self._file)
        self._file.close()
        self._stop_seconds = 120 if wrapper else 10  # under valgrind, ~50x slower, it writes its count at exit
        self.proc = subprocess.Popen([*wrapper, sys.executable, "-m", "transport.fake_openai", "--port", "0",
                                      "--script", self._file.name],
                                     stdout=subprocess.PIPE, text=True, cwd=str(ROOT), preexec_fn=load_child)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise SystemExit(f"fake model did not start: {line!r}")
        self.url = line.split()[-1]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(self._stop_seconds)
        os.unlink(self._file.name)

    def __enter__(self) -> FakeModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set (``VmHWM``) in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for pid {pid}")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


# ----------------------------------------------------------------- the canonical guard turn

CANONICAL_TODOS = {"todos": [{"id": "t1", "content": "migrate the billing tables", "status": "in_progress"},
                             {"id": "t2", "content": "rotate the signing keys", "status": "pending"}]}
GUARD_SETTINGS: dict[str, Any] = {"experimental": {"todoStopGuard": True}, "ui": {"enableFollowupSuggestions": False}}


def canonical_turn(n: int = 0) -> list[Any]:
    """The four model responses of the canonical guard turn: a todo write, then three natural stops.

    The guard continues after the first two stops (attempts 1 and 2) and reports
    exhaustion at the third (attempt 2 again): guard attempts ``[1, 2, 2]``.
    """
    return [
        [{"text": "Planning. "}, {"tool_call": {"id": f"call_{n}", "name": "todo_write", "arguments": CANONICAL_TODOS}},
         {"usage": {"prompt_tokens": 120, "completion_tokens": 30}}],
        [{"text": "I will stop here."}, {"usage": {"prompt_tokens": 160, "completion_tokens": 6}}],
        [{"text": "Still stopping."}, {"usage": {"prompt_tokens": 200, "completion_tokens": 4}}],
        [{"text": "Stopping again."}, {"usage": {"prompt_tokens": 240, "completion_tokens": 4}}],
    ]


# ----------------------------------------------------------------- floors and loop stalls


class BareServer:
    """``bench/_bare_server.py`` in a subprocess: a bare quart-trio app on hypercorn, the HTTP floor."""

    def __init__(self, *args: str) -> None:
        pin_client()
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "_bare_server.py"), "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                                     preexec_fn=server_child)  # stderr: one line, at exit
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise SystemExit(f"bare server did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.url = line.split()[-1]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> str:
        """SIGTERM, wait, and return what it wrote on stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err or ""

    def __enter__(self) -> BareServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cpu_ns(pid: int) -> int:
    """On-CPU nanoseconds of the process's live threads (``/proc/<pid>/task/*/schedstat``).

    Exact where :func:`cpu_seconds` counts 10 ms ticks, so one turn can be timed;
    a thread that exits takes its time with it (Trio's worker threads idle ten
    seconds before they do).
    """
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


STALL_MS = 20.0  # the target: no event-loop step of the daemon longer than this
_stall_flag: bool | None = None


def loop_stalls_supported() -> bool:
    """Whether this daemon has ``--report-loop-stalls MS`` (read once from its ``--help``)."""
    global _stall_flag
    if _stall_flag is None:
        out = subprocess.run([sys.executable, "-m", "transport", "--help"], capture_output=True, text=True,
                             cwd=str(ROOT), env=_clean_env()).stdout
        _stall_flag = "--report-loop-stalls" in out
    return _stall_flag


def stall_args(ms: float = STALL_MS) -> tuple[str, ...]:
    """The daemon flags that report its longest event-loop step at exit (none if it lacks the flag)."""
    return ("--report-loop-stalls", f"{ms:g}") if loop_stalls_supported() else ()


def longest_step_ms(stderr: str) -> float | None:
    """X from the ``longest step <X> ms`` line a process wrote at exit, or None."""
    found = re.findall(r"longest step\s+([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s*ms", stderr)
    return float(found[-1]) if found else None


def stall_figures(bench: str, daemon_stderr: str, floor_stderr: str = "", floor_name: str = "") -> list[Figure]:
    """The "longest event-loop step" figure (absolute target :data:`STALL_MS`), or none if not reported."""
    ours = longest_step_ms(daemon_stderr)
    if ours is None:
        why = "the daemon has no --report-loop-stalls" if not loop_stalls_supported() else "no 'longest step' line"
        print(f"{bench}: longest event-loop step skipped ({why})", file=sys.stderr)
        return []
    for who, stderr in (("ours", daemon_stderr), (floor_name, floor_stderr)):
        lines = re.findall(r"longest step [^\n]*", stderr)
        if lines:
            print(f"{bench}: {who}: {lines[-1]}", file=sys.stderr)
    task = re.search(r"longest step [^\n]*? in task ([^\s;]+)", daemon_stderr)
    where = task.group(1) if task and task.group(1) != "-" else ""
    name = "longest event-loop step" + (f" (in {'…' + where[-35:] if len(where) > 36 else where})" if where else "")
    return [Figure(bench, name, ours, longest_step_ms(floor_stderr), "ms",
                   floor_name=floor_name if floor_stderr else "", target=STALL_MS, target_is_absolute=True)]


# ----------------------------------------------------------------- helper processes driven over stdin

async def stdin_commands() -> AsyncIterator[dict[str, Any]]:
    """The commands a benchmark's helper process is sent, a JSON object a line, until its stdin closes."""
    import trio

    stdin = trio.lowlevel.FdStream(os.dup(0))
    buffer = b""
    while data := await stdin.receive_some(1 << 20):
        buffer += data
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)


class CommandChild:
    """A helper process on the load CPUs, sent one JSON command a line and answering one JSON line each."""

    def __init__(self, argv: list[str], name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(ROOT),
                                     preexec_fn=load_child)  # noqa: PLW1509 - no threads here

    @property
    def pid(self) -> int:
        return self.proc.pid

    def command(self, op: str, **fields: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name} died during {op!r} (its error is above)")
        return json.loads(line)

    def stop(self, wait: float = 5) -> None:
        """Close its stdin (it ends when it next reads), then kill it if it has not ended within ``wait``."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
