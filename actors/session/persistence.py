"""What of a session outlives its daemon: restoring one after a restart, and its session record.

The journal (:mod:`actors.storage.journal`) and the transcript are written as
the session goes; this module reads them back when a session is restored,
keeps the session record (cwd, approval mode, model name, system-prompt layers, times) current and
writes each folded turn of the compacted replay (:mod:`actors.events.compaction`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from .. import wire
from ..model import ChatMessage
from ..wire import Event
from ..storage import DAEMON_RESTARTED, NODE_LOST, NODE_LOST_MESSAGE, RESTARTED_MESSAGE, replay

INTERRUPTED = {DAEMON_RESTARTED: RESTARTED_MESSAGE, NODE_LOST: NODE_LOST_MESSAGE}

if TYPE_CHECKING:
    from .session import Session

log = logging.getLogger("trellis.session")


def restore(session: Session) -> None:
    """Take the conversation from the transcript and the FIFO from the journal (after a restart).

    Called once, before the session runs and after the daemon's observers saw
    it, so they see the replayed events too. Raises ``TranscriptError`` or
    ``StorageError`` for files it cannot read; nothing runs then.
    """
    store = session.runtime.store
    journalled = store.journal_read(session.session_id) if store is not None else []
    restore_conversation(session)
    session.fifo.journal_count(len(journalled))
    code = session.interrupted_code
    replayed = replay(journalled)
    for prompt_id in session.fifo.restore(replayed, code, INTERRUPTED[code]):
        end_interrupted(session, prompt_id, code)
    session.timers_to_restore = replayed.timers  # started with the session's background actors


def restore_conversation(session: Session) -> int:
    """Replace the conversation with the transcript on disk, and show it to clients; how many messages.

    A session restored after a restart seeds its replay with its earlier turns
    (compacted, guard chunks intact); a live one reloading publishes its messages.
    """
    messages = session.transcript.messages()
    session.history = list(messages)
    if session.bus.seedable:
        session.bus.seed(replay_segments(session, messages))
        return len(messages)
    for m in messages:
        if m.role == "user":
            session.publish_update(wire.text_update("user_message_chunk", m.content, {"replay": True}))
        elif m.role == "assistant" and m.content:
            session.publish_update(wire.text_update("agent_message_chunk", m.content, {"replay": True}))
    return len(messages)


def end_interrupted(session: Session, prompt_id: str, code: str = DAEMON_RESTARTED) -> None:
    """A prompt the previous daemon (or lost node) was running when it died: ended, said, written; never re-run."""
    message = INTERRUPTED[code]
    session.bus.publish("turn_error", wire.turn_error(session.session_id, prompt_id, message, code), prompt_id)
    try:
        session.transcript.append_record({"type": "turn_error", "promptId": prompt_id, "code": code,
                                          "message": message})
    except OSError as exc:
        log.error("session %s: %s not written to the transcript: %s", session.session_id, code, exc)


def _record(session: Session) -> dict[str, Any]:
    return {
        "sessionId": session.session_id, "cwd": session.cwd, "approvalMode": session.approval_mode,
        "model": session.model_name, "createdAt": session.created_at, "updatedAt": session.runtime.clock_ms(),
        "eventEpoch": session.bus.epoch,  # a cluster's next owner keeps it (a single daemon starts a new one)
        **session.prompt_overrides.to_record()}


def save_record(session: Session) -> None:
    """Write the session record; ``StorageError`` (an ``OSError``) when the store refuses it."""
    store = session.runtime.store
    if store is not None:
        store.record_write(session.session_id, _record(session))


def save_record_quietly(session: Session) -> None:
    """Save the record after a change that goes ahead anyway (a failure is logged)."""
    try:
        save_record(session)
    except OSError as exc:
        log.error("session %s: session record not written: %s", session.session_id, exc)


class RecordSaver:
    """A live session's record writes after a change (approval mode, model, cwd), off the event loop where the
    store syncs there: a record is replaced with two fsyncs (its file, then its directory after the rename).

    In the session actor's handler :meth:`mark` only notes the change; the actor's mailbox then commits it
    (:func:`~actors._actor.serve_mailbox`) in a worker thread before the handler's replies go, so a client
    is answered once its change is on disk, as before. Writes go one at a time, each of the state when it
    starts (a later one never lands under an earlier). Events the change publishes (``current_mode_update``)
    may go out before the write; the reply does not. Where the store syncs on the event loop (an embedder,
    tests, replays, PostgreSQL, ``storage.fsync: never``) :meth:`mark` writes at once, as
    :func:`save_record_quietly` does. Failures are logged.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._dirty = False
        self._one_at_a_time = trio.Lock()

    def _in_thread(self) -> bool:
        store = self._session.runtime.store
        return store is not None and store.sync_in_thread

    @property
    def unsynced(self) -> bool:
        """A change was marked and waits for :meth:`commit`."""
        return self._dirty

    def mark(self) -> None:
        """The record changed (in the actor's handler)."""
        if self._in_thread():
            self._dirty = True
        else:
            save_record_quietly(self._session)

    async def commit(self) -> None:
        self._dirty = False
        await self.save()

    async def save(self) -> None:
        """Write the record now (outside the handler: a slash command's change); a failure is logged."""
        try:
            await self.write()
        except OSError as exc:
            log.error("session %s: session record not written: %s", self._session.session_id, exc)

    async def write(self) -> None:
        """Write the record now, in a thread where the store syncs there; ``StorageError`` (an ``OSError``)
        when the store refuses it (a new session's first record: then the session is not created)."""
        if not self._in_thread():
            save_record(self._session)
            return
        session = self._session
        # Shielded: the change is live already, so a cancelled turn (a /model cut short) must not leave its
        # record unwritten while it waits for the write before it.
        with trio.CancelScope(shield=True):
            async with self._one_at_a_time:
                record = _record(session)  # taken once the write before it is done: the newest state lands last
                await trio.to_thread.run_sync(session.runtime.store.record_write, session.session_id, record)


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

    def __init__(self, session: Session, nursery: Callable[[], trio.Nursery | None]) -> None:
        self._session = session
        self._nursery = nursery  # the session's, while it runs
        self._waiting: list[list[dict[str, Any]]] | None = None  # folded during a rewrite (None: none under way)

    def turn_folded(self, segment: list[Event]) -> None:
        session = self._session
        store = session.runtime.store
        if store is None:
            return
        if self._waiting is not None:
            self._waiting.append([e.to_dict() for e in segment])
            return
        try:
            size = store.replay_append(session.session_id, [e.to_dict() for e in segment])
            if size <= 2 * session.bus.compactor.max_bytes:
                return
            nursery = self._nursery() if store.sync_in_thread else None
            if nursery is not None:
                try:
                    nursery.start_soon(self._rewrite_off_loop)
                    self._waiting = []
                    return
                except RuntimeError:  # the session's nursery has closed: it is going away
                    pass
            store.replay_rewrite(session.session_id, self._kept())
        except OSError as exc:
            log.error("session %s: compacted replay not written: %s", session.session_id, exc)

    def _kept(self) -> list[list[dict[str, Any]]]:
        return [[e.to_dict() for e in s] for s in self._session.bus.compactor.kept()]

    async def _rewrite_off_loop(self) -> None:
        session = self._session
        store = session.runtime.store
        assert store is not None
        with trio.CancelScope(shield=True):  # a session closing meanwhile: the rewrite is done all the same
            try:
                await trio.to_thread.run_sync(store.replay_rewriter(session.session_id), self._kept())
            except OSError as exc:
                log.error("session %s: compacted replay not rewritten: %s", session.session_id, exc)
            finally:
                waiting, self._waiting = self._waiting or [], None
                try:
                    for segment in waiting:
                        store.replay_append(session.session_id, segment)
                except OSError as exc:
                    log.error("session %s: compacted replay not written: %s", session.session_id, exc)


def replay_segments(session: Session, messages: list[ChatMessage]) -> list[list[Event]]:
    """The earlier turns a restored session replays: its compacted replay, else its transcript's messages.

    A replay file that cannot be read, or holds something that is not an event, is logged and the
    transcript's messages are replayed instead.
    """
    store = session.runtime.store
    try:
        stored = store.replay_read(session.session_id) if store is not None else None
    except OSError as exc:  # a damaged view must not keep the conversation from coming back
        log.error("session %s: compacted replay unreadable (%s); replaying the transcript instead",
                  session.session_id, exc)
        stored = None
    if stored is not None:
        where = f"compacted replay of session {session.session_id}"
        try:
            return [[Event.from_dict(e, f"{where}, turn {n}") for e in segment] for n, segment in enumerate(stored, 1)]
        except ValueError as exc:
            log.error("%s; replaying the transcript instead", exc)
    segments = []
    for m in messages:  # a state directory from before the compacted replay, or one that lost it
        kind = "user_message_chunk" if m.role == "user" else "agent_message_chunk" if m.role == "assistant" else None
        if kind is not None and m.content:
            update = wire.text_update(kind, m.content, {"replay": True})
            segments.append([Event("session_update", wire.session_update(session.session_id, update))])
    return segments
