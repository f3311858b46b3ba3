"""The network side of ``trellis attach``: a thread running ``trio.run``, the only one that talks to the daemon.

:class:`Link` opens (or attaches to, or restores) the session, follows its
event stream and carries out what the screen asks (a prompt, a mid-turn
message, a cancel, a vote). It tells the screen what happened through
``deliver(item)`` — a callable that must be thread-safe (the screen passes
one that hands the item to its asyncio loop with ``call_soon_threadsafe``).
Items are tuples:

- ``("frame", frame)``: an SSE frame to render;
- ``("restored", frame)``: a frame of the history a restarted daemon restored (shown already, but for how the
  turn, question or tool call still open here ended);
- ``("info", text, style)``: a line of the client's own;
- ``("connection", "reconnecting" | "live")``;
- ``("snapshot", status, pending_prompts)``: the session's state after a reconnect;
- ``("refresh", status)``: the status read again after each turn (and ``/mode``): the model, the approval mode;
- ``("unsent", text)``: a prompt the daemon did not take (unreachable, refused): back to the input line;
- ``("tasks", background_tasks, task_id | None)``: ``/tasks`` (the status's ``backgroundTasks``);
- ``("subagent", status)``: a subagent run's MCP ``status`` when its turn or state changed;
- ``("permission_gone", request_id)``: a vote found the request already resolved;
- ``("checkpoints", listing)``: ``/checkpoints`` (``GET /session/:id/checkpoints``);
- ``("rewound", "rewind" | "undo", turn | None, answer)``: a rewind or an undo was done (the conversation cut);
- ``("outside", paths, retry)``: a rewind or undo refused (``files_changed_outside``), ``retry`` overrides it;
- ``("diff", turn, text)``: ``/diff N``'s unified diff;
- ``("end", exit_code, message | None)``: nothing more will come (the session closed, or is gone).

Joining without the history (``--session ID --no-history``). The stream
starts after the status's ``lastEventId``; what the screen still needs from
before it is read once, before the screen starts: the running turn's record
(``GET /session/:id/turns/current``: when it began, its tokens so far — the
status read again until the record did not move between the reads, so a
model call is counted neither twice nor never), and from the replay up to that
id (``Last-Event-ID: 0``, read to its ``replay_complete``) the
``permission_request`` frames of the requests still waiting (the status names
them by id only) and the titles of the tool calls still running (their later
updates carry only an id).

Reconnecting. Frames are read with :func:`trellis.stream.events`, which
skips any frame whose id was already delivered. A dropped connection ends that
read at once (its ``on_reconnect`` raises here), and the link takes over,
because what to resume from depends on the daemon: it re-reads the token (a
restarted daemon mints a new one into its state directory), asks
``GET /status`` (restoring the session with ``POST /session {sessionId}`` when
the daemon no longer has it live) and compares the event epoch. The same
epoch: the stream resumes after the last id seen, and the daemon replays what
was missed. A new epoch means a restarted daemon whose ids start again: the
stream is read from 0, and of its replay only frames from
``state_resync_required.earliestAvailableId`` on — what the new daemon
published since it restored the session — are rendered; the restored history
before them was shown already, but for the ends the old daemon stored as it
stopped after the connection dropped (the running turn cancelled, its question
and tool call with it): those frames are delivered as ``restored``, and the
screen shows the ones that end what it still shows open. A ``session_closed``
whose reason is ``daemon_shutdown`` is a graceful restart (or stop) of the
daemon, not the end of the session: the link reconnects as after a drop, for
as long as it takes (the session stays restorable from the state directory).

Subagent runs (background tasks of kind ``agent``) are followed through the
daemon's MCP ``status`` tool (``POST /mcp``), polled every second while one
is live: their turn (``turn N of M``) and, at the end, their end reason.
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
from collections.abc import Callable
from contextlib import aclosing
from typing import Any
from urllib.parse import quote

import httpx
import trio

from .. import __version__, connect, stream
from ..connect import is_loopback

Deliver = Callable[[tuple[Any, ...]], None]
POLL_SUBAGENTS = 1.0  # seconds between MCP status polls of live subagent runs
FIRST_WAIT = 0.25  # seconds before a second reconnection attempt; doubled up to MAX_WAIT
MAX_WAIT = 2.0  # the longest wait between reconnection attempts
MCP_VERSION = "2025-06-18"
HISTORY_ABOVE = "── the session's history is above; live from here ──"
JOIN_SCAN_SECONDS = 10.0  # the longest a --no-history join reads the replay for the waiting questions
RESTARTED = "(the daemon restarted: the session was restored; its history is not shown again)"


def dig(value: Any, *keys: str) -> Any:
    """``value[k1][k2]…``, or None where a level is missing or not an object."""
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def queued_count(entry: dict[str, Any]) -> int:
    """Prompts waiting (not the running one): ``queuedCount``, else ``pendingCount`` less the running prompt."""
    if isinstance(entry.get("queuedCount"), int):
        return entry["queuedCount"]
    pending = entry.get("pendingCount") if isinstance(entry.get("pendingCount"), int) else 0
    running = entry.get("state") == "running" and entry.get("activeWorkState", "prompt") == "prompt"
    return max(0, pending - (1 if running else 0))


def sessions_here(args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """The daemon's sessions (``GET /session``) whose cwd is the directory a new session would work in, newest
    first; None when the daemon cannot be asked (attaching then says why)."""
    target = connect.target(args)
    here = os.getcwd() if args.cwd is None else args.cwd
    places = {os.path.abspath(here), os.path.realpath(here)} if here else set()
    try:
        with httpx.Client(timeout=httpx.Timeout(10.0, connect=5.0), trust_env=not is_loopback(target.url)) as client:
            answer = client.get(f"{target.url}/session", headers=target.headers)
        if answer.status_code != 200:
            return None
        listed = answer.json().get("sessions") or []
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    found = [s for s in listed if isinstance(s, dict) and isinstance(s.get("sessionId"), str)
             and isinstance(s.get("cwd"), str) and (s["cwd"] in places or os.path.realpath(s["cwd"]) in places)]
    return sorted(found, key=lambda s: s.get("updatedAt") if isinstance(s.get("updatedAt"), (int, float)) else 0,
                  reverse=True)


class Refused(Exception):
    """Attaching failed: ``message`` for stderr, ``code`` to exit with."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class _Dropped(Exception):
    """The event stream broke: the link reconnects itself (raised from ``on_reconnect``)."""


class Link:
    """The session's connection, in a thread of its own."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.target = connect.target(args)
        self.session_id: str = args.session or ""
        self.epoch: str | None = None
        self.deliver: Deliver = lambda item: None
        self._thread: threading.Thread | None = None
        self._ready: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._client: httpx.AsyncClient | None = None
        self._agents: set[str] = set()  # names of subagent runs to poll
        self._mcp_session: str | None = None
        self.last_undo: str | None = None  # the undoId of the last rewind (or undo) made from this client

    # ------------------------------------------------------------------ from the screen's thread

    def start(self) -> dict[str, Any]:
        """Open the session (blocking); its ``{"sessionId", "attached", "status", "pending", ...}``, or Refused."""
        self._thread = threading.Thread(target=self._thread_main, name="trellis-attach-link", daemon=True)
        self._thread.start()
        answer = self._ready.get()
        if answer[0] != "ready":
            self._thread.join(5)
            raise Refused(answer[1], answer[2])
        return answer[1]

    def follow(self, deliver: Deliver, cursor: int | None) -> None:
        """Start following the stream from ``cursor`` (and polling subagents), delivering to ``deliver``."""
        self.deliver = deliver
        self.request(self._follow, cursor)
        self.request(self._watch_subagents)

    def request(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` (an async method of this link) in the link's thread, without waiting for it."""
        if self._token is None or self._nursery is None:
            return
        try:
            trio.from_thread.run_sync(self._nursery.start_soon, fn, *args, trio_token=self._token)
        except trio.RunFinishedError:
            pass

    def stop(self) -> None:
        if self._token is not None and self._nursery is not None:
            try:
                trio.from_thread.run_sync(self._nursery.cancel_scope.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(5)

    # ------------------------------------------------------------------ the thread

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # noqa: BLE001 - a bug here must reach the screen, not vanish with the thread
            message = f"internal error in the connection: {type(exc).__name__}: {exc}"
            self._ready.put(("failed", message, 1))
            self.deliver(("end", 1, message))

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0),
                                     trust_env=not is_loopback(self.target.url)) as client:
            self._client = client
            try:
                info = await self._open()
            except Refused as exc:
                self._ready.put(("failed", exc.message, exc.code))
                return
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._ready.put(("ready", info))
                await trio.sleep_forever()  # until stop(); the tasks run in the nursery

    async def _call(self, method: str, path: str, *, json: Any = None,
                    headers: dict[str, str] | None = None) -> httpx.Response:
        """One request; a 401 re-reads the token once (a restarted daemon minted a new one)."""
        assert self._client is not None
        for attempt in range(2):
            response = await self._client.request(method, f"{self.target.url}{path}", json=json,
                                                  headers={**self.target.headers, **(headers or {})})
            if response.status_code != 401 or attempt:
                return response
            fresh = connect.target(self.args)
            if fresh.token == self.target.token:
                return response
            self.target = fresh
        raise AssertionError("unreachable")

    @property
    def _path(self) -> str:
        return f"/session/{quote(self.session_id, safe='')}"

    async def _open(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.args.session:
            body["sessionId"] = self.args.session
        else:
            cwd = os.getcwd() if self.args.cwd is None else self.args.cwd
            if cwd:
                body["cwd"] = os.path.abspath(cwd)
        try:
            opened = await self._call("POST", "/session", json=body)
            if opened.status_code != 200:
                raise Refused(self._refusal(opened))
            info = opened.json()
            self.session_id = info["sessionId"]
            status = await self._call("GET", f"{self._path}/status")
            pending = await self._call("GET", f"{self._path}/pending-prompts")
            if status.status_code != 200 or pending.status_code != 200:
                raise Refused(self._refusal(status if status.status_code != 200 else pending))
        except httpx.TransportError as exc:
            raise Refused(f"no daemon answers at {self.target.url} ({exc or type(exc).__name__}): start one "
                          "with `trellis serve`, or point --url or $TRELLIS_URL at yours") from None
        except (ValueError, KeyError) as exc:
            raise Refused(f"the daemon at {self.target.url} answered something unexpected: {exc}") from None
        st = status.json()
        self.epoch = st.get("eventEpoch")
        model = st.get("modelName") or st.get("model")
        for task in st.get("backgroundTasks") or []:
            if task.get("kind") == "agent" and task.get("status") == "running":
                self._agents.add(str(task.get("label") or "").partition(":")[0].strip())
        joined: dict[str, Any] = {"turn": None, "frames": [], "tools": {}}
        if not self.args.session or self.args.history:
            cursor = 0  # a new session has nothing yet; an existing one is replayed from its beginning
            if st.get("state") == "running":  # the replay gives the turn's tokens; its record when it began
                joined["turn"] = await self._current_turn()
        else:
            st, joined["turn"] = await self._status_and_turn(st)
            cursor = st.get("lastEventId") if isinstance(st.get("lastEventId"), int) else 0
            if st.get("state") == "running" or st.get("pendingPermissions"):
                joined["frames"], joined["tools"] = await self._join_scan(cursor, st)
        return {"sessionId": self.session_id, "attached": bool(info.get("attached")),
                "cwd": info.get("workspaceCwd"), "status": st,
                "pending": pending.json().get("pendingPrompts") or [], "cursor": cursor,
                "model": model if isinstance(model, str) else None, "title": st.get("title"),
                "history": cursor == 0, **joined}

    async def _current_turn(self) -> dict[str, Any] | None:
        """The running turn's record (``GET /session/:id/turns/current``: its start, its live usage), or None."""
        try:
            answer = await self._call("GET", f"{self._path}/turns/current")
            record = answer.json() if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return record if isinstance(record, dict) and record.get("state") == "running" else None

    async def _status_and_turn(self, st: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The status and the running turn's record read together (joining without the history): a model
        call's usage that lands between the two reads would be counted twice (in the record, and on the stream
        after the status's ``lastEventId``), so the status is read again until the record did not move."""
        if st.get("state") != "running":
            return st, None
        record = await self._current_turn()
        for _ in range(3):
            again = await self._call("GET", f"{self._path}/status")
            if again.status_code != 200:
                break
            st = again.json()
            if st.get("state") != "running":
                return st, None
            after = await self._current_turn()
            if after is not None and record is not None and after.get("promptId") == record.get("promptId") \
                    and after.get("usage") == record.get("usage"):
                return st, after
            record = after
        return st, record

    async def _join_scan(self, cursor: int, st: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """Joining without the history: what of it the screen still needs, read from the session's replay up
        to ``cursor`` (the status's ``lastEventId``, where the stream starts). The ``permission_request``
        frames of the requests still waiting for a vote (the status names them by id only: the question, its
        options), to be shown and answered; and the names of the tool calls still running, which the stream
        from ``cursor`` on refers to by id only (``toolCallId`` -> title). Best effort: a failure leaves both
        empty."""
        waiting = st.get("pendingPermissions")
        waiting = set(waiting) if isinstance(waiting, list) else None
        asked: dict[str, dict[str, Any]] = {}
        tools: dict[str, str] = {}
        assert self._client is not None
        with trio.move_on_after(JOIN_SCAN_SECONDS):
            try:
                async with self._client.stream(
                        "GET", f"{self.target.url}{self._path}/events",
                        headers={**self.target.headers, "Last-Event-ID": "0"},
                        timeout=httpx.Timeout(10.0, read=JOIN_SCAN_SECONDS)) as response:
                    if response.status_code != 200:
                        return [], {}
                    async for frame in stream.frames(response):
                        kind = frame.get("type")
                        if kind == "replay_complete":
                            break
                        frame_id = frame.get("id")
                        if not isinstance(frame_id, int) or frame_id > cursor:
                            if isinstance(frame_id, int):
                                break  # live from here: the stream from the cursor shows it
                            continue
                        data = frame.get("data") if isinstance(frame.get("data"), dict) else {}
                        if kind == "permission_request" and isinstance(data.get("requestId"), str):
                            asked[data["requestId"]] = frame
                        elif kind == "permission_resolved":
                            asked.pop(str(data.get("requestId")), None)
                        elif kind == "session_update":
                            update = data.get("update") if isinstance(data.get("update"), dict) else {}
                            call = update.get("toolCallId")
                            if update.get("sessionUpdate") not in ("tool_call", "tool_call_update") or call is None:
                                continue
                            if update.get("status") in ("completed", "failed"):
                                tools.pop(str(call), None)
                            elif isinstance(update.get("title"), str) and update["title"]:
                                tools[str(call)] = update["title"]
                        elif kind in ("turn_complete", "turn_error"):
                            tools.clear()  # a turn's tools end with it
            except (httpx.HTTPError, ValueError):
                return [], {}
        frames = [f for rid, f in asked.items() if waiting is None or rid in waiting]
        return frames, tools

    def _refusal(self, response: httpx.Response) -> str:
        message = stream.error_message(response.status_code, response.text)
        if response.status_code == 401:
            message += ("\nthe token is read from --token, else $TRELLIS_TOKEN, else <state-dir>/token "
                        "(--state-dir, $TRELLIS_STATE_DIR, default ./.trellis)")
        return message

    # ------------------------------------------------------------------ the stream

    def _dropped(self, attempt: int, error: BaseException | None) -> None:
        raise _Dropped(error)

    async def _follow(self, cursor: int | None) -> None:
        resync = False  # reading a restarted daemon's replay from 0: skip what it restored
        skip_below: int | None = None
        history = cursor == 0 and bool(self.args.session)  # an existing session replayed from its beginning
        reconnecting = False
        wait = FIRST_WAIT
        while True:
            terminal = None
            shutdown = False  # the daemon is shutting down: it closed the session, to restore it when it is back
            try:
                assert self._client is not None
                events = stream.events(self._client, self.target, self.session_id, last_event_id=cursor,
                                       on_reconnect=self._dropped)
                async with aclosing(events) as frames:
                    async for frame in frames:
                        if reconnecting:  # a frame came through: the stream is back
                            reconnecting, wait = False, FIRST_WAIT
                            self.deliver(("connection", "live"))
                        kind = frame.get("type")
                        frame_id = frame.get("id")
                        if resync:
                            if kind == "state_resync_required":
                                earliest = (frame.get("data") or {}).get("earliestAvailableId")
                                skip_below = earliest if isinstance(earliest, int) else None
                                continue
                            if kind == "replay_complete":
                                resync = False
                                continue
                            if isinstance(frame_id, int) and skip_below is not None and frame_id < skip_below:
                                cursor = frame_id
                                self.deliver(("restored", frame))  # shown only if it ends what is still open
                                continue
                        if history and kind == "replay_complete":
                            history = False
                            if (frame.get("data") or {}).get("replayedCount"):
                                self.deliver(("info", HISTORY_ABOVE, "dim"))
                        if isinstance(frame_id, int):
                            cursor = frame_id
                        self._watch(frame)
                        self.deliver(("frame", frame))
                        if kind in stream.TERMINAL:
                            terminal = kind
                            shutdown = (kind == "session_closed"
                                        and (frame.get("data") or {}).get("reason") == "daemon_shutdown")
                        if kind in ("turn_complete", "turn_error") and not history and self._nursery is not None:
                            self._nursery.start_soon(self.refresh_status)  # the model, the mode after a turn
            except (_Dropped, stream.SessionGone, httpx.HTTPError):
                pass
            if terminal == "session_closed" and not shutdown:
                self.deliver(("end", 0, None))
                return
            if reconnecting:  # the last attempt delivered nothing: wait longer before the next
                await trio.sleep(wait)
                wait = min(MAX_WAIT, wait * 2)
            else:
                reconnecting = True
                self.deliver(("connection", "reconnecting"))
            found = await self._reconnect(cursor)
            if found is None:
                return
            cursor, new_epoch = found
            if new_epoch:
                resync, skip_below = True, None

    async def _reconnect(self, cursor: int | None) -> tuple[int | None, bool] | None:
        """Wait for the daemon and the session again; the cursor to resume from and whether it is a new epoch."""
        wait = FIRST_WAIT
        while True:
            self.target = connect.target(self.args)  # a restarted daemon has a new token
            try:
                status = await self._call("GET", f"{self._path}/status")
                if status.status_code == 404:  # not live: the daemon restarted; restore the session
                    restored = await self._call("POST", "/session", json={"sessionId": self.session_id})
                    if restored.status_code in (400, 404):
                        why = stream.error_message(restored.status_code, restored.text)
                        self.deliver(("end", 1, f"session {self.session_id} is gone: {why}"))
                        return None
                    if restored.status_code == 200:
                        status = await self._call("GET", f"{self._path}/status")
                if status.status_code == 200:
                    st = status.json()
                    pending = await self._call("GET", f"{self._path}/pending-prompts")
                    listed = pending.json().get("pendingPrompts") if pending.status_code == 200 else None
                    self.deliver(("snapshot", st, listed))
                    if st.get("eventEpoch") == self.epoch:
                        return cursor, False
                    self.epoch = st.get("eventEpoch")
                    self.deliver(("info", RESTARTED, "dim"))
                    return 0, True
            except (httpx.HTTPError, ValueError):
                pass
            await trio.sleep(wait)
            wait = min(MAX_WAIT, wait * 2)

    def _watch(self, frame: dict[str, Any]) -> None:
        """Note subagent runs starting (background tasks of kind agent), to poll their status."""
        data = frame.get("data") or {}
        if frame.get("type") == "background_task" and data.get("kind") == "agent":
            name = str(data.get("label") or "").partition(":")[0].strip()
            if name:
                self._agents.add(name)  # also on "finished": one more poll says how it ended

    # ------------------------------------------------------------------ subagent runs

    async def _watch_subagents(self) -> None:
        while True:
            await trio.sleep(POLL_SUBAGENTS)
            for name in sorted(self._agents):
                try:
                    status = await self._mcp_status(name)
                except (httpx.HTTPError, ValueError, KeyError, TypeError):
                    self._mcp_session = None
                    continue
                if status is None:
                    self._agents.discard(name)  # not a run this daemon knows (any more)
                    continue
                self.deliver(("subagent", status))
                if status.get("ended"):
                    self._agents.discard(name)

    async def _mcp(self, message: dict[str, Any]) -> httpx.Response:
        headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MCP_VERSION}
        if self._mcp_session is not None:
            headers["Mcp-Session-Id"] = self._mcp_session
        return await self._call("POST", "/mcp", json=message, headers=headers)

    async def _mcp_status(self, name: str) -> dict[str, Any] | None:
        """The MCP ``status`` of run ``name`` (its structured content), None when the daemon has no such run."""
        if self._mcp_session is None:
            init = await self._mcp({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": MCP_VERSION, "capabilities": {},
                "clientInfo": {"name": "trellis-attach", "version": __version__}}})
            self._mcp_session = init.headers.get("Mcp-Session-Id")
            if init.status_code != 200 or self._mcp_session is None:
                raise ValueError(f"MCP initialize answered {init.status_code}")
            await self._mcp({"jsonrpc": "2.0", "method": "notifications/initialized"})
        answer = await self._mcp({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                  "params": {"name": "status", "arguments": {"name": name}}})
        if answer.status_code != 200:
            raise ValueError(f"MCP status answered {answer.status_code}")
        result = answer.json().get("result") or {}
        if result.get("isError"):
            return None
        content = result.get("structuredContent")
        return content if isinstance(content, dict) else None

    # ------------------------------------------------------------------ what the screen asks

    async def _act(self, what: str, method: str, path: str, json: Any = None,
                   ok: tuple[int, ...] = (200, 202, 204)) -> httpx.Response | None:
        """One request for the screen; a failure becomes an ``info`` line."""
        try:
            response = await self._call(method, f"{self._path}{path}", json=json)
        except httpx.HTTPError as exc:
            self.deliver(("info", f"{what} failed: {exc or type(exc).__name__}", "red"))
            return None
        if response.status_code not in ok:
            self.deliver(("info", f"{what} refused: {stream.error_message(response.status_code, response.text)}",
                          "red"))
            return None
        return response

    async def send_prompt(self, text: str) -> None:
        if await self._act("the prompt", "POST", "/prompt", {"prompt": [{"type": "text", "text": text}]}) is None:
            self.deliver(("unsent", text))

    async def mid_turn(self, text: str) -> None:
        answer = await self._act("the mid-turn message", "POST", "/mid-turn-message", {"message": text})
        if answer is not None:
            self.deliver(("info", "↳ mid-turn message queued: the running turn takes it at its next tool call",
                          "dim"))

    async def cancel(self) -> None:
        await self._act("cancelling", "POST", "/cancel")

    async def vote(self, request_id: str, option_id: str) -> None:
        answer = await self._act("the vote", "POST", f"/permission/{quote(request_id, safe='')}",
                                 {"outcome": {"outcome": "selected", "optionId": option_id}}, ok=(200, 404))
        if answer is not None and answer.status_code == 404:
            self.deliver(("permission_gone", request_id))
            self.deliver(("info", "that permission request was already resolved", "dim"))

    async def drop(self, prompt_id: str) -> None:
        answer = await self._act("removing the prompt", "DELETE", f"/pending-prompts/{quote(prompt_id, safe='')}")
        if answer is not None and not answer.json().get("removed"):
            self.deliver(("info", f"{prompt_id} is no longer pending", "dim"))

    async def _pending(self) -> list[dict[str, Any]] | None:
        answer = await self._act("listing pending prompts", "GET", "/pending-prompts")
        if answer is None:
            return None
        listed = answer.json().get("pendingPrompts") or []
        return [p for p in listed if isinstance(p, dict)]

    async def list_pending(self) -> None:
        """``/pending``: the running prompt apart, then the queued ones numbered as ``/drop N`` takes them."""
        listed = await self._pending()
        if listed is None:
            return
        for entry in listed:
            if entry.get("state") == "running":
                self.deliver(("info", f"▶ running: {entry.get('text')} ({entry.get('promptId')})", "dim"))
        queued = [p for p in listed if p.get("state", "queued") == "queued"]
        if not queued:
            self.deliver(("info", "⋯ no prompts queued", "dim"))
        for i, entry in enumerate(queued, 1):
            self.deliver(("info", f"⋯ {i}. {entry.get('text')} ({entry.get('promptId')})", "dim"))

    async def drop_nth(self, n: int) -> None:
        """``/drop N``: the Nth queued prompt, numbered as ``/pending`` numbers them (the running one is not)."""
        listed = await self._pending()
        if listed is None:
            return
        queued = [p for p in listed if p.get("state", "queued") == "queued"]
        if not 0 < n <= len(queued):
            self.deliver(("info", f"no queued prompt {n} ({len(queued)} queued; /pending lists them)", "yellow"))
            return
        await self.drop(str(queued[n - 1].get("promptId")))

    async def list_tasks(self, task_id: str | None = None) -> None:
        answer = await self._act("listing background tasks", "GET", "/status")
        if answer is not None:
            self.deliver(("tasks", answer.json().get("backgroundTasks") or [], task_id))

    async def kill_task(self, task_id: str) -> None:
        answer = await self._act("stopping the task", "DELETE", f"/background-tasks/{quote(task_id, safe='')}")
        if answer is not None:
            killed = answer.json().get("killed")
            self.deliver(("info", f"⚙ {task_id}: stopping" if killed else
                          f"⚙ {task_id} is not a live background task (/tasks lists them)",
                          "dim" if killed else "yellow"))

    async def _rules(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]] | None:
        """The settings file's rules and the session's own, each as (effect, rule) in list order (the session's
        are numbered from 1 in that order by ``/permissions``)."""
        answer = await self._act("listing the permission rules", "GET", "/permissions")
        if answer is None:
            return None
        listed = answer.json()
        return tuple([(effect, rule) for effect in ("allow", "ask", "deny")  # type: ignore[return-value]
                      for rule in (listed.get(source) or {}).get(effect) or []] for source in ("settings", "session"))

    async def list_rules(self) -> None:
        """``/permissions``: the settings file's rules, then the session's own, numbered for removal."""
        rules = await self._rules()
        if rules is None:
            return
        settings, own = rules
        if not settings and not own:
            self.deliver(("info", "⚖ no permission rules: the approval mode decides every call", "dim"))
        for effect, rule in settings:
            self.deliver(("info", f"⚖ {effect:5} {rule}   (settings file)", "dim"))
        for i, (effect, rule) in enumerate(own, 1):
            self.deliver(("info", f"⚖ {i}. {effect:5} {rule}   (this session)", "dim"))
        if own:
            self.deliver(("info", "  /permissions remove N removes one of this session's rules", "dim"))

    async def add_rule(self, effect: str, rule: str) -> None:
        answer = await self._act("adding the rule", "POST", "/permissions", {"effect": effect, "rule": rule})
        if answer is not None:
            changed = answer.json().get("changed")
            self.deliver(("info", f"⚖ {effect} {rule}: added to this session" if changed else
                          f"⚖ {effect} {rule}: this session has it already", "dim"))

    async def remove_nth_rule(self, n: int) -> None:
        """``/permissions remove N``: the session's own rule N, as ``/permissions`` numbers them."""
        rules = await self._rules()
        if rules is None:
            return
        own = rules[1]
        if not 0 < n <= len(own):
            self.deliver(("info", f"no rule {n} of this session ({len(own)}; /permissions lists them)", "yellow"))
            return
        effect, rule = own[n - 1]
        answer = await self._act("removing the rule", "DELETE",
                                 f"/permissions/{effect}?rule={quote(rule, safe='')}")
        if answer is not None:
            self.deliver(("info", f"⚖ {effect} {rule}: removed", "dim"))

    async def set_mode(self, mode: str) -> None:
        if await self._act("setting the approval mode", "POST", "/approval-mode", {"mode": mode}) is not None:
            await self.refresh_status()

    # ------------------------------------------------------------------ checkpoints

    async def list_checkpoints(self) -> None:
        """``/checkpoints``: the turns with a checkpoint and the files each changed, and the undo entries."""
        answer = await self._act("listing the checkpoints", "GET", "/checkpoints")
        if answer is not None:
            self.deliver(("checkpoints", answer.json()))

    def _outside(self, response: httpx.Response) -> list[str] | None:
        """The paths of a ``files_changed_outside`` refusal, else None."""
        if response.status_code != 409:
            return None
        try:
            body = response.json()
        except ValueError:
            return None
        if not isinstance(body, dict) or body.get("code") != "files_changed_outside":
            return None
        return [str(p) for p in body.get("paths") or []]

    async def _checkpoint_act(self, what: str, path: str, body: dict[str, Any], retry: str) -> dict[str, Any] | None:
        try:
            response = await self._call("POST", f"{self._path}{path}", json=body)
        except httpx.HTTPError as exc:
            self.deliver(("info", f"{what} failed: {exc or type(exc).__name__}", "red"))
            return None
        paths = self._outside(response)
        if paths is not None:
            self.deliver(("outside", paths, retry))
            return None
        if response.status_code != 200:
            self.deliver(("info", f"{what} refused: {stream.error_message(response.status_code, response.text)}",
                          "red"))
            return None
        answer = response.json()
        if isinstance(answer.get("undoId"), str):
            self.last_undo = answer["undoId"]
        return answer

    async def rewind(self, turn: int, files: bool, force: bool) -> None:
        """``/rewind N [files [force]]``: the conversation back to the start of user turn N (from 0), and with
        ``files`` the files of the cwd too (``POST /session/:id/rewind``)."""
        body: dict[str, Any] = {"turn": turn}
        if files:
            body["files"] = True
        if force:
            body["force"] = True
        answer = await self._checkpoint_act("the rewind", "/rewind", body, f"/rewind {turn} files force")
        if answer is not None:
            self.deliver(("rewound", "rewind", turn, answer))

    async def undo(self, undo_id: str | None, force: bool) -> None:
        """``/undo [ID] [force]``: undo a rewind (by default the last one made from here, else the newest)."""
        if undo_id is None:
            undo_id = self.last_undo
        if undo_id is None:
            listed = await self._act("listing the checkpoints", "GET", "/checkpoints")
            if listed is None:
                return
            entries = [u for u in listed.json().get("undo") or [] if isinstance(u, dict) and u.get("undoId")]
            if not entries:
                self.deliver(("info", "nothing to undo: no rewind was made in this session", "yellow"))
                return
            undo_id = str(max(entries, key=lambda u: u.get("at") if isinstance(u.get("at"), int) else 0)["undoId"])
        answer = await self._checkpoint_act("the undo", f"/checkpoints/undo/{quote(undo_id, safe='')}",
                                            {"force": True} if force else {}, f"/undo {undo_id} force")
        if answer is not None:
            self.deliver(("rewound", "undo", None, answer))

    async def diff(self, turn: int) -> None:
        """``/diff N``: what user turn N changed, as a unified diff."""
        answer = await self._act("the diff", "GET", f"/checkpoints/{turn}/diff")
        if answer is not None:
            diff = answer.json().get("diff")
            self.deliver(("diff", turn, diff if isinstance(diff, str) else ""))

    async def refresh_status(self) -> None:
        """The status read again (after a turn, a mode change): the model, the approval mode, the counts."""
        try:
            answer = await self._call("GET", f"{self._path}/status")
            if answer.status_code == 200:
                self.deliver(("refresh", answer.json()))
        except (httpx.HTTPError, ValueError):
            pass

    async def show_status(self) -> None:
        answer = await self._act("the status", "GET", "/status")
        if answer is None:
            return
        st = answer.json()
        guard = st.get("todoStopGuard") or {}
        usage = st.get("usage") or {}
        lines = [
            f"session {st.get('sessionId')} in {st.get('workspaceCwd')}: {st.get('state')}"
            + (f" ({st.get('currentPromptId')})" if st.get("currentPromptId") else ""),
            (f"approval mode {st.get('approvalMode')}, sandbox {st.get('sandbox')}, "
             f"{len(st.get('backgroundTasks') or [])} background task(s), {queued_count(st)} queued"),
            f"todo stop guard: {'on' if guard.get('enabled') else 'off'}"
            + (f", attempt {guard.get('attempts')} of {guard.get('maxAttempts')}" if guard.get("enabled") else ""),
            f"usage: {usage.get('calls', 0)} calls, {usage.get('totalTokens', 0)} tokens",
        ]
        for line in lines:
            self.deliver(("info", line, "dim"))


__all__ = ["Link", "Refused", "dig", "is_loopback", "queued_count", "sessions_here"]
