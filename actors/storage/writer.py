"""One session's journal in a store: appends, compaction so it never grows without bound, and deferred syncs.

Inside :meth:`JournalWriter.deferring` (an actor's handler, see
:func:`actors._actor.serve_mailbox`), where the store syncs in a thread
(``LocalStore.sync_in_thread``: the daemon's), a durable append is
written without its sync, and :meth:`JournalWriter.commit` then makes
everything written durable in a worker thread: the event loop runs on while
the disk takes its time, and the actor's replies (a 202) wait for the sync as
they waited for the inline one. Otherwise (PostgreSQL, ``storage.fsync``
``never``, an embedder, a daemon under virtual time) each durable append
syncs itself, as outside the block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio

from .base import SessionStore

COMPACT_AFTER = 2048  # records appended since the last compaction

log = logging.getLogger("trellis.storage")


class JournalWriter:
    """Appends a session's journal records; :meth:`compact_if_due` rewrites it from a snapshot."""

    def __init__(self, store: SessionStore, session_id: str, *, existing: int = 0) -> None:
        self._store = store
        self._session_id = session_id
        self._count = existing
        self._deferring = False
        self._unsynced = False  # a durable record was written in a deferring block and not synced yet
        self._sync_failed = False  # the last deferred sync failed: durable appends sync inline until one works

    def existing(self, count: int) -> None:
        self._count = count

    def append(self, record: dict[str, Any], *, durable: bool = True) -> None:
        """Append ``record`` (synced unless ``durable=False``, or by the next :meth:`commit` inside
        :meth:`deferring`); raises ``StorageError`` (an ``OSError``) and changes nothing if it cannot."""
        if durable and self._deferring and not self._sync_failed:
            self._store.journal_append(self._session_id, record, durable=False)
            self._unsynced = True
        else:
            self._store.journal_append(self._session_id, record, durable=durable)
            if durable:
                self._sync_failed = False
        self._count += 1

    @property
    def unsynced(self) -> bool:
        """A durable record was written in a :meth:`deferring` block and waits for :meth:`commit`."""
        return self._unsynced

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """Durable appends in the block are written now and synced by the next :meth:`commit`."""
        self._deferring = self._store.sync_in_thread
        try:
            yield
        finally:
            self._deferring = False

    async def commit(self) -> None:
        """Sync what :meth:`deferring` wrote, in a worker thread; no checkpoint when there is nothing.

        A failed sync is logged, not raised: what the records describe has been
        done and answered. The durable appends after it then sync on the event
        loop, as without this writer's deferral, so the next one that cannot be
        made durable is refused (the FIFO fails closed again) until one is.
        """
        if not self._unsynced:
            return
        self._unsynced = False
        try:
            sync = self._store.journal_syncer(self._session_id)
            if sync is not None:
                await trio.to_thread.run_sync(sync)
        except OSError as exc:
            self._sync_failed = True
            log.error("session %s: journal not synced (the next records sync before they are answered): %s",
                      self._session_id, exc)

    def compact_if_due(self, snapshot: Callable[[], list[dict[str, Any]]]) -> None:
        """Past the bound, replace the journal with ``snapshot()`` (taken after the last change was applied)."""
        if self._count < COMPACT_AFTER:
            return
        records = snapshot()
        try:
            self._store.journal_rewrite(self._session_id, records)
        except OSError as exc:
            log.error("session %s: journal not compacted: %s", self._session_id, exc)
            return
        self._count = len(records)
        self._unsynced = False  # the rewritten journal is durable, and holds what was waiting for a sync
