"""A run's done message and the report file it is appended to.

Every stop extends the done message (lines are only ever added), and each
line is appended, flushed and fsynced to the report file when the run has
one. The path is never inferred: it is the one ``start`` was given, or the
one the subagent named in ``goal_reached`` (then the whole message so far is
written there first).

The append is synchronous, as the transcript store's writes are: a report is a
few lines, and a thread hop would let a replay's virtual clock jump (under the
autojump clock a task waiting on a thread counts as blocked) while it is written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from .files import append_report


class DoneMessage:
    """The lines of a run's done message, and the writer that keeps the report file up to date."""

    def __init__(self, name: str, path: Path | None, clock_ms: Callable[[], int]) -> None:
        self.name = name
        self.path = path
        self.confine: Path | None = None  # a path the subagent named must stay under this directory
        self.lines: list[tuple[int, str]] = []
        self.error: str | None = None  # the report file could not be written (shown in status)
        self._clock_ms = clock_ms
        self._written = 0

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def add(self, line: str) -> None:
        """Extend the done message (never replace it); call :meth:`flush` to write it out.

        A line stays one line: newlines and other control characters (a subagent's summary or
        question is its own text) are escaped, so nothing it says starts a line of its own in the
        report file, or reaches a terminal as a control sequence."""
        self.lines.append((self._clock_ms(), escape_controls(line)))

    def name_path(self, path: Path, confine: Path) -> bool:
        """Use ``path`` (named by the subagent, kept under ``confine``) when the run has no report file yet.

        ``False`` if it already has one.
        """
        if self.path is not None:
            return False
        self.path = path
        self.confine = confine
        return True

    def flush(self) -> None:
        """Append every line not yet on disk, in order, fsynced before it returns (synchronously)."""
        path = self.path
        pending = self.lines[self._written:]
        if path is None or self.error is not None or not pending:
            return
        text = "".join(f"{_stamp(ts)} subagent {self.name}: {line}\n" for ts, line in pending)
        try:
            append_report(path, text, confine=self.confine)
        except OSError as exc:
            self.error = f"cannot write the report file {path}: {exc.strerror or exc}"
            return
        self._written += len(pending)


def escape_controls(text: str) -> str:
    """``text`` with every C0/C1 control character, DEL and line separator written as a Python escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else _escape(c) for c in text)


def _escape(c: str) -> str:
    escaped = repr(c)[1:-1]
    return escaped if escaped != c else f"\\u{ord(c):04x}"


def _stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
