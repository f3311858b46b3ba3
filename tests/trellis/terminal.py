"""``trellis attach`` (and other ``trellis`` commands) under a pseudo-terminal with pexpect, against real daemons.

Shared by tests/trellis/test_attach.py and tests/security: :class:`Attached`
runs the client and keeps every byte it wrote to the terminal; :func:`plain`
is that without its escape sequences; the ``world`` fixture stops what a test
started. A module that imports this one is skipped where pexpect is missing
(``pytestmark`` says where it cannot spawn a pseudo-terminal).
"""

from __future__ import annotations

import io
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sync_daemon import Daemon, environ

pexpect = pytest.importorskip("pexpect", reason="pexpect drives trellis attach under a pseudo-terminal")


def _pty_problem() -> str | None:
    try:
        child = pexpect.spawn(sys.executable, ["-c", "pass"], timeout=10)
        child.expect(pexpect.EOF)
        child.close()
    except (OSError, pexpect.ExceptionPexpect) as exc:
        return f"pexpect cannot spawn a pseudo-terminal here: {exc}"
    return None


PTY_PROBLEM = _pty_problem()
pytestmark = pytest.mark.skipif(PTY_PROBLEM is not None, reason=PTY_PROBLEM or "")

ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]|[\x08\r]")
WAIT = 10.0  # seconds for anything to show up on the screen


def plain(raw: str) -> str:
    """What was written to the terminal without its escape sequences (colours, cursor moves, CR, BS)."""
    return ESCAPES.sub("", raw)


class Attached:
    """``python -m trellis attach`` under a 40x120 pseudo-terminal, and what it wrote to it."""

    def __init__(self, tmp: Path, url: str, state: Path, *extra: str) -> None:
        env = environ(TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", XDG_STATE_HOME=str(tmp / "xdg"))
        self.raw = io.StringIO(newline="")
        self.child = pexpect.spawn(sys.executable, ["-m", "trellis", "attach", "--url", url, "--state-dir",
                                                    str(state), *extra],
                                   env=env, cwd=str(tmp), dimensions=(40, 120), encoding="utf-8",
                                   codec_errors="replace", timeout=WAIT)
        self.child.logfile_read = self.raw
        self.mark = 0  # where in the screen's text the next expect looks from

    def screen(self) -> str:
        return plain(self.raw.getvalue())

    def _pump(self, timeout: float) -> bool:
        """Read what the client wrote (into the log); False once it has exited."""
        try:
            self.child.read_nonblocking(65536, timeout=timeout)
        except pexpect.TIMEOUT:
            pass
        except pexpect.EOF:
            return False
        return True

    def expect(self, wanted: str, timeout: float = WAIT) -> None:
        """Wait until ``wanted`` shows on the screen after what the previous expect found."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.screen().find(wanted, self.mark)
            if found >= 0:
                self.mark = found + len(wanted)
                return
            alive = self._pump(0.05)
            if not alive and self.screen().find(wanted, self.mark) < 0:
                raise AssertionError(f"attach exited before {wanted!r} showed; the screen:\n{self.screen()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{wanted!r} did not show in {timeout} s; the screen:\n{self.screen()}")

    def settle(self, seconds: float = 0.3) -> None:
        """Read what comes in for a moment (to see that nothing more does)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and self._pump(0.05):
            pass

    def session_id(self) -> str:
        self.expect("Ctrl-D leaves")
        found = re.search(r"session (\S+) — type a prompt", self.screen())
        assert found, self.screen()
        return found[1]

    def line(self, body: str) -> None:
        self.child.send(body + "\r")

    def exit_code(self, timeout: float = WAIT) -> int:
        deadline = time.monotonic() + timeout
        while self._pump(0.1):
            if time.monotonic() > deadline:
                raise AssertionError(f"attach did not exit; the screen:\n{self.screen()}")
        self.child.close()
        return self.child.exitstatus

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Daemons and clients of one test, all stopped at its end."""
    made: dict[str, Any] = {"daemons": [], "clients": []}

    def daemon(port: int = 0) -> Daemon:
        d = Daemon(tmp_path, port)
        made["daemons"].append(d)
        return d

    def attach(d: Daemon, *extra: str) -> Attached:
        a = Attached(tmp_path, d.url, d.state, *extra)
        made["clients"].append(a)
        return a

    made["daemon"], made["attach"] = daemon, attach
    try:
        yield made
    finally:
        for a in made["clients"]:
            a.close()
        for d in made["daemons"]:
            d.stop()


__all__ = ["ESCAPES", "PTY_PROBLEM", "WAIT", "Attached", "pexpect", "plain", "pytestmark", "world"]
