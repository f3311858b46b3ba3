"""A session's status, as ``GET /session/:id/status`` and the replay traces show it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .session import Session


def status_of(session: Session) -> dict[str, Any]:
    """What a session says of itself: its work, events, guard, background tasks, usage and context."""
    work = session.current
    return {
        "sessionId": session.session_id,
        "workspaceCwd": session.cwd,
        "state": "running" if work else "idle",
        "activeWorkState": work.kind if work else "idle",
        "hasActivePrompt": bool(work and work.kind == "prompt"),
        "currentPromptId": work.prompt_id if work else None,
        "approvalMode": session.approval_mode,
        "model": session.model_name,
        "lastEventId": session.bus.last_event_id,
        "eventEpoch": session.bus.epoch,
        "subscribers": session.bus.subscriber_count,
        "historyLength": len(session.history),
        "backgroundTasks": session.background.status(),
        "automaticQueue": len(session.background.queue),
        "pendingPermissions": session.permissions.pending_ids,
        "todoStopGuard": session.chain.guard.summary(),
        "queuedPromptPriority": session.chain.queued_prompt_priority,
        "sandbox": session.runtime.sandbox.kind,  # what model-run commands of this session run in
        "usage": session.usage.summary(),  # model calls and tokens since the session began, by source
        "context": session.context.status(),  # the window, the last request's estimate and its calibration
    }
