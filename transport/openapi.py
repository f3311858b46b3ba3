"""The OpenAPI 3.1 document of the REST API (``GET /openapi.json``), generated from the wire module.

Each route is one :class:`Operation` row below: its request body class, its answer class and the
error codes it can answer. Every schema is generated from the attrs classes of :mod:`actors.wire`
(bodies, answers, event data) by :mod:`actors.wire.schema`; nothing here writes a schema by hand
except the few plain parameters. :func:`openapi_document` is pure and imports no web framework,
so the document can be rendered without a daemon (for the docs site, say).

Errors: each status an operation can answer has the error body (``ErrorBody``) with its ``code``
narrowed to the codes of that status the operation can give. Events: ``GET
/session/{sessionId}/events`` answers ``text/event-stream``; its schema is a ``oneOf`` of one
envelope per event type (``type`` a const, ``data`` that type's schema) — what each frame's
``data:`` line holds — and the extension ``x-sse-events`` maps each event type to its data schema.
"""

from __future__ import annotations

import inspect
from typing import Any

import attrs

from actors.session.transcript import SESSION_ID_RULE
from actors.wire import bodies
from actors.wire import answers as a
from actors.wire import event_data as ev
from actors.wire.schema import REF_PREFIX, schemas_of

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1"  # the REST protocol's version (GET /capabilities: protocolVersion)

# Refusals any request can get before its route runs (transport/access.py, transport/connections.py).
ANY_REQUEST = ("origin_not_allowed", "misdirected_host", "too_many_connections", "http_error")
WITH_TOKEN = ("unauthorized",)
BODY = ("invalid_json", "invalid_request", "value_too_long", "value_too_deep", "payload_too_large")
SESSION = ("session_not_found", "invalid_client_id", "session_closing", "not_found", "owner_unreachable",
           "session_moving")  # not_found: a path parameter holding "/" matches no route
STARTS_WORK = ("shutting_down",)
STARTS_SESSION = ("invalid_session_id", "invalid_cwd", "session_starting", "too_many_sessions",
                  "transcript_corrupt", "storage_unavailable", "node_draining", "session_elsewhere")

SESSION_ID = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$",
              "description": f"A session id: {SESSION_ID_RULE}."}
AN_ID = {"type": "string", "minLength": 1}  # prompt, request and task ids are opaque: an unknown one is not found


@attrs.frozen(kw_only=True)
class Param:
    name: str
    where: str  # path, query or header
    schema: dict[str, Any]
    description: str = ""
    required: bool = False


SESSION_PARAM = Param(name="sessionId", where="path", schema=SESSION_ID, required=True)
CLIENT_ID = Param(name="X-Qwen-Client-Id", where="header", schema={"type": "string"},
                  description="The clientId a session answer handed out; an unknown one is 400 invalid_client_id.")
CWD_QUERY = Param(name="cwd", where="query", schema={"type": "string", "pattern": "^/"},
                  description="An absolute path to read the branch of instead.")
# A path from the top of the work tree: not absolute, no ".." part, no NUL (the route answers 400 otherwise).
_RELATIVE = {"type": "string", "pattern": r"^(?!/)(?!(?:.*/)?\.\.(?:/|$))[^\x00]*$"}
LOG_QUERY = (Param(name="limit", where="query", schema={"type": "integer", "minimum": 1, "maximum": 200}),
             Param(name="skip", where="query", schema={"type": "integer", "minimum": 0, "maximum": 1_000_000}),
             Param(name="all", where="query", schema={"enum": ["0", "1"], "type": "string"},
                   description="1: every branch, tag and remote, not HEAD alone."),
             Param(name="range", where="query",
                   schema={"type": "string", "pattern": r"^(?:(?!-|\.\.)[A-Za-z0-9_./~^-]+)?$"},
                   description="A revision or a range of them (a..b)."),
             Param(name="search", where="query", schema={"type": "string", "maxLength": 200, "pattern": "^[^\\x00]*$"},
                   description="Commits whose message or author holds it (any case), or the commit it names."))
SHA_QUERY = Param(name="sha", where="query", required=True, schema={"type": "string", "pattern": "^[0-9a-fA-F]{7,40}$"})
WORKSPACE_PARAM = Param(name="workspace", where="path", required=True, schema={"type": "string", "minLength": 1},
                        description="A workspace id from GET /capabilities, or an absolute path (percent-encoded)")
DIFF_PATH_QUERY = (Param(name="path", where="query", required=True, schema={**_RELATIVE, "minLength": 1},
                         description="The file, from the top of the work tree."),
                   Param(name="oldPath", where="query", schema=_RELATIVE,
                         description="A renamed file's old path (a diff entry's oldPath); empty is none."))


def _id(name: str, description: str = "") -> Param:
    return Param(name=name, where="path", schema=AN_ID, description=description, required=True)


@attrs.frozen(kw_only=True)
class Operation:
    """One route: ``answer`` is the success body's class (``None``: no body), ``body`` the request body's."""

    method: str
    path: str
    summary: str
    answer: type | None
    status: int = 200
    body: type | None = None
    body_optional: bool = False  # an empty body is taken as {}
    errors: tuple[str, ...] = ()
    params: tuple[Param, ...] = ()
    open: bool = False  # served without a bearer token
    tag: str = "sessions"
    also: tuple[tuple[int, type], ...] = ()  # other success answers: (status, body class)


def _session(method: str, tail: str, summary: str, answer: type | None, *, errors: tuple[str, ...] = (),
             params: tuple[Param, ...] = (), **kw: Any) -> Operation:
    """An operation on one live session (``/session/{sessionId}<tail>``), which checks ``X-Qwen-Client-Id``."""
    return Operation(method=method, path="/session/{sessionId}" + tail, summary=summary, answer=answer,
                     errors=SESSION + errors, params=(SESSION_PARAM, CLIENT_ID, *params), **kw)


OPERATIONS: tuple[Operation, ...] = (
    Operation(method="get", path="/health", summary="The daemon is up", answer=a.Health, open=True, tag="daemon"),
    Operation(method="get", path="/openapi.json", summary="This document", answer=None, open=True, tag="daemon"),
    Operation(method="get", path="/capabilities", summary="Protocol version, features, model, limits",
              answer=a.Capabilities, tag="daemon"),
    Operation(method="get", path="/metrics", summary="The daemon's metrics, in Prometheus's text format",
              answer=None, tag="daemon"),
    Operation(method="get", path="/subagents", summary="The daemon's subagent runs, live and recently ended",
              answer=a.SubagentRuns, tag="daemon"),
    Operation(method="get", path="/session", summary="Live and restorable sessions, newest first",
              answer=a.SessionList),
    Operation(method="post", path="/session", summary="Start, attach to or restore a session", answer=a.SessionInfo,
              body=bodies.CreateSessionBody, body_optional=True,
              errors=BODY + STARTS_WORK + STARTS_SESSION + ("invalid_rule", "not_recording")),
    Operation(method="post", path="/sessions/delete", summary="Delete sessions for good (a live one is closed first)",
              answer=a.SessionsDeleted, body=bodies.DeleteSessionsBody,
              errors=BODY + ("too_many_sessions_named", "deletion_unavailable")),
    _session("delete", "", "Close a session once every actor of it has stopped", None, status=204),
    _session("get", "/status", "A session's work, events, guard, background tasks, usage and context",
             a.SessionStatus),
    _session("post", "/prompt", "Admit a prompt to the session's FIFO", a.PromptAdmitted, status=202,
             body=bodies.PromptBody,
             errors=BODY + STARTS_WORK + ("empty_prompt", "images_not_supported", "invalid_image", "image_too_large",
                                          "too_many_images", "prompt_queue_full", "storage_unavailable")),
    _session("get", "/pending-prompts", "Queued and running prompts, in FIFO order", a.PendingPrompts),
    _session("delete", "/pending-prompts/{promptId}", "Remove a queued prompt or cancel the running one",
             a.Removed, params=(_id("promptId"),)),
    _session("post", "/mid-turn-message", "Queue input for the running turn", a.MidTurnAnswer,
             body=bodies.MidTurnMessageBody, errors=BODY + STARTS_WORK + ("empty_message",)),
    _session("get", "/mid-turn-messages", "Mid-turn input waiting for a tool boundary, and where the last went",
             a.MidTurnMessages),
    _session("delete", "/mid-turn-messages/{messageId}", "Take back mid-turn input no turn has taken yet",
             a.Removed, params=(_id("messageId"),), errors=("storage_unavailable",)),
    _session("post", "/cancel", "Cancel the running work", None, status=204),
    _session("delete", "/background-tasks/{taskId}", "Stop a live background task", a.TaskKilled,
             params=(_id("taskId"),)),
    _session("post", "/permission/{requestId}", "Vote on a permission request", a.VoteAccepted,
             body=bodies.PermissionVoteBody, errors=BODY + ("unknown_option", "permission_not_found"),
             params=(_id("requestId"),)),
    Operation(method="post", path="/permission/{requestId}", summary="Vote on whichever live session's request",
              answer=a.VoteAccepted, body=bodies.PermissionVoteBody,
              errors=BODY + ("unknown_option", "permission_not_found", "session_closing", "not_found",
                             "owner_unreachable", "storage_unavailable"),
              params=(_id("requestId"),)),
    _session("get", "/turns/{promptId}", "A turn's record ('current': the running prompt)", a.TurnRecord,
             errors=("turn_not_found",), params=(_id("promptId"),)),
    _session("get", "/events", "The session's event stream (SSE); HEAD answers the headers only", None,
             errors=("invalid_request", "too_many_subscribers", "events_unavailable"),
             params=(Param(name="Last-Event-ID", where="header", schema={"type": "string"},
                           description="The SSE cursor: a plain decimal up to 2^53-1; anything else is ignored."),
                     Param(name="lastEventId", where="query", schema={"type": "string"},
                           description="The cursor, for clients that cannot set headers."),
                     Param(name="X-Qwen-Event-Epoch", where="header", schema={"type": "string"},
                           description="The epoch the cursor came from."),
                     Param(name="epoch", where="query", schema={"type": "string"}),
                     Param(name="maxQueued", where="query", schema={"type": "integer", "minimum": 16,
                                                                    "maximum": 2048},
                           description="This stream's live queue, in frames."))),
    Operation(method="get", path="/session/{sessionId}/transcript", summary="A session's transcript from disk",
              answer=a.Transcript, errors=("session_not_found", "transcript_corrupt", "not_found"),
              params=(SESSION_PARAM,)),
    Operation(method="post", path="/session/{sessionId}/load", summary="Restore a session, or re-read a live one",
              answer=a.LoadedSessionInfo, body=bodies.LoadBody, body_optional=True,
              errors=BODY + STARTS_WORK + STARTS_SESSION + ("session_not_found", "not_found"),
              params=(SESSION_PARAM,)),
    Operation(method="post", path="/session/{sessionId}/resume", summary="Restore a session, or attach to a live one",
              answer=a.LoadedSessionInfo, body=bodies.LoadBody, body_optional=True,
              errors=BODY + STARTS_WORK + STARTS_SESSION + ("session_not_found", "not_found"),
              params=(SESSION_PARAM,)),
    _session("post", "/rewind", "Drop a user turn and everything after it (files: true restores the files too)",
             a.Rewound, body=bodies.RewindBody,
             errors=BODY + ("session_busy", "invalid_turn", "checkpoint_not_found", "files_changed_outside",
                            "checkpoints_unavailable", "storage_unavailable")),
    _session("get", "/checkpoints", "The turns that have a checkpoint, the files each changed, the undo entries",
             a.Checkpoints, errors=("checkpoints_unavailable", "storage_unavailable"), tag="checkpoints"),
    _session("get", "/checkpoints/{turn}/diff", "A unified diff of what one turn changed", a.CheckpointDiff,
             errors=("invalid_turn", "checkpoint_not_found", "checkpoints_unavailable", "storage_unavailable"),
             tag="checkpoints",
             params=(Param(name="turn", where="path", required=True, schema={"type": "string", "minLength": 1},
                           description="The user turn's number, from 0."),)),
    _session("post", "/checkpoints/undo/{undoId}", "Undo a rewind: the files and the conversation as before it",
             a.Rewound, body=bodies.UndoBody, body_optional=True, tag="checkpoints",
             errors=BODY + ("session_busy", "checkpoint_not_found", "files_changed_outside",
                            "checkpoints_unavailable", "storage_unavailable"),
             params=(_id("undoId"),)),
    _session("post", "/fork", "A new session with a copy of the conversation (with a directive: running it)",
             a.SessionInfo, body=bodies.ForkBody, body_optional=True, also=((202, a.ForkLaunched),),
             errors=BODY + STARTS_WORK + STARTS_SESSION + ("missing_directive", "session_busy")),
    _session("post", "/cwd", "Change the session's working directory", a.WorkspaceCwd, body=bodies.CwdBody,
             errors=BODY + ("invalid_cwd",)),
    _session("post", "/model", "Name the model from the next model call on", a.ModelAnswer, body=bodies.ModelBody,
             errors=BODY + ("invalid_model",)),
    _session("post", "/approval-mode", "Set the approval mode", a.ModeAnswer, body=bodies.ApprovalModeBody,
             errors=BODY),
    _session("post", "/title", "Give the session a title, or clear it", a.TitleAnswer, body=bodies.TitleBody,
             errors=BODY),
    _session("get", "/permissions", "The permission rules in force: the settings file's and the session's own",
             a.PermissionRules, tag="permissions"),
    _session("post", "/permissions", "Add a permission rule of the session's own (and to the settings file)",
             a.PermissionRuleEdit, body=bodies.PermissionRuleBody, errors=BODY + ("invalid_rule", "settings_not_writable"),
             tag="permissions"),
    _session("delete", "/permissions/{effect}", "Remove a permission rule of the session's own", a.PermissionRuleEdit,
             errors=("invalid_request",), tag="permissions",
             params=(Param(name="effect", where="path", required=True,
                           schema={"type": "string", "enum": ["allow", "ask", "deny"]}),
                     Param(name="rule", where="query", required=True, schema={"type": "string", "minLength": 1},
                           description="The rule, as listed."))),
    _session("get", "/permissions/explain", "What a tool call would come to now, and which rule or mode decides",
             a.PermissionExplained, errors=("invalid_request", "unknown_tool", "value_too_long"), tag="permissions",
             params=(Param(name="tool", where="query", required=True, schema={"type": "string", "minLength": 1},
                           description="The tool's name, as the model calls it."),
                     Param(name="input", where="query", schema={"type": "string"},
                           description="The call's arguments, a JSON object (default {})."))),
    # What qwen's Web Shell reads beyond the routes above (transport/webshell.py, docs/webshell.md).
    Operation(method="get", path="/brand", summary="White-label title and logo (none)", answer=a.Brand,
              tag="webshell"),
    Operation(method="get", path="/daemon/status", summary="The Daemon Status panel's report",
              answer=a.DaemonStatus, tag="webshell", errors=("invalid_request", "session_closing"),
              params=(Param(name="detail", where="query", schema={"enum": ["summary", "full"], "type": "string"}),)),
    Operation(method="get", path="/workspace/providers", summary="The model provider and its model",
              answer=a.WorkspaceProviders, tag="webshell"),
    Operation(method="get", path="/workspace/settings", summary="Editable settings (none)",
              answer=a.WorkspaceSettings, tag="webshell"),
    Operation(method="get", path="/workspace/models", summary="Model services (none)", answer=a.ModelServices,
              tag="webshell"),
    Operation(method="get", path="/workspace/git", summary="The workspace's git branch and status", answer=a.GitStatus,
              tag="webshell", errors=("invalid_request",),
              params=(CWD_QUERY,)),
    Operation(method="get", path="/workspace/git/diff", summary="The work tree's changes against HEAD",
              answer=a.GitDiff, tag="webshell", errors=("invalid_request",), params=(CWD_QUERY,)),
    Operation(method="get", path="/workspace/git/diff/file", summary="One file's diff",
              answer=a.GitDiffFile, tag="webshell", errors=("invalid_request",),
              params=(CWD_QUERY, *DIFF_PATH_QUERY)),
    Operation(method="get", path="/workspace/git/branches", summary="The work tree's branches and tags",
              answer=a.GitBranches, tag="webshell", errors=("invalid_request",), params=(CWD_QUERY,)),
    *(Operation(method="post", path=f"{prefix}/git/{action}", summary=summary, answer=answer, body=body,
                tag="webshell", errors=BODY + ("git_refused",) + (("workspace_not_found", "not_found") if
                                                                   "{workspace}" in prefix else ()),
                params=(CWD_QUERY,) + ((WORKSPACE_PARAM,) if "{workspace}" in prefix else ()))
      for prefix in ("/workspace", "/workspaces/{workspace}")
      for action, summary, answer, body in (
          ("checkout", "Check out a branch, a remote branch, a tag or a commit (git in the sandbox)", a.GitCheckedOut,
           bodies.GitCheckoutBody),
          ("branch", "Start a branch and check it out (git in the sandbox)", a.GitCheckedOut, bodies.GitBranchBody),
          ("commit", "Commit what is staged, or every change (git in the sandbox)", a.GitCommitted,
           bodies.GitCommitBody))),
    Operation(method="get", path="/workspace/git/log", summary="A page of the work tree's history", answer=a.GitLog,
              tag="webshell", errors=("invalid_request",), params=(CWD_QUERY, *LOG_QUERY)),
    Operation(method="get", path="/workspace/git/log/commit", summary="One commit and its files", answer=a.GitCommit,
              tag="webshell", errors=("invalid_request",), params=(CWD_QUERY, SHA_QUERY)),
    *(Operation(method="get", path=path, summary=summary, answer=answer, tag="webshell", errors=errors,
                params=(WORKSPACE_PARAM, *params))
      for path, summary, answer, errors, params in (
          ("/workspaces/{workspace}/git", "A workspace's git branch and status", a.GitStatus,
           ("invalid_request", "workspace_not_found", "not_found"),
           (CWD_QUERY,)),
          ("/workspaces/{workspace}/git/diff", "A workspace's changes against HEAD", a.GitDiff,
           ("invalid_request", "workspace_not_found", "not_found"), (CWD_QUERY,)),
          ("/workspaces/{workspace}/git/diff/file", "One file's diff", a.GitDiffFile,
           ("invalid_request", "workspace_not_found", "not_found"), (CWD_QUERY, *DIFF_PATH_QUERY)),
          ("/workspaces/{workspace}/git/branches", "A workspace's branches and tags", a.GitBranches,
           ("invalid_request", "workspace_not_found", "not_found"), (CWD_QUERY,)),
          ("/workspaces/{workspace}/git/log", "A page of a workspace's history", a.GitLog,
           ("invalid_request", "workspace_not_found", "not_found"), (CWD_QUERY, *LOG_QUERY)),
          ("/workspaces/{workspace}/git/log/commit", "One commit and its files", a.GitCommit,
           ("invalid_request", "workspace_not_found", "not_found"), (CWD_QUERY, SHA_QUERY)),
          *((f"/{prefix}/{{workspace}}/sessions", "The sessions working in a workspace, a page at a time",
             a.WorkspaceSessions, ("invalid_request", "workspace_not_found", "not_found", "session_closing"),
             (Param(name="size", where="query", schema={"type": "integer", "minimum": 1, "maximum": 1000}),
              Param(name="cursor", where="query", schema={"type": "string", "pattern": "^[0-9]{1,9}$"},
                    description="A nextCursor this route gave."),
              Param(name="archiveState", where="query", schema={"enum": ["active", "archived", "all"],
                                                                 "type": "string"}),
              Param(name="sourceType", where="query", schema={"type": "string"}),
              Param(name="group", where="query", schema={"type": "string"})))
            for prefix in ("workspace", "workspaces")),
      )),
    Operation(method="get", path="/session/{sessionId}/context", summary="The session's model and approval modes",
              answer=a.SessionContext, tag="webshell", errors=("session_not_found", "not_found", "session_closing"),
              params=(SESSION_PARAM,)),
    _session("patch", "/metadata", "Rename the session as qwen serve does (its displayName is the title)",
             a.SessionMetadata, body=bodies.SessionMetadataBody, errors=BODY + ("invalid_metadata", "session_starting"),
             tag="webshell"),
    Operation(method="patch", path="/workspaces/{workspace}/session/{sessionId}/metadata",
              summary="Rename a session of a workspace as qwen serve does", answer=a.SessionMetadata,
              body=bodies.SessionMetadataBody, tag="webshell",
              errors=BODY + SESSION + ("invalid_metadata", "workspace_not_found", "session_starting"),
              params=(WORKSPACE_PARAM, SESSION_PARAM, CLIENT_ID)),
    Operation(method="get", path="/session/{sessionId}/context-usage",
              summary="The last request's size against the context window, as qwen serve answers it",
              answer=a.SessionContextUsage, tag="webshell",
              errors=("session_not_found", "not_found", "session_closing"),
              params=(SESSION_PARAM, Param(name="detail", where="query", schema={"type": "string"},
                                           description="true: showDetails (Trellis has no per-item lists)"))),
    Operation(method="get", path="/session/{sessionId}/stats", summary="Model calls and tokens, as qwen serve answers",
              answer=a.SessionStats, tag="webshell", errors=("session_not_found", "not_found", "session_closing"),
              params=(SESSION_PARAM,)),
    Operation(method="get", path="/session/{sessionId}/tasks",
              summary="The session's background shells, monitors and subagent runs, as qwen serve answers",
              answer=a.SessionTasks, tag="webshell", errors=("session_not_found", "not_found", "session_closing"),
              params=(SESSION_PARAM,)),
    Operation(method="get", path="/session/{sessionId}/goal",
              summary="The session's goal, as qwen serve answers for a session without one (Trellis sessions have none)",
              answer=a.SessionGoal, tag="webshell", errors=("session_not_found", "not_found"),
              params=(SESSION_PARAM,)),
    Operation(method="get", path="/session/{sessionId}/supported-commands", summary="Slash commands and skills (none)",
              answer=a.SupportedCommands, tag="webshell",
              errors=("session_not_found", "not_found", "session_closing"),
              params=(SESSION_PARAM,)),
)

# The JSON-RPC transports: one generic entry each (their messages are in docs/protocol.md, ACP and MCP).
JSONRPC_PATHS = {"/acp": "ACP over HTTP (Streamable HTTP)", "/mcp": "The parent's MCP tools (Streamable HTTP)"}
JSONRPC_METHODS = ("get", "post", "delete")
SIGNAL_PATH = "/signal/mcp/{token}"


# --------------------------------------------------------------------------- the document


def _error_response(codes: list[str]) -> dict[str, Any]:
    narrowed = {"allOf": [{"$ref": REF_PREFIX + "ErrorBody"},
                          {"properties": {"code": {"enum": sorted(codes), "type": "string"}}}]}
    return {"description": "Refused: " + ", ".join(sorted(codes)),
            "content": {"application/json": {"schema": narrowed}}}


def _errors_by_status(op: Operation) -> dict[str, Any]:
    codes = [*ANY_REQUEST, *(() if op.open else WITH_TOKEN), *op.errors]
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(codes):
        if code == a.FRAMEWORK_CODE:
            for status in (400, 408):  # werkzeug: a request it cannot read, a body that did not arrive in time
                by_status.setdefault(status, []).append(code)
            continue
        if code not in a.ERROR_CODES:
            raise ValueError(f"{op.method.upper()} {op.path}: unknown error code {code!r} (add it to "
                             "actors.wire.answers.ERROR_CODES)")
        by_status.setdefault(a.ERROR_CODES[code], []).append(code)
    return {str(status): _error_response(codes) for status, codes in sorted(by_status.items())}


def _parameter(p: Param) -> dict[str, Any]:
    out: dict[str, Any] = {"name": p.name, "in": p.where, "schema": p.schema}
    if p.required:
        out["required"] = True
    if p.description:
        out["description"] = p.description
    return out


def _ref(cls: type) -> dict[str, str]:
    return {"$ref": REF_PREFIX + cls.__name__}


def _events_response() -> dict[str, Any]:
    frames = [{"$ref": REF_PREFIX + _frame_name(kind)} for kind in ev.EVENT_DATA]
    return {
        "description": "The event stream: a `retry: 3000` hint, then one frame per event (`id:` unless "
                       "synthetic, `event:` the type, one `data:` line holding the envelope), and a "
                       "`: keepalive` comment after 15 s without an event. It ends after `session_closed` "
                       "or `client_evicted`. The schema is that of each frame's `data:` line.",
        "headers": {"X-Qwen-Event-Epoch": {"description": "The epoch of the session's event ids.",
                                           "schema": {"type": "string"}}},
        "content": {"text/event-stream": {"schema": {"oneOf": frames}}},
        "x-sse-events": {kind: _ref(cls) for kind, cls in ev.EVENT_DATA.items()},
    }


def _frame_name(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_")) + "Frame"


def _frame_schemas() -> dict[str, Any]:
    """One envelope schema per event type: ``EventEnvelope`` with ``type`` a const and ``data`` its schema."""
    return {_frame_name(kind): {
        "description": f"A `{kind}` frame" + (" (synthetic: no `id`, no `_meta`, never replayed)"
                                               if kind in ev.SYNTHETIC else ""),
        "allOf": [_ref(ev.EventEnvelope),
                  {"properties": {"type": {"const": kind, "type": "string"}, "data": _ref(cls)}}],
    } for kind, cls in ev.EVENT_DATA.items()}


def _operation(op: Operation) -> dict[str, Any]:
    out: dict[str, Any] = {"operationId": _operation_id(op), "summary": op.summary, "tags": [op.tag]}
    if op.params:
        out["parameters"] = [_parameter(p) for p in op.params]
    if op.body is not None:
        out["requestBody"] = {"required": not op.body_optional,
                              "content": {"application/json": {"schema": _ref(op.body)}}}
        if op.body_optional:
            out["requestBody"]["description"] = "May be empty (taken as {})."
    responses: dict[str, Any] = {}
    if op.path == "/openapi.json":
        responses["200"] = {"description": "This document",
                            "content": {"application/json": {"schema": {"type": "object",
                                                                        "required": ["openapi", "paths"]}}}}
    elif op.path == "/metrics":
        responses["200"] = {"description": "Prometheus's text exposition format 0.0.4 (docs/how-to/operations.md)",
                            "content": {"text/plain": {"schema": {"type": "string"}}}}
    elif op.path.endswith("/events"):
        responses["200"] = _events_response()
    elif op.answer is None:
        responses[str(op.status)] = {"description": "Done (no body)"}
    else:
        responses[str(op.status)] = {"description": _first_line(op.answer),
                                     "content": {"application/json": {"schema": _ref(op.answer)}}}
    for status, cls in op.also:
        responses[str(status)] = {"description": _first_line(cls),
                                  "content": {"application/json": {"schema": _ref(cls)}}}
    responses.update(_errors_by_status(op))
    out["responses"] = responses
    if op.open:
        out["security"] = []
    return out


def _first_line(cls: type) -> str:
    doc = inspect.cleandoc(cls.__doc__ or "")
    return doc.split("\n\n", 1)[0].replace("\n", " ") if doc else cls.__name__


def _operation_id(op: Operation) -> str:
    words = [w.strip("{}") for w in op.path.replace("-", "/").replace(".", "/").split("/") if w]
    return op.method + "".join(w[:1].upper() + w[1:] for w in words)


def _jsonrpc_operation(path: str, method: str, summary: str) -> dict[str, Any]:
    rpc = {"type": "object", "description": "A JSON-RPC 2.0 message (or, for MCP, a batch of them)"}
    out: dict[str, Any] = {
        "operationId": method + path.strip("/").capitalize(), "summary": f"{summary}: {method.upper()}",
        "tags": ["jsonrpc"],
        "description": "JSON-RPC; the messages are described in docs/protocol.md (ACP) and docs/mcp.md (MCP).",
        "responses": {"default": {"description": "A JSON-RPC answer, an event stream, or an empty 202",
                                  "content": {"application/json": {"schema": rpc},
                                              "text/event-stream": {"schema": {"type": "string"}}}}},
    }
    if method == "post":
        out["requestBody"] = {"required": True,
                              "content": {"application/json": {"schema": {"anyOf": [rpc, {"type": "array"}]}}}}
    return out


def _signal_operation(method: str) -> dict[str, Any]:
    """A subagent run's own MCP endpoint: the run's unguessable token in the path is its only credential (no
    bearer token); an unknown or revoked token is a bare 404."""
    out = _jsonrpc_operation("/signal/mcp", method, "One subagent run's signal tools (MCP)")
    out["operationId"] = method + "SignalMcp"
    out["parameters"] = [{"name": "token", "in": "path", "required": True, "schema": {"type": "string"},
                          "description": "The run's token (docs/mcp.md)"}]
    out["security"] = []
    out["responses"]["404"] = {"description": "No live run has that token"}
    return out


def component_schemas() -> dict[str, Any]:
    """Every schema the document names: generated from the wire classes, plus one envelope per event type."""
    classes: list[type] = [a.ErrorBody, ev.EventEnvelope, *ev.EVENT_DATA.values()]
    for op in OPERATIONS:
        classes += [c for c in (op.body, op.answer, *(cls for _, cls in op.also)) if c is not None]
    defs = schemas_of(*classes)
    for schema in defs.values():
        schema.pop("x-python-class", None)  # generation bookkeeping, not wire
    defs.update(_frame_schemas())
    return dict(sorted(defs.items()))


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of the daemon's REST API (pure: no daemon, no web framework)."""
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method] = _operation(op)
    for path, summary in JSONRPC_PATHS.items():
        paths[path] = {m: _jsonrpc_operation(path, m, summary) for m in JSONRPC_METHODS}
    paths[SIGNAL_PATH] = {m: _signal_operation(m) for m in JSONRPC_METHODS}
    codes = sorted({*a.ERROR_CODES, a.FRAMEWORK_CODE})
    schemas = component_schemas()
    schemas["ErrorBody"]["properties"]["code"] = {"type": "string", "enum": codes}
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "Trellis daemon REST API", "version": API_VERSION,
                 "description": "REST + SSE, wire-compatible with qwen-code's `qwen serve` (docs/protocol.md). "
                                "Generated from the wire module (actors/wire) by transport/openapi.py."},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "The daemon's token (--token, $TRELLIS_TOKEN, or "
                                                          "<state-dir>/token)."}},
        },
        "security": [{"bearer": []}],
        "tags": [{"name": "daemon"}, {"name": "sessions"}, {"name": "checkpoints"},
                 {"name": "webshell", "description": "What qwen's Web "
                 "Shell reads beyond the core routes (docs/webshell.md)"}, {"name": "jsonrpc"}],
    }
