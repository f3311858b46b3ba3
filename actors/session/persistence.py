"""What of a session outlives its daemon: restoring one after a restart, and its session record.

The journal (:mod:`actors.storage.journal`) and the transcript are written as
the session goes; this module reads them back when a session is restored,
keeps the session record (cwd, approval mode, model name, system-prompt layers, times) current and
writes each folded turn of the compacted replay (:mod:`actors.events.compaction`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from .. import wire
from ..background.automatic import parse_notification
from ..events import EventBus
from ..model import ChatMessage
from ..wire import Event
from ..storage import DAEMON_RESTARTED, NODE_LOST, NODE_LOST_MESSAGE, RESTARTED_MESSAGE
from .conversation import Conversation, shown_as_user_text
from .publisher import Publisher

INTERRUPTED = {DAEMON_RESTARTED: RESTARTED_MESSAGE, NODE_LOST: NODE_LOST_MESSAGE}

log = logging.getLogger("trellis.session")


def restore_conversation(conversation: Conversation, publisher: Publisher, store: Any) -> int:
    """Replace the conversation with the transcript on disk; how many messages.

    A session restored after a restart seeds its replay with its earlier turns
    (compacted, guard chunks intact). A live one reloading publishes nothing: its
    bus already holds what its clients were shown, and a client that loads it is
    shown that (:func:`load_replay`), not the others.
    """
    messages = conversation.reload()
    bus = publisher.bus
    if bus.seedable:
        bus.seed(replay_segments(store, publisher.session_id, messages))
    return len(messages)


TURN_ENDS = frozenset({"turn_complete", "turn_error"})


def load_replay(bus: EventBus, turn_active: bool) -> tuple[list[Event], int]:
    """What the client that loads a session is shown first on its stream, and the id it goes on after.

    The earlier turns as the compacted replay keeps them (tool calls included), then the turn still
    running as it streamed, its pending permission requests among its events (``bus.resync_replay``,
    with no ``state_resync_required``: the client asked for the session, it did not lose its place).
    While a prompt is active (``turn_active``) the earlier turns' ``turn_complete``/``turn_error`` are left
    out: qwen's Web Shell takes the first turn end it reads after loading a session with an active prompt
    for that prompt's end, and would show the running turn as over. The events keep their ids, all up to
    the returned one.
    """
    last = bus.last_event_id
    events = bus.resync_replay()
    if turn_active:
        events = [e for e in events if e.type not in TURN_ENDS]
    return events, last


def end_interrupted(publisher: Publisher, transcript: Any, prompt_id: str, code: str = DAEMON_RESTARTED) -> None:
    """A prompt the previous daemon (or lost node) was running when it died: ended, said, written; never re-run."""
    message = INTERRUPTED[code]
    session_id = publisher.session_id
    publisher.event("turn_error", wire.turn_error(session_id, prompt_id, message, code), prompt_id)
    try:
        transcript.append_record({"type": "turn_error", "promptId": prompt_id, "code": code, "message": message})
    except OSError as exc:
        log.error("session %s: %s not written to the transcript: %s", session_id, code, exc)


def save_record(store: Any, session_id: str, record: dict[str, Any]) -> None:
    """Write the session record; ``StorageError`` (an ``OSError``) when the store refuses it."""
    if store is not None:
        store.record_write(session_id, record)


class RecordSaver:
    """A live session's record writes after a change (approval mode, model, cwd), off the event loop where the
    store syncs there: a record is replaced with two fsyncs (its file, then its directory after the rename).

    In the session actor's handler :meth:`mark` only notes the change; the actor's mailbox then commits it
    (:func:`~actors._actor.serve_mailbox`) in a worker thread before the handler's replies go, so a client
    is answered once its change is on disk, as before. Writes go one at a time, each of the state when it
    starts (a later one never lands under an earlier). Events the change publishes (``current_mode_update``)
    may go out before the write; the reply does not. Where the store syncs on the event loop (an embedder,
    tests, replays, PostgreSQL, ``storage.fsync: never``) :meth:`mark` writes at once, as
    it writes otherwise. Failures are logged.
    """

    def __init__(self, store: Any, session_id: str, record: Callable[[], dict[str, Any]]) -> None:
        self._store = store
        self._session_id = session_id
        self._record = record  # the record as the session stands now
        self._dirty = False
        self._one_at_a_time = trio.Lock()

    def _in_thread(self) -> bool:
        return self._store is not None and self._store.sync_in_thread

    @property
    def unsynced(self) -> bool:
        """A change was marked and waits for :meth:`commit`."""
        return self._dirty

    def mark(self) -> None:
        """The record changed (in the actor's handler)."""
        if self._in_thread():
            self._dirty = True
        else:
            self._save_quietly()

    def _save_quietly(self) -> None:
        try:
            save_record(self._store, self._session_id, self._record())
        except OSError as exc:
            log.error("session %s: session record not written: %s", self._session_id, exc)

    def save_soon(self, nursery: trio.Nursery) -> None:
        """A change made outside the actor's handler, where nothing commits a :meth:`mark`: written at once
        where the store syncs on the event loop, else by a task of ``nursery``."""
        if self._in_thread():
            nursery.start_soon(self.save)
        else:
            self._save_quietly()

    async def commit(self) -> None:
        self._dirty = False
        await self.save()

    async def save(self) -> None:
        """Write the record now (outside the handler: a slash command's change); a failure is logged."""
        try:
            await self.write()
        except OSError as exc:
            log.error("session %s: session record not written: %s", self._session_id, exc)

    async def write(self) -> None:
        """Write the record now, in a thread where the store syncs there; ``StorageError`` (an ``OSError``)
        when the store refuses it (a new session's first record: then the session is not created)."""
        if not self._in_thread():
            save_record(self._store, self._session_id, self._record())
            return
        # Shielded: the change is live already, so a cancelled turn (a /model cut short) must not leave its
        # record unwritten while it waits for the write before it.
        with trio.CancelScope(shield=True):
            async with self._one_at_a_time:
                record = self._record()  # taken once the write before it is done: the newest state lands last
                await trio.to_thread.run_sync(self._store.record_write, self._session_id, record)


class ReplayWriter:
    """A session's compacted replay on disk: each folded turn appended as it is folded (written, not fsynced:
    a view, not a promise), and the whole file rewritten from what the compactor keeps once it is twice its
    bound.

    The rewrite (what is kept, up to ``limits.replay_bytes``, and two fsyncs) runs in a worker thread where
    the store syncs there and the session is running. Turns folded meanwhile wait in memory (appended now,
    they would go to the file being replaced) and are appended once the rewrite is over, whether it worked
    (the new file is what was kept before them) or not (the old one holds everything before them), a
    session closing meanwhile included. A daemon killed during a rewrite loses them from the replay (the
    transcript keeps the conversation). Elsewhere (an embedder, tests, replays, PostgreSQL,
    ``storage.fsync: never``) the rewrite runs at once, on the loop. A failure is logged, not raised: the
    replay is a view of the conversation, and the turn it folds has already ended.
    """

    def __init__(self, store: Any, session_id: str, bus: EventBus, nursery: Callable[[], trio.Nursery | None]) -> None:
        self._store = store
        self._session_id = session_id
        self._compactor = bus.compactor  # not the bus, which holds this writer's turn_folded: no cycle
        self._nursery = nursery  # the session's, while it runs
        self._waiting: list[list[dict[str, Any]]] | None = None  # folded during a rewrite (None: none under way)

    def turn_folded(self, segment: list[Event]) -> None:
        store = self._store
        if store is None:
            return
        if self._waiting is not None:
            self._waiting.append([e.to_dict() for e in segment])
            return
        try:
            size = store.replay_append(self._session_id, [e.to_dict() for e in segment])
            if size <= 2 * self._compactor.max_bytes:
                return
            nursery = self._nursery() if store.sync_in_thread else None
            if nursery is not None:
                try:
                    nursery.start_soon(self._rewrite_off_loop)
                    self._waiting = []
                    return
                except RuntimeError:  # the session's nursery has closed: it is going away
                    pass
            store.replay_rewrite(self._session_id, self._kept())
        except OSError as exc:
            log.error("session %s: compacted replay not written: %s", self._session_id, exc)

    def _kept(self) -> list[list[dict[str, Any]]]:
        return [[e.to_dict() for e in s] for s in self._compactor.kept()]

    async def _rewrite_off_loop(self) -> None:
        store = self._store
        assert store is not None
        with trio.CancelScope(shield=True):  # a session closing meanwhile: the rewrite is done all the same
            try:
                await trio.to_thread.run_sync(store.replay_rewriter(self._session_id), self._kept())
            except OSError as exc:
                log.error("session %s: compacted replay not rewritten: %s", self._session_id, exc)
            finally:
                waiting, self._waiting = self._waiting or [], None
                try:
                    for segment in waiting:
                        store.replay_append(self._session_id, segment)
                except OSError as exc:
                    log.error("session %s: compacted replay not written: %s", self._session_id, exc)


def replay_segments(store: Any, session_id: str, messages: list[ChatMessage]) -> list[list[Event]]:
    """The earlier turns a restored session replays: its compacted replay, else its transcript's messages.

    A replay file that cannot be read, or holds something that is not an event, is logged and the
    transcript's messages are replayed instead.
    """
    try:
        stored = store.replay_read(session_id) if store is not None else None
    except OSError as exc:  # a damaged view must not keep the conversation from coming back
        log.error("session %s: compacted replay unreadable (%s); replaying the transcript instead",
                  session_id, exc)
        stored = None
    if stored is not None:
        where = f"compacted replay of session {session_id}"
        try:
            return [[Event.from_dict(e, f"{where}, turn {n}") for e in segment] for n, segment in enumerate(stored, 1)]
        except ValueError as exc:
            log.error("%s; replaying the transcript instead", exc)
    segments = []
    for m in messages:  # a state directory from before the compacted replay, or one that lost it
        kind = "user_message_chunk" if m.role == "user" else "agent_message_chunk" if m.role == "assistant" else None
        note = parse_notification(m.content) if m.origin == "automatic" and isinstance(m.content, str) else None
        if note is not None:  # a background result: shown as it was live, not as the user's message
            update = wire.background_notification_update(note.text, note.background_task())
            update["_meta"]["replay"] = True
            segments.append([Event("session_update", wire.session_update(session_id, update))])
            continue
        if kind is not None and m.content and (kind != "user_message_chunk" or shown_as_user_text(m)):
            update = wire.text_update(kind, m.content, {"replay": True})
            segments.append([Event("session_update", wire.session_update(session_id, update))])
    return segments
