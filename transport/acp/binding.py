"""One ACP connection's hold on one session: the event pump, prompt answers, permission round trips.

The pump reads the session's bus in order and, in that order: forwards every
``session_update`` as a ``session/update`` notification (the bus event id
travels along, so the HTTP transport can resume a stream from the ring),
turns each ``permission_request`` into a ``session/request_permission`` to the
client, and answers the ``session/prompt`` request a ``turn_complete`` or
``turn_error`` ends. Because one task does all three, a prompt's answer always
follows its updates.

Tearing a binding down (explicit close, the end of the connection, or an HTTP
grace period running out) aborts the prompts it admitted and resolves the
permission requests it forwarded as *cancelled*: a client that went away never
approves anything.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import attrs
import trio

from actors import ActorGone, SessionHandle, TooManySubscribers
from actors.wire import Event, jsonrpc

from . import client_services, mapping
from .bridge import BridgeDrain
from .jsonrpc import ConnectionClosed, OutgoingCall, Request, RpcError

if TYPE_CHECKING:
    from .connection import AcpConnection

log = logging.getLogger("trellis.acp")

PUMP_QUEUE = 1024  # the pump's bus queue; if it overflows the pump catches up from the ring
FINISHED_KEPT = 64  # turn outcomes kept for a prompt whose answer is registered after its turn ended
VOTE_TIMEOUT = 10.0
RESUBSCRIBE_DELAY = 0.1


@attrs.define
class PermissionAsk:
    """A permission request forwarded to the client and not answered yet."""

    request_id: str  # the session's
    call: OutgoingCall  # ours, to the client
    options: list[dict[str, Any]]  # the session's own options
    tool_kind: str | None
    message: dict[str, Any]  # the JSON-RPC request, to send again to a resuming HTTP stream


class SessionBinding:
    """A session as one ACP connection sees it."""

    def __init__(self, conn: AcpConnection, handle: SessionHandle) -> None:
        self.conn = conn
        self.handle = handle
        self.session_id = handle.session_id
        self.waiters: dict[str, Request] = {}  # promptId -> the session/prompt request it answers
        self.finished: OrderedDict[str, Any] = OrderedDict()
        self.asks: dict[str, PermissionAsk] = {}
        self.rejected_kinds: set[str] = set()
        self.drain: BridgeDrain | None = None
        self.lent: Any = None  # the client's files/terminal lent to the session (client_services)
        self.processed_id = 0
        self.closed = False
        self._progress = trio.lowlevel.ParkingLot()
        self._scope = trio.CancelScope()

    # ------------------------------------------------------------- the pump

    async def run(self, cursor: int | None, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Pump events until the binding is torn down or the session closes.

        ``cursor`` replays the ring after that id first (``0``: all of it); ``None`` is live only.
        """
        started = False
        try:
            with self._scope:
                while True:
                    try:
                        subscription = self.handle.subscribe(cursor, max_queued=PUMP_QUEUE)
                    except TooManySubscribers:
                        if not started:
                            raise  # the caller refuses the binding
                        # Catching up after an eviction while the session is full: try again shortly.
                        await trio.sleep(RESUBSCRIBE_DELAY)
                        continue
                    if not started:
                        started = True
                        task_status.started()
                    try:
                        session_ended = await self._pump(subscription)
                    finally:
                        subscription.close()
                    if session_ended:
                        break
                    # Evicted (we fell behind): catch up from the ring where we stopped.
                    cursor = self.processed_id
        finally:
            self._progress.unpark_all()
        if not self.closed:
            await self.conn.session_ended(self)

    async def _pump(self, subscription: Any) -> bool:
        """Handle events in order; ``True`` when the session closed, ``False`` when evicted."""
        async for event in subscription:
            if event.id is None:
                if event.type == "client_evicted":
                    log.warning("ACP pump for %s fell behind; catching up from the ring", self.session_id)
                    return False
                if event.type == "replay_complete":
                    self._advance(event.data["lastEventId"])
                continue
            if event.id <= self.processed_id:
                continue  # already handled before a catch-up
            try:
                await self._handle(event)
            except Exception:  # contained: one odd event must not end the client's view of the session
                log.exception("ACP pump of %s could not handle event %s", self.session_id, event.id)
            self._advance(event.id)
            if event.type == "session_closed":
                return True
        return True

    def _advance(self, event_id: int) -> None:
        if event_id > self.processed_id:
            self.processed_id = event_id
            self._progress.unpark_all()

    async def _handle(self, event: Event) -> None:
        if event.type == "session_update":
            await self.conn.peer.notify("session/update", mapping.session_update(event.data),
                                        session_id=self.session_id, event_id=event.id)
        elif event.type == "permission_request":
            await self._ask_permission(event.data)
        elif event.type == "permission_resolved":
            ask = self.asks.get(event.data.get("requestId", ""))
            if ask is not None:
                self.conn.peer.forget(ask.call)  # resolved elsewhere; the client's late answer changes nothing
        elif event.type in ("turn_complete", "turn_error"):
            prompt_id = event.prompt_id or event.data.get("promptId") or ""
            if event.type == "turn_complete":
                outcome: Any = mapping.prompt_result(str(event.data.get("stopReason")), prompt_id)
            else:
                outcome = mapping.turn_error_outcome(event.data, prompt_id)
            request = self.waiters.pop(prompt_id, None)
            if request is None:
                self.finished[prompt_id] = outcome
                while len(self.finished) > FINISHED_KEPT:
                    self.finished.popitem(last=False)
            else:
                await self._answer(request, outcome)

    async def caught_up(self, event_id: int) -> None:
        """Wait until the pump has handled every event up to ``event_id`` (or the binding ended)."""
        while self.processed_id < event_id and not self.closed and not self._scope.cancel_called:
            await self._progress.park()

    # ------------------------------------------------------------- prompts

    async def expect(self, prompt_id: str, request: Request) -> None:
        """``request`` is answered when prompt ``prompt_id``'s turn ends."""
        outcome = self.finished.pop(prompt_id, None)
        if outcome is not None:
            await self._answer(request, outcome)
        else:
            self.waiters[prompt_id] = request

    async def _answer(self, request: Request, outcome: Any) -> None:
        if isinstance(outcome, RpcError):
            await self.conn.peer.respond(request, error=outcome)
        else:
            await self.conn.peer.respond(request, outcome)

    async def cancel(self) -> None:
        """``session/cancel``: abort the prompts this binding admitted (else whatever runs)."""
        ours = list(self.waiters)
        # Latest first: aborting the running prompt first let the session's next TakeNext hand over a queued
        # one of ours before its own abort arrived (the turn ends, settles and asks without yielding between).
        for prompt_id in reversed(ours):
            await self.handle.abort_prompt(prompt_id)
        await self._cancel_if_running(ours)

    async def _cancel_if_running(self, prompt_ids: list[str]) -> None:
        # A prompt the FIFO just started may not be the session's current work yet, so its
        # abort can miss; cancelling the running work covers that window.
        status = await self.handle.status()
        current = status.get("currentPromptId")
        if current is not None and (not prompt_ids or current in prompt_ids):
            await self.handle.cancel()

    # ------------------------------------------------------------- permissions

    async def _ask_permission(self, data: dict[str, Any]) -> None:
        request_id = data.get("requestId", "")
        try:
            pending = await self.handle.has_permission_request(request_id)
        except (ActorGone, trio.TooSlowError):
            return  # the session is closing: nothing to ask
        if request_id in self.asks or not pending:
            return  # already asked, or already resolved (a replayed request)
        options = list(data.get("options") or [])
        tool_call = data.get("toolCall") or {}
        kind = tool_call.get("kind")
        if kind is not None and kind in self.rejected_kinds:
            await self._vote(request_id, "selected", mapping.reject_option(options))
            return
        params = {"sessionId": self.session_id, "toolCall": tool_call,
                  "options": mapping.permission_options(options)}
        call = await self.conn.peer.call("session/request_permission", params, session_id=self.session_id)
        message = jsonrpc.request(call.id, "session/request_permission", params)
        ask = PermissionAsk(request_id, call, options, kind, message)
        self.asks[request_id] = ask
        self.conn.nursery.start_soon(self._await_answer, ask)

    async def _await_answer(self, ask: PermissionAsk) -> None:
        outcome, option_id = "cancelled", None
        try:
            answer = await ask.call.wait()
            outcome, option_id = self._read_outcome(ask, answer)
        except (RpcError, ConnectionClosed) as exc:
            log.info("permission %s for %s resolved as cancelled: %s", ask.request_id, self.session_id, exc)
        finally:
            self.asks.pop(ask.request_id, None)
        await self._vote(ask.request_id, outcome, option_id)

    def _read_outcome(self, ask: PermissionAsk, answer: Any) -> tuple[str, str | None]:
        """``(outcome, optionId)`` from a ``RequestPermissionResponse``; anything unclear is a cancel."""
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        if not isinstance(outcome, dict) or outcome.get("outcome") != "selected":
            return "cancelled", None
        option_id = outcome.get("optionId")
        own = {o.get("optionId") for o in ask.options}
        if option_id == mapping.REJECT_ALWAYS_ID and option_id not in own:
            if ask.tool_kind is not None:
                self.rejected_kinds.add(ask.tool_kind)
            option_id = mapping.reject_option(ask.options)
        if not isinstance(option_id, str) or option_id not in own:
            return "cancelled", None  # an option we never offered approves nothing
        return "selected", option_id

    async def _vote(self, request_id: str, outcome: str, option_id: str | None) -> None:
        if outcome == "selected" and option_id is None:
            outcome = "cancelled"
        try:
            await self.handle.vote(request_id, outcome, option_id)
        except (ActorGone, trio.TooSlowError, ValueError) as exc:
            log.info("vote on %s not recorded: %s", request_id, exc)

    def pending_requests(self) -> list[dict[str, Any]]:
        """The permission requests still awaiting the client (sent again to a resuming stream)."""
        return [ask.message for ask in self.asks.values() if not ask.call.done]

    # ------------------------------------------------------------- the end

    async def teardown(self, *, abort: bool = True) -> None:
        """End the binding. With ``abort``: cancel its permission requests, then abort its prompts."""
        if self.closed:
            return
        self.closed = True
        asks, self.asks = list(self.asks.values()), {}
        waiters, self.waiters = dict(self.waiters), {}
        with trio.CancelScope(shield=True), trio.move_on_after(VOTE_TIMEOUT):
            # What the client lent goes back first (quietly, if the session is gone already).
            if self.drain is not None:
                await self.drain.uninstall()
            await client_services.take_back(self)
            for ask in asks:
                self.conn.peer.forget(ask.call)
                if abort:
                    await self._vote(ask.request_id, "cancelled", None)
            if abort:
                try:
                    for prompt_id in reversed(list(waiters)):  # latest first, as cancel() (see there)
                        await self.handle.abort_prompt(prompt_id)
                    if waiters:
                        await self._cancel_if_running(list(waiters))
                except (ActorGone, trio.TooSlowError):
                    pass  # the session is gone already
            for prompt_id, request in waiters.items():
                # Whoever still listens learns how its prompt ended.
                await self._answer(request, mapping.prompt_result("cancelled", prompt_id) if abort else
                                   RpcError(-32603, "the session closed", {"code": "session_closed"}))
        self._scope.cancel()
        self._progress.unpark_all()
