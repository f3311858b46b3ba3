"""The wire form of every event's ``data``, as attrs classes: what the builders in events.py return.

The builders stay dict-making functions (they run on every streamed chunk); these classes are their
shapes, field by field, for the generated schemas (actors/wire/schema.py) that the OpenAPI document
gives each SSE event type. tests/actors/test_event_data.py checks every builder's output against
its class's schema, so the two cannot drift apart silently. A field with a default may be absent.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

from .answers import MidTurnItem, UsageSummary
from .bodies import CancelledOutcome, SelectedOutcome

# --------------------------------------------------------------------------- the envelope


@attrs.frozen(kw_only=True)
class ServerTimestamp:
    serverTimestamp: int


@attrs.frozen(kw_only=True)
class EventEnvelope:
    """One event as an SSE frame's ``data:`` line carries it (``Event.to_dict``). Synthetic frames (replay
    markers, slow-client frames) have no ``id`` and no ``_meta``; ``originatorClientId`` is on a prompt's
    echo when the prompt was sent with ``X-Qwen-Client-Id``."""

    id: int = 0
    v: Literal[1]
    type: str
    promptId: str = ""
    data: dict[str, Any]
    originatorClientId: str = ""
    meta: ServerTimestamp | None = None


# --------------------------------------------------------------------------- session_update payloads


@attrs.frozen(kw_only=True)
class MessageChunk:
    """The prompt's echo, streamed model text or thought, and discrete daemon messages (``_meta`` says which)."""

    sessionUpdate: Literal["user_message_chunk", "agent_message_chunk", "agent_thought_chunk"]
    content: dict[str, Any]
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class BackgroundNotificationTask:
    """The background item a ``background_notification`` message is about (qwen's ``backgroundTask``):
    ``status`` ``completed``, ``failed``, ``cancelled`` (a killed one) or ``running`` (a monitor's batch);
    a shell's command is ``commandLabel``, another item's label ``description``."""

    taskId: str
    kind: Literal["shell", "monitor", "agent", "wakeup", "cron"]
    status: str = ""
    commandLabel: str = ""
    description: str = ""


@attrs.frozen(kw_only=True)
class BackgroundNotificationMeta:
    """``_meta`` of the ``agent_message_chunk`` that shows a background item's result (:class:`MessageChunk`)
    when its automatic turn starts (``wire.background_notification_update``)."""

    source: Literal["background_notification"]
    qwenDiscreteMessage: Literal[True]
    backgroundTask: BackgroundNotificationTask


@attrs.frozen(kw_only=True)
class Location:
    path: str
    line: int | None = None


@attrs.frozen(kw_only=True)
class ToolCallMeta:
    """``_meta`` of a tool call's updates: ``toolName``, the tool the model called (on the call's every update
    but a client terminal's, as qwen serve stamps it; qwen's Web Shell labels the card by it), and ``rule``,
    the permission rule that refused the call."""

    toolName: str = ""
    rule: str = ""


@attrs.frozen(kw_only=True)
class ToolCall:
    """ACP's ``tool_call`` (a call starts, or fails at once) and ``tool_call_update`` (it ended); the compacted
    replay merges a call and its updates into one ``tool_call``."""

    sessionUpdate: Literal["tool_call", "tool_call_update"]
    toolCallId: str
    status: Literal["pending", "in_progress", "completed", "failed"]
    title: str = ""
    kind: Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"] = "other"
    rawInput: Any = None
    content: list[dict[str, Any]] = attrs.Factory(list)
    locations: list[Location] = attrs.Factory(list)
    meta: ToolCallMeta | None = None


@attrs.frozen(kw_only=True)
class PlanEntry:
    content: str
    status: Literal["pending", "in_progress", "completed"]
    priority: Literal["high", "medium", "low"]
    meta: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class Plan:
    sessionUpdate: Literal["plan"]
    entries: list[PlanEntry]


@attrs.frozen(kw_only=True)
class CurrentModeUpdate:
    sessionUpdate: Literal["current_mode_update"]
    currentModeId: Literal["default", "auto-edit", "yolo", "plan"]


@attrs.frozen(kw_only=True)
class SessionInfoUpdate:
    """The session's title changed (``null``: cleared); ``updatedAt`` is ISO 8601 in UTC."""

    sessionUpdate: Literal["session_info_update"]
    title: str | None
    updatedAt: str


@attrs.frozen(kw_only=True)
class AvailableCommandsUpdate:
    sessionUpdate: Literal["available_commands_update"]
    availableCommands: list[dict[str, Any]]


SessionUpdatePayload = (MessageChunk | ToolCall | Plan | CurrentModeUpdate | SessionInfoUpdate
                        | AvailableCommandsUpdate)


# --------------------------------------------------------------------------- daemon events


@attrs.frozen(kw_only=True)
class SessionUpdate:
    """An ACP ``session/update`` payload."""

    sessionId: str
    update: SessionUpdatePayload


@attrs.frozen(kw_only=True)
class PendingPromptAdded:
    sessionId: str
    promptId: str
    text: str
    queuedAt: int


@attrs.frozen(kw_only=True)
class PendingPromptStarted:
    sessionId: str
    promptId: str
    text: str


@attrs.frozen(kw_only=True)
class PendingPromptCompleted:
    sessionId: str
    promptId: str
    state: Literal["completed", "removed"]


@attrs.frozen(kw_only=True)
class TokenLimit:
    """Why a ``max_tokens`` turn stopped."""

    cause: Literal["max_tokens", "context_window"]
    answerCut: bool
    limit: int | None
    message: str
    finishReason: str = ""


@attrs.frozen(kw_only=True)
class PromptCancelled:
    """When a turn that had started was cancelled (``cancelledAt``, epoch milliseconds) and how long it had run
    by then (``elapsedMs``): qwen serve's ``turn_complete.promptCancelled``."""

    cancelledAt: int
    elapsedMs: int


@attrs.frozen(kw_only=True)
class TurnComplete:
    """A turn ended. ``promptCancelled`` is on a cancelled turn that had started (not on a queued prompt
    taken back, nor on a turn its session's close ended)."""

    sessionId: str
    stopReason: Literal["end_turn", "cancelled", "max_tokens", "max_turn_requests", "refusal"]
    promptId: str
    hookStopReason: str = ""
    usage: UsageSummary | None = None
    tokenLimit: TokenLimit | None = None
    promptCancelled: PromptCancelled | None = None


@attrs.frozen(kw_only=True)
class TurnError:
    sessionId: str
    message: str
    code: str
    promptId: str
    usage: UsageSummary | None = None


@attrs.frozen(kw_only=True)
class MidTurnMessageInjected:
    sessionId: str
    messages: list[str]
    messageIds: list[str]
    items: list[MidTurnItem]


@attrs.frozen(kw_only=True)
class PermissionOption:
    optionId: str
    name: str
    kind: Literal["allow_once", "allow_always", "reject_once", "reject_always"]


@attrs.frozen(kw_only=True)
class PermissionRequest:
    requestId: str
    sessionId: str
    toolCall: dict[str, Any]
    options: list[PermissionOption]


@attrs.frozen(kw_only=True)
class PermissionResolved:
    requestId: str
    sessionId: str
    outcome: SelectedOutcome | CancelledOutcome  # the vote, as it was given


@attrs.frozen(kw_only=True)
class BackgroundTask:
    """``status``: ``started``, ``output``, ``finished`` or ``notification_dropped``; the members beside these
    depend on it (docs/protocol.md, *Event types*)."""

    wire_open: ClassVar[bool] = True
    sessionId: str
    taskId: str
    status: Literal["started", "output", "finished", "notification_dropped"]


@attrs.frozen(kw_only=True)
class HookResult:
    sessionId: str
    hookEvent: str
    systemMessages: list[str]
    failures: list[str]
    stopReason: str = ""


@attrs.frozen(kw_only=True)
class FollowupSuggestion:
    """``suggestion``: the first of ``suggestions`` (qwen serve sends that one; its Web Shell reads only it)."""

    sessionId: str
    promptId: str
    suggestion: str
    suggestions: list[str]


@attrs.frozen(kw_only=True)
class SessionMetadataUpdated:
    """qwen serve's event for a title change (published with ``session_info_update``): ``displayName`` is the
    title, ``null`` when cleared; ``titleSource`` ``auto`` (from the first prompt) or ``manual`` when set."""

    sessionId: str
    displayName: str | None
    titleSource: Literal["auto", "manual"] = "manual"


@attrs.frozen(kw_only=True)
class ApprovalModeChanged:
    """qwen serve's event for an approval-mode change, whoever made it (a route, ACP, a subagent's start),
    published right after its ``current_mode_update``: ``previous`` and ``next`` mode; ``persisted`` is always
    ``false`` (qwen: also written to its settings file; Trellis never writes the mode there). qwen's Web Shell
    moves its mode picker to ``next``."""

    sessionId: str
    previous: Literal["default", "auto-edit", "yolo", "plan"]
    next: Literal["default", "auto-edit", "yolo", "plan"]
    persisted: bool


@attrs.frozen(kw_only=True)
class ModelSwitched:
    """qwen serve's event for a model change (``POST /session/:id/model``, a ``/model`` command, a subagent's
    start): ``modelId`` is the model name from the next model call on. qwen's Web Shell moves its model picker to it."""

    sessionId: str
    modelId: str


@attrs.frozen(kw_only=True)
class ConversationRewound:
    """User turn ``turn`` (from 0, as a rewind counts them) and everything after it left the conversation;
    ``undoId`` when the files went back with it."""

    sessionId: str
    turn: int
    historyLength: int
    undoId: str | None


@attrs.frozen(kw_only=True)
class RewindUndone:
    """The undo ``undoId`` put the conversation and the files back as they were; ``newUndoId`` undoes it."""

    sessionId: str
    undoId: str
    historyLength: int
    newUndoId: str


@attrs.frozen(kw_only=True)
class SessionClosed:
    sessionId: str
    reason: Literal["closed", "daemon_shutdown", "crashed"]


# --------------------------------------------------------------------------- synthetic frames


@attrs.frozen(kw_only=True)
class StateResyncRequired:
    reason: Literal["epoch_reset", "ring_evicted", "seeded_replay_not_in_ring"]
    lastDeliveredId: int
    earliestAvailableId: int


@attrs.frozen(kw_only=True)
class ReplayComplete:
    replayedCount: int
    lastReplayedEventId: int
    lastEventId: int


@attrs.frozen(kw_only=True)
class HistoryTruncated:
    reason: Literal["replay_window_exceeded"]
    truncatedEvents: int
    retainedEvents: int
    fullTranscriptAvailable: Literal[True]
    maxBytes: int
    maxEvents: int = 0
    truncatedTurns: int = 0
    scope: Literal["live_journal"] = "live_journal"


@attrs.frozen(kw_only=True)
class SlowClientWarning:
    queueSize: int
    maxQueued: int
    queuedBytes: int
    maxQueuedBytes: int
    lastEventId: int
    threshold: Literal["frames", "bytes", "frames_and_bytes"]
    queued: int  # the names of a first version, kept for older clients
    limit: int


@attrs.frozen(kw_only=True)
class ClientEvicted:
    reason: Literal["queue_overflow", "queue_bytes_overflow"]
    droppedAfter: int
    queueSize: int
    maxQueued: int
    queuedBytes: int
    maxQueuedBytes: int
    queued: int
    limit: int
    eventBytes: int = 0


# Every event type a session's stream carries, and the class of its data.
EVENT_DATA: dict[str, type] = {
    "session_update": SessionUpdate,
    "pending_prompt_added": PendingPromptAdded,
    "pending_prompt_started": PendingPromptStarted,
    "pending_prompt_completed": PendingPromptCompleted,
    "turn_complete": TurnComplete,
    "turn_error": TurnError,
    "mid_turn_message_injected": MidTurnMessageInjected,
    "permission_request": PermissionRequest,
    "permission_resolved": PermissionResolved,
    "background_task": BackgroundTask,
    "hook_result": HookResult,
    "followup_suggestion": FollowupSuggestion,
    "session_metadata_updated": SessionMetadataUpdated,
    "approval_mode_changed": ApprovalModeChanged,
    "model_switched": ModelSwitched,
    "conversation_rewound": ConversationRewound,
    "rewind_undone": RewindUndone,
    "session_closed": SessionClosed,
    "state_resync_required": StateResyncRequired,
    "replay_complete": ReplayComplete,
    "history_truncated": HistoryTruncated,
    "slow_client_warning": SlowClientWarning,
    "client_evicted": ClientEvicted,
}
SYNTHETIC = frozenset({"state_resync_required", "replay_complete", "history_truncated", "slow_client_warning",
                       "client_evicted"})
