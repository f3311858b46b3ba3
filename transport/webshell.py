"""What qwen-code's Web Shell (0.24.4) asks of a daemon beyond the core REST + SSE routes.

The Web Shell is qwen serve's browser client. Pointed at Trellis (``?daemon=<origin>``,
docs/webshell.md), it reads a few more capability fields, then, before it sends
anything, its workspace's providers, settings, model services, git branch and
session list, and for an open session its modes and commands. This module
answers those, truthfully: what Trellis has (its model, its approval modes, its
sessions, the branch in ``.git/HEAD``), and empty lists where it has no such
thing (settings the shell could edit, model services, slash commands). Every
other qwen route stays 404, which the shell copes with: the panel that wanted it
says it failed, the chat goes on.

Workspaces. qwen serve registers workspaces; Trellis has one (``--workspace``),
but a session may work in any directory. ``capabilities.workspaces`` lists the
workspace and every other directory a known session works in, each with an
``id`` (a hash of its path). A ``:workspace`` in a URL is such an id or an
absolute path, percent-encoded as the shell sends it (``%2Ftmp%2Fws``).

Times in these answers are ISO 8601 strings, as qwen serve gives them (Trellis's
own routes give epoch milliseconds).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import time
from datetime import datetime, timezone
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import orjson
import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.routing import PathConverter

from actors import Daemon, SessionHandle, SessionStarting, UnknownSession
from actors.model import configured_model
from actors.settings import APPROVAL_MODES
from actors.wire import SessionMetadataBody, answers, unstructure
from actors.wire.bodies import GitBranchBody, GitCheckoutBody, GitCommitBody
from actors.git_diff import read_diff as read_git_diff
from actors.git_diff import read_file_diff as read_git_file_diff
from actors.git_diff import unavailable_list as unavailable_diff
from actors import git_actions
from actors.git_actions import GitRefused, is_ref
from actors.git_branches import read_branches as read_git_branches
from actors.git_branches import unavailable_branches
from actors.git_log import DEFAULT_LOG_LIMIT, MAX_LOG_LIMIT, MAX_SEARCH_CHARS, is_sha, safe_range, unavailable_log
from actors.git_log import read_commit as read_git_commit
from actors.git_log import read_log as read_git_log
from actors.workspace_git import read_status as read_git_status

from .errors import HttpError, int_query, json_response, not_found_session

# Features the shell checks before it sends a field or offers an action (a new session's sourceType needs the
# first; its sidebar offers Rename only with the second, and renames by PATCH /workspaces/:workspace/session/:id/metadata).
WEBSHELL_FEATURES = ["session_source_metadata", "workspace_session_metadata"]
# How qwen names Trellis's approval modes (its context route offers them by these names).
MODE_NAMES = {
    "default": ("Default", "Require approval for edits and shell commands"),
    "auto-edit": ("Auto Edit", "Automatically approve file edits"),
    "yolo": ("YOLO", "Automatically approve all tools"),
    "plan": ("Plan", "Analyze only, do not modify files or execute commands"),
}
MAX_PAGE = 1000  # the most sessions one page lists, as qwen serve allows
ARCHIVE_STATES = ("active", "archived", "all")
TITLE_CHARS = 120  # a session's displayName: the start of its first prompt
TITLE_SCAN_LINES = 64  # transcript lines read looking for that prompt


class AnyPath(PathConverter):
    """A URL part that may hold slashes, an empty first segment included.

    The shell percent-encodes an absolute path (``/workspaces/%2Ftmp%2Fws/git``), which
    arrives decoded as ``/workspaces//tmp/ws/git``: werkzeug's ``path`` converter wants a
    first character other than ``/``, and merging the slashes would drop the path's root.
    """

    regex = ".+?"
    part_isolating = False


def iso(ms: int | float | None) -> str | None:
    """Epoch milliseconds as qwen serve writes times: ``2026-12-01T17:35:39.013Z``."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def workspace_id(cwd: str) -> str:
    """A workspace's id: stable for its path, 16 hex digits like qwen serve's."""
    return hashlib.sha256(cwd.encode()).hexdigest()[:16]


def model_name(daemon: Daemon) -> str:
    """The name of the model new sessions call (the OpenAI-compatible model's ``--openai-model``)."""
    return configured_model(daemon.runtime.provider)


def primary_workspace(daemon: Daemon) -> str:
    """The workspace: the directory new sessions work in unless they name another."""
    return os.path.realpath(daemon.runtime.workspace)


async def workspace_cwds(daemon: Daemon) -> list[str]:
    """The workspace first, then every other directory a live or stored session works in.

    Read from the live sessions and the stored session records only (not their journals, as
    ``Daemon.list_sessions`` does), in a worker thread: ``GET /capabilities`` asks for this.
    """
    primary = primary_workspace(daemon)
    cwds = {h.cwd for h in daemon.sessions()} | await daemon.stored_cwds()
    return [primary, *sorted(cwds - {primary})]


async def capability_fields(daemon: Daemon) -> dict[str, Any]:
    """The fields qwen's SDK requires of ``GET /capabilities`` beside Trellis's own."""
    cwds = await workspace_cwds(daemon)
    return {
        "v": 1,
        "protocolVersions": {"current": "v1", "supported": ["v1"]},
        "mode": "trellis",  # qwen serve says "http-bridge" (a qwen --acp child per workspace); here, in-process
        "modelServices": [],  # qwen's named model endpoints; Trellis has one model, in providers
        "workspaceCwd": cwds[0],
        "workspaces": [{"id": workspace_id(cwd), "cwd": cwd, "primary": i == 0, "trusted": True,
                        "removable": False} for i, cwd in enumerate(cwds)],
        "transports": ["rest"],
        "policy": {"permission": "first-responder"},  # the first vote wins
    }


def git_branch(cwd: str) -> str | None:
    """The branch checked out in the git work tree holding ``cwd`` (from ``.git/HEAD``), or ``None``
    (no repository, a detached head, or one that cannot be read)."""
    here = cwd
    while True:
        dot_git = os.path.join(here, ".git")
        if os.path.isdir(dot_git):
            head = os.path.join(dot_git, "HEAD")
            break
        if os.path.isfile(dot_git):  # a linked work tree or a submodule: "gitdir: <path>"
            try:
                with open(dot_git, encoding="utf-8", errors="replace") as f:
                    line = f.read(4096).strip()
            except OSError:
                return None
            if not line.startswith("gitdir:"):
                return None
            head = os.path.join(here, line[len("gitdir:"):].strip(), "HEAD")
            break
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
    try:
        with open(head, encoding="utf-8", errors="replace") as f:
            ref = f.read(4096).strip()
    except OSError:
        return None
    prefix = "ref: refs/heads/"
    return ref[len(prefix):] if ref.startswith(prefix) else None


def title_of(daemon: Daemon, session_id: str) -> str | None:
    """The start of a session's first prompt, read from the head of its transcript (qwen's displayName)."""
    path = getattr(daemon.runtime.transcript(session_id), "path", None)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            for _, line in zip(range(TITLE_SCAN_LINES), f):
                try:
                    record = orjson.loads(line)
                except orjson.JSONDecodeError:
                    return None
                message = record.get("message") if isinstance(record, dict) else None
                user = isinstance(message, dict) and message.get("role") == "user"
                if user and message.get("origin") in (None, "prompt"):  # not an automatic turn's text
                    text = str(message.get("content") or "").strip().split("\n", 1)[0]
                    return text[:TITLE_CHARS] or None
    except OSError:
        return None
    return None


async def session_entry(daemon: Daemon, stored: dict[str, Any]) -> dict[str, Any]:
    """One session as qwen serve lists it (``GET /workspace/:workspace/sessions``)."""
    session_id = stored["sessionId"]
    entry: dict[str, Any] = {
        "sessionId": session_id,
        "workspaceCwd": stored.get("cwd"),
        "createdAt": iso(stored.get("createdAt")),
        "updatedAt": iso(stored.get("updatedAt")),
        "sourceType": "default",
        "isArchived": False,
    }
    # The session's title (given, set, or taken from its first prompt); the first prompt's start when it has none.
    title = stored.get("title") or title_of(daemon, session_id)
    if title is not None:
        entry["displayName"] = title
    handle = _live(daemon, session_id)
    if handle is None:
        entry.update(clientCount=0, hasActivePrompt=False, activeWorkState="idle", isWaitingForPermission=False,
                     pendingInteractionCount=0)
        return entry
    entry.update(_activity(await handle.status()))
    return entry


def _activity(status: dict[str, Any]) -> dict[str, Any]:
    """What qwen's lists say of a live session's work, from Trellis's status."""
    waiting = len(status.get("pendingPermissions") or ())
    return {"clientCount": status.get("subscribers", 0), "hasActivePrompt": bool(status.get("hasActivePrompt")),
            "activeWorkState": "idle" if status.get("state") == "idle" else "active",
            "isWaitingForPermission": waiting > 0, "pendingInteractionCount": waiting}


def context_usage_of(status: dict[str, Any], details: bool) -> answers.SessionContextUsage:
    """qwen serve's ``GET /session/:id/context-usage`` from a session's status (its ``context``): the last
    request's size (the server's count, else Trellis's estimate) against the context window."""
    context = status["context"]
    reported, estimated = context.get("reportedTokens"), context.get("estimatedTokens")
    total = reported if reported is not None else (estimated or 0)
    window = context.get("window") or 0
    base = context.get("baseTokens") or 0  # the system prompt and the tool schemas, estimated
    system = min(base, total) if total else base  # before a request: the overhead the first one will carry
    breakdown = answers.ContextBreakdown(systemPrompt=system, builtinTools=0, mcpTools=0, memoryFiles=0, skills=0,
                                         messages=max(0, total - system), freeSpace=max(0, window - total),
                                         autocompactBuffer=0)
    figures = answers.ContextUsageFigures(modelName=status["modelName"], totalTokens=total,
                                          contextWindowSize=window, breakdown=breakdown, builtinTools=[],
                                          mcpTools=[], memoryFiles=[], skills=[], isEstimated=reported is None,
                                          showDetails=details)
    if not total:
        text = "Context usage: no request sent yet"
    elif window:
        text = f"Context usage: {total:,} / {window:,} tokens ({total / window * 100:.1f}%)"
    else:
        text = f"Context usage: {total:,} tokens (context window unknown)"
    if total and reported is None:
        text += ", estimated"
    return answers.SessionContextUsage(v=1, sessionId=status["sessionId"], workspaceCwd=status.get("workspaceCwd"),
                                       usage=figures, formattedText=text)


TASK_STATES = {"running": "running", "paused": "paused", "completed": "completed", "failed": "failed",
               "killed": "cancelled", "cancelled": "cancelled"}


def tasks_of(status: dict[str, Any], session_id: str, now_ms: int) -> dict[str, Any]:
    """qwen serve's ``GET /session/:id/tasks`` from a session's ``backgroundTasks``: its shells, monitors and
    subagent runs, oldest first (@wakeups and cron jobs are scheduled tasks, not listed here, as in qwen)."""
    tasks = []
    for item in status["backgroundTasks"]:
        if item["kind"] not in ("shell", "monitor", "agent") or "startedAt" not in item:
            continue
        end = item.get("endedAt")
        tasks.append(answers.SessionTask(
            kind=item["kind"], id=item["taskId"], label=item["label"], description=item["label"],
            status=TASK_STATES.get(item["status"], "failed"),  # type: ignore[arg-type]
            startTime=item["startedAt"], runtimeMs=max(0, (end if end is not None else now_ms) - item["startedAt"]),
            endTime=end, command=item["label"] if item["kind"] != "agent" else None, exitCode=item.get("exitCode")))
    return unstructure(answers.SessionTasks(v=1, sessionId=session_id, now=now_ms,
                                            tasks=sorted(tasks, key=lambda t: t.startTime)))


def stats_of(status: dict[str, Any], created_at: int, now_ms: int) -> answers.SessionStats:
    """qwen serve's ``GET /session/:id/stats`` from a session's status (its ``usage``): the model calls and
    tokens since the session began, under the model it uses now."""
    usage = status["usage"]
    models: dict[str, answers.ModelStats] = {}
    if usage.get("calls"):
        models[status["modelName"]] = answers.ModelStats(
            api=answers.ModelApiStats(totalRequests=usage["calls"], totalErrors=0, totalLatencyMs=0),
            tokens=answers.ModelTokenStats(prompt=usage["inputTokens"], candidates=usage["outputTokens"],
                                           total=usage["totalTokens"], cached=usage["cachedReadTokens"], thoughts=0))
    return answers.SessionStats(
        v=1, sessionId=status["sessionId"], workspaceCwd=status.get("workspaceCwd"),
        sessionStartTimeMs=created_at, durationMs=max(0, now_ms - created_at), models=models,
        tools=answers.ToolCallTotals(totalCalls=0, totalSuccess=0, totalFail=0, totalDurationMs=0),
        files=answers.FileLineTotals(totalLinesAdded=0, totalLinesRemoved=0),
        skills=answers.SkillTotals(totalCalls=0, totalSuccess=0, totalFail=0, byName={}))


def _live(daemon: Daemon, session_id: str) -> SessionHandle | None:
    try:
        return daemon.get(session_id)
    except UnknownSession:
        return None


def page_size() -> int:
    """``?size=`` (1 to 1000, default 50), or 400 naming it."""
    raw = request.args.get("size")
    if raw is None:
        return 50
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 4 or not 1 <= int(raw) <= MAX_PAGE:
        raise HttpError(400, f"size must be an integer from 1 to {MAX_PAGE}", "invalid_request", "query.size")
    return int(raw)


def page_start() -> int:
    """``?cursor=`` (what a previous page gave as ``nextCursor``: an offset), or 400 naming it."""
    raw = request.args.get("cursor")
    if raw is None:
        return 0
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise HttpError(400, "cursor must be a nextCursor this route gave", "invalid_request", "query.cursor")
    return int(raw)


def diff_path(name: str, *, required: bool = False) -> str | None:
    """``?path=`` or ``?oldPath=`` of a diff route: a path from the top of the work tree, or 400 naming it."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        if required:
            raise HttpError(400, f"{name} is required: a file's path from the top of the work tree",
                            "invalid_request", f"query.{name}")
        return None
    if raw.startswith("/") or ".." in raw.split("/") or "\0" in raw:
        raise HttpError(400, f"{name} must be a file's path from the top of the work tree (not absolute, no "
                             f"'..'): {raw[:200]!r}", "invalid_request", f"query.{name}")
    return raw


async def status_report(daemon: Daemon, detail: str, started: float, *, auth: bool, origins: bool,
                        acp: Any) -> dict[str, Any]:
    """``GET /daemon/status`` in the shape qwen's Daemon Status panel reads (in a request: the bound address
    says whether the bind is loopback). qwen's own parts (its ACP child, channel worker, rate limits) say what
    Trellis has instead: none, or off; what Trellis does not count (a V8 heap) is left out."""
    handles = daemon.sessions()
    statuses = [await h.status() for h in handles]
    limits = daemon.settings.limits
    server = request.scope.get("server") or ("", 0)
    try:
        loopback = ipaddress.ip_address(server[0]).is_loopback
    except ValueError:
        loopback = server[0] == "localhost"
    connections = list(getattr(acp, "connections", {}).values())  # the ACP-over-HTTP clients (transport/acp)
    active = sum(1 for s in statuses if s.get("state") != "idle")
    last_event = max((h.summary()["updatedAt"] for h in handles), default=int(started * 1000))
    return {
        "v": 1, "detail": detail, "generatedAt": iso(time.time() * 1000), "status": "ok", "issues": [],
        "daemon": {"pid": os.getpid(), "uptimeMs": int((time.time() - started) * 1000), "mode": "trellis",
                   "qwenCodeVersion": None, "workspaceCwd": primary_workspace(daemon)},
        "security": {"tokenConfigured": auth, "requireAuth": auth, "loopbackBind": loopback,
                     "allowOriginConfigured": origins, "allowOriginMode": "specific" if origins else "none",
                     "sessionShellCommandEnabled": False},
        "limits": {"maxSessions": limits.max_sessions, "maxPendingPromptsPerSession": limits.max_pending_prompts,
                   "eventRingSize": limits.event_ring_size, "listenerMaxConnections": limits.max_connections,
                   # No prompt deadline; idle sessions are never reaped (qwen's 0 means that).
                   "promptDeadlineMs": None, "sessionIdleTimeoutMs": 0},
        "capabilities": {"protocolVersions": {"current": "v1", "supported": ["v1"]},
                         "features": [*_app_features(), *WEBSHELL_FEATURES]},
        "runtime": {
            "sessions": {"active": len(handles)},
            "permissions": {"pending": sum(len(s.get("pendingPermissions") or ()) for s in statuses),
                            "policy": "first-responder"},
            "activity": {"activePrompts": active,
                         "idleSinceMs": 0 if active else int(time.time() * 1000) - last_event,
                         "pendingPrompts": sum(s.get("pendingCount", 0) for s in statuses),
                         "queuedPrompts": sum(s.get("queuedCount", 0) for s in statuses)},
            "transport": {"restSseActive": sum(s.get("subscribers", 0) for s in statuses),
                          # ACP over HTTP: its sessions with a stream, and no WebSocket transport at all.
                          "acp": {"enabled": acp is not None, "connections": len(connections),
                                  "sessionStreams": sum(len(c.session_outboxes) for c in connections),
                                  "wsStreams": 0}},
            "channel": {"live": True},  # qwen: its per-workspace agent process; Trellis runs sessions in-process
            "channelWorker": {"enabled": False, "state": "disabled", "channels": []},
            "rateLimit": {"enabled": False, "rejectedSinceStart": {}},
            "process": {"rss": _rss_bytes()},
        },
    }


def _app_features() -> list[str]:
    from .app import FEATURES  # here, not at the top: app imports this module

    return FEATURES


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return None


def register(app: QuartTrio, daemon: Daemon, *, auth: bool = True, allowed_origins: tuple[str, ...] = (),
             session: Callable[[str], SessionHandle] | None = None,
             body: Callable[[type[Any]], Awaitable[Any]] | None = None) -> None:
    """Add the routes qwen's Web Shell needs beyond the core ones to ``app`` (see the module docstring).

    ``auth`` and ``allowed_origins`` are what :func:`transport.app.create_app` was given: the daemon status
    reports them. ``session`` and ``body`` are the app's: a live session looked up (404 otherwise, and its
    ``X-Qwen-Client-Id`` checked) and a request body decoded (400 naming the bad field); without them the
    metadata routes are not served.
    """
    if app.extensions.get("trellis.webshell") is daemon:
        return
    app.extensions["trellis.webshell"] = daemon
    app.url_map.converters["anypath"] = AnyPath
    started = time.time()

    async def workspace(selector: str) -> str:
        """The directory a ``:workspace`` URL part names: a workspace id or an absolute path."""
        if selector.startswith("/"):
            return os.path.realpath(selector)
        for cwd in await workspace_cwds(daemon):
            if workspace_id(cwd) == selector:
                return cwd
        raise HttpError(404, "no workspace with that id: use an id from GET /capabilities or an absolute path",
                        "workspace_not_found", "url.workspace")

    def absolute(name: str) -> str | None:
        raw = request.args.get(name)
        if raw is None:
            return None
        if not raw.startswith("/"):
            raise HttpError(400, f"{name} must be an absolute path", "invalid_request", f"query.{name}")
        return os.path.realpath(raw)

    def handle_of(session_id: str) -> SessionHandle:
        handle = _live(daemon, session_id)
        if handle is None:
            raise not_found_session(session_id)
        return handle

    # ------------------------------------------------------------- the daemon

    @app.get("/brand")
    async def brand() -> Response:
        # qwen's white-label title and logo (ui.brand); none here, as qwen serve answers without one.
        return json_response({})

    @app.get("/daemon/status")
    async def daemon_status() -> Response:
        detail = request.args.get("detail", "summary")
        if detail not in ("summary", "full"):
            raise HttpError(400, "detail must be summary or full", "invalid_request", "query.detail")
        return json_response(await status_report(daemon, detail, started, auth=auth, origins=bool(allowed_origins),
                                                 acp=app.extensions.get("trellis.acp")))

    # ------------------------------------------------------------- the workspace

    @app.get("/workspace/providers")
    async def providers() -> Response:
        cwd = primary_workspace(daemon)
        kind, name = daemon.runtime.provider.name, model_name(daemon)
        window = getattr(daemon.runtime.provider, "context_window", None)
        model: dict[str, Any] = {"modelId": name, "baseModelId": name, "name": name, "isCurrent": True,
                                 "isRuntime": True}
        if window:
            model["contextLimit"] = window
        return json_response({
            "v": 1, "workspaceCwd": cwd, "initialized": True,
            "acpChannelLive": True,  # qwen: its per-workspace child is up; here the sessions run in-process
            "current": {"authType": kind, "modelId": name},
            "approvalMode": daemon.settings.approval_mode,
            "providers": [{"kind": "model_provider", "status": "ok", "authType": kind, "current": True,
                           "models": [model]}],
        })

    @app.get("/workspace/settings")
    async def settings() -> Response:
        # qwen's editable settings.json keys; Trellis's settings are a file read at start (docs/settings.md).
        return json_response({"v": 1, "settings": []})

    @app.get("/workspace/models")
    async def model_services() -> Response:
        return json_response({"models": []})  # qwen's model services; Trellis has its one model (providers)

    git_runs = trio.CapacityLimiter(2)  # each a sandboxed process: a page polling many workspaces waits its turn

    async def git_cwd(selector: str | None) -> tuple[str, bool]:
        """The directory a git route reads, and whether git may run there: only where sessions work (a
        command there is nothing new, and the root-only scan stops walking where commands run,
        actors/process/root_only.py, which a request must not choose)."""
        cwd = absolute("cwd") or (await workspace(selector) if selector is not None else primary_workspace(daemon))
        runs = os.path.isdir(cwd) and any(cwd == w or cwd.startswith(w.rstrip("/") + "/")
                                          for w in await workspace_cwds(daemon))
        return cwd, runs

    async def git_read(selector: str | None, unavailable: Callable[[str], Any],
                       read: Callable[[str], Awaitable[Any]]) -> Response:
        """A git read of the Web Shell's dialogs: ``read(cwd)`` where git may run (two at a time), else
        ``unavailable(cwd)``."""
        cwd, runs = await git_cwd(selector)
        if not runs:
            return json_response(unstructure(unavailable(cwd)))
        async with git_runs:
            found = await read(cwd)
        return json_response(unstructure(found))

    @app.get("/workspace/git")
    @app.get("/workspaces/<anypath:selector>/git", merge_slashes=False)
    async def git(selector: str | None = None) -> Response:
        cwd, runs = await git_cwd(selector)
        status = None
        if runs:
            async with git_runs:
                status = await read_git_status(daemon.runtime.sandbox, cwd)
        if status is False:  # in no work tree
            return json_response({"v": 2, "workspaceCwd": cwd, "branch": None})
        if status is None:  # no sandbox to run git in, or git could not answer: the branch from .git/HEAD
            return json_response({"v": 2, "workspaceCwd": cwd, "branch": git_branch(cwd)})
        found = {k: v for k, v in attrs.asdict(status).items() if v is not None or k == "branch"}
        return json_response({"v": 2, "workspaceCwd": cwd, **found, "computedAt": daemon.runtime.clock_ms()})

    @app.get("/workspace/git/diff")
    @app.get("/workspaces/<anypath:selector>/git/diff", merge_slashes=False)
    async def git_diff(selector: str | None = None) -> Response:
        return await git_read(selector, unavailable_diff, lambda cwd: read_git_diff(daemon.runtime.sandbox, cwd))

    @app.get("/workspace/git/diff/file")
    @app.get("/workspaces/<anypath:selector>/git/diff/file", merge_slashes=False)
    async def git_diff_file(selector: str | None = None) -> Response:
        path = diff_path("path", required=True)
        old_path = diff_path("oldPath")
        return await git_read(
            selector, lambda cwd: answers.GitDiffFile(v=1, workspaceCwd=cwd, path=path, available=False, hunks=[]),
            lambda cwd: read_git_file_diff(daemon.runtime.sandbox, cwd, path, old_path))

    @app.get("/workspace/git/branches")
    @app.get("/workspaces/<anypath:selector>/git/branches", merge_slashes=False)
    async def git_branches(selector: str | None = None) -> Response:
        return await git_read(selector, unavailable_branches,
                              lambda cwd: read_git_branches(daemon.runtime.sandbox, cwd))

    if body is not None:
        decode_git = body

        async def git_action(selector: str | None, act: Callable[[str], Awaitable[Any]]) -> Response:
            """Run one of the branch picker's actions (actors/git_actions.py) where sessions work; git's refusal
            is 409 ``git_refused`` in its own words."""
            cwd, runs = await git_cwd(selector)
            if not runs:
                raise HttpError(409, "git runs only in a directory sessions work in", "git_refused")
            try:
                async with git_runs:
                    done = await act(cwd)
            except GitRefused as exc:
                raise HttpError(409, f"git: {exc}", "git_refused") from None
            return json_response(unstructure(done))

        def ref_or_400(value: str | None, where: str) -> None:
            if value is not None and not is_ref(value):
                raise HttpError(400, f"{where[2:]} must be a branch, tag or commit name (not starting with '-', "
                                     "no space or control character)", "invalid_request", where)

        @app.post("/workspace/git/checkout")
        @app.post("/workspaces/<anypath:selector>/git/checkout", merge_slashes=False)
        async def git_checkout(selector: str | None = None) -> Response:
            b = await decode_git(GitCheckoutBody)
            ref_or_400(b.ref, "$.ref")
            return await git_action(selector, lambda cwd: git_actions.checkout(daemon.runtime.sandbox, cwd, b.ref))

        @app.post("/workspace/git/branch")
        @app.post("/workspaces/<anypath:selector>/git/branch", merge_slashes=False)
        async def git_branch_create(selector: str | None = None) -> Response:
            b = await decode_git(GitBranchBody)
            ref_or_400(b.name, "$.name")
            ref_or_400(b.startPoint or None, "$.startPoint")
            return await git_action(selector, lambda cwd: git_actions.create_branch(
                daemon.runtime.sandbox, cwd, b.name, b.startPoint or None))

        @app.post("/workspace/git/commit")
        @app.post("/workspaces/<anypath:selector>/git/commit", merge_slashes=False)
        async def git_commit_create(selector: str | None = None) -> Response:
            b = await decode_git(GitCommitBody)
            if not b.message.strip():
                raise HttpError(400, "message is required", "invalid_request", "$.message")
            return await git_action(selector, lambda cwd: git_actions.commit(
                daemon.runtime.sandbox, cwd, b.message.strip(), stage_all=b.all))

    @app.get("/workspace/git/log")
    @app.get("/workspaces/<anypath:selector>/git/log", merge_slashes=False)
    async def git_log(selector: str | None = None) -> Response:
        limit = int_query("limit", 1, MAX_LOG_LIMIT) or DEFAULT_LOG_LIMIT
        skip = int_query("skip", 0, 1_000_000) or 0
        every = request.args.get("all", "0")
        if every not in ("0", "1"):
            raise HttpError(400, "all must be 1 or 0", "invalid_request", "query.all")
        revision = request.args.get("range") or None
        if revision is not None and not safe_range(revision):
            raise HttpError(400, "range must be a revision or a range of them (letters, digits, _ . / ~ ^ -; not "
                                 f"starting with - or ..): {revision[:200]!r}", "invalid_request", "query.range")
        search = request.args.get("search", "")
        if len(search) > MAX_SEARCH_CHARS or "\0" in search:
            raise HttpError(400, f"search must be at most {MAX_SEARCH_CHARS} characters, without NUL",
                            "invalid_request", "query.search")
        search = search.strip() or None
        return await git_read(selector, unavailable_log, lambda cwd: read_git_log(
            daemon.runtime.sandbox, cwd, limit=limit, skip=skip, all=every == "1", range=revision, search=search))

    @app.get("/workspace/git/log/commit")
    @app.get("/workspaces/<anypath:selector>/git/log/commit", merge_slashes=False)
    async def git_commit(selector: str | None = None) -> Response:
        sha = request.args.get("sha", "")
        if not is_sha(sha):
            raise HttpError(400, "sha is required: 7 to 40 hexadecimal digits", "invalid_request", "query.sha")
        return await git_read(selector, lambda cwd: answers.GitCommit(v=1, workspaceCwd=cwd, available=False),
                              lambda cwd: read_git_commit(daemon.runtime.sandbox, cwd, sha))

    @app.get("/workspace/<anypath:selector>/sessions", merge_slashes=False)
    @app.get("/workspaces/<anypath:selector>/sessions", merge_slashes=False)
    async def sessions(selector: str) -> Response:
        cwd = await workspace(selector)
        size, start = page_size(), page_start()
        archive = request.args.get("archiveState", "active")
        if archive not in ARCHIVE_STATES:
            raise HttpError(400, f"archiveState must be one of {list(ARCHIVE_STATES)}", "invalid_request",
                            "query.archiveState")
        source = request.args.get("sourceType", "default")
        group = request.args.get("group", "all")
        matching = [s for s in await daemon.list_sessions() if s.get("cwd") == cwd]
        if archive == "archived" or source != "default" or group not in ("all", "ungrouped"):
            matching = []  # nothing is archived, every session is of the default source, there are no groups or pins
        page = matching[start:start + size]
        body: dict[str, Any] = {"sessions": [await session_entry(daemon, s) for s in page]}
        if start + size < len(matching):
            body["nextCursor"] = str(start + size)
        return json_response(body)

    # ------------------------------------------------------------- one session

    @app.get("/session/<session_id>/context")
    async def context(session_id: str) -> Response:
        status = await handle_of(session_id).status()
        name = status["modelName"]
        current = status.get("approvalMode")
        modes = [{"id": m, "name": MODE_NAMES[m][0], "description": MODE_NAMES[m][1]} for m in APPROVAL_MODES]
        return json_response({
            "v": 1, "sessionId": session_id, "workspaceCwd": status.get("workspaceCwd"),
            "state": {
                "models": {"currentModelId": name, "availableModels": [{"modelId": name, "name": name}]},
                "modes": {"currentModeId": current, "availableModes": modes},
                "configOptions": [
                    {"id": "mode", "name": "Mode", "description": "Session permission mode", "category": "mode",
                     "type": "select", "currentValue": current,
                     "options": [{"value": m["id"], "name": m["name"], "description": m["description"]}
                                 for m in modes]},
                ],
            },
        })

    @app.get("/session/<session_id>/context-usage")
    async def context_usage(session_id: str) -> Response:
        status = await handle_of(session_id).status()
        return json_response(unstructure(context_usage_of(status, request.args.get("detail") == "true")))

    @app.get("/session/<session_id>/stats")
    async def stats(session_id: str) -> Response:
        handle = handle_of(session_id)
        status = await handle.status()
        return json_response(unstructure(stats_of(status, handle.summary()["createdAt"], daemon.runtime.clock_ms())),
                             headers={"Cache-Control": "no-store"})  # as qwen serve answers it (polled every 2 s)

    @app.get("/session/<session_id>/tasks")
    async def tasks(session_id: str) -> Response:
        status = await handle_of(session_id).status()
        return json_response(tasks_of(status, session_id, daemon.runtime.clock_ms()))

    @app.get("/session/<session_id>/goal")
    async def goal(session_id: str) -> Response:
        # qwen's answer for a session without a goal: Trellis sessions have none (a goal belongs to a subagent
        # run), and the shell polls this for the open session.
        handle_of(session_id)
        return json_response(unstructure(answers.SessionGoal(snapshot=None)))

    if session is not None and body is not None:
        found, decode = session, body

        async def rename(handle: SessionHandle, b: SessionMetadataBody) -> Response:
            """qwen serve's metadata update: ``displayName`` set as ``POST /session/:id/title`` sets the title
            (published as ``session_info_update`` and ``session_metadata_updated``, kept in the record)."""
            title = handle.summary()["title"] if b.displayName is None else await handle.set_title(b.displayName)
            return json_response(unstructure(answers.SessionMetadata(sessionId=handle.session_id, displayName=title)))

        async def rename_stored(session_id: str, record: dict[str, Any], b: SessionMetadataBody) -> Response:
            """A stored session (on disk, not live) renamed on disk, as qwen serve renames one: its record's
            title, which its lists show and its restore (after a restart too) starts with. Nothing is published:
            no stream is open on a session that is not live."""
            title = record.get("title")
            if b.displayName is not None:
                try:
                    title = await daemon.retitle_stored(session_id, b.displayName)
                except UnknownSession:
                    raise not_found_session(session_id) from None
                except SessionStarting as exc:  # restored (or deleted) meanwhile
                    raise HttpError(409, f"{exc}; try again", "session_starting", "url.sessionId") from None
            return json_response(unstructure(answers.SessionMetadata(sessionId=session_id, displayName=title)))

        async def live_or_stored(session_id: str) -> tuple[SessionHandle | None, dict[str, Any] | None]:
            """The live session (its client id checked), else the record of the stored one, else 404."""
            if _live(daemon, session_id) is not None:
                return found(session_id), None
            record = await daemon.stored_record(session_id)
            if record is None:
                return found(session_id), None  # live after all (restored meanwhile), or 404
            return None, record

        @app.patch("/session/<session_id>/metadata")
        async def session_metadata(session_id: str) -> Response:
            handle, record = await live_or_stored(session_id)
            b = await decode(SessionMetadataBody)
            if handle is None:
                assert record is not None
                return await rename_stored(session_id, record, b)
            return await rename(handle, b)

        @app.patch("/workspaces/<anypath:selector>/session/<session_id>/metadata", merge_slashes=False)
        async def workspace_session_metadata(selector: str, session_id: str) -> Response:
            cwd = await workspace(selector)
            handle, record = await live_or_stored(session_id)
            b = await decode(SessionMetadataBody)
            where = handle.cwd if handle is not None else (record or {}).get("cwd")
            if where != cwd:  # a session of another workspace is not this one's to rename
                raise HttpError(404, "that session does not work in that workspace", "session_not_found",
                                "url.sessionId")
            if b.displayName is None:  # qwen serve's workspace route wants something to change
                raise HttpError(400, "displayName is required", "invalid_metadata", "$.displayName")
            if handle is None:
                assert record is not None
                return await rename_stored(session_id, record, b)
            return await rename(handle, b)

    @app.get("/session/<session_id>/supported-commands")
    async def supported_commands(session_id: str) -> Response:
        handle_of(session_id)
        # qwen's slash commands and skills run in its agent; Trellis's daemon has neither (trellis attach has its
        # own commands). The shell reads both lists unguarded.
        return json_response({"v": 1, "sessionId": session_id, "availableCommands": [], "availableSkills": []})
