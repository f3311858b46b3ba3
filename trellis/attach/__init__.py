"""``trellis attach``: an interactive terminal client of one session.

    trellis attach                      a picker of this directory's sessions (newest first, "new session" on
                                        top); straight to a new session when there are none (--cwd: another dir)
    trellis attach --new                a new session, without asking
    trellis attach --continue           the latest session of this directory (a new one when there is none)
    trellis attach --session ID         that session: attached if live, restored from the state directory if not,
                                        its history replayed first (--no-history: from now on — with the running
                                        turn's time and tokens so far, and a permission question already waiting)

What the screen shows, as the session's events arrive: the model's text as
it streams, rendered as Markdown block by block as each block closes (a
paragraph — its lines joined, at a blank line or where another block starts —,
a heading, a list item, a quote, a fenced code block — syntax-highlighted — or
a table; until then its lines show as they came; :mod:`.render`), thoughts
dimmed, each tool call as ``▸ name (status)`` with its
output indented below, the plan (whole once, then a line of what changed), the Todo Stop Guard's
continuations (``⟳ todo stop guard, attempt N of 2 (K unfinished)``),
background tasks (``⚙ shell <id> started …`` and their end; their output is
kept for ``/tasks``, not printed among the model's text) and subagent runs
(``⧉ subagent <name>: turn N of M``, then their end reason), the
pending-prompt FIFO after each change (``⋯ 2 pending: 1. “…” 2. “…”``), hook
messages, and the end of each turn (``✓ turn complete``, ``✗ turn
cancelled``, ``✗ turn failed: …``). Below them, the prompt area: the line of
text being streamed (and an open code block), a permission question, a status
line (a spinner, the turn's elapsed time and tokens, the model, the approval
mode, the plan's progress, queued prompts, background work, ``reconnecting…``;
in a narrow terminal it gives up the model's name first and the spinner and
clock, the pending prompts and the background work last) and the ``›`` input
line,
with a history (``$XDG_STATE_HOME/trellis/history``, default
``~/.local/state/trellis/history``; in memory when that cannot be written).

Keys and lines:

- Enter sends the line as a prompt (``POST /session/:id/prompt``). While a
  turn runs it waits in the session's FIFO, which the screen shows; ``/mid
  TEXT`` instead sends a mid-turn message, which the running turn takes at
  its next tool call. ``/pending`` (the running prompt apart, the queued ones
  numbered as ``/drop N`` takes them), ``/drop N|ID``, ``/cancel``,
  ``/status``, ``/tasks [ID]``, ``/kill ID``, ``/mode [MODE]``, ``/help``,
  ``/quit``; the session's checkpoints: ``/checkpoints`` (the turns, numbered
  from 0 as a rewind counts them, with the files each changed; the undo
  entries), ``/rewind N`` (the conversation back to the start of turn N),
  ``/rewind N files [force]`` (the files too), ``/diff N``, ``/undo [ID]``;
  ``/clear``, ``/compact`` and ``/model NAME`` are the session's own commands,
  sent as prompts; ``//TEXT`` sends a prompt beginning with ``/``. Esc Enter
  (Alt+Enter) inserts a newline; Tab completes a command.
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
anything twice — also across a restart of the daemon, graceful (its
``session_closed`` ``daemon_shutdown`` does not end the attachment) or not,
whose new token is read again from its state directory and which restores the
session (:mod:`.link` says how the cursor is chosen). The typed draft stays in
the input line, and a prompt the daemon did not take comes back to it.

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
import time
from pathlib import Path

from prompt_toolkit.history import FileHistory, History, InMemoryHistory

from .. import __version__, connect
from ..visible import visible
from .link import Link, Refused, queued_count, sessions_here
from .render import Line, View, short

EXIT_OK = 0
EXIT_NOT_RUN = 2
EXIT_INTERRUPTED = 130


def add_parser(sub: Any) -> None:  # what argparse's add_subparsers() returns (its class is private)
    parser = sub.add_parser(
        "attach", help="an interactive terminal client of a session",
        description="Attach to a session and work with it interactively: the model's text rendered as "
                    "Markdown as it streams, tool calls, permissions answered with a key, the plan, background "
                    "tasks (/tasks, /kill), subagent runs and the pending-prompt queue. Without --session, pick "
                    "one of this directory's sessions or a new one (--continue: the latest; --new: a new one). "
                    "Ctrl-C cancels the running turn; a second Ctrl-C, or Ctrl-D, leaves (the session goes on in "
                    "the daemon). /help lists the commands.")
    parser.add_argument("--version", action="version", version=f"trellis {__version__}")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--session", metavar="ID", default=None,
                       help="attach to this session (restored from the daemon's state directory if it is not "
                            "live); without it, a picker offers this directory's sessions and a new one")
    which.add_argument("--continue", dest="resume", action="store_true",
                       help="attach to the latest session of this directory (a new one when there is none)")
    which.add_argument("--new", action="store_true", help="start a new session without asking")
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


def ago(ms: Any, now: float | None = None) -> str:
    """How long ago a time in milliseconds was, in a word or two."""
    if not isinstance(ms, (int, float)):
        return ""
    seconds = max(0, (time.time() if now is None else now) - ms / 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"


def session_label(entry: dict[str, Any], width: int = 60) -> str:
    """A session as the picker lists it: its title (else a short id), state, age and queued prompts."""
    sid = str(entry.get("sessionId"))
    title = entry.get("title") if isinstance(entry.get("title"), str) and entry.get("title").strip() else None
    name = short(title, width) if title else (sid if len(sid) <= 24 else sid[:23] + "…")
    state = "running" if entry.get("state") == "running" else "live" if entry.get("live") else "stored"
    parts = [state, ago(entry.get("updatedAt"))]
    queued = queued_count(entry)
    if queued:
        parts.append(f"{queued} queued")
    if title:
        parts.append(sid if len(sid) <= 24 else sid[:23] + "…")
    return visible(f"{name}  ({', '.join(p for p in parts if p)})")


def pick(sessions: list[dict[str, Any]]) -> str | None | bool:
    """Ask which session to attach to: its id, None for a new one, False to leave."""
    from prompt_toolkit import PromptSession

    print("sessions in this directory (newest first):")
    print("  0. new session")
    for i, entry in enumerate(sessions, 1):
        print(f"  {i}. {session_label(entry)}")
    session: PromptSession[str] = PromptSession()
    while True:
        try:
            answer = session.prompt(f"attach to [0-{len(sessions)}, Enter: new session]: ").strip()
        except (KeyboardInterrupt, EOFError):
            return False
        if answer in ("", "0", "n", "new"):
            return None
        if answer.isdigit() and 0 < int(answer) <= len(sessions):
            return str(sessions[int(answer) - 1]["sessionId"])
        print(f"  a number from 0 to {len(sessions)}")


def run(args: argparse.Namespace) -> int:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        say("attach needs a terminal (for scripts: trellis prompt)")
        return EXIT_NOT_RUN
    from .screen import Screen, terminal_width

    if args.session is None and not args.new:
        found = sessions_here(args)
        if found and args.resume:
            args.session = str(found[0]["sessionId"])
        elif found:
            chosen = pick(found)
            if chosen is False:
                return EXIT_INTERRUPTED
            args.session = chosen
    link = Link(args)
    try:
        info = link.start()
    except Refused as exc:
        say(exc.message)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    view = View(width=terminal_width)
    view.model = info.get("model")
    view.snapshot(info["status"], info["pending"])
    joined = view.join(info.get("turn"), info.get("frames"), info.get("tools"), tokens=not info.get("history"))
    sid = info["sessionId"]
    how = "attached" if info["attached"] else ("opened" if args.session else "new session")
    title = f" “{info['title']}”" if isinstance(info.get("title"), str) and info["title"].strip() else ""
    banner = [Line(f"session {sid} — type a prompt; Ctrl-C cancels a turn, Ctrl-D leaves", style="bold"),
              Line(f"({how}{title}, in {info['cwd']}; /help for commands, Esc Enter for a newline)", style="dim"),
              *joined]  # a permission question already waiting
    screen = Screen(link, view, make_history())
    try:
        code = asyncio.run(screen.run(banner, info["cursor"]))
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        link.stop()
    if view.closed is not None:
        say(f"session {sid} was closed ({view.closed}); trellis attach --session {sid} restores it")
    elif code == 1:
        say(f"left session {sid}")
    else:
        say(f"left session {sid}; it goes on in the daemon (trellis attach --session {sid} comes back to it)")
    return code


__all__ = ["add_parser", "history_file", "make_history", "run"]
