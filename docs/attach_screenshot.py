"""Make ``docs/attach-session.png`` and ``docs/attach-phone.png``: ``trellis attach`` in a terminal 1280 and
390 px wide, playing the quick start's demo.

    .venv/bin/python docs/attach_screenshot.py [OUT.png [PHONE.png]]

Needs tmux, chromium and the ``playwright`` package (the test extras), like
the browser tests. ``trellis serve --demo showcase`` runs on a free port with a
temporary state directory; ``trellis attach --new`` runs in a tmux pane of
:data:`WIDE` columns, and the script types the prompt, allows the shell command
(a permission request), queues a second prompt while the turn runs and allows
the background check. Once that check runs and the markdown answer (a code
block, a table) has streamed past its table, the pane is captured with its
colours (``tmux capture-pane -e``), turned into HTML by ``rich`` and shot by
chromium at 1280 px. The phone-sized picture is a second ``trellis attach
--session ID --no-history`` in a pane of :data:`NARROW` columns, attached to
the same session while the background check's permission question is up: its
banner names the session's title, and it shows the question asked before it
joined, the next one, the answer that streams and the status line (narrowed to
its counts), at 390 px.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.terminal_theme import TerminalTheme  # noqa: E402
from rich.text import Text  # noqa: E402

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.sync_daemon import environ  # noqa: E402

WIDE = (150, 54)  # columns, rows of the 1280-px terminal
NARROW = (44, 66)  # of the 390-px one (taller than a phone: the banner with the title stays in view)
FONT_PX = 13.8  # DejaVu Sans Mono: 0.602 em a cell, so 150 columns are 1246 px, 44 are 366 px
LINE = 1.22  # line height, in em
PAD = 12  # px around the text
WAIT = 30.0  # seconds for anything to show up
GRACE = 0.8  # a permission key pressed sooner than trellis.attach.screen.GRACE is typed, not a vote
FIRST = "Show me what a session can do"
QUEUED = "Then write a short report of what changed"

# A dark terminal (the colours of GNOME Terminal's "Tango dark").
THEME = TerminalTheme(
    (30, 30, 36), (222, 222, 222),
    [(46, 52, 54), (204, 0, 0), (78, 154, 6), (196, 160, 0), (52, 101, 164), (117, 80, 123), (6, 152, 154),
     (211, 215, 207)],
    [(115, 120, 112), (239, 41, 41), (138, 226, 52), (252, 233, 79), (114, 159, 207), (173, 127, 168),
     (52, 226, 226), (238, 238, 236)],
)
PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><style>
html, body {{ margin: 0; background: {background}; }}
pre {{ margin: 0; padding: {pad}px; font-family: "DejaVu Sans Mono", monospace; font-size: {font}px;
       line-height: {line}; color: {foreground}; white-space: pre; font-variant-ligatures: none; }}
</style></head><body><pre><code>{code}</code></pre></body></html>
"""


class Tmux:
    """A tmux server of this script's own (its own socket, no user config): panes running commands."""

    def __init__(self, tmp: Path) -> None:
        self.socket = str(tmp / "tmux.sock")
        self.env = environ(TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", XDG_STATE_HOME=str(tmp / "xdg"))

    def __call__(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", *args], env=self.env,
                              capture_output=True, text=True, timeout=10, check=True)
        return done.stdout

    def start(self, name: str, size: tuple[int, int], cwd: Path, command: list[str]) -> None:
        self("new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]), "-c", str(cwd),
             "-e", "TERM=xterm-256color", "-e", "PROMPT_TOOLKIT_NO_CPR=1", *command)
        self("set-option", "-t", name, "status", "off")
        self("set-option", "-t", name, "remain-on-exit", "on")

    def screen(self, name: str, colours: bool = False, history: bool = False) -> str:
        return self("capture-pane", "-p", "-t", name, *(["-e"] if colours else []), *(["-S", "-"] if history else []))

    def keys(self, name: str, text: str, enter: bool = False) -> None:
        self("send-keys", "-t", name, "-l", text)
        if enter:
            self("send-keys", "-t", name, "Enter")

    def wait(self, name: str, wanted: str, history: bool = False) -> str:
        deadline = time.monotonic() + WAIT
        while wanted not in (screen := self.screen(name, history=history)):
            if time.monotonic() > deadline:
                raise SystemExit(f"{wanted!r} did not show in pane {name} within {WAIT} s:\n{screen}")
            time.sleep(0.05)
        return screen

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], env=self.env, capture_output=True, timeout=10)


def serve(tmp: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """``trellis serve --demo showcase`` on a free port: the process, its URL and its state directory."""
    state = tmp / "state"
    workspace = tmp / "workspace"
    workspace.mkdir()
    with open(tmp / "daemon.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "trellis", "serve", "--demo", "showcase", "--port", "0",
                                 "--state-dir", str(state), "--workspace", str(workspace)],
                                env=environ(), stdout=subprocess.PIPE, stderr=log, cwd=workspace)
    line = proc.stdout.readline().decode()  # type: ignore[union-attr]  # "listening on http://127.0.0.1:PORT"
    if not line.strip():
        raise SystemExit(f"the daemon did not start:\n{(tmp / 'daemon.log').read_text()}")
    return proc, line.split()[-1], state


def scene(tmux: Tmux, url: str, state: Path, workspace: Path) -> tuple[str, str]:
    """Play the demo; the wide pane's and the narrow pane's screens (with colours) at the moment to show."""
    attach = [sys.executable, "-m", "trellis", "attach", "--url", url, "--state-dir", str(state)]
    tmux.start("wide", WIDE, workspace, [*attach, "--new"])
    banner = tmux.wait("wide", "type a prompt", history=True)
    sid = re.search(r"session (\S+) — type a prompt", banner)
    assert sid, banner
    tmux.keys("wide", FIRST, enter=True)
    tmux.wait("wide", "permission: execute: ls -la")
    # The phone-sized client joins now, while the first question is up: its banner has the session's title.
    tmux.start("narrow", NARROW, workspace, [*attach, "--session", sid[1], "--no-history"])
    tmux.wait("narrow", "permission: execute: ls -la")  # asked before it joined: shown, answerable there too
    time.sleep(GRACE)
    tmux.keys("wide", "a")  # ls -la may run
    tmux.wait("wide", "permission: execute: sleep 4")
    tmux.wait("narrow", "? sleep 4")  # the question, in the prompt area
    tmux.keys("wide", QUEUED, enter=True)  # queued behind the running turn
    tmux.wait("wide", "1 pending")
    time.sleep(GRACE)
    tmux.keys("narrow", "a")  # the background check may run: answered on the phone
    # The moment: the table has been drawn (the paragraph after it is streaming), the turn still runs with the
    # queued prompt and the background check in the status line.
    shots: dict[str, str] = {}
    deadline = time.monotonic() + WAIT
    while len(shots) < 2:
        for name in ("wide", "narrow"):
            if name in shots:
                continue
            screen = tmux.screen(name, colours=True)
            plain = re.sub(r"\x1b\[[0-9;:]*m", "", screen)
            # The narrow status line gives up its words before its counts: its spinner's clock ("12 s") shows.
            running = "turn running" if name == "wide" else " s · ⋯ 1 pending"
            if "Send another prompt" in plain and running in plain:
                shots[name] = screen
        if time.monotonic() > deadline:
            raise SystemExit("the answer's table did not show while the turn ran:\n"
                             + "\n----\n".join(tmux.screen(n) for n in ("wide", "narrow")))
        time.sleep(0.03)
    shown = {name: re.sub(r"\x1b\[[0-9;:]*m", "", screen) for name, screen in shots.items()}
    for name, wanted in (("wide", ("✎ titled", "? permission", "→ Allow", "⚙ shell", "async with", "Feature",
                                   "⋯ 1 pending", "⚙ 1 background")),
                         ("narrow", ("(attached “", "? permission", "→ Allow", "⚙ shell", "async with", "Feature",
                                     "⋯ 1 pending", "⚙ 1 background"))):
        missing = [w for w in wanted if w not in shown[name]]
        if missing:
            raise SystemExit(f"the {name} picture would lack {missing}:\n{shown[name]}")
    return shots["wide"], shots["narrow"]


def page(ansi: str, columns: int) -> str:
    """The captured pane as an HTML page: rich's HTML of its text, in a terminal's font and colours."""
    console = Console(record=True, width=columns, file=io.StringIO(), color_system="256", force_terminal=True)
    for line in Text.from_ansi(ansi.rstrip("\n")).split("\n", allow_blank=True):
        console.print(line, no_wrap=True, overflow="crop", crop=True)
    code = console.export_html(inline_styles=True, theme=THEME, code_format="{code}")
    return PAGE.format(code=code, background="#%02x%02x%02x" % THEME.background_color,
                       foreground="#%02x%02x%02x" % THEME.foreground_color, font=FONT_PX, line=LINE, pad=PAD)


def shoot(shots: list[tuple[str, int, int, str]]) -> None:
    """Each (html, width, rows, out) shot by chromium at that width, as tall as its rows."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for doc, width, rows, out in shots:
                height = round(rows * FONT_PX * LINE + 2 * PAD)
                tab = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
                tab.set_content(doc)
                tab.evaluate("document.fonts.ready")
                tab.screenshot(path=out)
                tab.close()
        finally:
            browser.close()


def main(out: str, phone: str) -> None:
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        daemon, url, state = serve(tmp)
        tmux = Tmux(tmp)
        try:
            wide, narrow = scene(tmux, url, state, tmp / "workspace")
        finally:
            tmux.kill()
            daemon.terminate()
            try:
                daemon.wait(15)
            except subprocess.TimeoutExpired:
                daemon.kill()
        shoot([(page(wide, WIDE[0]), 1280, WIDE[1], out), (page(narrow, NARROW[0]), 390, NARROW[1], phone)])
    print(f"wrote {out} and {phone}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("attach-session.png")),
         sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).with_name("attach-phone.png")))
