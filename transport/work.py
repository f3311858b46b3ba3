"""Routes for background work: kill one of a session's tasks, list the daemon's subagent runs.

``DELETE /session/:id/background-tasks/:taskId`` does what the model's
``kill_task`` tool does (a shell's whole process group, a monitor, a wakeup
or a cron job) and answers ``{"killed": bool}``; the task's ``background_task``
``finished`` event follows on the stream. ``GET /subagents`` lists every run
the daemon knows (live, and ended ones it still keeps), each as the MCP
``status`` tool shows it: ``{name, state, turn, maxTurns, endReason,
goalReachedSelfReported, question, ...}``. A run's token is never in it.
"""

from __future__ import annotations

from collections.abc import Callable

from quart import Response
from quart_trio import QuartTrio

from actors import Daemon, SessionHandle

from .errors import json_response


def register(app: QuartTrio, daemon: Daemon, session: Callable[[str], SessionHandle]) -> None:
    """Add the routes; ``session`` looks a live session up (404 ``session_not_found`` otherwise)."""

    @app.delete("/session/<session_id>/background-tasks/<task_id>")
    async def kill_background_task(session_id: str, task_id: str) -> Response:
        return json_response({"killed": await session(session_id).kill_task(task_id), "taskId": task_id})

    @app.get("/subagents")
    async def subagent_runs() -> Response:
        runs = daemon.subagents.list() if daemon.subagents is not None else []
        return json_response({"runs": runs})
