"""``trellis attach``: an interactive terminal client of one session.

    trellis attach                      a new session in this directory (--cwd for another)
    trellis attach --session ID         that session: attached if live, restored from the state directory if not,
                                        its history replayed first (--no-history: from now on)

What the screen shows, as the session's events arrive: the model's text as
it streams (thoughts dimmed), each tool call as ``▸ name (status)`` with its
output indented below, the plan, the Todo Stop Guard's continuations
(``⟳ todo stop guard, attempt N of 2 (K unfinished)``), background tasks
(``⚙ shell <id> started …``, their output, their end) and subagent runs
(``⧉ subagent <name>: turn N of M``, then their end reason), the
pending-prompt FIFO after each change (``⋯ 2 pending: 1. “…” 2. “…”``), hook
messages, and the end of each turn (``✓ turn complete``, ``✗ turn
cancelled``, ``✗ turn failed: …``). Below them, the prompt area: the line of
text being streamed, a permission question, a status line (turn running,
pending prompts, background work, ``reconnecting…``) and the ``›`` input line,
with a history (``$XDG_STATE_HOME/trellis/history``, default
``~/.local/state/trellis/history``; in memory when that cannot be written).

Keys and lines:

- Enter sends the line as a prompt (``POST /session/:id/prompt``). While a
  turn runs it waits in the session's FIFO, which the screen shows; ``/mid
  TEXT`` instead sends a mid-turn message, which the running turn takes at
  its next tool call. ``/pending``, ``/drop N``, ``/cancel``, ``/status``,
  ``/help``, ``/quit``; ``//TEXT`` sends a prompt beginning with ``/``.
- A permission request (``permission_request``) shows its options with a key
  each — ``[a] Allow  [A] Always allow in this session  [r] Reject  [R] Always
  reject in this session`` (digits for options of other kinds) — and that one
  key, pressed on an empty input line, answers it (``POST
  /session/:id/permission/:requestId``). Typed into a line that has text, the
  same keys are text of the line: a request that arrives mid-sentence neither
  takes a letter of it as a vote nor touches the line (Enter sends it, or
  Ctrl-U sets it aside and Ctrl-Y brings it back). A key pressed within half a
  second of the question appearing is typed too (it was on its way already).
- Ctrl-C while a turn runs cancels it (``POST /session/:id/cancel``; the
  screen says ``cancelling…``, then ``turn cancelled``). With no turn running
  it clears a typed line, or leaves on an empty one; a second Ctrl-C within
  2 s always leaves. Ctrl-D on an empty line leaves. Leaving detaches: the
  session goes on in the daemon (``--session ID`` comes back to it).

A dropped connection shows ``reconnecting…`` once and resumes without showing
anything twice — also across a restart of the daemon, whose new token is read
again from its state directory and which restores the session
(:mod:`.link` says how the cursor is chosen).

Design. prompt_toolkit owns the terminal: one ``PromptSession`` runs in the
main thread's asyncio loop for the whole attachment (:mod:`.screen`), under
``patch_stdout``; lines are rendered by ``rich`` and printed above the prompt
(prompt_toolkit's renderer erases its area first and redraws it after), so the
input line is never torn by output and no escape code is written by hand; the
daemon's text is printed with its control characters made visible
(:mod:`trellis.visible`), so a model writes no escape sequence to the terminal.
The network side — httpx on trio,
:func:`trellis.stream.events` for the stream — runs in a second thread with
its own ``trio.run`` (:mod:`.link`); it hands each frame to the screen's loop
with ``call_soon_threadsafe``, and the screen's actions (a prompt, a cancel, a
vote) reach it with ``trio.from_thread.run_sync`` and its trio token, fire and
forget (failures come back as lines). What a frame means for the screen is
decided in one pure class, :class:`.render.View`, tested without a terminal.

Exit codes: 0 left (or the session was closed); 1 the session is gone or the
client failed; 2 nothing ran (no terminal, no daemon, a refused token or
request); 130 interrupted before the prompt was up.
"""

from __future__ import annotations

import argparse
from typing import Any
import asyncio
import os
import sys
from pathlib import Path

from prompt_toolkit.history import FileHistory, History, InMemoryHistory

from .. import __version__, connect
from ..visible import visible
from .link import Link, Refused
from .render import Line, View

EXIT_OK = 0
EXIT_NOT_RUN = 2
EXIT_INTERRUPTED = 130


def add_parser(sub: Any) -> None:  # what argparse's add_subparsers() returns (its class is private)
    parser = sub.add_parser(
        "attach", help="an interactive terminal client of a session",
        description="Attach to a session (a new one without --session) and work with it interactively: "
                    "streamed text, tool calls, permissions answered with a key, the guard's continuations, "
                    "background tasks, subagent runs and the pending-prompt queue. Ctrl-C cancels the running "
                    "turn; a second Ctrl-C, or Ctrl-D, leaves (the session goes on in the daemon).")
    parser.add_argument("--version", action="version", version=f"trellis {__version__}")
    parser.add_argument("--session", metavar="ID", default=None,
                        help="attach to this session (restored from the daemon's state directory if it is not "
                             "live) instead of creating one")
    parser.add_argument("--cwd", metavar="DIR", default=None,
                        help="the working directory of a new session (default: this directory; '' for the "
                             "daemon's --workspace)")
    parser.add_argument("--no-history", dest="history", action="store_false",
                        help="with --session: show only what happens from now on, not the session's history")
    connect.add_arguments(parser)
    parser.set_defaults(run=run)


def history_file(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "trellis" / "history"


class _KeptHistory(FileHistory):
    """A file history that stops writing, rather than failing, when the file cannot be written any more."""

    def store_string(self, string: str) -> None:
        try:
            super().store_string(string)
        except OSError:
            pass


def make_history() -> History:
    path = history_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))  # prompts are nobody else's
    except OSError:
        return InMemoryHistory()
    return _KeptHistory(str(path))


def say(message: str) -> None:
    for line in visible(message).splitlines() or [""]:  # the daemon's words in it: shown, never obeyed
        print(f"trellis: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        say("attach needs a terminal (for scripts: trellis prompt)")
        return EXIT_NOT_RUN
    from .screen import Screen, terminal_width

    link = Link(args)
    try:
        info = link.start()
    except Refused as exc:
        say(exc.message)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    view = View(width=terminal_width)
    view.snapshot(info["status"], info["pending"])
    sid = info["sessionId"]
    how = "attached" if info["attached"] else ("opened" if args.session else "new session")
    banner = [Line(f"session {sid} — type a prompt; Ctrl-C cancels a turn, Ctrl-D leaves", style="bold"),
              Line(f"({how}, in {info['cwd']}; /help for commands)", style="dim")]
    screen = Screen(link, view, make_history())
    try:
        code = asyncio.run(screen.run(banner, info["cursor"]))
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        link.stop()
    say(f"left session {sid}; it goes on in the daemon (trellis attach --session {sid} comes back to it)")
    return code


__all__ = ["add_parser", "history_file", "make_history", "run"]
