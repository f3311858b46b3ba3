"""Bridge mode: the ACP client owns the prompt queue, so mid-turn drains are asked of it.

A client opts in at ``initialize`` with
``clientCapabilities._meta["craft/drainMidTurnQueue"] == true``. Each session
bound to it then drains through :class:`BridgeDrain`, which sends
``craft/drainMidTurnQueue {sessionId, todoStopGuardWatchQueuedPrompt?}`` and
turns the answer ``{messages, items, hasQueuedPrompt?}`` into a
:class:`DrainResult`. Only ``hasQueuedPrompt: true`` counts (an older client
omits it: false). A client that answers method-not-found, or that misses the
deadline three times in a row, is not asked again: the session falls back to
its local FIFO.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from actors import ActorGone, SessionHandle
from actors._actor import PendingReply, Reply, reply_pair
from actors.session.fifo import MAX_DRAIN_ITEMS, DrainResult, MidTurnItem

from .jsonrpc import METHOD_NOT_FOUND, ConnectionClosed, Peer, RpcError

log = logging.getLogger("trellis.acp.bridge")

CAPABILITY = "craft/drainMidTurnQueue"
DRAIN_METHOD = "craft/drainMidTurnQueue"
RELEASE_METHOD = "craft/todoStopGuardQueueReleased"
DEADLINE = 2.0  # the session's own drain deadline (actors.session.drains.DRAIN_DEADLINE)
LATE_LIMIT = 30.0  # how long a late answer is still awaited (its messages are kept, its queue flag is not)
MAX_TIMEOUTS = 3
EMPTY = DrainResult((), (), False)


def client_supports_bridge(client_capabilities: dict[str, Any]) -> bool:
    meta = client_capabilities.get("_meta")
    return isinstance(meta, dict) and meta.get(CAPABILITY) is True


def to_drain_result(answer: Any, watch_queued_prompt: bool, *, late: bool) -> DrainResult:
    """The client's answer as a :class:`DrainResult`; anything malformed reads as empty."""
    if not isinstance(answer, dict):
        return EMPTY
    items: list[MidTurnItem] = []
    raw_items = answer.get("items")
    if isinstance(raw_items, list):
        for i, raw in enumerate(raw_items):
            if isinstance(raw, dict) and isinstance(raw.get("displayText"), str):
                message_id = raw.get("messageId") if isinstance(raw.get("messageId"), str) else f"bridge-{i}"
                items.append(MidTurnItem(message_id, raw["displayText"]))
    messages = answer.get("messages")
    texts = [m for m in messages if isinstance(m, str)] if isinstance(messages, list) else []
    if not texts:
        texts = [item.text for item in items]
    if len(texts) > MAX_DRAIN_ITEMS:
        log.warning("a bridge drain returned %d messages; only the first %d are used", len(texts), MAX_DRAIN_ITEMS)
    texts, items = texts[:MAX_DRAIN_ITEMS], items[:MAX_DRAIN_ITEMS]
    # A late answer's queue snapshot may be stale: it never counts.
    queued = watch_queued_prompt and not late and answer.get("hasQueuedPrompt") is True
    return DrainResult(tuple(texts), tuple(items), queued)


class BridgeDrain:
    """The drain source installed on one session while a bridge client is bound to it."""

    def __init__(self, peer: Peer, handle: SessionHandle, nursery: trio.Nursery, *,
                 deadline: float = DEADLINE, late_limit: float = LATE_LIMIT) -> None:
        self._peer = peer
        self._handle = handle
        self._nursery = nursery
        self._deadline = deadline
        self._late_limit = max(late_limit, deadline)
        self.timeouts = 0  # consecutive
        self.enabled = True
        self.requests = 0

    async def install(self) -> None:
        await self._handle.set_drain_source(self)

    async def uninstall(self) -> None:
        try:
            await self._handle.set_drain_source(None, replacing=self)  # never remove someone else's source
        except (ActorGone, trio.TooSlowError):
            pass  # the session is gone: nothing to uninstall

    def __call__(self, watch_queued_prompt: bool) -> PendingReply[DrainResult]:
        """Called by the session (synchronously): the answer arrives through the returned reply."""
        reply, pending = reply_pair()
        if not self.enabled:
            reply.send(EMPTY)
        else:
            self._nursery.start_soon(self._ask, watch_queued_prompt, reply)
        return pending

    async def _ask(self, watch: bool, reply: Reply[DrainResult]) -> None:
        result = EMPTY
        try:
            result = await self._exchange(watch)
        finally:
            # Always answer: the session polls this reply later, and a closed reply would fail its turn.
            reply.send(result)

    async def _exchange(self, watch: bool) -> DrainResult:
        params: dict[str, Any] = {"sessionId": self._handle.session_id}
        if watch:
            params["todoStopGuardWatchQueuedPrompt"] = True
        self.requests += 1
        call = await self._peer.call(DRAIN_METHOD, params, session_id=self._handle.session_id)
        late = False
        try:
            try:
                answer = await call.wait(self._deadline)
            except trio.TooSlowError:
                late = True
                self._timed_out()
                answer = await call.wait(self._late_limit - self._deadline)
        except trio.TooSlowError:
            return EMPTY
        except RpcError as exc:
            if exc.code == METHOD_NOT_FOUND:
                self._switch_off("the client does not implement it")
            else:
                log.info("bridge drain failed for %s: %s", self._handle.session_id, exc.message)
            return EMPTY
        except ConnectionClosed:
            return EMPTY
        finally:
            self._peer.forget(call)
        if not late:
            self.timeouts = 0
        return to_drain_result(answer, watch, late=late)

    def _timed_out(self) -> None:
        self.timeouts += 1
        if self.timeouts >= MAX_TIMEOUTS:
            self._switch_off(f"{self.timeouts} consecutive timeouts")

    def _switch_off(self, why: str) -> None:
        if self.enabled:
            self.enabled = False
            log.warning("bridge draining off for session %s (%s); using the local queue",
                        self._handle.session_id, why)
            self._nursery.start_soon(self.uninstall)  # a message to the session: sent from a task of its own
