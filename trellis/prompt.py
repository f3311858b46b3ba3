"""``trellis prompt``: send one prompt, stream the answer to stdout, exit by the turn's stop reason.

    trellis prompt "Plan a picnic"                 # a new session, the answer on stdout
    echo "Plan a picnic" | trellis prompt -        # the prompt read from stdin
    trellis prompt --session ID "and now?"         # a turn on an existing (or restorable) session
    trellis prompt --json "..." | jq .type         # every event of the turn, one JSON object a line

Scriptable like ``claude -p``: stdout carries the answer only (the model's
``agent_message_chunk`` text, as it arrives, ended with a newline; the model's
separate messages — split by a tool call, a notice, another model call — parted
by a blank line, so that the answer stays valid Markdown); everything
else goes to stderr — a line per tool call (``▸ shell … completed``), the
Todo Stop Guard's continuations (``[todo stop guard, attempt 1 of 2]``), the
daemon's notices, thoughts with ``--thoughts``, and with ``--verbose`` the
session and prompt ids. ``--json`` prints instead every frame of this prompt's
turn as the daemon sent it, one JSON object a line, the last one its
``turn_complete`` or ``turn_error``; nothing else goes to stdout, and stderr
keeps only errors. Whatever came from the daemon (the answer, tool titles,
error messages) is printed with its control characters made visible
(:mod:`trellis.visible`: an escape sequence of a hostile model's shows as
``␛[2J``, the terminal does nothing with it); ``--json`` keeps the data exact.

The prompt is posted first, then the session's events are read from the 202's
``lastEventId`` (the daemon replays what came in between, so nothing is
missed); only frames of this prompt (``promptId``) count, so other clients'
turns on the same session are ignored — also while this prompt waits in the
session's queue behind them. A dropped connection is resumed where it broke
(:mod:`trellis.stream`), a few times, then given up (exit 1).

Sessions. Without ``--session`` a new session is created in the current
directory (``--cwd`` for another; ``--cwd ''`` for the daemon's
``--workspace``); with ``--session ID`` that session is used, restored from the
daemon's state directory if it is not live. A session this command started
(created or restored) is closed again when the turn ends, unless ``--keep``: it
stays restorable, so ``--session ID`` continues it later. Its id is on every
``--json`` frame (``data.sessionId``) and, with ``--verbose``, on stderr. A tool
call that asks for permission waits for a vote from another client (``trellis
attach``) unless ``--approval-mode`` set the session's mode first.

Ctrl-C while the turn runs cancels this prompt (``DELETE
/session/:id/pending-prompts/:promptId``, which reaches it queued or running
and never another client's turn) and waits for its end (exit 4); a second
Ctrl-C stops waiting at once (exit 130).

Exit codes:

====  =====================================================================
code  meaning
====  =====================================================================
0     the turn ended ``end_turn`` (hooks that stopped it included)
1     the turn failed: ``turn_error`` (a model or internal error, or
      ``daemon_restarted``), or its end was never seen (the session closed
      or left the daemon, the connection could not be resumed)
2     nothing ran: a usage error, no daemon at the URL, a refused token
      (401), or the daemon refused the request (unknown session, bad
      ``--cwd``, 503 ``prompt_queue_full``, ``too_many_sessions``,
      ``shutting_down`` …)
3     ``max_tokens``: the answer or the context window ran out of tokens
4     ``cancelled``: Ctrl-C, ``trellis cancel``, another client, or the
      session closed under the turn
5     ``max_turn_requests``: loop protection ended the turn
6     any other stop reason (``refusal``; none the daemon emits today)
130   a second Ctrl-C (or one before the prompt was admitted)
====  =====================================================================
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Iterable
from contextlib import aclosing
from typing import Any, TextIO
from urllib.parse import quote

import httpx
import orjson
import trio

from . import connect, stream
from .connect import Target, is_loopback
from .visible import json_visible, visible

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_NOT_RUN = 2
EXIT_MAX_TOKENS = 3
EXIT_CANCELLED = 4
EXIT_MAX_TURN_REQUESTS = 5
EXIT_OTHER_STOP = 6
EXIT_INTERRUPTED = 130

STOP_EXIT = {  # turn_complete.stopReason -> exit code (anything else: EXIT_OTHER_STOP)
    "end_turn": EXIT_OK,
    "max_tokens": EXIT_MAX_TOKENS,
    "cancelled": EXIT_CANCELLED,
    "max_turn_requests": EXIT_MAX_TURN_REQUESTS,
    "refusal": EXIT_OTHER_STOP,
}
MAX_RECONNECTS = 8  # consecutive failed attempts (about 25 s of waiting) before the turn is given up
GUARD_SOURCE = "todo_stop_guard"
TERMINAL_TOOL_STATUS = frozenset({"completed", "failed"})
APPROVAL_MODES = ("default", "auto-edit", "yolo", "plan")

EPILOG = """\
exit codes: 0 end_turn; 1 turn_error, or the turn's end was never seen; 2 nothing ran (usage, no daemon,
401, request refused); 3 max_tokens; 4 cancelled; 5 max_turn_requests; 6 another stop reason;
130 a second Ctrl-C."""


# --------------------------------------------------------------------------- talking to the daemon
# (shared with trellis.tables)


class Refused(Exception):
    """The command cannot go on: ``message`` for stderr, ``code`` to exit with."""

    def __init__(self, message: str, code: int = EXIT_NOT_RUN, error_code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.error_code = error_code  # the daemon's error code, when it refused


def open_client(target: Target) -> httpx.AsyncClient:
    """An httpx client for ``target``; proxy variables apply to a remote daemon only, never to loopback."""
    return httpx.AsyncClient(headers=target.headers, timeout=httpx.Timeout(30.0, connect=5.0),
                             trust_env=not is_loopback(target.url))


def unreachable(url: str, exc: BaseException) -> Refused:
    why = str(exc) or type(exc).__name__
    return Refused(f"no daemon answers at {url} ({why}): start one with `trellis serve`, or point --url "
                   "or $TRELLIS_URL at yours")


def token_source(args: argparse.Namespace, environ: Any = None) -> str:
    """Where :func:`trellis.connect.target` took the token from (or looked for it), for a 401."""
    env = os.environ if environ is None else environ
    if args.token:
        return "the token came from --token"
    if env.get("TRELLIS_TOKEN"):
        return "the token came from $TRELLIS_TOKEN"
    paths = [os.path.abspath(os.path.join(d, "token")) for d in connect.state_dirs(args, env)]
    found = next((path for path in paths if os.path.isfile(path)), None)
    where = f"read from {found}" if found is not None else f"no token: not found at {' nor '.join(paths)}"
    skipped = "" if getattr(args, "state_dir", None) or env.get("TRELLIS_STATE_DIR") else "".join(
        f"; passed over {why}" for why in connect.skipped_state_dirs())
    return (f"{where}{skipped} (a client looks for --token, then $TRELLIS_TOKEN, then <state-dir>/token, the "
            f"state directory being --state-dir or $TRELLIS_STATE_DIR, else the nearest .trellis here or above "
            f"that is yours, then {connect.user_state_dir(env)}: point --state-dir at the daemon's)")


def refusal(response: httpx.Response, args: argparse.Namespace) -> Refused:
    """A daemon's error answer as one :class:`Refused` (the 401 says where the token was looked for)."""
    message = stream.error_message(response.status_code, response.text)
    if response.status_code == 401:
        message += (f"\n{token_source(args)}\nafter `trellis token rotate`, the daemon takes the new token only once "
                    "it restarts")
    return Refused(message, error_code=_code(response))


async def call(client: httpx.AsyncClient, target: Target, args: argparse.Namespace, method: str, path: str, *,
               json: Any = None, expect: Iterable[int] = (200,), refuse: bool = True,
               timeout: float | None = None) -> httpx.Response:
    """One request to the daemon; :class:`Refused` when it cannot be reached or (``refuse``) answers otherwise."""
    url = f"{target.url}{path}"
    kwargs: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    try:
        response = await client.request(method, url, json=json, **kwargs)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise unreachable(target.url, exc) from None
    except httpx.TimeoutException:
        raise Refused(f"the daemon at {target.url} did not answer {method} {path} in time") from None
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        raise Refused(f"not a daemon URL: {target.url!r} ({exc})") from None
    except httpx.TransportError as exc:
        raise Refused(f"lost the daemon at {target.url} during {method} {path}: {exc or type(exc).__name__}") from None
    if refuse and response.status_code not in tuple(expect):
        raise refusal(response, args)
    return response


def say(message: str, file: TextIO | None = None) -> None:
    """One ``trellis: ...`` message on stderr (each line of it prefixed; the daemon's words in it made visible)."""
    out = sys.stderr if file is None else file
    for line in visible(message).splitlines() or [""]:
        print(f"trellis: {line}", file=out, flush=True)


def add_common(parser: argparse.ArgumentParser) -> None:
    """``--version`` and the daemon's ``--url``/``--token``/``--state-dir``, on every client subcommand."""
    # Lazily: trellis.cli imports this module while it builds its parser.
    from .cli import VERSION

    parser.add_argument("--version", action="version", version=VERSION)
    connect.add_arguments(parser)


# --------------------------------------------------------------------------- the subcommand


def add_parser(sub: Any) -> None:  # what argparse's add_subparsers() returns (its class is private)
    parser = sub.add_parser(
        "prompt", help="send one prompt, stream the answer, exit by its stop reason",
        description="Send one prompt to a session, stream the answer to stdout as it arrives, and exit when the "
                    "turn ends, with an exit code by its stop reason. Scriptable like `claude -p`.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("text", nargs="+", metavar="TEXT",
                        help="the prompt (several words are joined by spaces); '-' reads it from stdin")
    parser.add_argument("--session", metavar="ID", default=None,
                        help="use this session (restored from the daemon's state directory if it is not live) "
                             "instead of creating one")
    parser.add_argument("--cwd", metavar="DIR", default=None,
                        help="the working directory of a new session (default: this directory; '' for the "
                             "daemon's --workspace)")
    parser.add_argument("--keep", action="store_true",
                        help="leave a session this command started open on the daemon (default: close it; it "
                             "stays restorable with --session)")
    parser.add_argument("--approval-mode", choices=APPROVAL_MODES, default=None,
                        help="set the session's approval mode first (a tool that asks for permission otherwise "
                             "waits for a vote from another client)")
    parser.add_argument("--json", action="store_true",
                        help="print every event of the turn as one JSON line on stdout, nothing else")
    parser.add_argument("--thoughts", action="store_true", help="show the model's thoughts on stderr")
    parser.add_argument("-v", "--verbose", action="store_true", help="say the session and prompt ids on stderr")
    add_common(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.text == ["-"]:
        try:
            text = sys.stdin.read()
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED
        except UnicodeDecodeError as exc:
            say(f"stdin is not text in this locale's encoding: {exc}")
            return EXIT_NOT_RUN
    else:
        text = " ".join(args.text)
    if not text.strip():
        say("the prompt is empty")
        return EXIT_NOT_RUN
    try:
        return trio.run(PromptRun(args, text).main)
    except KeyboardInterrupt:  # outside the signal watcher's reach (before or after it)
        return EXIT_INTERRUPTED


class PromptRun:
    """One ``trellis prompt``: its session, its prompt, and what the turn showed so far."""

    def __init__(self, args: argparse.Namespace, text: str, *, stdout: TextIO | None = None,
                 stderr: TextIO | None = None) -> None:
        self.args = args
        self.text = text
        self.out = stdout or sys.stdout
        self.err = stderr or sys.stderr
        self.target = connect.target(args)
        self.client: httpx.AsyncClient | None = None
        self.session_id: str | None = args.session
        self.started_session = False  # created or restored here: closed at the end unless --keep
        self.prompt_id: str | None = None
        self.phase = "starting"  # starting -> posting -> following
        self.cancel_wanted = False
        self.cancel_sent = False
        self.midline = False  # stdout's last character is not a newline
        self.held_cr = False  # the answer's last chunk ended with a CR: shown once the next says if an LF follows
        self.thinking = False  # stderr is in the middle of a thought (--thoughts)
        self.stdout_gone = False
        self.tail = ""  # the last two characters of the answer written to stdout
        # Something other than the answer's text came (a model call's end, a tool call, a notice): the next text
        # is another message, parted from the one before by a blank line, as Markdown needs.
        self.new_message = False
        self.tools: dict[str, dict[str, Any]] = {}  # toolCallId -> {"title", "status", "shown"}
        self.permissions: set[str] = set()
        self.nursery: trio.Nursery | None = None
        self.color = self.err.isatty() and not os.environ.get("NO_COLOR")

    # ------------------------------------------------------------------ the flow

    async def main(self) -> int:
        code = EXIT_INTERRUPTED
        async with open_client(self.target) as client:
            self.client = client
            with trio.open_signal_receiver(signal.SIGINT) as interrupts:
                async with trio.open_nursery() as nursery:
                    self.nursery = nursery
                    nursery.start_soon(self.watch_interrupts, interrupts)
                    try:
                        code = await self.prompt()
                    except Refused as exc:
                        say(exc.message, self.err)
                        code = exc.code
                    nursery.cancel_scope.cancel()
            if code != EXIT_INTERRUPTED or self.prompt_id is None:  # else the turn may still run: leave it
                await self.close_started_session()
        self.finish_stdout()
        return code

    async def prompt(self) -> int:
        client, target, args = self.client, self.target, self.args
        assert client is not None
        if self.session_id is None:
            body: dict[str, Any] = {}
            cwd = os.getcwd() if args.cwd is None else args.cwd
            if cwd:
                body["cwd"] = os.path.abspath(cwd)
            created = (await call(client, target, args, "POST", "/session", json=body, timeout=60)).json()
            self.session_id = created["sessionId"]
            self.started_session = True
        sid = quote(self.session_id, safe="")
        if args.approval_mode is not None:
            await self.post_or_restore("POST", f"/session/{sid}/approval-mode", {"mode": args.approval_mode})
        body = {"prompt": [{"type": "text", "text": self.text}]}
        self.phase = "posting"
        admitted = (await self.post_or_restore("POST", f"/session/{sid}/prompt", body, expect=(202,))).json()
        self.prompt_id = admitted["promptId"]
        self.phase = "following"
        if args.verbose:
            say(f"session {self.session_id}, prompt {self.prompt_id}", self.err)
        if self.cancel_wanted:  # Ctrl-C while the prompt was being posted
            self.start_cancel()
        return await self.follow(admitted.get("lastEventId"))

    async def post_or_restore(self, method: str, path: str, body: Any,
                              expect: Iterable[int] = (200,)) -> httpx.Response:
        """A request on the session; a session that is not live is restored from disk once and asked again."""
        assert self.client is not None and self.session_id is not None
        response = await call(self.client, self.target, self.args, method, path, json=body, expect=expect,
                              refuse=False)
        if response.status_code == 404 and _code(response) == "session_not_found" and not self.started_session:
            sid = quote(self.session_id, safe="")
            loaded = await call(self.client, self.target, self.args, "POST", f"/session/{sid}/load", json={},
                                refuse=False, timeout=60)
            if loaded.status_code == 404:
                raise Refused(f"no session {self.session_id!r} on the daemon at {self.target.url}, live or "
                              "restorable (trellis sessions lists them)")
            if loaded.status_code != 200:
                raise refusal(loaded, self.args)
            self.started_session = True
            if self.args.verbose:
                say(f"restored session {self.session_id}", self.err)
            response = await call(self.client, self.target, self.args, method, path, json=body, expect=expect,
                                  refuse=False)
        if response.status_code not in tuple(expect):
            raise refusal(response, self.args)
        return response

    async def follow(self, last_event_id: int | None) -> int:
        """Read the session's events until this prompt's turn ends; its exit code."""
        assert self.client is not None and self.session_id is not None
        while True:
            evicted = False
            events = stream.events(self.client, self.target, self.session_id, last_event_id=last_event_id,
                                   on_reconnect=self.reconnecting)
            try:
                async with aclosing(events) as frames:
                    async for frame in frames:
                        if isinstance(frame.get("id"), int):
                            last_event_id = frame["id"]
                        if frame.get("type") == "client_evicted":
                            evicted = True  # too slow: the stream ends; read on from the last id
                            continue
                        code = self.show(frame)
                        if code is not None:
                            return code
                        if frame.get("type") == "session_closed":
                            reason = (frame.get("data") or {}).get("reason", "closed")
                            raise Refused(f"the session closed ({reason}) before the turn ended", EXIT_ERROR)
            except stream.SessionGone as exc:
                raise Refused(f"the session is gone from the daemon before the turn ended: {exc}", EXIT_ERROR) from None
            if not evicted:
                raise Refused("the event stream ended before the turn did", EXIT_ERROR)

    def reconnecting(self, attempt: int, error: BaseException | None) -> None:
        if attempt > MAX_RECONNECTS:
            raise Refused(f"lost the daemon at {self.target.url} ({error}); gave up on the turn after "
                          f"{MAX_RECONNECTS} attempts to reconnect", EXIT_ERROR)
        if not self.args.json or attempt == 1:
            say(f"the event stream broke ({error or 'closed'}); reconnecting", self.err)

    # ------------------------------------------------------------------ Ctrl-C

    async def watch_interrupts(self, interrupts: Any) -> None:
        async for _ in interrupts:
            if self.phase == "starting" or self.cancel_wanted:
                if self.cancel_wanted:
                    say("stopped waiting; the daemon may still be ending the turn", self.err)
                assert self.nursery is not None
                self.nursery.cancel_scope.cancel()  # main() exits 130
                return
            self.cancel_wanted = True
            say("cancelling the turn (Ctrl-C again to stop waiting)", self.err)
            if self.phase == "following":
                self.start_cancel()

    def start_cancel(self) -> None:
        if not self.cancel_sent and self.nursery is not None:
            self.cancel_sent = True
            self.nursery.start_soon(self.send_cancel)

    async def send_cancel(self) -> None:
        assert self.client is not None and self.session_id is not None and self.prompt_id is not None
        path = f"/session/{quote(self.session_id, safe='')}/pending-prompts/{quote(self.prompt_id, safe='')}"
        try:
            await call(self.client, self.target, self.args, "DELETE", path)
        except Refused as exc:
            say(f"the cancel did not go through: {exc.message}", self.err)

    async def close_started_session(self) -> None:
        """Close the session this command created or restored (``--keep``: leave it)."""
        if not self.started_session or self.args.keep or self.session_id is None or self.client is None:
            return
        try:
            with trio.move_on_after(30):
                await call(self.client, self.target, self.args, "DELETE", f"/session/{quote(self.session_id, safe='')}",
                           expect=(204, 404), timeout=30)
        except Refused as exc:
            say(f"the session was left open: {exc.message}", self.err)

    # ------------------------------------------------------------------ showing the turn

    def show(self, frame: dict[str, Any]) -> int | None:
        """Show one frame; the exit code once it ends this prompt's turn."""
        kind = frame.get("type")
        data = frame.get("data") if isinstance(frame.get("data"), dict) else {}
        if frame.get("promptId") != self.prompt_id:
            if kind == "permission_resolved" and data.get("requestId") in self.permissions:
                self.permissions.discard(data["requestId"])
                if self.args.json:
                    self.print_json(frame)
            return None
        if self.args.json:
            self.print_json(frame)
        if kind != "session_update":
            self.new_message = True
        if kind == "session_update":
            update = data.get("update")
            if isinstance(update, dict):
                self.show_update(update)
        elif kind == "permission_request":
            self.permissions.add(str(data.get("requestId")))
            title = (data.get("toolCall") or {}).get("title") or "a tool call"
            self.note(f"▸ {title} asks permission (request {data.get('requestId')}): vote from another client "
                      "(trellis attach), or use --approval-mode")
        elif kind == "turn_complete":
            reason = data.get("stopReason") or "end_turn"
            if data.get("hookStopReason"):
                self.note(f"[stopped by a hook: {data['hookStopReason']}]")
            self.close_open_tools(reason)
            code = STOP_EXIT.get(reason, EXIT_OTHER_STOP)
            if code != EXIT_OK and not self.args.json:
                self.note(f"[turn ended: {reason}]")
            return code
        elif kind == "turn_error":
            self.close_open_tools("error")
            if not self.args.json:
                self.note(f"[turn failed: {data.get('message') or 'error'} ({data.get('code') or 'error'})]",
                          always=True)
            return EXIT_ERROR
        return None

    def show_update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        meta = update.get("_meta") if isinstance(update.get("_meta"), dict) else {}
        content = update.get("content") if isinstance(update.get("content"), dict) else {}
        text = content.get("text") if content.get("type") == "text" and isinstance(content.get("text"), str) else ""
        if kind == "agent_message_chunk" and text and not meta.get("qwenDiscreteMessage") \
                and meta.get("source") not in (GUARD_SOURCE, "daemon"):
            self.write(text, message=True)
            return
        if kind != "agent_thought_chunk":
            self.new_message = True  # a model call's usage (its end), a notice, a tool call, a plan
        if kind == "agent_message_chunk":
            if meta.get("source") == GUARD_SOURCE:
                self.note(_guard_line(meta, text))
            elif meta.get("source") == "daemon":
                self.note(f"[daemon: {text}]")
            elif text:
                self.write(text, message=True)
                self.new_message = True  # a discrete message is one of its own: what follows is another
        elif kind == "agent_thought_chunk":
            if self.args.thoughts and text:
                self.think(text)
        elif kind in ("tool_call", "tool_call_update"):
            call_id = str(update.get("toolCallId"))
            tool = self.tools.setdefault(call_id, {"title": None, "status": None, "shown": False})
            if update.get("title"):
                tool["title"] = update["title"]
            if update.get("status"):
                tool["status"] = update["status"]
            if tool["status"] in TERMINAL_TOOL_STATUS and not tool["shown"]:
                tool["shown"] = True
                line = f"▸ {tool['title'] or 'tool'} … {tool['status']}"
                if tool["status"] == "failed":
                    detail = _first_text(update.get("content"))
                    if detail:
                        line += f": {detail}"
                self.note(line)

    def close_open_tools(self, reason: str) -> None:
        for tool in self.tools.values():
            if not tool["shown"]:
                tool["shown"] = True
                self.note(f"▸ {tool['title'] or 'tool'} … not finished ({reason})")

    # ------------------------------------------------------------------ output

    def write(self, text: str, *, final: bool = False, message: bool = False) -> None:
        """Answer text on stdout, made visible (no escape sequence of the model's reaches a terminal); ``message``:
        text of the model's, which begins a paragraph of its own when it starts another message."""
        if self.args.json or self.stdout_gone:
            return
        self.end_thought()
        text = ("\r" if self.held_cr else "") + text
        self.held_cr = text.endswith("\r") and not final  # a CR LF split across chunks is a line break
        text = visible(text[:-1] if self.held_cr else text)
        if not text:
            return
        if message and self.new_message:
            self.new_message = False
            if self.tail:  # a blank line between the two, counting the newlines already on either side
                ends = len(self.tail) - len(self.tail.rstrip("\n"))
                starts = len(text) - len(text.lstrip("\n"))
                text = "\n" * max(0, 2 - ends - starts) + text
        try:
            self.out.write(text)
            self.out.flush()
        except BrokenPipeError:
            self.drop_stdout()
            return
        self.tail = (self.tail + text)[-2:]
        self.midline = not text.endswith("\n")

    def print_json(self, frame: dict[str, Any]) -> None:
        if self.stdout_gone:
            return
        try:
            self.out.write(json_visible(orjson.dumps(frame).decode()) + "\n")
            self.out.flush()
        except BrokenPipeError:
            self.drop_stdout()

    def drop_stdout(self) -> None:
        """The reader of stdout went away (``| head``): write nothing more there, and let the turn end."""
        self.stdout_gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.out.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def note(self, text: str, *, always: bool = False) -> None:
        """A line on stderr (not in --json mode, unless ``always``)."""
        if self.args.json and not always:
            return
        self.end_thought()
        self.leave_answer_line()
        self.err.write(visible(text) + "\n")
        self.err.flush()

    def think(self, text: str) -> None:
        """A thought chunk on stderr, dimmed on a terminal; the next other output starts a new line."""
        if self.args.json:
            return
        if not self.thinking:
            self.leave_answer_line()
        text = visible(text)
        self.err.write(f"\x1b[2m{text}\x1b[0m" if self.color else text)
        self.err.flush()
        self.thinking = True

    def end_thought(self) -> None:
        if self.thinking:
            self.thinking = False
            self.err.write("\n")
            self.err.flush()

    def leave_answer_line(self) -> None:
        if self.midline and self.err.isatty() and _isatty(self.out):
            self.err.write("\n")  # the same terminal: do not continue the answer's line
            self.midline = False

    def finish_stdout(self) -> None:
        self.end_thought()
        if self.held_cr:
            self.write("", final=True)  # the answer ended with a lone CR: shown
        if self.midline and not self.stdout_gone:
            try:
                self.out.write("\n")
                self.out.flush()
            except BrokenPipeError:
                self.drop_stdout()
            self.midline = False


def _code(response: httpx.Response) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body.get("code") if isinstance(body, dict) else None


def _guard_line(meta: dict[str, Any], text: str) -> str:
    attempt, most = meta.get("attempt"), meta.get("maxAttempts")
    if "stopped after" in text:  # the exhaustion notice (actors/guard/texts.py), after the last attempt
        return f"[todo stop guard, stopped after attempt {attempt} of {most}; {meta.get('unfinishedCount')} " \
               "todo(s) unfinished]"
    return f"[todo stop guard, attempt {attempt} of {most}]"


def _first_text(content: Any) -> str:
    """The first line of a tool call's first text content, cut short."""
    for item in content if isinstance(content, list) else ():
        inner = item.get("content") if isinstance(item, dict) else None
        if isinstance(inner, dict) and isinstance(inner.get("text"), str) and inner["text"].strip():
            line = inner["text"].strip().splitlines()[0]
            return line if len(line) <= 120 else line[:119] + "…"
    return ""


def _isatty(stream_: TextIO) -> bool:
    try:
        return stream_.isatty()
    except (ValueError, AttributeError):
        return False


__all__ = ["EXIT_CANCELLED", "EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_MAX_TOKENS", "EXIT_MAX_TURN_REQUESTS",
           "EXIT_NOT_RUN", "EXIT_OK", "EXIT_OTHER_STOP", "STOP_EXIT", "PromptRun", "Refused", "add_parser",
           "call", "open_client", "run", "say"]
