"""Routes for a session's permission rules: what is in force, add or remove one, explain a call.

``GET /session/:id/permissions`` lists the rules by source — the settings file's (read at start) and
the session's own (given at ``POST /session``, added here, or made by an "always" answer) — and list.
``POST /session/:id/permissions {effect, rule, persist?}`` adds one of the session's own; with
``persist: "settings"`` the rule is also written into the settings file the daemon read (the per-user
one when it read none), for sessions started after the next daemon start. ``DELETE
/session/:id/permissions/:effect?rule=`` removes one of the session's own (the settings' are the
file's to change). ``GET /session/:id/permissions/explain?tool=&input=`` answers what a call would come
to now and which rule or mode decides it; ``input`` is the call's arguments as a JSON object.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import trio
from quart import Response, request
from quart_trio import QuartTrio

from actors import Daemon, SessionHandle, wire
from actors.checked import CheckError
from actors.permission_rules import EFFECTS, RuleError, RuleLists, rule_lists
from actors.settings import SettingsError
from actors.settings_file import add_permission_rule, user_settings_path
from actors.wire import answers

from .errors import HttpError, json_response

MAX_EXPLAIN_INPUT = 64 * 1024  # bytes of ?input=


def session_rules(given: wire.PermissionRulesBody | None, path: str = "$.permissions") -> RuleLists | None:
    """The session's own rules a request gives, each read (400 ``invalid_rule`` naming the first bad one)."""
    if given is None:
        return None
    try:
        return rule_lists({effect: getattr(given, effect) for effect in EFFECTS}, path)
    except CheckError as exc:
        raise HttpError(400, exc.detail, "invalid_rule", exc.path) from None


def register(app: QuartTrio, daemon: Daemon, session: Callable[[str], SessionHandle],
             body: Callable[[type[Any]], Awaitable[Any]]) -> None:
    """Add the routes; ``session`` looks a live session up (404 otherwise), ``body`` decodes a request body."""

    async def listed(handle: SessionHandle) -> answers.PermissionRules:
        rules = await handle.permission_rules()
        return answers.PermissionRules(settings=answers.RuleLists(**rules["settings"]),
                                       session=answers.RuleLists(**rules["session"]))

    @app.get("/session/<session_id>/permissions")
    async def permission_rules(session_id: str) -> Response:
        return json_response(wire.unstructure(await listed(session(session_id))))

    @app.post("/session/<session_id>/permissions")
    async def add_rule(session_id: str) -> Response:
        handle = session(session_id)
        b = await body(wire.PermissionRuleBody)
        try:
            changed = await handle.add_permission_rule(b.effect, b.rule)
        except RuleError as exc:
            raise HttpError(400, str(exc), "invalid_rule", "$.rule") from None
        written = None
        if b.persist == "settings":
            path = daemon.settings.path or user_settings_path(os.environ)
            try:
                await trio.to_thread.run_sync(add_permission_rule, path, b.effect, b.rule)
            except SettingsError as exc:
                raise HttpError(409, str(exc), "settings_not_writable", "$.persist") from None
            written = path
        edit = answers.PermissionRuleEdit(changed=changed, settingsFile=written, rules=await listed(handle))
        return json_response(wire.unstructure(edit))

    @app.delete("/session/<session_id>/permissions/<effect>")
    async def remove_rule(session_id: str, effect: str) -> Response:
        handle = session(session_id)
        if effect not in EFFECTS:
            raise HttpError(400, f"effect must be one of {', '.join(EFFECTS)}, got {effect[:64]!r}",
                            "invalid_request", "url.effect")
        rule = request.args.get("rule")
        if not rule:
            raise HttpError(400, "rule is required: the rule to remove, as listed", "invalid_request", "query.rule")
        changed = await handle.remove_permission_rule(effect, rule)
        edit = answers.PermissionRuleEdit(changed=changed, rules=await listed(handle))
        return json_response(wire.unstructure(edit))

    @app.get("/session/<session_id>/permissions/explain")
    async def explain(session_id: str) -> Response:
        handle = session(session_id)
        tool = request.args.get("tool")
        if not tool:
            raise HttpError(400, "tool is required: the tool's name, as the model calls it", "invalid_request",
                            "query.tool")
        raw = request.args.get("input", "{}")
        if len(raw) > MAX_EXPLAIN_INPUT:
            raise HttpError(400, f"input is at most {MAX_EXPLAIN_INPUT} bytes", "value_too_long", "query.input")
        try:
            arguments = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise HttpError(400, f"input is not JSON: {exc}", "invalid_request", "query.input") from None
        if not isinstance(arguments, dict):
            raise HttpError(400, "input must be a JSON object: the call's arguments", "invalid_request",
                            "query.input")
        try:
            explained = await handle.explain_permission(tool, arguments)
        except LookupError as exc:
            raise HttpError(400, str(exc.args[0]), "unknown_tool", "query.tool") from None
        return json_response(wire.unstructure(answers.PermissionExplained(**explained)))


__all__ = ["register", "session_rules"]
