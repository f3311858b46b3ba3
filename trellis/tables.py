"""``trellis sessions``, ``status ID``, ``cancel ID``, ``delete ID...``: the daemon's sessions as tables.

    trellis sessions [--json]     GET /session: the live sessions and those restorable from the state directory,
                                  with their state, queued prompts and title
    trellis status ID [--json]    GET /session/:id/status: one live session's work, guard, usage and context
    trellis cancel ID [--json]    POST /session/:id/cancel: cancel the session's running work
    trellis delete ID... [--json] POST /sessions/delete: delete sessions for good (a live one is closed first)

On a terminal the tables are drawn with ``rich``; otherwise (a pipe, a file)
they are plain text, columns aligned with two spaces and nothing cut short,
for ``grep`` and ``awk``. Every cell is daemon-supplied text (a session's
directory is any file name): its control characters are made visible
(:mod:`trellis.visible`), and ``rich`` is given it as text, never as markup.
``--json`` prints the daemon's own JSON instead
(``GET /session``'s ``{"sessions": [...]}``, the status object). The cancel
route answers 204 with no body, so ``trellis cancel --json`` prints what the
command saw: ``{"sessionId", "cancelled", "promptId"}``, ``cancelled`` being
whether the session was running work when the cancel was sent (read from its
status just before, so a turn that ended in between counts as cancelled).

Exit codes: 0 done (``delete``: every session named was deleted); 1 ``delete`` left some (not found, or
refused: each is named on stderr); 2 the daemon could not be reached, refused the token
(401; the message says where the token was looked for) or refused the request
(404 for a session that is not live, ...).
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from typing import Any, TextIO
from urllib.parse import quote

import orjson
import trio

from . import connect
from .prompt import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Refused,
    add_common,
    call,
    open_client,
    say,
)
from .visible import json_visible, visible

EXIT_SOME_LEFT = 1  # trellis delete: some of the sessions named were not deleted


def add_parser(sub: Any) -> None:  # what argparse's add_subparsers() returns (its class is private)
    sessions = sub.add_parser("sessions", help="the daemon's sessions, live and restorable",
                              description="List the daemon's sessions: the live ones and those restorable from "
                                          "its state directory (GET /session).")
    sessions.add_argument("--json", action="store_true", help="print the daemon's JSON")
    add_common(sessions)
    sessions.set_defaults(run=run, table="sessions")

    status = sub.add_parser("status", help="one session's status",
                            description="One live session's status (GET /session/:id/status).")
    status.add_argument("session", metavar="ID", help="the session")
    status.add_argument("--json", action="store_true", help="print the daemon's JSON")
    add_common(status)
    status.set_defaults(run=run, table="status")

    cancel = sub.add_parser("cancel", help="cancel the session's running turn",
                            description="Cancel the session's running work (POST /session/:id/cancel); its turn "
                                        "ends with stop reason 'cancelled'. Queued prompts stay queued.")
    cancel.add_argument("session", metavar="ID", help="the session")
    cancel.add_argument("--json", action="store_true",
                        help='print {"sessionId", "cancelled", "promptId"} (the route itself answers no JSON)')
    add_common(cancel)
    cancel.set_defaults(run=run, table="cancel")

    delete = sub.add_parser("delete", help="delete sessions for good",
                            description="Delete sessions for good (POST /sessions/delete): a live one is closed "
                                        "first (its running turn and queued prompts end cancelled), then its "
                                        "conversation, journal and checkpoints are deleted. `trellis sessions` "
                                        "lists the ids.")
    delete.add_argument("sessions", metavar="ID", nargs="+", help="a session to delete")
    delete.add_argument("--json", action="store_true", help="print the daemon's JSON")
    add_common(delete)
    delete.set_defaults(run=run, table="delete")


def run(args: argparse.Namespace) -> int:
    try:
        return trio.run(_main, args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


async def _main(args: argparse.Namespace) -> int:
    target = connect.target(args)
    out = sys.stdout
    try:
        async with open_client(target) as client:
            if args.table == "sessions":
                data = (await call(client, target, args, "GET", "/session")).json()
                if args.json:
                    print_json(data, out)
                else:
                    sessions_table(data.get("sessions") or [], out)
            elif args.table == "status":
                sid = quote(args.session, safe="")
                data = (await call(client, target, args, "GET", f"/session/{sid}/status")).json()
                if args.json:
                    print_json(data, out)
                else:
                    status_table(data, out)
            elif args.table == "delete":
                return delete_sessions((await call(client, target, args, "POST", "/sessions/delete",
                                                   json={"sessionIds": args.sessions})).json(), args, out)
            else:
                sid = quote(args.session, safe="")
                status = (await call(client, target, args, "GET", f"/session/{sid}/status")).json()
                await call(client, target, args, "POST", f"/session/{sid}/cancel", expect=(200, 204))
                running = status.get("state") == "running"
                result = {"sessionId": args.session, "cancelled": running,
                          "promptId": status.get("currentPromptId") if running else None}
                if args.json:
                    print_json(result, out)
                elif running:
                    what = f"turn {result['promptId']}" if result["promptId"] else status.get("activeWorkState")
                    out.write(visible(f"cancelled {what} of session {args.session}") + "\n")
                else:
                    out.write(visible(f"session {args.session} was idle: nothing to cancel") + "\n")
    except Refused as exc:
        say(exc.message)
        if exc.error_code == "session_not_found":
            say("(only live sessions have a status; `trellis sessions` lists them, and `trellis prompt --session "
                "ID` brings a restorable one back)")
        return exc.code
    return EXIT_OK


def delete_sessions(answer: dict[str, Any], args: argparse.Namespace, out: TextIO) -> int:
    """What ``POST /sessions/delete`` answered: each deleted session on stdout, the others on stderr."""
    if args.json:
        print_json(answer, out)
    else:
        for sid in answer.get("removed") or []:
            out.write(visible(f"deleted session {sid}") + "\n")
    for sid in answer.get("notFound") or []:
        say(f"no session {sid}: `trellis sessions` lists them")
    for error in answer.get("errors") or []:
        say(f"session {error.get('sessionId')} not deleted: {error.get('message')}")
    return EXIT_OK if not answer.get("notFound") and not answer.get("errors") else EXIT_SOME_LEFT


# --------------------------------------------------------------------------- rendering


def print_json(data: Any, out: TextIO) -> None:
    out.write(json_visible(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()) + "\n")


def when(ms: Any) -> str:
    """A daemon timestamp (ms since the epoch) in local time."""
    if not isinstance(ms, (int, float)) or ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def sessions_table(sessions: list[dict[str, Any]], out: TextIO) -> None:
    """One row a session: its state (``running``/``idle`` when live, else ``restorable``), its queued prompts
    (``queuedCount``: the running one is not queued), its title last (free text, so ``awk`` finds the rest)."""
    headers = ["SESSION", "STATE", "QUEUED", "UPDATED", "CWD", "TITLE"]
    rows = []
    for s in sessions:
        state = (s.get("state") or "live") if s.get("live") else ("restorable" if s.get("restorable") else "-")
        queued: Any = s.get("queuedCount") or 0
        if s.get("midTurnQueued"):
            queued = f"{queued} (+{s['midTurnQueued']} mid-turn)"
        rows.append([cell(s.get("sessionId")), state, cell(queued), when(s.get("updatedAt") or s.get("createdAt")),
                     cell(s.get("cwd")), cell(s.get("title"))])
    if not rows:
        out.write("no sessions\n")
        return
    table(headers, rows, out)


def status_table(status: dict[str, Any], out: TextIO) -> None:
    """One session's status."""
    work = status.get("activeWorkState") or status.get("state")
    state = cell(status.get("state"))
    if status.get("state") == "running":
        state += f" ({work}" + (f" {status['currentPromptId']}" if status.get("currentPromptId") else "") + ")"
    guard = status.get("todoStopGuard") or {}
    usage = status.get("usage") or {}
    context = status.get("context") or {}
    tasks = status.get("backgroundTasks") or []
    rows = [
        ["session", cell(status.get("sessionId"))],
        ["title", cell(status.get("title"))],
        ["cwd", cell(status.get("workspaceCwd"))],
        ["state", state],
        ["queued prompts", cell(status.get("queuedCount"))],  # the running prompt is not queued
        ["approval mode", cell(status.get("approvalMode"))],
        ["model", cell(status.get("modelName") or status.get("model"))],
        ["sandbox", cell(status.get("sandbox"))],
        ["subscribers", cell(status.get("subscribers"))],
        ["history", f"{cell(status.get('historyLength'))} messages"],
        ["last event", f"{cell(status.get('lastEventId'))} (epoch {cell(status.get('eventEpoch'))})"],
        ["background tasks", str(len(tasks)) + (f" ({status['automaticQueue']} automatic queued)"
                                                 if status.get("automaticQueue") else "")],
        ["pending permissions", ", ".join(status.get("pendingPermissions") or []) or "-"],
        ["todo stop guard", _guard(guard)],
        ["usage", (f"{usage.get('calls', 0)} calls, {usage.get('inputTokens', 0)} in / "
                   f"{usage.get('outputTokens', 0)} out tokens")],
        ["context", _context(context)],
    ]
    table(["FIELD", "VALUE"], rows, out, header=False)


def _context(context: dict[str, Any]) -> str:
    """The context window and the last request's size, each said only when the daemon knows it."""
    window, used = context.get("window"), context.get("estimatedTokens")
    parts = [f"window {window:,} tokens" + (f" ({context['windowSource']})" if context.get("windowSource") else "")
             if isinstance(window, int) else "window not known"]
    parts.append(f"last request ~{used:,} tokens" if isinstance(used, int) else "no model call yet")
    return ", ".join(parts)


def _guard(guard: dict[str, Any]) -> str:
    if not guard.get("enabled"):
        return "off"
    parts = ["armed" if guard.get("armed") else "idle",
             f"attempt {guard.get('attempts', 0)} of {guard.get('maxAttempts', '?')}",
             f"{guard.get('unfinishedCount', 0)} unfinished"]
    parts += [flag for flag in ("suspended", "retryPaused", "awaitingQueuedPrompt", "exhaustionReported")
              if guard.get(flag)]
    return ", ".join(parts)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO, *, header: bool = True) -> None:
    """``rows`` under ``headers``: a rich table on a terminal, aligned plain text elsewhere."""
    rows = [[visible(v) for v in row] for row in rows]
    if _isatty(out):
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        grid = Table(box=None, show_header=header, header_style="bold", pad_edge=False)
        for i, name in enumerate(headers):
            grid.add_column(name, style="bold" if (not header and i == 0) else None, overflow="fold")
        for row in rows:
            grid.add_row(*map(Text, row))  # Text: a '[bold]' in a cell is shown, not taken as markup
        Console(file=out).print(grid)
        return
    lines = [list(headers), *map(list, rows)] if header else [list(r) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    out.writelines("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() + "\n" for line in lines)


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (ValueError, AttributeError):
        return False


__all__ = ["add_parser", "run", "sessions_table", "status_table", "table"]
