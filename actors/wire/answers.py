"""The wire form of the REST answers: success bodies and the error body, as attrs classes.

Routes build the simple answers from these classes (``unstructure(SessionInfo(...))``); the answers
other modules build as dicts (a session's status, a turn record, the Web Shell's reads) are
described here field by field, and the daemon's answers are checked against the schemas generated
from these classes (actors/wire/schema.py, transport/openapi.py). A class with ``wire_omits_none = True`` leaves
out its members that are ``None`` (qwen serve writes such members only when set). A class with ``wire_open = True``
may carry members beyond those listed (forwarded records, tool-shaped entries).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import attrs

# --------------------------------------------------------------------------- errors

# Every machine-readable error code of the REST surface (docs/protocol.md, *Errors*), by status.
ERROR_CODES: dict[str, int] = {
    "invalid_json": 400, "invalid_request": 400, "value_too_long": 400, "value_too_deep": 400,
    "empty_prompt": 400, "empty_message": 400, "invalid_client_id": 400, "invalid_session_id": 400,
    "invalid_cwd": 400, "unknown_option": 400, "invalid_turn": 400, "invalid_model": 400,
    "too_many_sessions_named": 400, "invalid_metadata": 400, "missing_directive": 400,
    "images_not_supported": 400, "invalid_image": 400, "image_too_large": 400, "too_many_images": 400,
    "missing_connection_id": 400, "invalid_rule": 400, "unknown_tool": 400, "not_recording": 400,
    "unauthorized": 401,
    "origin_not_allowed": 403,
    "session_not_found": 404, "permission_not_found": 404, "turn_not_found": 404, "not_found": 404,
    "workspace_not_found": 404, "connection_not_found": 404,
    "method_not_allowed": 405,
    "session_starting": 409, "session_busy": 409, "settings_not_writable": 409, "files_changed_outside": 409,
    "deletion_unavailable": 409,
    "checkpoints_unavailable": 409, "checkpoint_not_found": 404,
    "payload_too_large": 413,
    "misdirected_host": 421,
    "transcript_corrupt": 500,
    "prompt_queue_full": 503, "too_many_sessions": 503, "too_many_subscribers": 503, "storage_unavailable": 503,
    "session_closing": 503, "shutting_down": 503, "too_many_connections": 503, "owner_unreachable": 503,
    "session_elsewhere": 503, "session_moving": 503, "node_draining": 503, "events_unavailable": 503,
    "git_refused": 409,
}
# Werkzeug's other refusals (a body that did not arrive in time, one that cannot be read): any status.
FRAMEWORK_CODE = "http_error"


@attrs.frozen(kw_only=True)
class ErrorBody:
    """Every 4xx/5xx answer: ``error`` is the sentence clients display, ``code`` is machine-readable, ``path``
    names the offending part of the request (``$.prompt[0].text``, ``url.sessionId``, ``header.Host``,
    ``query.maxQueued``) or is null. ``prompt_queue_full`` adds ``limit`` and ``pendingCount``;
    ``too_many_sessions`` adds ``limit``; ``files_changed_outside`` adds ``paths``, the files changed outside the
    session."""

    error: str
    code: str
    path: str | None
    limit: int = 0
    pendingCount: int = 0
    paths: list[str] = attrs.field(factory=list)


# --------------------------------------------------------------------------- the daemon


@attrs.frozen(kw_only=True)
class Health:
    status: Literal["ok"]


@attrs.frozen(kw_only=True)
class CapabilityLimits:
    maxSessions: int
    maxPendingPrompts: int
    maxMidTurnMessages: int
    eventRingSize: int
    maxBodyBytes: int


@attrs.frozen(kw_only=True)
class ProtocolVersions:
    current: str
    supported: list[str]


@attrs.frozen(kw_only=True)
class Workspace:
    id: str
    cwd: str
    primary: bool
    trusted: bool
    removable: bool


@attrs.frozen(kw_only=True)
class PermissionPolicy:
    permission: Literal["first-responder"]


@attrs.frozen(kw_only=True)
class Capabilities:
    """``GET /capabilities``: Trellis's own fields, then those qwen's SDK requires (transport/webshell.py)."""

    protocolVersion: int
    features: list[str]
    model: str
    todoStopGuard: bool
    sandbox: Literal["bwrap", "off"]
    limits: CapabilityLimits
    v: Literal[1]
    protocolVersions: ProtocolVersions
    mode: Literal["trellis"]
    modelServices: list[Any]
    workspaceCwd: str
    workspaces: list[Workspace]
    transports: list[str]
    policy: PermissionPolicy


@attrs.frozen(kw_only=True)
class SubagentRuns:
    """``GET /subagents``: each run as the MCP ``status`` tool shows it (never its token)."""

    runs: list[dict[str, Any]]


# --------------------------------------------------------------------------- sessions


@attrs.frozen(kw_only=True)
class SessionInfo:
    """What ``POST /session`` and ``fork`` answer (each answer hands out a new ``clientId``).

    ``hasActivePrompt`` (qwen serve's name, which qwen's Web Shell reads): a prompt was admitted and has not
    ended (running or queued), or an automatic turn runs."""

    sessionId: str
    workspaceCwd: str
    attached: bool
    clientId: str
    createdAt: int
    title: str | None
    hasActivePrompt: bool


@attrs.frozen(kw_only=True)
class LoadedSessionInfo(SessionInfo):
    """What ``load`` and ``resume`` answer: session info, the transcript's message count, and the cursor a
    stream goes on from (``load``: the loading client's stream first replays the session to it; ``resume``:
    ``0``, from where a stream replays the session from its start)."""

    restoredMessages: int
    lastEventId: int
    eventEpoch: str


@attrs.frozen(kw_only=True)
class SessionListEntry:
    """One session of ``GET /session``: live (``live``) or restorable from the state directory."""

    sessionId: str
    live: bool
    restorable: bool
    state: Literal["running", "idle", "stored", "remote"]
    cwd: str | None
    title: str | None
    createdAt: int | None
    updatedAt: int | None
    queuedCount: int
    pendingCount: int
    midTurnQueued: int
    node: str = ""  # cluster mode: the node that runs it


@attrs.frozen(kw_only=True)
class SessionList:
    sessions: list[SessionListEntry]


@attrs.frozen(kw_only=True)
class UsageTally:
    calls: int
    inputTokens: int
    outputTokens: int
    cachedReadTokens: int
    totalTokens: int


@attrs.frozen(kw_only=True)
class UsageSummary(UsageTally):
    """Model calls and tokens, in all and by what caused them (``primary``, ``todo_stop_guard``,
    ``compaction``, ``suggestion``)."""

    bySource: dict[str, UsageTally]


@attrs.frozen(kw_only=True)
class ContextStatus:
    window: int | None
    windowSource: Literal["configured", "server"] | None
    baseTokens: int
    estimatedTokens: int | None
    reportedTokens: int | None
    calibration: float | None


@attrs.frozen(kw_only=True)
class GuardStatus:
    """The Todo Stop Guard's counts and flags (never todo text)."""

    enabled: bool
    armed: bool
    unfinishedCount: int
    attempts: int
    maxAttempts: int
    suspended: bool
    retryPaused: bool
    awaitingQueuedPrompt: bool
    exhaustionReported: bool


@attrs.frozen(kw_only=True)
class BackgroundTaskStatus:
    """A background item of a session: ``startedAt`` and ``endedAt`` in milliseconds since the epoch (none
    for a timer that has not fired; ``endedAt`` once it ended)."""

    taskId: str
    kind: str
    status: str
    label: str
    exitCode: int | None = None
    startedAt: int | None = None
    endedAt: int | None = None


@attrs.frozen(kw_only=True)
class SessionStatus:
    """``GET /session/:id/status`` (``Session.status`` in actors/session/session.py)."""

    sessionId: str
    workspaceCwd: str
    title: str | None
    displayName: str | None  # the title again, by qwen serve's name for it (qwen's Web Shell reads this)
    state: Literal["idle", "running"]
    queuedCount: int
    pendingCount: int
    midTurnQueued: int
    activeWorkState: Literal["idle", "prompt", "automatic", "suggestion"]
    hasActivePrompt: bool
    currentPromptId: str | None
    approvalMode: Literal["default", "auto-edit", "yolo", "plan"]
    model: str | None
    modelName: str
    lastEventId: int
    eventEpoch: str
    subscribers: int
    historyLength: int
    backgroundTasks: list[BackgroundTaskStatus]
    automaticQueue: int
    pendingPermissions: list[str]
    todoStopGuard: GuardStatus
    queuedPromptPriority: bool
    sandbox: Literal["bwrap", "off"]
    usage: UsageSummary
    context: ContextStatus


@attrs.frozen(kw_only=True)
class PromptAdmitted:
    """``POST /session/:id/prompt`` (202): the prompt is durably in the session's FIFO."""

    promptId: str
    lastEventId: int
    eventEpoch: str


@attrs.frozen(kw_only=True)
class PendingPrompt:
    promptId: str
    state: Literal["queued", "running"]
    queuedAt: int
    text: str
    startedAt: int = 0
    originatorClientId: str = ""


@attrs.frozen(kw_only=True)
class PendingPrompts:
    pendingPrompts: list[PendingPrompt]


@attrs.frozen(kw_only=True)
class Removed:
    removed: bool


@attrs.frozen(kw_only=True)
class SessionNotDeleted:
    """One session ``POST /sessions/delete`` could not delete: ``error`` is ``message`` again, for qwen's
    Web Shell, which shows ``error``."""

    sessionId: str
    code: str
    message: str
    error: str


@attrs.frozen(kw_only=True)
class SessionsDeleted:
    """``POST /sessions/delete``: each session named is in one of the three lists."""

    removed: list[str]
    notFound: list[str]
    errors: list[SessionNotDeleted]


@attrs.frozen(kw_only=True)
class MidTurnAnswer:
    """``{"accepted": true, "messageId"}``, or ``{"accepted": false, "reason"}``."""

    accepted: bool
    messageId: str = ""
    reason: Literal["session_idle", "queue_full", "storage_unavailable", "message_id_conflict"] = "session_idle"


@attrs.frozen(kw_only=True)
class MidTurnItem:
    """One mid-turn message taken into a turn, as ``mid_turn_message_injected`` and the drain answer carry it."""

    messageId: str
    displayText: str
    content: list[dict[str, Any]]


@attrs.frozen(kw_only=True)
class MidTurnWaiting:
    """One mid-turn message still waiting, as ``GET /session/:id/mid-turn-messages`` lists it: qwen's form
    (``text``, not the drain's ``displayText``), which its Web Shell reads to rebuild its queue view."""

    messageId: str
    text: str


@attrs.frozen(kw_only=True)
class MidTurnMessages:
    """The mid-turn messages waiting for a tool boundary, and the ids of the last 200 taken into a turn
    (``settledMessageIds``) or run as a prompt of their own (``promotedMessageIds``)."""

    messages: list[MidTurnWaiting]
    settledMessageIds: list[str]
    promotedMessageIds: list[str]


@attrs.frozen(kw_only=True)
class TaskKilled:
    killed: bool
    taskId: str


@attrs.frozen(kw_only=True)
class VoteAccepted:
    accepted: Literal[True]
    requestId: str


@attrs.frozen(kw_only=True)
class TurnRecord:
    """``GET /session/:id/turns/:promptId``; ``usage`` is live while the turn runs."""

    promptId: str
    state: Literal["queued", "running", "completed", "error", "cancelled"]
    promptText: str
    queuedAt: int
    startedAt: int = 0
    endedAt: int = 0
    stopReason: str = ""
    error: str = ""
    errorCode: str = ""
    usage: UsageSummary | None = None


@attrs.frozen(kw_only=True)
class TranscriptEntry:
    """One transcript record (``{"type": "message", "message": {role, content, ...}}`` and others)."""

    wire_open: ClassVar[bool] = True
    type: str


@attrs.frozen(kw_only=True)
class Transcript:
    sessionId: str
    entries: list[TranscriptEntry]


@attrs.frozen(kw_only=True)
class ForkLaunched:
    """A fork that runs a directive (qwen serve's ``POST /session/:id/fork`` answer, 202): ``sessionId`` is the
    source's, as qwen's; ``forkSessionId`` the new session running the directive as its first prompt."""

    sessionId: str
    description: str
    launched: bool
    forkSessionId: str


@attrs.frozen(kw_only=True)
class HistoryLength:
    historyLength: int


@attrs.frozen(kw_only=True)
class SkippedPath:
    path: str
    reason: str


@attrs.frozen(kw_only=True)
class Rewound:
    """``POST /session/:id/rewind``: the messages kept; with ``files: true`` also the paths restored (written or
    made), deleted and left alone, and the undo entry that takes it all back."""

    historyLength: int
    restored: list[str] = attrs.field(factory=list)
    deleted: list[str] = attrs.field(factory=list)
    skipped: list[SkippedPath] = attrs.field(factory=list)
    undoId: str | None = None


@attrs.frozen(kw_only=True)
class ChangedFile:
    path: str
    change: Literal["added", "deleted", "modified"]
    kind: Literal["file", "link", "dir"]


@attrs.frozen(kw_only=True)
class Checkpoint:
    turn: int
    promptId: str
    at: int
    files: list[ChangedFile]  # what the turn changed (the latest turn: up to now)
    notCovered: list[str]  # paths its checkpoints do not cover (over a cap, unreadable, ...)


@attrs.frozen(kw_only=True)
class UndoEntry:
    undoId: str
    at: int
    kind: Literal["rewind", "undo"]
    turn: int | None


@attrs.frozen(kw_only=True)
class Checkpoints:
    """``GET /session/:id/checkpoints``: each turn of the conversation that has a checkpoint, and the undo
    entries (newest last)."""

    checkpoints: list[Checkpoint]
    undo: list[UndoEntry]


@attrs.frozen(kw_only=True)
class CheckpointDiff:
    """``GET /session/:id/checkpoints/:turn/diff``: a unified diff of what the turn changed."""

    turn: int
    promptId: str
    files: list[str]
    diff: str


@attrs.frozen(kw_only=True)
class WorkspaceCwd:
    workspaceCwd: str


@attrs.frozen(kw_only=True)
class TitleAnswer:
    sessionId: str
    title: str | None


@attrs.frozen(kw_only=True)
class SessionMetadata:
    """``PATCH /session/:id/metadata``'s answer, as qwen serve's: the session's title as ``displayName``
    (``null``: it has none)."""

    sessionId: str
    displayName: str | None


@attrs.frozen(kw_only=True)
class RuleLists:
    allow: list[str]
    ask: list[str]
    deny: list[str]


@attrs.frozen(kw_only=True)
class PermissionRules:
    """The rules in force: the settings file's (read at start) and the session's own."""

    settings: RuleLists
    session: RuleLists


@attrs.frozen(kw_only=True)
class PermissionRuleEdit:
    changed: bool  # false: the session had that rule already (an add), or had no such rule (a removal)
    settingsFile: str | None = None  # the settings file the rule was also written to, when asked
    rules: PermissionRules


@attrs.frozen(kw_only=True)
class PermissionExplained:
    """What a call would come to now: ``outcome``, and what decides it (``decidedBy``)."""

    outcome: Literal["allow", "ask", "deny"]
    decidedBy: Literal["rule", "mode", "tool"]
    decision: Literal["allow", "ask", "deny"] | None  # what the rules alone say
    rule: str | None
    reason: str
    approvalMode: Literal["default", "auto-edit", "yolo", "plan"]


@attrs.frozen(kw_only=True)
class ModelAnswer:
    model: str


@attrs.frozen(kw_only=True)
class ModeAnswer:
    mode: Literal["default", "auto-edit", "yolo", "plan"]


# --------------------------------------------------------------------------- qwen's Web Shell (transport/webshell.py)


@attrs.frozen(kw_only=True)
class Brand:
    """``GET /brand``: qwen's white-label title and logo; none here."""


@attrs.frozen(kw_only=True)
class DaemonStatus:
    """``GET /daemon/status`` in the shape qwen's Daemon Status panel reads (docs/webshell.md)."""

    wire_open: ClassVar[bool] = True
    v: Literal[1]
    detail: Literal["summary", "full"]
    generatedAt: str
    status: Literal["ok"]
    issues: list[Any]
    daemon: dict[str, Any]
    security: dict[str, Any]
    limits: dict[str, Any]
    capabilities: dict[str, Any]
    runtime: dict[str, Any]


@attrs.frozen(kw_only=True)
class CurrentProvider:
    authType: str
    modelId: str


@attrs.frozen(kw_only=True)
class ProviderModel:
    modelId: str
    baseModelId: str
    name: str
    isCurrent: bool
    isRuntime: bool
    contextLimit: int = 0


@attrs.frozen(kw_only=True)
class Provider:
    kind: Literal["model_provider"]
    status: Literal["ok"]
    authType: str
    current: bool
    models: list[ProviderModel]


@attrs.frozen(kw_only=True)
class WorkspaceProviders:
    v: Literal[1]
    workspaceCwd: str
    initialized: bool
    acpChannelLive: bool
    current: CurrentProvider
    approvalMode: Literal["default", "auto-edit", "yolo", "plan"]
    providers: list[Provider]


@attrs.frozen(kw_only=True)
class WorkspaceSettings:
    v: Literal[1]
    settings: list[Any]


@attrs.frozen(kw_only=True)
class ModelServices:
    models: list[Any]


@attrs.frozen(kw_only=True)
class GitStatus:
    """``GET /workspaces/:workspace/git`` in qwen serve's names. The counts and ``computedAt`` come from ``git
    status`` run in the sandbox, and are absent where it was not run (actors/workspace_git.py says when);
    ``operation`` only while one is under way."""

    v: Literal[2]
    workspaceCwd: str
    branch: str | None
    detached: bool | None = None
    hasUpstream: bool | None = None
    ahead: int | None = None
    behind: int | None = None
    staged: int | None = None
    unstaged: int | None = None
    untracked: int | None = None
    conflicted: int | None = None
    stashCount: int | None = None
    computedAt: int | None = None
    operation: Literal["rebase", "merge", "cherry-pick", "revert", "bisect"] | None = None


@attrs.frozen(kw_only=True)
class SessionTask:
    """One entry of ``GET /session/:id/tasks``, in qwen serve's names: a background shell, monitor or
    subagent run (``kind`` ``shell``, ``monitor``, ``agent``)."""

    wire_omits_none: ClassVar[bool] = True

    kind: Literal["shell", "monitor", "agent"]
    id: str
    label: str
    description: str
    status: Literal["running", "paused", "completed", "failed", "cancelled"]
    startTime: int
    runtimeMs: int
    endTime: int | None = None
    command: str | None = None
    exitCode: int | None = None


@attrs.frozen(kw_only=True)
class SessionTasks:
    """``GET /session/:id/tasks``: the session's background work, oldest first (qwen's Environment panel)."""

    v: Literal[1]
    sessionId: str
    now: int
    tasks: list[SessionTask]


@attrs.frozen(kw_only=True)
class SessionGoal:
    """``GET /session/:id/goal``: qwen serve's answer for a session without a goal; a Trellis session has none
    (a goal belongs to a subagent run)."""

    snapshot: None


@attrs.frozen(kw_only=True)
class GitDiffEntry:
    """One changed file of ``GET /workspaces/:workspace/git/diff``, its path from the top of the work tree;
    ``oldPath`` only for a rename."""

    wire_omits_none: ClassVar[bool] = True

    path: str
    added: int
    removed: int
    isBinary: bool
    isUntracked: bool
    isDeleted: bool
    truncated: bool
    oldPath: str | None = None


@attrs.frozen(kw_only=True)
class GitDiff:
    """``GET /workspaces/:workspace/git/diff``: the work tree's changes against ``HEAD``, in qwen serve's names
    and limits (actors/git_diff.py): at most 50 ``files``, ``hiddenCount`` the rest; ``available`` false (and
    nothing listed) where git could not say."""

    v: Literal[1]
    workspaceCwd: str
    available: bool
    filesCount: int
    linesAdded: int
    linesRemoved: int
    files: list[GitDiffEntry]
    hiddenCount: int


@attrs.frozen(kw_only=True)
class GitHunk:
    """One hunk of a file's diff: its lines with their ``+``, ``-`` or space prefix, as ``git diff`` prints
    them."""

    oldStart: int
    oldLines: int
    newStart: int
    newLines: int
    lines: list[str]


@attrs.frozen(kw_only=True)
class GitDiffFile:
    """``GET /workspaces/:workspace/git/diff/file?path=[&oldPath=]``: one file's hunks (an untracked file's one
    hunk of added lines); ``truncated`` only when the limits cut them; ``available`` false when there are
    none."""

    wire_omits_none: ClassVar[bool] = True

    v: Literal[1]
    workspaceCwd: str
    path: str
    available: bool
    hunks: list[GitHunk]
    truncated: bool | None = None


@attrs.frozen(kw_only=True)
class GitLogEntry:
    """One commit of ``GET /workspaces/:workspace/git/log``; ``authorDate`` in seconds, ``refs`` as ``git log``'s
    ``%D`` (``HEAD -> main, tag: v1``) when there are any."""

    wire_omits_none: ClassVar[bool] = True

    sha: str
    shortSha: str
    authorName: str
    authorEmail: str
    authorDate: int
    subject: str
    parents: list[str]
    refs: str | None = None


@attrs.frozen(kw_only=True)
class GitLog:
    """``GET /workspaces/:workspace/git/log[?limit=&skip=&all=1&range=&search=]``: a page of the history, newest
    first (actors/git_log.py); ``available`` false where git could not say."""

    v: Literal[1]
    workspaceCwd: str
    available: bool
    entries: list[GitLogEntry]
    hasMore: bool


@attrs.frozen(kw_only=True)
class GitCommitFile:
    path: str
    added: int
    removed: int
    isBinary: bool


@attrs.frozen(kw_only=True)
class GitCommit:
    """``GET /workspaces/:workspace/git/log/commit?sha=``: one commit, its message and its files against its first
    parent (at most 50 listed, ``hiddenCount`` the rest); only ``v``, ``workspaceCwd`` and ``available`` when it
    is not available."""

    wire_omits_none: ClassVar[bool] = True

    v: Literal[1]
    workspaceCwd: str
    available: bool
    sha: str | None = None
    shortSha: str | None = None
    authorName: str | None = None
    authorEmail: str | None = None
    authorDate: int | None = None
    subject: str | None = None
    body: str | None = None
    refs: str | None = None
    parents: list[str] | None = None
    files: list[GitCommitFile] | None = None
    filesCount: int | None = None
    linesAdded: int | None = None
    linesRemoved: int | None = None
    hiddenCount: int | None = None


@attrs.frozen(kw_only=True)
class GitBranch:
    """A local or remote branch of ``GET /workspaces/:workspace/git/branches``: its upstream and how far ahead and
    behind it, its push target (``push*`` only with one), its last commit's time (seconds) and subject."""

    wire_omits_none: ClassVar[bool] = True

    name: str
    isHead: bool
    ahead: int
    behind: int
    commitDate: int
    commitSubject: str
    upstream: str | None = None
    upstreamGone: bool | None = None
    pushTarget: str | None = None
    pushAhead: int | None = None
    pushBehind: int | None = None
    pushGone: bool | None = None


@attrs.frozen(kw_only=True)
class GitTag:
    name: str
    date: int
    subject: str


@attrs.frozen(kw_only=True)
class GitBranches:
    """``GET /workspaces/:workspace/git/branches``: the branch picker's lists (actors/git_branches.py); ``head`` the
    branch checked out, or the short hash of a detached head."""

    v: Literal[1]
    workspaceCwd: str
    available: bool
    local: list[GitBranch]
    remote: list[GitBranch]
    tags: list[GitTag]
    recent: list[str]
    head: str
    detached: bool


@attrs.frozen(kw_only=True)
class GitCheckedOut:
    """``POST /workspaces/:workspace/git/checkout`` and ``.../git/branch``: what is checked out now (the short hash
    when ``detached``)."""

    branch: str
    detached: bool


@attrs.frozen(kw_only=True)
class GitCommitted:
    """``POST /workspaces/:workspace/git/commit``: the new commit's short hash and subject."""

    sha: str
    subject: str


@attrs.frozen(kw_only=True)
class WorkspaceSession:
    sessionId: str
    workspaceCwd: str | None
    createdAt: str | None
    updatedAt: str | None
    sourceType: Literal["default"]
    isArchived: bool
    clientCount: int
    hasActivePrompt: bool
    activeWorkState: Literal["idle", "active"]
    isWaitingForPermission: bool
    pendingInteractionCount: int
    displayName: str = ""


@attrs.frozen(kw_only=True)
class WorkspaceSessions:
    sessions: list[WorkspaceSession]
    nextCursor: str = ""


@attrs.frozen(kw_only=True)
class SessionContext:
    """``GET /session/:id/context``: the session's model and approval modes, as qwen names them."""

    v: Literal[1]
    sessionId: str
    workspaceCwd: str | None
    state: dict[str, Any]


@attrs.frozen(kw_only=True)
class SupportedCommands:
    v: Literal[1]
    sessionId: str
    availableCommands: list[Any]
    availableSkills: list[Any]


@attrs.frozen(kw_only=True)
class ContextBreakdown:
    """Where a context's tokens go, by qwen's categories. Trellis estimates the system prompt and the tool
    schemas together (``status.context.baseTokens``): all of it is ``systemPrompt``; ``messages`` is the rest
    of the last request, ``freeSpace`` what the window has left; the categories Trellis does not count are 0."""

    systemPrompt: int
    builtinTools: int
    mcpTools: int
    memoryFiles: int
    skills: int
    messages: int
    freeSpace: int
    autocompactBuffer: int


@attrs.frozen(kw_only=True)
class ContextUsageFigures:
    """``totalTokens``: the last request's size, the server's count of it when it gave one, else Trellis's
    estimate (``isEstimated``); 0 before the first request. ``contextWindowSize``: 0 when no window is known."""

    modelName: str
    totalTokens: int
    contextWindowSize: int
    breakdown: ContextBreakdown
    builtinTools: list[Any]
    mcpTools: list[Any]
    memoryFiles: list[Any]
    skills: list[Any]
    isEstimated: bool
    showDetails: bool


@attrs.frozen(kw_only=True)
class SessionContextUsage:
    """``GET /session/:id/context-usage`` (qwen serve's; its Web Shell's Context Usage panel), from the
    session's ``status.context``."""

    v: Literal[1]
    sessionId: str
    workspaceCwd: str | None
    usage: ContextUsageFigures
    formattedText: str


@attrs.frozen(kw_only=True)
class ModelApiStats:
    """A model's requests: ``totalRequests`` is the session's model calls; errors and latency are not
    counted (0)."""

    totalRequests: int
    totalErrors: int
    totalLatencyMs: int


@attrs.frozen(kw_only=True)
class ModelTokenStats:
    """qwen's token names: ``prompt`` input, ``candidates`` output, ``cached`` cache reads; ``thoughts`` 0 (not
    counted apart from the output)."""

    prompt: int
    candidates: int
    total: int
    cached: int
    thoughts: int


@attrs.frozen(kw_only=True)
class ModelStats:
    api: ModelApiStats
    tokens: ModelTokenStats


@attrs.frozen(kw_only=True)
class ToolCallTotals:
    """Tool calls: not counted per session (0)."""

    totalCalls: int
    totalSuccess: int
    totalFail: int
    totalDurationMs: int


@attrs.frozen(kw_only=True)
class FileLineTotals:
    """Lines added and removed: not counted per session (0)."""

    totalLinesAdded: int
    totalLinesRemoved: int


@attrs.frozen(kw_only=True)
class SkillTotals:
    totalCalls: int
    totalSuccess: int
    totalFail: int
    byName: dict[str, Any]


@attrs.frozen(kw_only=True)
class SessionStats:
    """``GET /session/:id/stats`` (qwen serve's; its Web Shell's Token Usage panel), from the session's
    ``status.usage``: one entry of ``models``, the session's model, once it made a call (every source's calls:
    the prompt's, the Todo Stop Guard's, compaction's, suggestions'). qwen's ``promptCount``, ``sources``
    (its subagents) and ``tools.byName`` are left out: Trellis does not count them per session."""

    v: Literal[1]
    sessionId: str
    workspaceCwd: str | None
    sessionStartTimeMs: int
    durationMs: int
    models: dict[str, ModelStats]
    tools: ToolCallTotals
    files: FileLineTotals
    skills: SkillTotals
