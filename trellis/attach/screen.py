"""The terminal side of ``trellis attach``: prompt_toolkit's prompt line in the main thread's asyncio loop.

One :class:`~prompt_toolkit.PromptSession` runs for the whole attachment (a
line typed is handed over and the buffer cleared, the application never
exits in between), so the terminal stays in prompt_toolkit's hands: Ctrl-C
is a key, not a signal, and SIGINT (sent while a line was being printed) is
routed to the same key binding. Finished lines are rendered by ``rich`` and
printed above the prompt (the prompt area erased, the lines written, the area
redrawn; the terminal stays in raw mode throughout); the prompt area below them
is redrawn from the :class:`~.render.View`: the streamed line still being
written (and an open code block or table), the permission question, a status
line (a spinner and the running turn's time and tokens, the last turn's
figures, the model, the approval mode, the plan's progress, queued prompts,
background work; redrawn every tenth of a second while a turn runs; fitted to
the terminal's width by priority, :meth:`~.render.View.status_parts`) and the
``›`` input line. (Not prompt_toolkit's bottom toolbar: it is drawn only while
the rows below the cursor are known from a cursor-position report, which the
erase before each printed batch forgets, so under this screen it did not show;
and it sits on the terminal's last row, far from the input.)

When the terminal's width changes, most terminals (tmux, VTE, iTerm2, kitty,
Windows Terminal…) re-wrap what is on the screen: a row of the prompt area
drawn for 120 columns takes three rows at 50. prompt_toolkit erases (and
redraws) the area by moving up the rows it drew, so it would leave the rest —
an open table's raw rows — above the next lines (neither prompt_toolkit nor
rich.live accounts for the re-wrap). So the area's rows as last drawn are kept
(:meth:`Screen._drawn_rows`, after each render) and, before the area is next
erased or redrawn at another width, the cursor is first moved up the rows the
re-wrap added (:meth:`Screen._unwrap`, :func:`reflowed_rows`). A terminal that
cuts its rows instead of re-wrapping them has nothing to add when it widens;
when it narrows, the extra rows erased are the last ones printed above the area.

Input: Enter sends the line; Esc Enter (Alt+Enter in most terminals) inserts a
newline, for a prompt of several lines; Tab completes a ``/command`` (and
``/mode``'s modes).

Items from the :class:`~.link.Link` arrive through ``call_soon_threadsafe``
and are handled in this loop only, so the view has one thread.

Everything written to the terminal passes :meth:`Screen._write` (the lines)
or :meth:`Screen._message` (the prompt area), and both make the daemon's text
visible there (:mod:`trellis.visible`): a model's escape sequence is shown as
``␛…``, never obeyed.

A permission is answered only by an explicit choice: its key pressed on an
empty input line, once the question has been on screen for :data:`GRACE`
seconds. The key bindings' filter says so, so a key typed into a line with
text in it — a word with an ``a`` in it, while a request arrives — is text of
that line, and a key already on its way when the question appears is too.
The typed line is never touched by a request: the question says how to
answer without losing it (Enter sends it; Ctrl-U sets it aside and Ctrl-Y
brings it back).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

from prompt_toolkit import PromptSession
from prompt_toolkit.application import get_app
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document
from prompt_toolkit.filters import Condition
from prompt_toolkit.history import History
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout.screen import Char
from prompt_toolkit.patch_stdout import patch_stdout
from prompt_toolkit.styles import Style
from rich.console import Console
from rich.text import Text

from ..visible import visible
from .link import Link
from .render import S_NOTE, S_WARN, View, visible_text

AGAIN = 2.0  # seconds: a second Ctrl-C within them leaves
PERMISSION_KEYS = "aArR123456789"
GRACE = 0.5  # seconds a permission question is on screen before its keys answer (faster than anyone reads it)
LINE_HAS_TEXT = "keys answer on an empty line: Enter sends yours, or Ctrl-U sets it aside (Ctrl-Y brings it back)"
STYLE = Style.from_dict({
    "message": "",
    "thought": "italic fg:ansibrightblack",
    "status": "fg:ansibrightblack",
    "permission": "bold fg:ansiyellow",
    "keys": "fg:ansiyellow",
    "prompt": "bold",
})
TICK = 0.1  # seconds between redraws of the status line while a turn runs (its spinner and clock)
MODES = ("default", "auto-edit", "yolo", "plan")
DAEMON_COMMANDS = ("clear", "compact", "model")  # the session's own slash commands: sent as prompts
COMMANDS = ("help", "mid", "pending", "drop", "cancel", "status", "tasks", "kill", "mode", "permissions",
            "checkpoints", "rewind", "diff", "undo", *DAEMON_COMMANDS, "quit")
REWIND_USAGE = ("usage: /rewind N (the conversation back to the start of user turn N, from 0), /rewind N files "
                "(the files too), /rewind N files force (even over changes made outside the session)")
HELP = """\
type a prompt and Enter: it runs now, or waits in the session's queue while a turn runs
Esc Enter (Alt+Enter) inserts a newline; Tab completes a /command; Up/Down go through the history
/mid TEXT    send TEXT into the running turn (taken at its next tool call) instead of queueing it
/pending     the running prompt, and the queued ones numbered   /drop N|ID   remove queued prompt N (or by id)
/cancel      cancel the running turn        /status      the session's status
/tasks [ID]  background tasks and the end of their output       /kill ID     stop background task ID
/mode [default|auto-edit|yolo|plan]   show or set the approval mode
/permissions [allow|ask|deny RULE | remove N]   the permission rules; add one to this session, or remove one
/checkpoints the turns (numbered from 0, as /rewind counts them) with the files each changed; the undo entries
/rewind N [files [force]]   back to the start of turn N: the conversation, and with files the files too
/diff N      what turn N changed, as a diff      /undo [ID] [force]   undo the last rewind (or undo entry ID)
/clear  /compact  /model NAME   the session's own commands (sent to it as prompts: they run in turn)
/quit        leave (so do Ctrl-D, and Ctrl-C when no turn runs); the session goes on in the daemon
//TEXT       send a prompt that begins with '/'
a permission request is answered with the key in brackets ([a] allow once, [A] always, [r] reject, ...),
pressed on an empty line; typed into a line with text, those keys are text"""


class Commands(Completer):
    """Tab completion of ``/commands`` (the first word of the line) and of ``/mode``'s modes."""

    def get_completions(self, document: Document, complete_event: CompleteEvent) -> Iterator[Completion]:
        text = document.text_before_cursor
        if not text.startswith("/") or text.startswith("//") or "\n" in text:
            return
        name, space, rest = text[1:].partition(" ")
        if not space:
            for command in COMMANDS:
                if command.startswith(name):
                    yield Completion(command + " ", start_position=-len(name), display=f"/{command}")
        elif name == "mode" and " " not in rest:
            for mode in MODES:
                if mode.startswith(rest):
                    yield Completion(mode, start_position=-len(rest))
        elif name == "rewind":
            words = rest.split(" ")
            if len(words) == 2 and words[0].isdigit() and "files".startswith(words[1]):
                yield Completion("files", start_position=-len(words[1]))
            elif len(words) == 3 and words[0].isdigit() and words[1] == "files" and "force".startswith(words[2]):
                yield Completion("force", start_position=-len(words[2]))


def terminal_width() -> int:
    """The width of the terminal attach writes to, asked of the terminal itself: prompt_toolkit draws the prompt
    at that width, and a ``COLUMNS`` left in the environment (a shell's or a test runner's export) would make
    the lines above it wrap at another and never follow a resize. ``COLUMNS``, else 100, only off a terminal."""
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 100
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size((100, 40)).columns


def reflowed_rows(cells: list[int], width: int) -> int:
    """The rows a row of the terminal whose characters are ``cells`` columns wide each takes once the terminal
    re-wraps it to ``width`` columns (a wide character that does not fit moves to the next row, whole)."""
    rows, used = 1, 0
    for cell in cells:
        if used + cell > width and used > 0:
            rows, used = rows + 1, 0
        used += cell
    return rows


def row_cells(row: dict[int, Char]) -> list[int]:
    """The widths of the characters prompt_toolkit wrote on a row of its screen, up to its last one that is not a
    space (it writes a cell for every column before that one, a wide character's second column excepted)."""
    written = [x for x, char in row.items() if char.char.strip()]
    end = max((x + max(1, row[x].width) for x in written), default=0)
    cells, x = [], 0
    while x < end:
        char = row.get(x)
        width = max(1, char.width) if char is not None else 1
        cells.append(width)
        x += width
    return cells


class Screen:
    """The prompt line and the lines above it, for one attached session."""

    def __init__(self, link: Link, view: View, history: History) -> None:
        self.link = link
        self.view = view
        self.history = history
        self.code = 0
        self._out: list[Text] = []
        self._flushing = False
        self._last_ctrl_c = -AGAIN
        self._leaving = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._console = Console(file=sys.__stdout__, force_terminal=True, highlight=False, emoji=False)
        self._session: PromptSession[Any] | None = None
        self._asked: dict[str, float] = {}  # requestId -> when its question was first drawn in the prompt area
        # The prompt area as last drawn (None once it is erased): the terminal's width then, the widths of the
        # characters of each of its rows (as wide as the row was ever drawn since), the cursor's column and row.
        self._drawn: tuple[int, list[list[int]], tuple[int, int]] | None = None

    # ------------------------------------------------------------------ running

    async def run(self, banner: list[Text], cursor: int | None) -> int:
        self._loop = asyncio.get_running_loop()
        session: PromptSession[Any] = PromptSession(
            message=self._message, history=self.history, key_bindings=self._bindings(), style=STYLE,
            erase_when_done=True, complete_while_typing=False, enable_history_search=False,
            completer=Commands(), prompt_continuation="  ")
        session.default_buffer.accept_handler = self._accept
        session.app.before_render += self._unwrap
        session.app.after_render += self._drawn_rows
        self._session = session
        with patch_stdout(raw=True):  # anything else that writes to stdout goes above the prompt too
            self._print(banner)
            self.link.follow(self._post, cursor)
            ticking = asyncio.ensure_future(self._tick())
            try:
                await session.prompt_async(pre_run=self._pre_run, handle_sigint=True)
            except (KeyboardInterrupt, EOFError):
                pass
            finally:
                ticking.cancel()
        self._write([*self._out, *self.view.close_partial()])  # what was still to print
        self._out = []
        return self.code

    async def _tick(self) -> None:
        """Redraw the status line while a turn runs: its spinner and clock move."""
        while True:
            await asyncio.sleep(TICK)
            if self.view.running is not None:
                self._invalidate()

    def _pre_run(self) -> None:
        if self._leaving:  # the session ended before the prompt was up
            get_app().exit(result=self.code)

    def leave(self, code: int = 0) -> None:
        if self._leaving:
            return
        self._leaving = True
        self.code = code
        app = self._session.app if self._session is not None else None
        if app is not None and app.is_running and not app.is_done:
            app.exit(result=code)

    # ------------------------------------------------------------------ from the link

    def _post(self, item: tuple[Any, ...]) -> None:
        """Called in the link's thread: hand ``item`` to this loop."""
        if self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._handle, item)
        except RuntimeError:  # the loop is closed: we left
            pass

    def _handle(self, item: tuple[Any, ...]) -> None:
        view = self.view
        kind = item[0]
        lines: list[Text] = []
        if kind == "frame":
            lines = view.feed(item[1])
        elif kind == "restored":
            lines = view.restored(item[1])
        elif kind == "info":
            lines = view.note(item[1], item[2])
        elif kind == "connection":
            if item[1] == "reconnecting" and not view.reconnecting:
                view.reconnecting = True
                lines = view.note("⟲ reconnecting…", S_WARN)
            elif item[1] == "live" and view.reconnecting:
                view.reconnecting = False
                lines = view.note("⟲ reconnected", "green")
        elif kind == "snapshot":
            view.snapshot(item[1], item[2])
        elif kind == "refresh":
            view.refresh(item[1])
        elif kind == "unsent":
            buffer = self._session.default_buffer if self._session is not None else None
            if buffer is not None and not buffer.text:
                buffer.text = item[1]
                buffer.cursor_position = len(item[1])
                lines = view.note("the prompt was not sent: it is back in the input line (Enter sends it again)",
                                  S_WARN)
            else:
                lines = view.note("the prompt was not sent: Up brings it back from the history", S_WARN)
        elif kind == "tasks":
            lines = view.task_lines(item[1], item[2])
        elif kind == "subagent":
            lines = view.subagent(item[1])
        elif kind == "checkpoints":
            lines = view.checkpoint_lines(item[1])
        elif kind == "rewound":
            lines = view.rewound_lines(item[1], item[2], item[3])
        elif kind == "outside":
            lines = view.outside_lines(item[1], item[2])
        elif kind == "diff":
            lines = view.diff_view(item[1], item[2])
        elif kind == "permission_gone":
            view.permissions.pop(item[1], None)
        elif kind == "end":
            if item[2]:
                lines = view.note(item[2], "red" if item[1] else S_WARN)
            self.leave(item[1])
        self._print(lines)
        self._invalidate()

    # ------------------------------------------------------------------ output

    def _print(self, lines: list[Text]) -> None:
        if not lines:
            return
        self._out.extend(lines)
        if not self._flushing and self._loop is not None:
            self._flushing = True
            self._loop.call_soon(self._flush)  # lines that arrive together are printed together

    def _flush(self) -> None:
        """Print the waiting lines above the prompt: erase the prompt area, write them, let it redraw.

        Not ``run_in_terminal``: that puts the terminal back in cooked mode while it prints, so a key
        typed meanwhile is echoed by the tty, and a Ctrl-D becomes an end of file that ends all input.
        The terminal stays raw here (output processing is untouched by raw mode, so newlines still work).
        """
        self._flushing = False
        batch, self._out = self._out, []
        app = self._session.app if self._session is not None else None
        if app is not None and app.is_running and not app.is_done:
            self._unwrap(app)
            app.renderer.erase()
            self._drawn = None
            self._write(batch)
            app.invalidate()
        else:
            self._write(batch)

    def _write(self, batch: list[Text]) -> None:
        if not batch:
            return
        self._console.width = terminal_width()
        for line in batch:
            self._console.print(visible_text(line))  # the daemon's control characters shown, not obeyed
        self._console.file.flush()

    def _drawn_rows(self, app: Any) -> None:
        """After a render: keep the prompt area's rows as drawn, for :meth:`_unwrap`.

        A row is kept as wide as it was ever drawn since the area was last erased from its first row: a row
        redrawn shorter is cleared to its end, and a terminal (tmux) may still count the cleared cells as the
        row's when it re-wraps it."""
        screen = app.renderer.last_rendered_screen
        if screen is None:  # rendered as done: erased
            self._drawn = None
            return
        cursor = screen.get_cursor_position(app.layout.current_window)
        rows = [row_cells(screen.data_buffer.get(y, {})) for y in range(max(cursor.y + 1, screen.height))]
        # The width it was drawn for: its windows span it. (Not the terminal's width now: it may have changed
        # since the renderer read it, and then the rows drawn for the old width are re-wrapped.)
        placed = screen.visible_windows_to_write_positions.values()
        width = max((at.xpos + at.width for at in placed), default=0) or app.output.get_size().columns
        if self._drawn is not None and self._drawn[0] == width:
            kept = self._drawn[1]
            rows = [row + [1] * (sum(kept[y]) - sum(row)) if y < len(kept) and sum(kept[y]) > sum(row) else row
                    for y, row in enumerate(rows)]
        self._drawn = (width, rows, (cursor.x, cursor.y))

    def _unwrap(self, app: Any) -> None:
        """Before the prompt area is erased or redrawn: if the terminal's width changed since it was drawn, move
        the cursor up the rows the terminal's re-wrap added above it, and erase from there. prompt_toolkit then
        moves up the rows it drew, from where the cursor is: to the area's first row, as re-wrapped."""
        drawn = self._drawn
        width = app.output.get_size().columns
        if drawn is not None and drawn[0] != width and width > 0:
            self._drawn = None  # erased from its first row, below
            _, rows, (x, y) = drawn
            at_cursor = []  # the cursor's row up to the cursor: the rows it is moved down by
            for cell in rows[y]:
                if sum(at_cursor) + cell > x:
                    break
                at_cursor.append(cell)
            extra = sum(reflowed_rows(row, width) - 1 for row in [*rows[:y], at_cursor])
            if extra > 0:
                app.output.write_raw("\r")
                app.output.cursor_up(extra)
                app.output.erase_down()
        if app.renderer.last_rendered_screen is None:  # erased (or to be drawn afresh): from its first row
            self._drawn = None

    def _invalidate(self) -> None:
        if self._session is not None and self._session.app.is_running:
            self._session.app.invalidate()

    def _message(self) -> list[tuple[str, str]]:
        """The prompt area: streamed text not printed yet, the permission question, the status line, the ``›``."""
        view = self.view
        parts: list[tuple[str, str]] = []
        for kind, row in view.live():
            parts += [(f"class:{kind}", row), ("", "\n")]
        request = view.permission()
        if request is not None:
            self._asked.setdefault(request.request_id, time.monotonic())  # from now on it can be seen
        for line in (view.permission_parts(LINE_HAS_TEXT if self._line_has_text() else None), view.status_parts()):
            if line:
                parts += [*line, ("", "\n")]
        parts.append(("class:prompt", "› "))
        return [(style, visible(text)) for style, text in parts]

    # ------------------------------------------------------------------ keys

    def _bindings(self) -> KeyBindings:
        bindings = KeyBindings()

        @bindings.add("c-c")
        @bindings.add("<sigint>")
        def _interrupt(event: KeyPressEvent) -> None:
            self._ctrl_c(event.app.current_buffer)

        @Condition
        def empty() -> bool:
            return not get_app().current_buffer.text

        @bindings.add("c-d", filter=empty)
        def _eof(event: KeyPressEvent) -> None:
            self.leave(0)

        @bindings.add("escape", "enter")
        def _newline(event: KeyPressEvent) -> None:
            event.current_buffer.insert_text("\n")

        for key in PERMISSION_KEYS:
            bindings.add(key, filter=Condition(partial(self._answers, key)), eager=True)(partial(self._vote, key))
        return bindings

    def _line_has_text(self) -> bool:
        return self._session is not None and bool(self._session.default_buffer.text)

    def _answers(self, key: str) -> bool:
        """Whether ``key`` is a choice now: else it is typed into the line, as any other key."""
        request = self.view.permission()
        if request is None or request.choice(key) is None or self._line_has_text():
            return False
        asked = self._asked.get(request.request_id)
        return asked is not None and time.monotonic() - asked >= GRACE

    def _vote(self, key: str, event: KeyPressEvent) -> None:
        request = self.view.permission()
        choice = request.choice(key) if request is not None else None
        if request is None or choice is None:
            return
        request.voted = True
        self.link.request(self.link.vote, request.request_id, choice.option_id)
        self._invalidate()

    def _ctrl_c(self, buffer: Buffer) -> None:
        now = time.monotonic()
        again, self._last_ctrl_c = now - self._last_ctrl_c < AGAIN, now
        view = self.view
        if again:
            self.leave(0)
        elif view.running is not None:
            verb = "still cancelling" if view.cancelling else "cancelling"
            view.cancelling = True
            self.link.request(self.link.cancel)
            self._print(view.note(f"✗ {verb}… (Ctrl-C again within {AGAIN:.0f} s leaves)", S_WARN))
        elif buffer.text:
            buffer.reset()
        else:
            self.leave(0)
        self._invalidate()

    # ------------------------------------------------------------------ lines typed

    def _accept(self, buffer: Buffer) -> bool:
        """Enter: a prompt (or a /command); False clears the line (it is kept in the history)."""
        text = buffer.text
        if not text.strip():
            return False
        if text.startswith("/") and not text.startswith("//"):
            self._command(text.strip())
        else:
            self.link.request(self.link.send_prompt, text[1:] if text.startswith("//") else text)
        return False

    def _command(self, text: str) -> None:
        name, _, rest = text[1:].partition(" ")
        rest = rest.strip()
        link, view = self.link, self.view
        if name in ("help", "?"):
            self._print([Text(line, style=S_NOTE) for line in HELP.splitlines()])
        elif name == "mid":
            if rest:
                link.request(link.mid_turn, rest)
            else:
                self._print(view.note("usage: /mid TEXT", S_WARN))
        elif name == "pending":
            link.request(link.list_pending)
        elif name == "drop":
            if rest.isdigit():
                link.request(link.drop_nth, int(rest))
            elif rest:
                link.request(link.drop, rest)
            else:
                self._print(view.note("usage: /drop N (as /pending numbers them) or /drop PROMPT_ID", S_WARN))
        elif name == "cancel":
            link.request(link.cancel)
        elif name == "status":
            link.request(link.show_status)
        elif name == "tasks":
            link.request(link.list_tasks, rest or None)
        elif name == "kill":
            if rest:
                link.request(link.kill_task, rest)
            else:
                self._print(view.note("usage: /kill TASK_ID (/tasks lists them)", S_WARN))
        elif name == "mode":
            if rest in MODES:
                link.request(link.set_mode, rest)
            elif not rest:
                self._print(view.note(f"approval mode: {view.mode or '?'} (/mode {'|'.join(MODES)} sets it)"))
            else:
                self._print(view.note(f"unknown mode {rest!r}: /mode {'|'.join(MODES)}", S_WARN))
        elif name == "permissions":
            verb, _, arg = rest.partition(" ")
            if not rest:
                link.request(link.list_rules)
            elif verb in ("allow", "ask", "deny") and arg.strip():
                link.request(link.add_rule, verb, arg.strip())
            elif verb == "remove" and arg.strip().isdigit():
                link.request(link.remove_nth_rule, int(arg.strip()))
            else:
                self._print(view.note("usage: /permissions, /permissions allow|ask|deny RULE (as Bash(npm test:*)), "
                                      "/permissions remove N", S_WARN))
        elif name == "checkpoints":
            link.request(link.list_checkpoints)
        elif name == "rewind":
            words = rest.split()
            if words and words[0].isdigit() and words[1:] in ([], ["files"], ["files", "force"]):
                link.request(link.rewind, int(words[0]), len(words) > 1, len(words) > 2)
            else:
                self._print(view.note(REWIND_USAGE, S_WARN))
        elif name == "diff":
            if rest.isdigit():
                link.request(link.diff, int(rest))
            else:
                self._print(view.note("usage: /diff N (a turn, as /checkpoints numbers them)", S_WARN))
        elif name == "undo":
            words = rest.split()
            force = bool(words) and words[-1] == "force"
            words = words[:-1] if force else words
            if len(words) <= 1:
                link.request(link.undo, words[0] if words else None, force)
            else:
                self._print(view.note("usage: /undo [ID] [force] (/checkpoints lists the undo entries)", S_WARN))
        elif name in DAEMON_COMMANDS:
            if name == "model" and not rest:
                self._print(view.note(f"model: {view.model or '?'} (/model NAME sets it)"))
            else:
                link.request(link.send_prompt, f"/{name} {rest}".strip())
        elif name in ("quit", "exit", "leave"):
            self.leave(0)
        else:
            self._print(view.note(f"unknown command /{name}: /help lists them (//TEXT sends a prompt "
                                  "beginning with '/')", S_WARN))


__all__ = ["Screen", "reflowed_rows", "terminal_width"]
