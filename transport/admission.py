"""A prompt's admission over HTTP: the route's answer to what the session's FIFO said."""

from __future__ import annotations

from typing import Any

from actors import Admitted
from actors.session.fifo import StorageUnavailable

from .errors import HttpError


def admission_answer(admitted: Any) -> dict[str, Any]:
    """The 202 body for an admitted prompt; :class:`HttpError` (503) for a full queue or storage that failed."""
    if isinstance(admitted, StorageUnavailable):
        raise HttpError(503, f"the prompt was not admitted: {admitted.reason}", "storage_unavailable")
    if not isinstance(admitted, Admitted):
        raise HttpError(503, f"the session already has {admitted.pending_count} pending prompt(s)",
                        "prompt_queue_full", limit=admitted.limit, pendingCount=admitted.pending_count)
    return {"promptId": admitted.prompt_id, "lastEventId": admitted.last_event_id,
            "eventEpoch": admitted.event_epoch}
