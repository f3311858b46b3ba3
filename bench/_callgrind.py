"""Counting a process's instructions with valgrind's callgrind, between two marks.

CPU time on a shared virtual machine moves with whatever runs beside it; the
number of instructions a process executes does not. A process started under
:attr:`Counted.wrapper` runs with callgrind's instrumentation off (start-up,
imports, warm-up cost nothing but time); :meth:`Counted.start` turns it on,
:meth:`Counted.stop` dumps the count and turns it off again, and
:meth:`Counted.instructions` reads that dump. Valgrind follows ``exec``
(``--trace-children``): the daemon re-executes itself at start, to take its
secrets off its environment, and the count must follow it. Only the marked
process's own dump is read, not those of children it starts meanwhile;
valgrind's own messages go to a log file beside the dumps, not to stderr.

What valgrind does not see: the kernel's side of system calls, and the time
any of it takes. Under callgrind a process runs about 50 times slower.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path


def available() -> bool:
    """Whether valgrind and its ``callgrind_control`` are on this machine."""
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def _control(pid: int, *args: str) -> None:
    result = subprocess.run(["callgrind_control", *args, str(pid)], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        said = result.stderr.strip() or result.stdout.strip()
        raise RuntimeError(f"callgrind_control {' '.join(args)} {pid} failed: {said}")


class Counted:
    """The command prefix that runs a process under callgrind, its marks, and the count between them."""

    def __init__(self, name: str) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix=f"trellis-callgrind-{name}-")
        self._prefix = Path(self._dir.name) / "callgrind.out"

    @property
    def wrapper(self) -> list[str]:
        return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--trace-children=yes",
                f"--callgrind-out-file={self._prefix}.%p", f"--log-file={self._prefix}.log.%p"]

    def start(self, pid: int) -> None:
        """Count from here (the process was started with counting off)."""
        _control(pid, "--instr=on")

    def stop(self, pid: int) -> None:
        """Write the count so far (the process's first dump) and stop counting."""
        _control(pid, "--dump")
        _control(pid, "--instr=off")

    def instructions(self, pid: int) -> int:
        """Instructions between :meth:`start` and :meth:`stop` (``RuntimeError`` if there is no dump)."""
        dump = Path(f"{self._prefix}.{pid}.1")
        try:
            text = dump.read_text()
        except OSError as exc:
            raise RuntimeError(f"no callgrind dump of process {pid} at {dump}: {exc}") from None
        for line in text.splitlines():
            if line.startswith("totals:"):
                return int(line.split()[1])
        raise RuntimeError(f"the callgrind dump {dump} has no totals line")

    def cleanup(self) -> None:
        self._dir.cleanup()
