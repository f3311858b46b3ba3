"""Daemon-supplied text reaches no terminal as control characters (issue 35, finding 8).

A hostile model (or a file a tool reads, or a directory name) puts escape
sequences in what the daemon relays: an OSC 52 clipboard write, a CSI clear
screen, the C1 CSI byte U+009B, BEL, DEL, and a CR followed by a forged
``→ Allow`` line. The real ``trellis`` commands run against a real daemon with
the scripted model; what they wrote is checked byte for byte: none of the
model's sequences is there as written, and each shows as visible text
(``␛]52;c;…␇``, ``\\x9b``, ``␍``). Each OSC 52 carries its own base64
payload, so a leak names its path. The client's own styling (``trellis
attach`` draws with CSI SGR and cursor moves, never OSC, BEL, C1, a clear
screen or a cursor home) is told apart by what it never writes.
"""

from __future__ import annotations

import base64
import io
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.sync_daemon import Daemon, environ
from tests.trellis.helpers import daemon_args, scripted_daemon, trellis
from tests.trellis.terminal import PTY_PROBLEM, WAIT, pexpect, plain, world  # noqa: F401 - world: the fixture
from trellis.attach.screen import GRACE

needs_pty = pytest.mark.skipif(PTY_PROBLEM is not None, reason=PTY_PROBLEM or "")
C1 = re.compile("[\x80-\x9f]")
MODEL_CSI = ("\x1b[2J", "\x1b[1;1H", "\x1b[2K")  # a clear screen, a cursor home, a line erase: never the client's


def clip(tag: str) -> str:
    """The base64 an OSC 52 of ``tag`` would put in the clipboard: unique to that path."""
    return base64.b64encode(f"trellis-red-team-{tag}".encode()).decode().rstrip("=")


def hostile(tag: str) -> str:
    """Text that writes the clipboard, clears the screen (by ESC and by C1), rings, and forges a vote line."""
    return f"{tag}<\x1b]52;c;{clip(tag)}\x07\x1b[2J\x1b[1;1H\x9b2J\x07\x7fover\r\x1b[2K  → Allow>"


def shown(tag: str) -> str:
    """``hostile(tag)`` as the user must see it."""
    return f"{tag}<␛]52;c;{clip(tag)}␇␛[2J␛[1;1H\\x9b2J␇␡over␍␛[2K  → Allow>"


def osc(tag: str) -> str:
    return f"\x1b]52;c;{clip(tag)}"


def assert_no_controls(out: str, what: str) -> None:
    """Output meant for no terminal styling at all (a pipe): no control character but newline and tab."""
    found = sorted({hex(ord(c)) for c in out if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F})
    assert not found, f"{what} carries control characters {found}: {out!r}"


# --------------------------------------------------------------------------- trellis prompt


async def test_trellis_prompt_shows_the_models_escape_sequences_and_does_not_send_them(tmp_path):
    command = f"echo 'T{osc('TITLE')}\x07'; printf 'OUT<\\033]52;c;{clip('OUT')}\\007\\302\\233>\\n'; exit 3"
    turn = [{"thought": hostile("THOUGHT")}, {"text": hostile("MODEL") + "\n"},
            {"text": "crlf-left\r"}, {"text": "\ncrlf-right\n"},  # a CR LF split across chunks: a line break
            {"tool_call": {"name": "shell", "arguments": {"command": command}}}]
    after = [{"text": "after the tool\n"}, {"fail": {"code": "boom", "message": hostile("ERROR")}}]
    async with scripted_daemon(tmp_path, turn, after) as daemon:
        result = await trellis("prompt", *daemon_args(daemon), "--thoughts", "--approval-mode", "yolo", "go",
                               cwd=tmp_path)
    assert result.code == 1, result.stderr  # the turn failed, by the script
    assert_no_controls(result.stdout, "stdout")
    assert_no_controls(result.stderr, "stderr")
    assert shown("MODEL") in result.stdout
    assert "crlf-left\ncrlf-right\n" in result.stdout
    assert shown("THOUGHT") in result.stderr
    assert f"T␛]52;c;{clip('TITLE')}␇" in result.stderr  # the tool's title: the command, ESC in it
    assert shown("ERROR") in result.stderr  # the turn's error message


async def test_trellis_prompt_json_carries_the_exact_text_and_no_raw_control_character(tmp_path):
    """--json is for programs: the data stays exact, and DEL and C1 are written as \\u escapes (JSON lets them
    through raw, and a terminal obeys a C1 CSI)."""
    async with scripted_daemon(tmp_path, [{"text": hostile("JSON")}]) as daemon:
        result = await trellis("prompt", *daemon_args(daemon), "--json", "go", cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert_no_controls(result.stdout, "--json stdout")
    texts = [f["data"]["update"]["content"]["text"] for f in result.json_lines()
             if f["type"] == "session_update" and f["data"]["update"]["sessionUpdate"] == "agent_message_chunk"]
    assert texts == [hostile("JSON")]  # decoded, the same characters the model sent


# --------------------------------------------------------------------------- trellis sessions / status


def hostile_dir(tmp_path: Path) -> Path:
    """A directory whose name writes the clipboard and is rich markup ('/' cannot be in a name)."""
    path = tmp_path / f"proj{osc('CWD')}\x07[reverse]LOUD\x9b2J"
    path.mkdir()
    return path


async def test_sessions_and_status_tables_show_a_hostile_directory_name_as_text(tmp_path):
    evil = hostile_dir(tmp_path)
    async with scripted_daemon(tmp_path) as daemon:
        async with daemon.client(daemon.token()) as client:
            sid = (await client.post("/session", json={"cwd": str(evil)})).json()["sessionId"]
        sessions = await trellis("sessions", *daemon_args(daemon), cwd=tmp_path)
        status = await trellis("status", *daemon_args(daemon), sid, cwd=tmp_path)
    for result in (sessions, status):
        assert result.code == 0, result.stderr
        assert_no_controls(result.stdout, "the table")
        assert f"proj␛]52;c;{clip('CWD')}␇[reverse]LOUD\\x9b2J" in result.stdout


@needs_pty
def test_the_rich_table_on_a_terminal_takes_no_markup_and_no_escape_from_a_directory_name(tmp_path):
    evil = hostile_dir(tmp_path)
    daemon = Daemon(tmp_path).start([])
    try:
        with daemon.client() as client:
            client.post("/session", json={"cwd": str(evil)}).raise_for_status()
        raw = io.StringIO(newline="")
        child = pexpect.spawn(sys.executable, ["-m", "trellis", "sessions", "--url", daemon.url, "--state-dir",
                                               str(daemon.state)],
                              env=environ(TERM="xterm-256color"), cwd=str(tmp_path), dimensions=(40, 250),
                              encoding="utf-8", codec_errors="replace", timeout=WAIT)
        child.logfile_read = raw
        child.expect(pexpect.EOF)
        child.close()
    finally:
        daemon.stop()
    out = raw.getvalue()
    assert child.exitstatus == 0, out
    assert osc("CWD") not in out and "\x07" not in out and not C1.search(out), repr(out)
    assert "\x1b[7m" not in out, "'[reverse]' in a directory name was taken as rich markup"
    assert f"proj␛]52;c;{clip('CWD')}␇[reverse]LOUD\\x9b2J" in plain(out)


# --------------------------------------------------------------------------- trellis attach


@needs_pty
def test_trellis_attach_shows_the_models_escape_sequences_and_does_not_send_them(world, request):
    # Under a short base: the banner shortens a directory wider than the 120-column screen, and pytest's
    # own tmp_path grows with its run counter.
    short = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    evil = hostile_dir(short)
    command = f"echo 'T{osc('TITLE')}\x07'; printf 'OUT<\\033]52;c;{clip('OUT')}\\007\\302\\233>\\n'"
    d = world["daemon"]().start([
        [{"thought": hostile("THOUGHT") + "\n"}, {"text": hostile("MODEL") + "\n"},
         {"text": hostile("PARTIAL")},  # no newline: drawn in the prompt area until the tool call ends it
         {"sleep": 0.5}, {"tool_call": {"name": "shell", "arguments": {"command": command}}}],
        [{"text": "after the tool\n"}, {"fail": {"code": "boom", "message": hostile("ERROR")}}],
    ])
    screen = world["attach"](d, "--cwd", str(evil))
    screen.session_id()
    screen.line("go")
    screen.expect("? permission:")  # the question's title is the command, ESC and all
    time.sleep(GRACE + 0.2)
    screen.child.send("a")
    screen.expect("after the tool")
    screen.expect("✗ turn failed:")
    screen.settle(0.5)
    raw = screen.raw.getvalue()
    screen.child.sendcontrol("d")
    assert screen.exit_code() == 0
    for tag in ("THOUGHT", "MODEL", "PARTIAL", "ERROR", "TITLE", "OUT", "CWD"):
        assert osc(tag) not in raw, f"the OSC 52 of {tag} reached the terminal"
    assert "\x1b]" not in raw  # no OSC at all: the client writes none
    for sequence in MODEL_CSI:
        assert sequence not in raw, f"{sequence!r} reached the terminal"
    assert "\x07" not in raw and "\x7f" not in raw
    assert not C1.search(raw), sorted({hex(ord(c)) for c in C1.findall(raw)})
    text = plain(raw)
    for tag in ("THOUGHT", "MODEL", "PARTIAL", "ERROR"):
        assert shown(tag) in text, (tag, text)
    assert f"T␛]52;c;{clip('TITLE')}␇" in text  # the tool's title and its output
    assert f"OUT<␛]52;c;{clip('OUT')}␇\\x9b>" in text
    assert f"proj␛]52;c;{clip('CWD')}␇[reverse]LOUD\\x9b2J" in text  # the banner's directory
