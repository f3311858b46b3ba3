"""Routes for a session's checkpoints (actors.checkpoints, docs/how-to/checkpoints.md).

``GET /session/:id/checkpoints`` lists the turns of the conversation that have a checkpoint, with the
files each changed, and the undo entries; ``GET /session/:id/checkpoints/:turn/diff`` answers a
unified diff of one turn's changes; ``POST /session/:id/checkpoints/undo/:undoId {force?}`` undoes a
rewind (files and conversation). A rewind with ``files: true`` is ``POST /session/:id/rewind``
(transport/app.py), which calls :func:`rewind_files`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from quart import Response
from quart_trio import QuartTrio

from actors import Daemon, SessionHandle, wire
from actors.checkpoints import CheckpointRefused
from actors.wire import answers

from .errors import HttpError, json_response

PATHS = {"invalid_turn": "$.turn", "checkpoint_not_found": "$.turn", "files_changed_outside": "$.force",
         "session_busy": None}


def refusal(exc: CheckpointRefused, path: str | None = None) -> HttpError:
    """A refused checkpoint operation as its HTTP error (``files_changed_outside`` lists the ``paths``)."""
    status = answers.ERROR_CODES.get(exc.code, 500)
    extra: dict[str, Any] = {"paths": exc.paths} if exc.code == "files_changed_outside" else {}
    return HttpError(status, exc.message, exc.code, path if path is not None else PATHS.get(exc.code), **extra)


def _rewound(result: dict[str, Any]) -> answers.Rewound:
    return answers.Rewound(historyLength=result["historyLength"], restored=result["restored"],
                           deleted=result["deleted"], undoId=result["undoId"],
                           skipped=[answers.SkippedPath(**s) for s in result["skipped"]])


async def rewind_files(handle: SessionHandle, turn: int, force: bool) -> Response:
    """``POST /session/:id/rewind {turn, files: true, force?}``: the files and the conversation."""
    try:
        result = await handle.checkpoints("rewind", turn=turn, force=force)
    except CheckpointRefused as exc:
        raise refusal(exc) from None
    return json_response(wire.unstructure(_rewound(result)))


def register(app: QuartTrio, daemon: Daemon, session: Callable[[str], SessionHandle],
             body: Callable[[type[Any]], Awaitable[Any]]) -> None:
    """Add the routes; ``session`` looks a live session up (404 otherwise), ``body`` decodes a request body."""

    @app.get("/session/<session_id>/checkpoints")
    async def checkpoints(session_id: str) -> Response:
        try:
            listed = await session(session_id).checkpoints("list")
        except CheckpointRefused as exc:
            raise refusal(exc) from None
        answer = answers.Checkpoints(
            checkpoints=[answers.Checkpoint(turn=c["turn"], promptId=c["promptId"], at=c["at"],
                                            files=[answers.ChangedFile(**f) for f in c["files"]],
                                            notCovered=c["notCovered"]) for c in listed["checkpoints"]],
            undo=[answers.UndoEntry(**u) for u in listed["undo"]])
        return json_response(wire.unstructure(answer))

    @app.get("/session/<session_id>/checkpoints/<turn>/diff")
    async def checkpoint_diff(session_id: str, turn: str) -> Response:
        handle = session(session_id)
        if not turn.isdigit() or len(turn) > 9:
            raise HttpError(400, "turn must be a user turn's number, from 0", "invalid_turn", "url.turn")
        try:
            diff = await handle.checkpoints("diff", turn=int(turn))
        except CheckpointRefused as exc:
            raise refusal(exc, "url.turn") from None
        return json_response(wire.unstructure(answers.CheckpointDiff(**diff)))

    @app.post("/session/<session_id>/checkpoints/undo/<undoId>")
    async def undo(session_id: str, undoId: str) -> Response:  # noqa: N803 (the document's name)
        handle = session(session_id)
        b = await body(wire.UndoBody, optional=True)  # type: ignore[call-arg]
        try:
            result = await handle.checkpoints("undo", undo_id=undoId, force=bool(b.force))
        except CheckpointRefused as exc:
            raise refusal(exc, "url.undoId" if exc.code == "checkpoint_not_found" else None) from None
        return json_response(wire.unstructure(_rewound(result)))


__all__ = ["refusal", "register", "rewind_files"]
