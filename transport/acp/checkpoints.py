"""ACP extension methods for a session's checkpoints: what ``POST /session/:id/rewind`` and the
``/checkpoints`` routes do, for an editor bound over ACP (ACP itself has no rewind).

``_trellis/checkpoints {sessionId}`` lists the turns with the files each changed, and the undo entries;
``_trellis/rewind {sessionId, turn, files?, force?}`` drops user turn ``turn`` and everything after it,
restoring the files to the start of that turn with ``files: true``;
``_trellis/checkpoints/undo {sessionId, undoId, force?}`` undoes such a rewind. A refusal is -32602 with
``data.path`` for a bad turn or id, else -32000 with ``data.code`` (``session_busy``,
``files_changed_outside`` with ``data.paths``, ``checkpoints_unavailable``, ...).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actors.checkpoints import CheckpointRefused

from . import params as p
from .jsonrpc import SERVER_BUSY, Request, RpcError, invalid_params

if TYPE_CHECKING:
    from .connection import AcpConnection

METHODS = ("_trellis/checkpoints", "_trellis/rewind", "_trellis/checkpoints/undo")


def _refused(exc: CheckpointRefused, path: str) -> RpcError:
    if exc.code in ("invalid_turn", "checkpoint_not_found"):
        return invalid_params(exc.message, path)
    data: dict[str, Any] = {"code": exc.code}
    if exc.code == "files_changed_outside":
        data["paths"] = exc.paths
    return RpcError(SERVER_BUSY, exc.message, data)


def _flag(params: dict[str, Any], name: str) -> bool:
    value = params.get(name, False)
    if type(value) is not bool:
        raise invalid_params("expected true or false", f"$.{name}")
    return value


def register(peer: Any, conn: AcpConnection) -> None:
    async def listing(request: Request) -> dict[str, Any]:
        conn.require_initialized()
        binding = conn.binding(p.require_object(request.params))
        try:
            return await binding.handle.checkpoints("list")
        except CheckpointRefused as exc:
            raise _refused(exc, "$.sessionId") from None

    async def rewind(request: Request) -> dict[str, Any]:
        conn.require_initialized()
        params = p.require_object(request.params)
        binding = conn.binding(params)
        turn = p.integer(params, "turn")
        files, force = _flag(params, "files"), _flag(params, "force")
        if not files:
            try:
                return {"historyLength": await binding.handle.rewind(turn)}
            except ValueError as exc:
                code = "session_busy" if "busy" in str(exc) else "invalid_turn"
                raise _refused(CheckpointRefused(code, str(exc)), "$.turn") from None
        try:
            return await binding.handle.checkpoints("rewind", turn=turn, force=force)
        except CheckpointRefused as exc:
            raise _refused(exc, "$.turn") from None

    async def undo(request: Request) -> dict[str, Any]:
        conn.require_initialized()
        params = p.require_object(request.params)
        binding = conn.binding(params)
        undo_id = p.string(params, "undoId")
        try:
            return await binding.handle.checkpoints("undo", undo_id=undo_id, force=_flag(params, "force"))
        except CheckpointRefused as exc:
            raise _refused(exc, "$.undoId") from None

    for method, handler in zip(METHODS, (listing, rewind, undo)):
        peer.method(method, handler)


__all__ = ["METHODS", "register"]
