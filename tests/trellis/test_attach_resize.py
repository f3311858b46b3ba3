"""``trellis attach`` when the terminal's width changes while an answer streams, in a real terminal (tmux), and the
prompt area's row accounting behind it; with a nested list's indent (:class:`trellis.attach.render.View`).

tmux re-wraps (reflows) what is on its screen when its window narrows, as most terminals do: a row of the prompt
area drawn for 120 columns takes several rows at 50. The client must erase all of them before it prints or redraws,
or the raw Markdown source it was showing (an open table's rows) stays on the screen above the rendered table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sync_daemon import Daemon, environ
from tests.trellis.test_attach_view import chunk, lines
from trellis.attach.render import View
from trellis.attach.screen import reflowed_rows

WAIT = 15.0  # seconds for anything to show up on the screen

TABLE_HEADER = "| Column A | A much longer column header B | C | Description that is very long and goes on and on |"
ANSWER = (
    "# Release notes\n\nSome **bold** text, and `code`.\n\n## A table\n\n"
    + TABLE_HEADER + "\n|---|---|:-:|---|\n| 1 | alpha | ✓ | short |\n"
    "| 2 | beta beta beta beta beta beta beta | ✗ | a cell with a lot of text that will need wrapping in narrow "
    "terminals for sure |\n"
)
REST = (
    "| 3 | 漢字テキスト | ✓ | emoji and CJK |\n\n## Code\n\n```python\ndef fibonacci(n: int) -> list[int]:\n"
    "    a, b = 0, 1\n    return [a, b]\n```\n\n1. First item\n   - nested bullet\n2. Second item\n\n"
    "> A block quote that spans a long line and should wrap nicely without breaking the layout.\n\n"
    "Final line with trailing text.\n"
)


def streamed(text: str, size: int = 40, pause: float = 0.05) -> list[dict[str, Any]]:
    """``text`` as the scripted model streams it: ``size`` characters a chunk, ``pause`` seconds apart."""
    out: list[dict[str, Any]] = []
    for at in range(0, len(text), size):
        out += [{"text": text[at:at + size]}, {"sleep": pause}]
    return out


# ---------------------------------------------------------------------------------------------------- tmux


class Tmux:
    """One tmux server of a test's own (its socket in the test's directory) running ``trellis attach``."""

    def __init__(self, tmp: Path, daemon: Daemon, width: int, height: int = 40, **env: str) -> None:
        self.socket = str(tmp / "tmux.sock")
        self.env = environ(XDG_STATE_HOME=str(tmp / "xdg"), TERM="xterm-256color", **env)
        self.env.pop("TMUX", None)
        command = " ".join([sys.executable, "-m", "trellis", "attach", "--new", "--url", daemon.url,
                            "--state-dir", str(daemon.state)])
        self.run("-f", "/dev/null", "new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                 f"cd {tmp} && exec {command}")
        self.run("set-option", "-g", "remain-on-exit", "on")

    def run(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", self.socket, *args], env=self.env, capture_output=True, text=True,
                              timeout=WAIT)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    def screen(self) -> str:
        """The pane's text, its scrollback included (rows as the terminal shows them, wrapped rows apart)."""
        return self.run("capture-pane", "-p", "-S", "-", "-t", "t")

    def wait_for(self, wanted: str, timeout: float = WAIT) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if wanted in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{wanted!r} did not show in {timeout} s; the screen:\n{screen}")
            time.sleep(0.05)  # polling the pane: there is no event to wait on

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "t", *keys)

    def resize(self, width: int) -> None:
        self.run("resize-window", "-t", "t", "-x", str(width))

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], env=self.env, capture_output=True, timeout=WAIT)


needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None or os.name != "posix",
                                reason="tmux is the terminal that re-wraps its rows here")


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Any]:
    made: list[Any] = []

    def start(script: list[Any], width: int, **env: str) -> Tmux:
        daemon = Daemon(tmp_path).start(script)
        made.append(daemon)
        tmux = Tmux(tmp_path, daemon, width, **env)
        made.append(tmux)
        tmux.wait_for("Ctrl-D leaves")
        return tmux

    try:
        yield start
    finally:
        for thing in reversed(made):
            thing.stop() if isinstance(thing, Daemon) else thing.close()


@needs_tmux
def test_narrowing_the_terminal_while_a_table_streams_leaves_no_raw_source_on_the_screen(terminal):
    # The table's rows wait in the prompt area (raw, one 120-column row each) for 2 s; the terminal narrows
    # meanwhile, and the rest streams on in 40-character chunks (printed lines racing the resize's redraw).
    tmux = terminal([[*streamed(ANSWER), {"sleep": 2.0}, *streamed(REST)]], 120)
    tmux.keys("Show me the release notes", "Enter")
    tmux.wait_for(TABLE_HEADER)  # the open table's source, in the prompt area
    # Narrower than the status line (48 columns): rows that held it before the table's rows pushed it down
    # were cleared to their end, and tmux re-wraps them as 48 columns wide still.
    tmux.resize(45)
    screen = tmux.wait_for("✓ turn complete")
    assert "| Column A |" not in screen and "| 1 | alpha |" not in screen, screen
    assert screen.count("Column A") == 1, screen  # the table, rendered once (for 45 columns)
    assert "Description" in screen and "漢字" in screen
    assert screen.count("Final line with trailing text.") == 1
    assert "Some bold text, and code." in screen  # what was printed before the resize is still there


@needs_tmux
def test_widening_the_terminal_erases_nothing_printed(terminal):
    tmux = terminal([[*streamed(ANSWER), {"sleep": 2.0}, *streamed(REST)]], 50)
    tmux.keys("Show me the release notes", "Enter")
    tmux.wait_for("| 1 | alpha |")
    tmux.resize(120)
    screen = tmux.wait_for("✓ turn complete")
    assert "| Column A |" not in screen and screen.count("Column A") == 1, screen
    for printed in ("› Show me the release notes", "Release notes", "Some bold text, and code.", "A table",
                    "Final line with trailing text."):
        assert screen.count(printed) == 1, (printed, screen)


@needs_tmux
def test_a_columns_left_in_the_environment_does_not_set_the_width(terminal):
    # A shell's or a test runner's exported COLUMNS=50 in a 120-column terminal: the lines above the prompt
    # followed it (wrapping at 50 beside a prompt drawn at 120) and never followed a resize.
    tmux = terminal([[{"text": "word " * 20}]], 120, COLUMNS="50", LINES="20")
    screen = tmux.screen()
    assert any("type a prompt; Ctrl-C cancels a turn, Ctrl-D leaves" in row for row in screen.splitlines()), screen
    tmux.keys("Say it", "Enter")
    screen = tmux.wait_for("✓ turn complete")
    assert any(row.strip() == ("word " * 20).strip() for row in screen.splitlines()), screen


# ---------------------------------------------------------------------------------------------------- rows


def test_a_row_takes_as_many_rows_as_the_terminal_rewraps_it_into():
    assert reflowed_rows([1] * 110, 120) == 1
    assert reflowed_rows([1] * 110, 50) == 3
    assert reflowed_rows([1] * 100, 50) == 2
    assert reflowed_rows([], 50) == 1  # an empty row is still a row
    assert reflowed_rows([1] * 49 + [2], 50) == 2  # a wide character is not split: it moves to the next row
    assert reflowed_rows([2] * 25, 50) == 1


# ---------------------------------------------------------------------------------------------------- a nested list


def test_a_nested_list_item_is_indented_under_its_parents_text():
    view = View(width=lambda: 60)
    out = lines(view, chunk("1. First item\n   - nested bullet with `code`\n   - another nested bullet that is "
                            "long enough to wrap around on a narrow terminal\n2. Second item\n- top\n  - sub\n"
                            "    - subsub\n\nafter\n\n"))
    assert out == [
        "1. First item",
        "    • nested bullet with code",
        "    • another nested bullet that is long enough to wrap",
        "      around on a narrow terminal",
        "2. Second item",
        " • top",
        "    • sub",
        "       • subsub",
        "",
        "after",
        "",
    ]
