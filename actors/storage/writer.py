"""One session's journal in a store: appends, and compaction so it never grows without bound."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .base import SessionStore

COMPACT_AFTER = 2048  # records appended since the last compaction

log = logging.getLogger("trellis.storage")


class JournalWriter:
    """Appends a session's journal records; :meth:`compact_if_due` rewrites it from a snapshot."""

    def __init__(self, store: SessionStore, session_id: str, *, existing: int = 0) -> None:
        self._store = store
        self._session_id = session_id
        self._count = existing

    def existing(self, count: int) -> None:
        self._count = count

    def append(self, record: dict[str, Any], *, durable: bool = True) -> None:
        """Append ``record`` (synced unless ``durable=False``); raises ``StorageError`` (an ``OSError``)
        and changes nothing if it cannot."""
        self._store.journal_append(self._session_id, record, durable=durable)
        self._count += 1

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
