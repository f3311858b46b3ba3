"""What ``trellis attach`` shows: a session's frames as lines, and the state its prompt area shows.

:class:`View` is pure (no terminal, no network): :meth:`View.feed` takes one
SSE frame and returns the finished lines it produced, as ``rich`` :class:`Text`,
and keeps what the prompt area draws live — the line of streamed text still
being written (:attr:`View.partial`), the running turn, the permission
question, the pending-prompt FIFO, the background tasks. The screen
(:mod:`.screen`) prints the lines above the prompt and redraws the area.

Streamed text is kept in the live area until its block ends, then printed
once: a finished block is never drawn twice. The model's text is Markdown,
rendered by ``rich``'s :class:`~rich.markdown.Markdown` block by block as each
block closes: a paragraph (its lines joined, as Markdown joins them — a single
newline is a soft break, and ``**bold**`` across it is bold) ends at a blank
line or where another block starts (a heading, a list item, a quote, a fence,
a table row); a list item and a quote are closed the same way (a nested item
printed under its parent item's text); a heading is a
block of its own line; a fenced code block is kept until its closing fence and
then printed syntax-highlighted; a table is printed once its last row is
followed by another line. Until then the block's lines are shown as they came
in the live area (provisionally, not rendered), any other event closes the
open block first (a tool call, the turn's end), and the line being written is
cut at a space past four rows of the live area (into its paragraph, joined
again when it is printed). Thoughts are not rendered (dimmed text), a line at
a time. The Markdown source is made visible first (control
characters shown), HTML in it is text, and links are written as ``text
(url)``, never as terminal hyperlinks: rendering writes no escape sequence the
model chose.

A permission request is shown whole (:func:`request_rows`): every line of its
title (and of the command it runs, when that differs), control characters made
visible, long lines wrapped, never cut; past :data:`PERMISSION_ROWS` rows a
line says how many lines and characters are not shown, and to reject. Folding
or cutting it let a harmless first line hide a ``curl … | sh`` second line
from the user asked to allow it. An edit's or a write's request carries the
change as an ACP diff (``toolCall.content``): it is shown under the question
as a unified diff, highlighted as ``/diff`` is (:func:`request_diff`), its
first :data:`PERMISSION_DIFF_LINES` lines; past them, or past a line cut at
:data:`DIFF_LINE_CHARS`, a line counts what is not shown and says to reject —
a long write must not be approved from its first lines. A restarted daemon's
restored history is not shown again, but for how the turn, question or tool
call still open here ended (:meth:`View.restored`).

Lines are :class:`Line`: rich text whose daemon-supplied characters are made
visible as it is built (:mod:`trellis.visible`: an ESC shows as ``␛``, a
lone CR as ``␍``), never parsed as markup (a ``[bold]`` in the model's text is
shown as it is). The screen makes every line visible again as it prints it
(:func:`visible_text`, a no-op on a :class:`Line`), for a line built elsewhere.
"""

from __future__ import annotations

import difflib
import json
import re
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs
from markdown_it import MarkdownIt
from rich.console import Console
from rich.markdown import Markdown
from rich.syntax import Syntax
from rich.text import Span, Text

from ..visible import visible

GUARD_SOURCE = "todo_stop_guard"
TERMINAL_TOOL_STATUS = frozenset({"completed", "failed"})
OUTPUT_LINES = 12  # lines of a tool's output shown (the rest is counted)
TASK_OUTPUT_LINES = 8  # lines of one background_task output event shown
PERMISSION_ROWS = 40  # rows of a permission request's text shown; past them the rest is counted, never dropped
PENDING_LISTED = 4  # queued prompts named on the FIFO line (the rest are counted)
KIND_KEYS = {"allow_once": "a", "allow_always": "A", "reject_once": "r", "reject_always": "R"}
PLAN_MARKS = {"pending": "○", "in_progress": "◐", "completed": "✓"}
TASK_OUTPUT_KEPT = 200  # lines of a background task's output kept for /tasks
LIVE_BLOCK_ROWS = 8  # rows of an open code block or table shown in the live area
SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
CODE_THEME = "monokai"
DIFF_LINES = 400  # lines of a /diff shown (the rest are counted)
PERMISSION_DIFF_LINES = 40  # lines of a permission request's diff shown; past them the rest is counted, and to reject
DIFF_LINE_CHARS = 400  # characters of one line of a permission request's diff shown (a one-line file is a diff too)
CHANGE_MARKS = {"added": "+", "deleted": "-", "modified": "~"}
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
MARKDOWN_SYNTAX = re.compile(r"[*_`#>|~\[\]!<&\\]|^\s*(?:[-+]|\d+[.)])(?:\s|$)|^\s*(?:-{3,}|={3,})\s*$")
ORDERED = re.compile(r"^(\s{0,3})(\d{1,9})([.)])(\s)")
HEADING = re.compile(r"^ {0,3}#{1,6}(?:\s|$)")
LIST_ITEM = re.compile(r"^\s*(?:[-+*]|\d{1,9}[.)])(?:\s|$)")
ITEM_PARTS = re.compile(r"^(\s*)([-+*]|\d{1,9}[.)])(\s*)")  # a list item's indent, marker and the space after it
QUOTE = re.compile(r"^ {0,3}>")
THEMATIC = re.compile(r"^ {0,3}(?:(?:-\s*){3,}|(?:\*\s*){3,}|(?:_\s*){3,}|(?:=\s*){3,})$")
PARAGRAPHS = frozenset({"paragraph", "item", "quote"})  # blocks whose lines Markdown joins (soft line breaks)
NOTIFICATION_SUBAGENT = re.compile(r"Subagent run '?(?P<name>[^' ]+)'? ended at turn (?P<turn>\d+) of (?P<max>\d+)")

# Styles (rich), by role.
S_THOUGHT = "dim italic"
S_USER = "bold"
S_TOOL = "cyan"
S_OK = "green"
S_BAD = "red"
S_WARN = "yellow"
S_GUARD = "magenta"
S_NOTE = "dim"
S_TASK = "blue"
S_SUBAGENT = "bright_blue"
S_PERMISSION = "bold yellow"


@attrs.frozen
class Choice:
    """One option of a permission request and the key that picks it."""

    key: str
    option_id: str
    name: str
    kind: str


@attrs.define
class Permission:
    request_id: str
    title: str
    choices: list[Choice]
    voted: bool = False  # a vote was sent; the resolution has not arrived yet
    # What the prompt area adds to the question's first line when the lines above show it in rows
    # (several lines, or a long one), and when not all of it is shown there.
    above: str = ""

    def choice(self, key: str) -> Choice | None:
        return next((c for c in self.choices if c.key == key), None)

    def keys_text(self) -> str:
        return "  ".join(f"[{c.key}] {c.name}" for c in self.choices)


def choices_of(options: Any) -> list[Choice]:
    """Keys for a request's options: a/A/r/R by kind, digits for anything else (or a second of a kind)."""
    out: list[Choice] = []
    used: set[str] = set()
    digit = 1
    for option in options if isinstance(options, list) else ():
        if not isinstance(option, dict) or not isinstance(option.get("optionId"), str):
            continue
        kind = str(option.get("kind") or "")
        key = KIND_KEYS.get(kind)
        if key is None or key in used:
            key = str(digit)
            digit += 1
        used.add(key)
        out.append(Choice(key, option["optionId"], str(option.get("name") or option["optionId"]), kind))
    return out


class Line(Text):
    """Rich text whose text is made visible as it is given, not left to rich: rich drops BEL, BS, VT, FF and CR
    without a trace (a CR that rewrote the line would not show) and passes ESC and C1 to the terminal."""

    def __init__(self, text: str = "", *args: Any, **kwargs: Any) -> None:
        super().__init__(visible(text), *args, **kwargs)

    def append(self, text: str | Text, style: Any = None) -> Text:
        return super().append(visible(text) if isinstance(text, str) else text, style)


def visible_text(line: Text) -> Text:
    """``line`` with its text made visible (:func:`trellis.visible.visible`), each style on the same characters."""
    plain = line.plain
    if visible(plain) == plain:
        return line
    cuts = sorted({0, len(plain), *(min(i, len(plain)) for span in line.spans for i in (span.start, span.end))})
    pieces, moved, at = [], {0: 0}, 0
    for start, end in zip(cuts, cuts[1:]):  # span by span: a C1 shown as \x9b is longer, so offsets move
        piece = visible(plain[start:end])
        pieces.append(piece)
        at += len(piece)
        moved[end] = at
    out = line.blank_copy("".join(pieces))
    out.spans = [Span(moved[min(s.start, len(plain))], moved[min(s.end, len(plain))], s.style) for s in line.spans]
    return out


class SafeMarkdown(Markdown):
    """rich's Markdown of text made visible, HTML parsed as text (rich drops HTML tags: ``<b>`` would vanish),
    links written out rather than made terminal hyperlinks (an OSC 8 sequence to a URL the model chose)."""

    def __init__(self, source: str) -> None:
        super().__init__(visible(source), code_theme=CODE_THEME, hyperlinks=False)
        self.parsed = MarkdownIt("commonmark", {"html": False}).enable("strikethrough").enable("table").parse(
            self.markup)


_RENDER = Console(width=100, force_terminal=True, color_system="truecolor", highlight=False, emoji=False,
                  markup=False)


def markdown_lines(source: str, width: int) -> list[Text]:
    """``source`` rendered as Markdown, as lines of rich text (styles kept, no escape code in their text)."""
    options = _RENDER.options.update(width=max(20, width))
    out: list[Text] = []
    for segments in _RENDER.render_lines(SafeMarkdown(source), options, pad=False):
        line = Text()
        for segment in segments:
            if not segment.control:
                line.append(visible(segment.text), segment.style)
        out.append(line)
    while out and not out[-1].plain.strip() and FENCE.match(source) is None:
        out.pop()
    if FENCE.match(source) is None:  # a code block's lines keep their background to the full width
        while out and not out[0].plain.strip():
            out.pop(0)
        for line in out:
            line.rstrip()
    return out


def _highlighted(lines: list[str], width: int) -> list[Text]:
    """Lines of a unified diff (made visible) highlighted by rich's ``diff`` lexer, as lines of rich text."""
    syntax = Syntax("\n".join(lines), "diff", theme=CODE_THEME, word_wrap=True, background_color="default")
    options = _RENDER.options.update(width=max(20, width))
    out: list[Text] = []
    for segments in _RENDER.render_lines(syntax, options, pad=False):
        line = Text()
        for segment in segments:
            if not segment.control:
                line.append(visible(segment.text), segment.style)
        line.rstrip()
        out.append(line)
    return out


def diff_lines(diff: str, width: int, limit: int = DIFF_LINES) -> list[Text]:
    """A unified diff highlighted by rich's ``diff`` lexer, as lines of rich text; at most ``limit`` lines of
    it (the rest counted). Its text is made visible first: a file's escape sequence is shown, never obeyed."""
    lines = visible(diff).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    shown = lines[:limit]
    out = _highlighted(shown, width)
    if len(lines) > len(shown):
        out.append(Line(f"… {len(lines) - len(shown)} more lines of the diff not shown "
                        "(GET /session/:id/checkpoints/:turn/diff has it whole)", style=S_NOTE))
    return out


@attrs.frozen
class RequestDiff:
    """The diff a permission request carries (an edit, a write), rendered: what is shown, and what is not."""

    lines: list[Text]
    hidden_lines: int  # lines of the diff not shown, or shown only in part
    total: int  # lines of the diff


def request_diff(item: dict[str, Any], width: int, limit: int = PERMISSION_DIFF_LINES) -> RequestDiff:
    """An ACP diff (``{path, oldText, newText}``, ``oldText`` null for a new file) as a unified diff, highlighted
    as ``/diff`` is: its first ``limit`` lines, each cut at :data:`DIFF_LINE_CHARS` (what is cut is counted)."""
    path = str(item.get("path") or "?")
    old = item.get("oldText")
    new = item.get("newText")
    before = str(old).splitlines() if old is not None else []
    after = str(new).splitlines() if new is not None else []
    body = list(difflib.unified_diff(before, after, "/dev/null" if old is None else path, path, lineterm=""))
    if not body:
        return RequestDiff([Line("  (no change to the file's text)", style=S_NOTE)], 0, 0)
    lines = [visible(line) for line in body]
    shown = lines[:limit]
    cut = sum(1 for line in shown if len(line) > DIFF_LINE_CHARS)
    shown = [line if len(line) <= DIFF_LINE_CHARS else line[:DIFF_LINE_CHARS] + "…" for line in shown]
    rendered = [Text("  ") + line for line in _highlighted(shown, width - 2)]
    return RequestDiff(rendered, len(lines) - len(shown) + cut, len(lines))


def short(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: max(1, width - 1)] + "…"


def wrap(line: str, width: int) -> list[str]:
    """``line`` in rows of at most ``width`` characters, at a space when one is in the second half; no
    character dropped (a row that starts with a space is the space that was cut at)."""
    width = max(1, width)
    rows: list[str] = []
    while len(line) > width:
        cut = line.rfind(" ", width // 2, width + 1)
        if cut <= 0:
            cut = width
        rows.append(line[:cut])
        line = line[cut:]
    rows.append(line)
    return rows


@attrs.frozen
class Rows:
    """A permission request's text as rows to print: what is shown, and what is not (counted)."""

    rows: list[str]
    lines: int  # lines of the text
    hidden_lines: int = 0  # lines not shown, or shown only in part
    hidden_chars: int = 0


def request_rows(text: str, width: int, limit: int = PERMISSION_ROWS) -> Rows:
    """Every line of ``text`` (made visible: a CR or ESC is shown, not obeyed), numbered when there are
    several, each wrapped at ``width`` (continued rows marked ``↪``), up to ``limit`` rows."""
    lines = visible(text).split("\n")
    number = len(str(len(lines))) if len(lines) > 1 else 0
    rows: list[str] = []
    for n, line in enumerate(lines, 1):
        head = f"{n:>{number}}│ " if number else ""
        pieces = wrap(line, width - (len(head) if number else 2))  # 2: a continued row's "↪ "
        for i, piece in enumerate(pieces):
            if len(rows) == limit:
                shown = sum(len(p) for p in pieces[:i])
                left = len(line) - shown + sum(len(later) + 1 for later in lines[n:])  # +1: each line break
                return Rows(rows, len(lines), len(lines) - n + 1, left)
            lead = head if i == 0 else (" " * (len(head) - 2) + "↪ " if number else "↪ ")
            rows.append(lead + piece)
    return Rows(rows, len(lines))


def text_of(content: Any) -> str:
    """The text of an ACP content block (``{"type": "text", "text"}``), else ''."""
    if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
        return content["text"]
    return ""


def tool_output(content: Any) -> list[str]:
    """The lines of a tool call's content (text blocks; a diff is named by its path)."""
    lines: list[str] = []
    for item in content if isinstance(content, list) else ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "content":
            lines.extend(text_of(item.get("content")).splitlines())
        elif item.get("type") == "diff":
            lines.append(f"(diff of {item.get('path')})")
    kept: list[str] = []
    for line in lines:  # no blank lines at the ends, none twice in a row
        if line.strip() or (kept and kept[-1].strip()):
            kept.append(line.rstrip())
    while kept and not kept[-1]:
        kept.pop()
    return kept


def input_summary(raw: Any, width: int) -> str:
    """A tool call's arguments on one line: a shell's command, else compact JSON."""
    if raw is None:
        return ""
    if isinstance(raw, dict) and isinstance(raw.get("command"), str):
        text = raw["command"]
        if raw.get("run_in_background"):
            text += "  (background)"
    else:
        try:
            text = json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
        except (TypeError, ValueError):
            text = str(raw)
    return short(text, width)


class View:
    """The state of one attached session, as the frames left it."""

    def __init__(self, width: Callable[[], int] = lambda: 100,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.width = width
        self.clock = clock
        self.block: list[str] = []  # the open block of the model's text (printed, rendered, when it ends)
        self.block_kind: str | None = None  # "code" | "table" | "paragraph" | "item" | "quote"
        self.fence = ""  # the open code block's fence
        # The list items the next item may be nested in, innermost last: (the column its text starts at in the
        # source, the column it is printed at). A nested item is printed under its parent's text.
        self.items: list[tuple[int, int]] = []
        self.item_indent = 0  # the column the open list item is printed at
        self.plan: list[tuple[str, str]] | None = None  # the plan as last shown: (content, status)
        self.task_log: dict[str, dict[str, Any]] = {}  # every background task seen: kind, label, state, output
        self.turn_started: float | None = None  # when the running turn began (as this client saw it)
        self.turn_tokens = 0  # tokens of the running turn's model calls so far
        self.last_turn: str = ""  # how the last turn ended, for the status line ("1,234 tokens, 3.2 s")
        self.model: str | None = None
        self.mode: str | None = None  # the approval mode
        self.context: tuple[int, int] | None = None  # a usage_update's (used, size) of the context window
        self.title: str | None = None  # the session's title, when the daemon gave it one
        self.closed: str | None = None  # the reason the session was closed (not by a daemon's shutdown)
        self.partial = ""  # the line of streamed text not yet ended
        self.partial_kind: str | None = None  # "message" | "thought"
        self.running: str | None = None  # the promptId of the running turn
        self.cancelling = False
        self.started: set[str] = set()
        self.ended: set[str] = set()
        self.pending: dict[str, str] = {}  # the FIFO: promptId -> text, in order
        self.permissions: dict[str, Permission] = {}
        # Questions a snapshot found no longer waiting (resolved while this client was away): how they ended
        # is still shown when the frame saying it arrives (a replay, a restarted daemon's restored history).
        self.dropped_permissions: dict[str, Permission] = {}
        self.ended_by = ""  # what ended the turn, when not the stream itself (a daemon restart), for its end line
        self.tools: dict[str, dict[str, Any]] = {}
        self.known_start: dict[str, float] = {}  # promptId -> when it began (its turn record), on self.clock
        self.tool_names: dict[str, str] = {}  # toolCallId -> the title a permission request gave it
        self.tasks: dict[str, dict[str, Any]] = {}  # live background tasks: taskId -> {"kind", "label"}
        self.subagents: dict[str, tuple[Any, ...]] = {}  # name -> the last (turn, maxTurns, state, endReason) shown
        self.reconnecting = False
        self.tokens = 0  # total tokens of the calls whose usage the daemon published
        self.prompt_texts: dict[str, str] = {}  # promptId -> its user message, as the stream showed it (/checkpoints)
        # A rewind or undo made from here is heard twice, by its answer and by its event, in either order:
        # the first prints the cut's headline, the second finds its key here. (turn, kept, undoId) for a
        # rewind, the new undoId for an undo; a few, since an event that is someone else's never meets its answer.
        self.cuts_heard: deque[tuple[str, Any]] = deque(maxlen=16)
        self.cuts_answered: deque[tuple[str, Any]] = deque(maxlen=16)

    # ------------------------------------------------------------------ state from outside the stream

    def snapshot(self, status: dict[str, Any], pending: list[dict[str, Any]] | None = None) -> None:
        """Align with ``GET /status`` (and ``/pending-prompts``): after attaching and after a reconnect."""
        current = status.get("currentPromptId") if status.get("state") == "running" else None
        if status.get("state") == "running" and current is None:
            current = "(running)"  # work without a prompt id: still cancellable
        if current != self.running:
            self.cancelling = False
            self.turn_started = self.clock() if current is not None else None
            self.turn_tokens = 0
        self.running = current
        if isinstance(status.get("approvalMode"), str):
            self.mode = status["approvalMode"]
        name = status.get("modelName") or status.get("model")
        if isinstance(name, str) and name:
            self.model = name
        if current is not None:
            self.started.add(current)
        if pending is not None:
            self.pending = {p["promptId"]: str(p.get("text") or "") for p in pending
                            if isinstance(p, dict) and isinstance(p.get("promptId"), str)
                            and p.get("state", "queued") == "queued"}
        live = status.get("pendingPermissions")
        if isinstance(live, list):
            for request_id in [r for r in self.permissions if r not in live]:
                self.dropped_permissions[request_id] = self.permissions.pop(request_id)  # its end may still come
            while len(self.dropped_permissions) > 32:
                del self.dropped_permissions[next(iter(self.dropped_permissions))]
        tasks = status.get("backgroundTasks")
        if isinstance(tasks, list):
            self.tasks = {t["taskId"]: {"kind": t.get("kind"), "label": t.get("label") or ""} for t in tasks
                          if isinstance(t, dict) and t.get("status") in ("running", "paused", "scheduled")
                          and isinstance(t.get("taskId"), str)}

    def join(self, turn: dict[str, Any] | None, frames: list[dict[str, Any]] | None = None,
             tools: dict[str, str] | None = None, tokens: bool = True) -> list[Text]:
        """What a client joining a running turn takes from before it joined (after :meth:`snapshot`): the
        turn's record (``GET /session/:id/turns/current``) says when it began and — with ``tokens``, when the
        stream is not replayed from the start to count them — its tokens so far; ``tools`` names the tool calls
        still running (their later updates carry only an id); ``frames`` are the permission requests waiting
        for a vote, shown (and answerable) as if they had just arrived. The lines to print."""
        if isinstance(turn, dict) and turn.get("promptId") == self.running and self.running is not None:
            started = turn.get("startedAt")
            if isinstance(started, (int, float)) and started > 0:
                self.turn_started = self.clock() - max(0.0, time.time() - started / 1000)
                self.known_start[self.running] = self.turn_started  # a replay of the history begins it again
            usage = turn.get("usage") if isinstance(turn.get("usage"), dict) else {}
            if tokens and isinstance(usage.get("totalTokens"), int):
                self.turn_tokens = usage["totalTokens"]
        for call_id, title in (tools or {}).items():
            self.tools.setdefault(str(call_id), {"title": title, "status": "in_progress", "shown": "in_progress"})
        out: list[Text] = []
        for frame in frames or []:
            out += self.feed(frame)
        return out

    def refresh(self, status: dict[str, Any]) -> None:
        """The fields of ``GET /status`` read again after a turn (or ``/mode``) that frames do not carry: the
        model and the approval mode (the turn's state is the frames' to say: this read may be older)."""
        if isinstance(status.get("approvalMode"), str):
            self.mode = status["approvalMode"]
        name = status.get("modelName") or status.get("model")
        if isinstance(name, str) and name:
            self.model = name

    def note(self, text: str, style: str = S_NOTE) -> list[Text]:
        """A line of the client's own (``reconnecting…``, an error), after the open line of text."""
        return [*self.close_partial(), Line(text, style=style)]

    def aside(self, text: str, style: str = S_NOTE) -> list[Text]:
        """A line printed above what is still streaming, which stays open (a queued prompt, a background task
        starting or ending): an open line, code block or table is neither cut nor printed early."""
        return [Line(text, style=style)]

    def close_partial(self) -> list[Text]:
        """End the open line of streamed text (and an open code block or table): it is printed now."""
        out: list[Text] = []
        if self.partial:
            if self.partial_kind == "thought":
                out.append(self._stream_line("thought", self.partial))
            else:
                out += self._message_line(self.partial)
        self.partial, self.partial_kind = "", None
        return out + self._close_block()

    def live(self) -> list[tuple[str, str]]:
        """The rows of streamed text not printed yet, as (kind, text): the open block's last rows (a paragraph's
        lines as they came: the joined rendering is printed when it ends), the open line."""
        rows: list[tuple[str, str]] = []
        if self.block:
            shown = self.block[-LIVE_BLOCK_ROWS:]
            if len(self.block) > len(shown):
                what = {"code": "code block", "table": "table"}.get(str(self.block_kind), "paragraph")
                rows.append(("status", f"… {len(self.block) - len(shown)} more lines, printed when the "
                                       f"{what} ends"))
            rows += [("message", row) for row in shown]
        if self.partial:
            rows.append((self.partial_kind or "message", self.partial))
        return rows

    # ------------------------------------------------------------------ the model's text as Markdown

    def _message_line(self, line: str) -> list[Text]:
        """A finished line of the model's text: kept in the open block (a paragraph, a list item, a quote, a code
        block, a table), or printed rendered with the block it closed."""
        if self.block_kind == "code":
            self.block.append(line)
            fence = FENCE.match(line)
            if (fence is not None and fence[1][0] == self.fence[0] and len(fence[1]) >= len(self.fence)
                    and not line[fence.end():].strip()):
                return self._close_block()
            return []
        out: list[Text] = []
        if self.block_kind == "table":
            if line.strip().startswith("|"):
                self.block.append(line)
                return []
            out = self._close_block()
        if not line.strip():  # a blank line ends a paragraph (and is one)
            return out + self._close_block() + [Line("")]
        if not LIST_ITEM.match(line) and not line.startswith(" "):
            self.items = []  # the list has ended (a heading, a fence, a table, a paragraph)
        fence = FENCE.match(line)
        if fence is not None:
            out += self._close_block()
            self.block_kind, self.fence, self.block = "code", fence[1], [line]
            return out
        if line.strip().startswith("|"):
            out += self._close_block()
            self.block_kind, self.block = "table", [line]
            return out
        if HEADING.match(line):  # a heading is a block of one line
            return out + self._close_block() + self._markdown_block([line])
        if LIST_ITEM.match(line):
            out += self._close_block()
            self.block_kind, self.block = "item", [line]
            self._nest(line)
            return out
        if QUOTE.match(line) and self.block_kind != "quote":
            out += self._close_block()
            self.block_kind, self.block = "quote", [line]
            return out
        if self.block_kind in PARAGRAPHS:  # the paragraph goes on (a soft line break: joined when rendered)
            self.block.append(line)
            return out
        if line.startswith("    ") or THEMATIC.match(line):
            return out + self._markdown_block([line])  # a line of its own
        self.block_kind, self.block = "paragraph", [line]
        return out

    def _nest(self, line: str) -> None:
        """A list item begins: the column it is printed at, under the text of the item it is nested in (rich
        renders one item at a time, so it cannot know: ``   - sub`` under ``1. First`` would be flush left)."""
        parts = ITEM_PARTS.match(line)
        assert parts is not None
        indent, marker, space = len(parts[1].expandtabs(4)), parts[2], len(parts[3].expandtabs(4))
        while self.items and self.items[-1][0] > indent:  # not nested in that one: a sibling of it, or above
            self.items.pop()
        self.item_indent = self.items[-1][1] if self.items and indent > 0 else 0
        if indent == 0:
            self.items = []
        shown = len(marker) + 1 if marker[0].isdigit() else 3  # "1. " is printed as it is; "- " as " • "
        self.items.append((indent + len(marker) + (space if 1 <= space <= 4 else 1), self.item_indent + shown))

    def _markdown_block(self, lines: list[str], width: int | None = None) -> list[Text]:
        """A closed block of the model's text (a paragraph, a list item, a quote, a heading) rendered: its lines
        joined as Markdown joins them (to ``width`` columns, the terminal's by default)."""
        if len(lines) == 1 and (lines[0].startswith("    ") or MARKDOWN_SYNTAX.search(lines[0]) is None):
            return [Line(lines[0])]  # nothing to render (an indented line is not made a code block)
        if not any(MARKDOWN_SYNTAX.search(line) or line.endswith("  ") for line in lines):
            return [Line(" ".join(line.strip() for line in lines))]  # plain prose: its soft line breaks joined
        source = "\n".join([ORDERED.sub(r"\1\2\\\3\4", lines[0]), *lines[1:]])  # "1. x" stays "1. x" (rich: "1 x")
        return markdown_lines(source, (width or self.width()) - 1) or [Line(line) for line in lines]

    def _close_block(self) -> list[Text]:
        block, kind = self.block, self.block_kind
        self.block, self.block_kind, self.fence = [], None, ""
        if not block:
            return []
        if kind == "item" and self.item_indent:
            indent, self.item_indent = self.item_indent, 0
            lines = self._markdown_block([block[0].lstrip(), *block[1:]], self.width() - indent)
            return [Text(" " * indent) + line for line in lines]
        if kind in PARAGRAPHS:
            return self._markdown_block(block)
        if kind == "table" and (len(block) < 2 or re.match(r"^\s*\|?[\s:|-]*-[\s:|-]*$", block[1]) is None):
            return [line for row in block for line in self._markdown_block([row])]  # not a table after all
        return markdown_lines("\n".join(block), self.width() - 1) or [Line(row) for row in block]

    def permission(self) -> Permission | None:
        """The permission request the keys answer: the oldest one not yet voted on."""
        return next((p for p in self.permissions.values() if not p.voted), None)

    def subagent(self, status: dict[str, Any]) -> list[Text]:
        """A subagent run's status (the MCP ``status`` tool's structured content): a line when it changed."""
        name = str(status.get("name") or "?")
        key = (status.get("turn"), status.get("maxTurns"), status.get("state"), status.get("endReason"))
        if self.subagents.get(name) == key:
            return []
        self.subagents[name] = key
        turn = f"turn {status.get('turn')} of {status.get('maxTurns')}"
        reason = status.get("endReason")
        if reason:
            line = f"⧉ subagent {name} ended at {turn}: {reason}"
            if reason == "goal_reached":
                line += " (self-reported)"
            elif reason == "need_help" and status.get("question"):
                line += f" — asks: {short(str(status['question']), 100)}"
            return self.note(line, S_SUBAGENT)
        return self.note(f"⧉ subagent {name}: {turn} ({status.get('state')})", S_SUBAGENT)

    def task_lines(self, listed: list[dict[str, Any]], only: str | None = None) -> list[Text]:
        """``/tasks``: one line per background task (``GET /status``'s ``backgroundTasks`` and those this
        client saw end), with the last lines of its output; ``only``: that task, with more of its output."""
        tasks: dict[str, dict[str, Any]] = {}
        for task in listed:
            if isinstance(task, dict) and isinstance(task.get("taskId"), str):
                tasks[task["taskId"]] = {"kind": task.get("kind"), "label": task.get("label") or "",
                                         "state": task.get("status"), "exit": task.get("exitCode")}
        for task_id, log in self.task_log.items():
            tasks.setdefault(task_id, {"kind": log["kind"], "label": log["label"], "state": log["state"],
                                       "exit": log.get("exit")})
        if only is not None:
            tasks = {k: v for k, v in tasks.items() if k == only}
            if not tasks:
                return self.note(f"no background task {only} (/tasks lists them)", S_WARN)
        if not tasks:
            return self.note("⚙ no background tasks")
        out = self.close_partial()
        tail = 20 if only is not None else 3
        for task_id, task in tasks.items():
            code = f" (exit {task['exit']})" if task.get("exit") is not None else ""
            label = short(str(task["label"]), max(20, self.width() - len(task_id) - 30))
            out.append(Line(f"⚙ {task_id} {task.get('kind')} {task.get('state')}{code}: {label}", style=S_TASK))
            output = (self.task_log.get(task_id) or {}).get("output") or []
            if len(output) > tail:
                out.append(Line(f"    … {len(output) - tail} earlier lines", style=S_NOTE))
            out += [Line(f"    {line}", style=S_NOTE) for line in output[-tail:]]
        if only is None and any(t.get("state") in ("running", "paused", "scheduled") for t in tasks.values()):
            out.append(Line("  /tasks ID shows more of a task's output; /kill ID stops it", style=S_NOTE))
        return out

    # ------------------------------------------------------------------ checkpoints (/checkpoints, /rewind, /undo)

    def checkpoint_lines(self, listed: dict[str, Any]) -> list[Text]:
        """``/checkpoints``: each turn that has a checkpoint, numbered as ``/rewind N`` counts them, with the
        files it changed; then the undo entries (newest last)."""
        turns = [c for c in listed.get("checkpoints") or [] if isinstance(c, dict)]
        undo = [u for u in listed.get("undo") or [] if isinstance(u, dict)]
        out = self.close_partial()
        if not turns:
            out.append(Line("⎌ no checkpoints yet (each user turn takes one as it starts)", style=S_NOTE))
        else:
            out.append(Line("⎌ checkpoints (turns from 0, as /rewind N counts them):", style=S_NOTE))
        width = self.width()
        for c in turns:
            said = self.prompt_texts.get(str(c.get("promptId")))
            files = [f for f in c.get("files") or [] if isinstance(f, dict)]
            head = f"  {c.get('turn')}. " + (f"“{short(said, max(20, width - 40))}” " if said else "")
            head += f"({c.get('promptId')}): " + (f"{len(files)} file(s) changed" if files else "no file changed")
            out.append(Line(head, style=S_NOTE))
            for f in files[:20]:
                mark = CHANGE_MARKS.get(str(f.get("change")), "?")
                kind = "" if f.get("kind") in (None, "file") else f" ({f.get('kind')})"
                out.append(Line(f"       {mark} {f.get('path')}{kind}", style=S_NOTE))
            if len(files) > 20:
                out.append(Line(f"       … {len(files) - 20} more (/diff {c.get('turn')} shows them)", style=S_NOTE))
            for path in (c.get("notCovered") or [])[:10]:
                out.append(Line(f"       ! not covered: {path}", style=S_WARN))
        if undo:
            out.append(Line("⎌ undo entries (/undo ID; /undo alone undoes the last rewind):", style=S_NOTE))
            for u in undo[-10:]:
                what = f"{u.get('kind')} to turn {u.get('turn')}" if u.get("turn") is not None else str(u.get("kind"))
                out.append(Line(f"  {u.get('undoId')}  before the {what}", style=S_NOTE))
        if turns:
            out.append(Line("  /diff N shows a turn's changes; /rewind N [files] goes back to the start of turn N",
                            style=S_NOTE))
        return out

    def rewound_lines(self, what: str, turn: int | None, answer: dict[str, Any]) -> list[Text]:
        """After a rewind (``what`` is ``rewind``) or an undo made from here: a note that the conversation was
        cut (or put back), unless its event said so already, and what happened to the files."""
        out = self.close_partial()
        kept = answer.get("historyLength")
        key = ("rewind", (turn, kept, answer.get("undoId"))) if what == "rewind" else ("undo", answer.get("undoId"))
        if key in self.cuts_heard:
            self.cuts_heard.remove(key)
        else:
            self.cuts_answered.append(key)
            out.append(self._cut_headline(what, turn, kept))
        if "undoId" not in answer:
            out.append(Line("  (files left as they are: /rewind N files restores them too)", style=S_NOTE))
            return out
        restored = [str(p) for p in answer.get("restored") or []]
        deleted = [str(p) for p in answer.get("deleted") or []]
        skipped = [s for s in answer.get("skipped") or [] if isinstance(s, dict)]
        if not restored and not deleted:
            out.append(Line("  files: nothing to change", style=S_NOTE))
        if restored:
            out.append(Line(f"  files restored: {', '.join(restored[:20])}"
                            + (f" (+{len(restored) - 20} more)" if len(restored) > 20 else ""), style=S_NOTE))
        if deleted:
            out.append(Line(f"  files deleted: {', '.join(deleted[:20])}"
                            + (f" (+{len(deleted) - 20} more)" if len(deleted) > 20 else ""), style=S_NOTE))
        for s in skipped[:10]:
            out.append(Line(f"  left alone: {s.get('path')} ({s.get('reason')})", style=S_WARN))
        out.append(Line(f"  /undo puts it back ({answer.get('undoId')})", style=S_NOTE))
        return out

    @staticmethod
    def _cut_headline(what: str, turn: Any, kept: Any) -> Text:
        if what == "rewind":
            return Line(f"✂ ── conversation rewound: turn {turn} and everything after it were dropped "
                        f"({kept} message(s) kept); what is shown above it is no longer in the session ──",
                        style="bold " + S_WARN)
        return Line(f"⎌ ── undone: the conversation is back as it was before that rewind ({kept} message(s)) ──",
                    style="bold " + S_WARN)

    def _cut_heard(self, what: str, key: tuple[str, Any], turn: Any, kept: Any) -> list[Text]:
        """A rewind's or an undo's event: its headline, unless this client's answer printed it already."""
        if key in self.cuts_answered:
            self.cuts_answered.remove(key)
            return []
        self.cuts_heard.append(key)
        return [*self.close_partial(), self._cut_headline(what, turn, kept)]

    def outside_lines(self, paths: list[str], retry: str) -> list[Text]:
        """A rewind or undo refused: files changed outside the session since its last checkpoint."""
        out = self.close_partial()
        out.append(Line(f"✗ refused: {len(paths)} file(s) it would change were changed outside the session since "
                        "its last checkpoint:", style=S_BAD))
        out += [Line(f"    {p}", style=S_WARN) for p in paths[:30]]
        if len(paths) > 30:
            out.append(Line(f"    … {len(paths) - 30} more", style=S_WARN))
        out.append(Line(f"  nothing was changed; `{retry}` overrides (an /undo can still bring them back)",
                        style=S_NOTE))
        return out

    def diff_view(self, turn: int, diff: str) -> list[Text]:
        """``/diff N``: the turn's unified diff, highlighted and bounded."""
        out = self.close_partial()
        if not diff.strip():
            out.append(Line(f"⎌ turn {turn} changed no file", style=S_NOTE))
            return out
        out.append(Line(f"⎌ what turn {turn} changed:", style=S_NOTE))
        return out + diff_lines(diff, self.width())

    # ------------------------------------------------------------------ the prompt area

    def status_parts(self) -> list[tuple[str, str]]:
        """The prompt area's status line, as prompt_toolkit (style, text) pairs; [] when there is nothing to say.

        It fits the terminal's width: when the whole line does not, it degrades by priority — the Ctrl-C hint
        goes, the separators narrow, then the model's name, the context, the approval mode and the last turn's
        figures go, the turn's words shorten, the plan and the turn's tokens go, then the background work and the
        pending prompts shorten — so the spinner and the turn's time, the pending prompts and the background work
        stay visible the longest (at 44 columns too), and what is left is cut only when nothing else fits."""
        pieces: dict[str, list[str]] = {}  # name -> its forms, longest first ("" = left out)
        glued: set[str] = {"tokens", "hint"}  # written onto the piece before them, without a separator
        if self.reconnecting:
            pieces["reconnecting"] = ["⟲ waiting for the daemon", "⟲ reconnecting"]
        if self.running is not None:
            now = self.clock()
            spin = SPINNER[int(now * 10) % len(SPINNER)]
            took = f" {now - self.turn_started:.0f} s" if self.turn_started is not None else ""
            if self.cancelling:
                pieces["turn"] = [f"{spin} cancelling…{took}", f"{spin} cancelling…{took}"]
            else:
                pieces["turn"] = [f"{spin} turn running{took}", f"{spin}{took}"]
                if self.turn_tokens:
                    pieces["tokens"] = [f" · {self.turn_tokens:,} tokens", f" · {self.turn_tokens:,} tok", ""]
                pieces["hint"] = [" (Ctrl-C cancels)", ""]
        elif self.last_turn:
            pieces["last"] = [self.last_turn, ""]
        if self.model:
            pieces["model"] = [self.model, ""]
        if self.mode and self.mode != "default":
            pieces["mode"] = [f"mode {self.mode}", ""]
        if self.context is not None:
            pieces["context"] = [f"context {self.context[0]:,}/{self.context[1]:,}", ""]
        if self.plan:
            done = sum(1 for _, st in self.plan if st == "completed")
            pieces["plan"] = [f"☰ {done}/{len(self.plan)}", ""]
        if self.pending:
            pieces["pending"] = [f"⋯ {len(self.pending)} pending", f"⋯ {len(self.pending)}"]
        if self.tasks:
            agents = sum(1 for t in self.tasks.values() if t.get("kind") == "agent")
            label = f"⚙ {len(self.tasks) - agents} background" if len(self.tasks) > agents else ""
            if agents:
                label = (label + ", " if label else "⚙ ") + f"{agents} subagent{'s' if agents > 1 else ''}"
            pieces["tasks"] = [label, f"⚙ {len(self.tasks)}"]
        if not pieces:
            return []
        order = ("reconnecting", "turn", "tokens", "hint", "last", "model", "mode", "context", "plan", "pending",
                 "tasks")
        # Each step takes one piece to its next (shorter) form; "sep" narrows the separators.
        steps = ("hint", "sep", "model", "context", "mode", "last", "turn", "tokens", "plan", "tokens", "tasks",
                 "pending", "reconnecting")
        form = dict.fromkeys(pieces, 0)
        separator = "  ·  "
        width = max(20, self.width() - 1)

        def line() -> str:
            out = ""
            for name in order:
                text = pieces[name][form[name]] if name in pieces else ""
                if text:
                    out += text if name in glued or not out else separator + text
            return out

        text = line()
        taken: list[str] = []
        for step in steps:
            if len(text) <= width:
                break
            if step == "sep":
                separator = " · "
            elif step in pieces and form[step] + 1 < len(pieces[step]):
                form[step] += 1
                taken.append(step)
            text = line()
        for step in reversed(taken):  # room left: what was given up last (the more important) comes back first
            form[step] -= 1
            if len(line()) > width:
                form[step] += 1
                break  # nothing less important comes back before it
        text = line()
        if len(text) > width:
            text = text[: width - 1] + "…"
        return [("class:status", text)] if text else []

    def permission_parts(self, instead: str | None = None) -> list[tuple[str, str]]:
        """The permission question and its keys (``instead`` of the keys: why they do not answer now)."""
        request = self.permission()
        if request is None:
            return []
        more = sum(1 for p in self.permissions.values() if not p.voted) - 1
        keys = ("class:keys", request.keys_text()) if instead is None else ("class:status", instead)
        title = short(request.title.split("\n", 1)[0], 60) + request.above
        parts = [("class:permission", f"? {title} — "), keys]
        if more > 0:
            parts.append(("class:status", f"  (+{more} more)"))
        return parts

    # ------------------------------------------------------------------ frames

    def feed(self, frame: dict[str, Any]) -> list[Text]:
        """One frame of the session's stream; the lines it finished."""
        kind = frame.get("type")
        data = frame.get("data") if isinstance(frame.get("data"), dict) else {}
        prompt_id = frame.get("promptId") if isinstance(frame.get("promptId"), str) else None
        handler = getattr(self, f"_on_{kind}", None) if isinstance(kind, str) else None
        if handler is None:
            return []
        return handler(data, prompt_id)

    def _begin(self, prompt_id: str | None) -> None:
        if prompt_id is None or prompt_id in self.ended:
            return
        self.started.add(prompt_id)
        if self.running != prompt_id:
            self.running = prompt_id
            self.cancelling = False
            self.turn_started = self.known_start.get(prompt_id, self.clock())
            self.turn_tokens = 0

    def _end(self, prompt_id: str | None) -> bool:
        """The turn of ``prompt_id`` ended; whether it had begun (a queued prompt removed had not)."""
        began = prompt_id in self.started or prompt_id == self.running or prompt_id is None
        if prompt_id is not None:
            self.ended.add(prompt_id)
            self.pending.pop(prompt_id, None)
        if self.running == prompt_id or prompt_id is None or self.running == "(running)":
            self.running = None
            self.cancelling = False
            self.turn_started = None
        return began

    def _on_session_update(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        update = data.get("update") if isinstance(data.get("update"), dict) else {}
        kind = update.get("sessionUpdate")
        meta = update.get("_meta") if isinstance(update.get("_meta"), dict) else {}
        self._begin(prompt_id)
        if kind == "agent_message_chunk":
            text = text_of(update.get("content"))
            if isinstance(meta.get("usage"), dict) and not text:
                total = meta["usage"].get("totalTokens")
                self.tokens += total if isinstance(total, int) else 0
                if prompt_id is not None and prompt_id == self.running:
                    self.turn_tokens += total if isinstance(total, int) else 0
                return []
            if meta.get("source") == GUARD_SOURCE:
                return self.note(self._guard_line(meta, text), S_GUARD)
            if meta.get("source") == "daemon":
                return self.note(f"! {text}", S_WARN)
            if meta.get("source") == "background_notification":  # an automatic turn's background result
                task = meta.get("backgroundTask") if isinstance(meta.get("backgroundTask"), dict) else {}
                return self._user(text, {"source": "notification", "taskId": task.get("taskId")})
            if meta.get("qwenDiscreteMessage"):
                return self.note(text, "")
            return self._stream("message", text)
        if kind == "agent_thought_chunk":
            return self._stream("thought", text_of(update.get("content")))
        if kind == "user_message_chunk":
            if prompt_id is not None and meta.get("source") in (None, "user", "prompt"):
                self.prompt_texts.setdefault(prompt_id, text_of(update.get("content")))
            return self._user(text_of(update.get("content")), meta)
        if kind in ("tool_call", "tool_call_update"):
            return self._tool(kind, update)
        if kind == "plan":
            return self._plan(update.get("entries"))
        if kind == "current_mode_update":
            if isinstance(update.get("currentModeId"), str):
                self.mode = update["currentModeId"]
            return self.note(f"approval mode: {update.get('currentModeId')}")
        if kind == "session_info_update":  # the session's title (the picker and the banner show it too)
            title = update.get("title") if isinstance(update.get("title"), str) else None
            if "title" not in update or title == self.title:
                return []
            self.title = title
            return self.aside(f"✎ titled “{short(title, 60)}”" if title else "✎ untitled")  # Line makes it visible
        if kind == "usage_update":  # ACP's context-window usage: {used, size}
            used, size = update.get("used"), update.get("size")
            if isinstance(used, int) and isinstance(size, int):
                self.context = (used, size)
            return []
        return []

    @staticmethod
    def _guard_line(meta: dict[str, Any], text: str) -> str:
        attempt, most, left = meta.get("attempt"), meta.get("maxAttempts"), meta.get("unfinishedCount")
        if "stopped after" in text:  # the exhaustion notice, after the last attempt
            return f"⟳ todo stop guard stopped after {attempt} of {most} attempts ({left} unfinished)"
        return f"⟳ todo stop guard, attempt {attempt} of {most} ({left} unfinished)"

    def _stream(self, kind: str, text: str) -> list[Text]:
        out: list[Text] = []
        if self.partial_kind not in (None, kind):
            out += self.close_partial()
        if not text:
            return out
        self.partial_kind = kind
        *lines, self.partial = (self.partial + text).split("\n")
        for line in lines:
            line = line.removesuffix("\r")  # CR LF ends a line too
            out += self._message_line(line) if kind == "message" else [self._stream_line(kind, line)]
        limit = max(20, self.width() - 1)
        if kind == "message":  # a Markdown line is rendered whole: cut only one too long for the live area
            limit = 10**9 if self.block_kind == "code" else limit * 4
        while len(self.partial) > limit:  # wrap at a space: a wrapped line is finished, print it
            cut = self.partial.rfind(" ", 0, limit + 1)
            if cut <= 0:
                cut = limit
            piece = self.partial[:cut].rstrip()
            out += self._message_line(piece) if kind == "message" else [self._stream_line(kind, piece)]
            self.partial = self.partial[cut:].lstrip(" ")
        return out

    @staticmethod
    def _stream_line(kind: str | None, line: str) -> Text:
        return Line(line, style=S_THOUGHT if kind == "thought" else "")

    def _user(self, text: str, meta: dict[str, Any]) -> list[Text]:
        out = self.close_partial()
        source = meta.get("source")
        if source in (None, "user", "prompt"):
            lines = text.splitlines() or [""]
            out.append(Line("› " + lines[0], style=S_USER))
            out += [Line("  " + line, style=S_USER) for line in lines[1:]]
            return out
        body = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("<")]
        first = body[0] if body else ""
        found = NOTIFICATION_SUBAGENT.search(text)
        if found is not None:  # the end of a subagent run, as the model is told it
            self.subagents.pop(found["name"], None)
        head = f"↳ {source}" + (f" ({meta['taskId']})" if meta.get("taskId") else "") + ": "
        out.append(Line(head + short(first, max(20, self.width() - len(head) - 1)), style=S_NOTE))
        return out

    def _tool(self, kind: str, update: dict[str, Any]) -> list[Text]:
        call_id = str(update.get("toolCallId"))
        tool = self.tools.setdefault(call_id, {"title": None, "status": None, "shown": None})
        first = tool["title"] is None and tool["status"] is None
        if update.get("title"):
            tool["title"] = update["title"]
        elif not tool["title"] and call_id in self.tool_names:
            tool["title"] = self.tool_names[call_id]
        if update.get("status"):
            tool["status"] = update["status"]
        status = tool["status"] or "pending"
        out = self.close_partial()
        lines = tool_output(update.get("content"))
        if first or (status in TERMINAL_TOOL_STATUS and tool["shown"] != status):
            tool["shown"] = status
            style = S_OK if status == "completed" else S_BAD if status == "failed" else S_TOOL
            head = Line("▸ ", style=S_TOOL)
            head.append(str(tool["title"] or "tool"), style="bold")
            head.append(f" ({status})", style=style)
            if first:
                summary = input_summary(update.get("rawInput"), max(20, self.width() - len(head) - 4))
                if summary:
                    head.append("  " + summary, style=S_NOTE)
            out.append(head)
        elif not lines:
            return out
        for line in lines[:OUTPUT_LINES]:
            out.append(Line("    " + line))
        if len(lines) > OUTPUT_LINES:
            out.append(Line(f"    … {len(lines) - OUTPUT_LINES} more lines", style=S_NOTE))
        if status in TERMINAL_TOOL_STATUS:
            self.tools.pop(call_id, None)
            self.tool_names.pop(call_id, None)
        return out

    def _plan(self, entries: Any) -> list[Text]:
        """The plan: whole the first time (or when its todos change), then one line naming what changed."""
        out = self.close_partial()
        items = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        now = [(str(e.get("content") or ""), str(e.get("status"))) for e in items]
        before, self.plan = self.plan, now
        if before is not None and [c for c, _ in before] == [c for c, _ in now]:
            changed = [(c, st) for (c, st), (_, old) in zip(now, before) if st != old]
            if not changed:
                return out
            done = sum(1 for _, st in now if st == "completed")
            width = max(20, (self.width() - 24) // len(changed) - 3)
            listed = " · ".join(f"{PLAN_MARKS.get(st, '·')} {short(c, width)}" for c, st in changed)
            out.append(Line(f"☰ plan ({done}/{len(now)} done): {listed}", style=S_TOOL))
            return out
        out.append(Line(f"☰ plan ({sum(1 for e in items if e.get('status') == 'completed')}/{len(items)} done)",
                        style=S_TOOL))
        for entry in items:
            mark = PLAN_MARKS.get(str(entry.get("status")), "·")
            style = S_NOTE if entry.get("status") == "completed" else ""
            out.append(Line(f"  {mark} {short(str(entry.get('content') or ''), max(20, self.width() - 6))}",
                            style=style))
        return out

    def _on_permission_request(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        request_id = data.get("requestId")
        if not isinstance(request_id, str):
            return []
        tool_call = data.get("toolCall") if isinstance(data.get("toolCall"), dict) else {}
        title = str(tool_call.get("title") or "a tool call")
        kind = tool_call.get("kind")
        request = Permission(request_id, title, choices_of(data.get("options")))
        self.permissions[request_id] = request
        if tool_call.get("toolCallId") is not None and tool_call.get("title"):
            # A call this client may know only by id (its tool_call was before the join, or left the replay's
            # ring): the request names it.
            self.tool_names[str(tool_call["toolCallId"])] = str(tool_call["title"])
            call = self.tools.get(str(tool_call["toolCallId"]))
            if call is not None and not call["title"]:
                call["title"] = tool_call["title"]
        out = self.close_partial()
        head = Line("? permission: ", style=S_PERMISSION)
        head.append(f"{kind}: " if kind else "", style=S_WARN)
        width = max(20, self.width() - 24)
        raw = tool_call.get("rawInput")
        command = raw.get("command") if isinstance(raw, dict) else None
        texts = [("", title)]
        if isinstance(command, str) and command != title:  # e.g. a hook's "ask", titled by the tool's name
            texts.append(("command", command))
        above = ""
        for label, text in texts:
            rows = request_rows(text, max(20, self.width() - 4))
            if not label and rows.lines == 1 and len(rows.rows) == 1 and len(rows.rows[0]) <= width:
                head.append(rows.rows[0], style="bold")  # one short line: on the question's own line
                out.append(head)
                continue
            if not label:
                head.append(f"({rows.lines} line{'s' if rows.lines != 1 else ''}, "
                            f"{len(visible(text)):,} characters):", style=S_WARN)
                out.append(head)
            else:
                out.append(Line(f"  {label} ({rows.lines} line{'s' if rows.lines != 1 else ''}):", style=S_WARN))
            above = above or " (whole request above)"
            out += [Line("  " + row, style="bold") for row in rows.rows]
            if rows.hidden_lines:
                above = " (not all shown above: reject unless you have inspected it)"
                out.append(Line(f"  ⚠ not shown: {rows.hidden_lines} line{'s' if rows.hidden_lines != 1 else ''} "
                                f"({rows.hidden_chars:,} characters) of this request. Reject it unless you have "
                                "inspected all of it.", style=S_BAD))
        diffs = [item for item in tool_call.get("content") or [] if isinstance(item, dict)
                 and item.get("type") == "diff"] if isinstance(tool_call.get("content"), list) else []
        for item in diffs:  # what an edit or a write would change: its diff, bounded, before the choices
            shown = request_diff(item, max(20, self.width() - 1))
            out.append(Line(f"  the change ({shown.total} line{'s' if shown.total != 1 else ''} of diff):",
                            style=S_WARN))
            out += shown.lines
            if shown.hidden_lines:
                above = " (not all shown above: reject unless you have inspected it)"
                out.append(Line(f"  ⚠ not shown: {shown.hidden_lines} line{'s' if shown.hidden_lines != 1 else ''} "
                                "of this diff (or shown in part). Reject it unless you have inspected all of it.",
                                style=S_BAD))
            else:
                above = above or " (whole change above)"
        if not diffs and kind == "edit":  # the daemon leaves the diff out of an event when the texts are too big
            above = " (its diff is not shown: reject unless you have inspected it)"
            out.append(Line("  ⚠ this request carries no diff (the change is too large to send): reject it unless "
                            "you have inspected the change.", style=S_BAD))
        request.above = above
        out.append(Line("  " + request.keys_text(), style=S_WARN))
        return out

    def _on_permission_resolved(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        request = self.permissions.pop(str(data.get("requestId")), None) \
            or self.dropped_permissions.pop(str(data.get("requestId")), None)
        if request is None:
            return []
        outcome = data.get("outcome") if isinstance(data.get("outcome"), dict) else {}
        if outcome.get("outcome") != "selected":
            return self.note("  → cancelled (no vote)", S_WARN)
        choice = next((c for c in request.choices if c.option_id == outcome.get("optionId")), None)
        name = choice.name if choice else str(outcome.get("optionId"))
        allowed = choice is not None and choice.kind.startswith("allow")
        return self.note(f"  → {name}", S_OK if allowed else S_BAD)

    def _pending_line(self) -> list[Text]:
        if not self.pending:
            return self.aside("⋯ no prompts pending")
        shown = list(self.pending.values())[:PENDING_LISTED]
        width = max(12, (self.width() - 30) // len(shown) - 7)
        listed = "  ".join(f"{i}. “{short(t, width)}”" for i, t in enumerate(shown, 1))
        more = f"  … {len(self.pending) - len(shown)} more (/pending lists them)" if len(self.pending) > len(shown) \
            else ""
        return self.aside(f"⋯ {len(self.pending)} pending: {listed}{more}")

    def _on_pending_prompt_added(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        if prompt_id is None or prompt_id in self.ended or prompt_id in self.started:
            return []
        self.pending[prompt_id] = str(data.get("text") or "")
        return self._pending_line()

    def _on_pending_prompt_started(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        had = self.pending.pop(prompt_id, None) if prompt_id else None
        self._begin(prompt_id)
        return self._pending_line() if had is not None else []

    def _on_pending_prompt_completed(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        if prompt_id is not None and self.pending.pop(prompt_id, None) is not None:
            return self._pending_line()
        return []

    def _on_mid_turn_message_injected(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        messages = data.get("messages") if isinstance(data.get("messages"), list) else []
        taken = [i for i in data.get("messageIds") or () if isinstance(i, str) and i in self.pending]
        for message_id in taken:  # a waiting mid-turn message is listed pending (under its id) until taken
            self.pending.pop(message_id)
        out = self.close_partial()
        for message in messages:
            out.append(Line(f"↳ mid-turn message taken: {short(str(message), max(20, self.width() - 30))}",
                            style=S_NOTE))
        return out + (self._pending_line() if taken else [])

    def _turn_figures(self, usage: dict[str, Any]) -> str:
        """The ending turn's tokens (the summary's, else those counted live) and time, for the status line."""
        total = usage.get("totalTokens") if isinstance(usage.get("totalTokens"), int) else self.turn_tokens
        figures = [f"{total:,} tokens"] if total else []
        if self.turn_started is not None:
            figures.append(f"{self.clock() - self.turn_started:.1f} s")
        return f"last turn {', '.join(figures)}" if figures else ""

    def _on_turn_complete(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        prompt_id = prompt_id or data.get("promptId")
        out = self.close_partial()
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        figures = self._turn_figures(usage)
        if not self._end(prompt_id):
            return out  # a queued prompt removed before it ran: the FIFO line said so
        self.last_turn = figures
        reason = data.get("stopReason")
        out += self._unfinished_tools(str(reason))
        tokens = f" · {usage['totalTokens']:,} tokens" if isinstance(usage.get("totalTokens"), int) else ""
        hook = f" (hook: {data['hookStopReason']})" if data.get("hookStopReason") else ""
        if reason == "end_turn":
            out.append(Line(f"✓ turn complete{hook}{tokens}", style=S_NOTE))
        elif reason == "cancelled":
            out.append(Line(f"✗ turn cancelled{self.ended_by}{tokens}", style=S_WARN))
        elif reason == "max_tokens":
            limit = data.get("tokenLimit") if isinstance(data.get("tokenLimit"), dict) else {}
            out.append(Line(f"✗ turn stopped: max_tokens — {limit.get('message') or 'out of tokens'}{tokens}",
                            style=S_WARN))
        elif reason == "max_turn_requests":
            out.append(Line(f"✗ turn stopped by loop protection (max_turn_requests){tokens}", style=S_WARN))
        else:
            out.append(Line(f"✗ turn stopped: {reason}{hook}{tokens}", style=S_WARN))
        return out

    def _on_turn_error(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        out = self.close_partial()
        self.last_turn = self._turn_figures(data.get("usage") if isinstance(data.get("usage"), dict) else {})
        if self._end(prompt_id or data.get("promptId")):
            out += self._unfinished_tools("failed")
        out.append(Line(f"✗ turn failed: {data.get('message')} [{data.get('code')}]", style=S_BAD))
        return out

    def _unfinished_tools(self, reason: str) -> list[Text]:
        """The tool calls still shown running when their turn ended (a cancel, a daemon restart can end a turn
        without a last update of its call): each gets its last line, so none stays "in_progress"."""
        out: list[Text] = []
        for call_id, tool in list(self.tools.items()):
            if tool["shown"] is None:
                continue  # never shown: nothing to end
            head = Line("▸ ", style=S_TOOL)
            head.append(str(tool["title"] or self.tool_names.get(call_id) or "tool"), style="bold")
            head.append(f" (not finished: turn {reason})", style=S_WARN)
            out.append(head)
        self.tools.clear()
        self.tool_names.clear()
        return out

    def restored(self, frame: dict[str, Any]) -> list[Text]:
        """A frame of a session's history as a restarted daemon restored it (before what it published since):
        shown only when it ends what this client still shows open — the running turn, a question, a tool call.
        The old daemon ended them as it stopped, often after this client's connection had dropped; the rest of
        that history was shown already."""
        kind = frame.get("type")
        data = frame.get("data") if isinstance(frame.get("data"), dict) else {}
        if kind == "permission_resolved":
            request_id = str(data.get("requestId"))
            if request_id not in self.permissions and request_id not in self.dropped_permissions:
                return []
        elif kind in ("turn_complete", "turn_error"):
            prompt_id = frame.get("promptId") or data.get("promptId")
            if prompt_id not in self.started or prompt_id in self.ended:
                return []
        elif kind == "session_update":
            update = data.get("update") if isinstance(data.get("update"), dict) else {}
            ends = update.get("sessionUpdate") == "tool_call_update" and update.get("status") in TERMINAL_TOOL_STATUS
            if not ends or str(update.get("toolCallId")) not in self.tools:
                return []
            return self._tool("tool_call_update", update)  # not feed(): it would take the turn as running again
        else:
            return []
        self.ended_by = " (daemon restarted)"
        try:
            return self.feed(frame)
        finally:
            self.ended_by = ""

    def _on_background_task(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        task_id = str(data.get("taskId"))
        status = data.get("status")
        kind = str(data.get("kind") or "task")
        label = str(data.get("label") or "")
        out: list[Text] = []  # printed above the model's open line or block, which goes on
        width = max(20, self.width() - len(task_id) - 24)
        if kind == "agent":
            name, _, brief = label.partition(":")
            who = f"⧉ subagent {name.strip()}"
            style = S_SUBAGENT
        else:
            who, brief, style = f"⚙ {kind} {task_id}", label, S_TASK
        log = self.task_log.setdefault(task_id, {"kind": kind, "label": label, "state": "running", "output": [],
                                                  "lines": 0})
        if status == "started":
            self.tasks[task_id] = {"kind": kind, "label": label}
            extra = f" ({task_id})" if kind == "agent" else ""
            out.append(Line(f"{who} started{extra}: {short(brief.strip(), width)}", style=style))
        elif status == "output":  # kept for /tasks, not printed among the model's text
            lines = str(data.get("text") or "").splitlines()
            if data.get("truncated"):
                lines.append(f"… {data.get('truncated')} more characters")
            log["output"] = (log["output"] + lines)[-TASK_OUTPUT_KEPT:]
            log["lines"] += len(lines)
            return out
        elif status == "finished":
            self.tasks.pop(task_id, None)
            state = data.get("state") or "finished"
            log["state"] = state
            code = f" (exit {data['exitCode']})" if data.get("exitCode") is not None else ""
            log["exit"] = data.get("exitCode")
            ended = f"finished ({state})" if kind == "agent" else f"{state}{code}"
            if log["lines"]:
                ended += f", {log['lines']} line{'s' if log['lines'] != 1 else ''} of output (/tasks {task_id})"
            out.append(Line(f"{who} {ended}", style=S_OK if state == "completed" else style))
        elif status == "notification_dropped":
            out.append(Line(f"⚙ the notification of {task_id} was dropped ({data.get('reason')})", style=S_WARN))
        return out

    def _on_hook_result(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        event = data.get("hookEvent")
        out = self.close_partial()
        for message in data.get("systemMessages") or []:
            out.append(Line(f"⚑ {event} hook: {message}", style=S_WARN))
        for failure in data.get("failures") or []:
            out.append(Line(f"⚑ {event} hook failed: {failure}", style=S_BAD))
        if data.get("stopReason"):
            out.append(Line(f"⚑ {event} hook stopped the turn: {data['stopReason']}", style=S_WARN))
        return out

    def _on_followup_suggestion(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        suggestions = [str(s) for s in data.get("suggestions") or []]
        return self.note("suggestions: " + " · ".join(suggestions)) if suggestions else []

    def _on_history_truncated(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        return self.note(f"(earlier history not replayed: {data.get('truncatedEvents')} events)")

    def _on_client_evicted(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        return self.note("(this client fell behind the stream; catching up)", S_WARN)

    def _on_conversation_rewound(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        turn, kept = data.get("turn"), data.get("historyLength")
        return self._cut_heard("rewind", ("rewind", (turn, kept, data.get("undoId"))), turn, kept)

    def _on_rewind_undone(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        return self._cut_heard("undo", ("undo", data.get("newUndoId")), None, data.get("historyLength"))

    def _on_session_closed(self, data: dict[str, Any], prompt_id: str | None) -> list[Text]:
        self._end(None)
        if data.get("reason") == "daemon_shutdown":  # a restart, most likely: the link waits for the daemon
            return self.note("the daemon is shutting down; the session is restored when it is back", S_WARN)
        self.closed = str(data.get("reason"))
        return self.note(f"session closed ({data.get('reason')})", S_WARN)


__all__ = ["Choice", "Line", "Permission", "RequestDiff", "Rows", "View", "choices_of", "diff_lines", "request_diff",
           "request_rows", "visible_text", "wrap"]
