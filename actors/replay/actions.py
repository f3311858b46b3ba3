"""The timeline's actions: a table from the name used in ``do`` to a function and its fields.

Each action is an ``async def action(world, args) -> result`` registered with
:func:`register_action`, which declares its fields (checked when the scenario
is loaded, with errors naming file and field). The result is recorded in the
trace and can be checked with the step's ``expect``. To add an action::

    from actors.replay.actions import register_action
    from actors.replay import fields as F

    @register_action("cron_fire", session=F.SESSION, job=F.Field(F.string, required=True))
    async def cron_fire(world, args):
        ...  # act on world.session(args["session"])
        return {"fired": True}

Every step also takes ``at`` (virtual seconds), ``do`` and ``expect`` (a value the
result must match; objects match as subsets).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from .. import wire
from ..session.fifo import Admitted
from . import fields as F
from .world import World

ActionFn = Callable[[World, dict[str, Any]], Awaitable[Any]]


@attrs.frozen
class ActionSpec:
    name: str
    run: ActionFn
    fields: dict[str, F.Field]
    doc: str = ""


ACTIONS: dict[str, ActionSpec] = {}


def register_action(name: str, **fields: F.Field) -> Callable[[ActionFn], ActionFn]:
    """Register ``fn`` as the timeline action ``name`` with the given fields (a decorator)."""
    def decorate(fn: ActionFn) -> ActionFn:
        ACTIONS[name] = ActionSpec(name, fn, fields, ((fn.__doc__ or "").strip().splitlines() or [""])[0])
        return fn
    return decorate


# ----------------------------------------------------------------- helpers


def _auto_session_label(ctx: F.ParseContext, where: str) -> str:
    label = "main" if "main" not in ctx.sessions else f"session{len(ctx.sessions) + 1}"
    ctx.sessions.append(label)
    return label


def _body(text: str, meta: dict[str, Any] | None) -> wire.PromptBody:
    return wire.PromptBody(prompt=[wire.TextBlock(type="text", text=text)], meta=meta or None)


async def _submit(world: World, args: dict[str, Any], meta: dict[str, Any] | None) -> dict[str, Any]:
    outcome = await world.session(args["session"]).prompt(_body(args["text"], meta))
    if isinstance(outcome, Admitted):
        world.prompts[args["label"]] = outcome.prompt_id
        return {"promptId": outcome.prompt_id}
    return {"queueFull": {"limit": outcome.limit, "pendingCount": outcome.pending_count}}


# ----------------------------------------------------------------- the built-in actions


@register_action("create_session", label=F.Field(F.new_session_label, default_from=_auto_session_label),
                 session_id=F.Field(F.string))
async def create_session(world: World, args: dict[str, Any]) -> Any:
    """Start a session known to the scenario as ``label`` (default ``main``)."""
    slot = await world.open_session(args["label"], args["session_id"])
    return {"sessionId": slot.session_id}


@register_action("prompt", session=F.SESSION, label=F.NEW_PROMPT, text=F.Field(F.string, required=True),
                 _meta=F.Field(F.obj))
async def prompt(world: World, args: dict[str, Any]) -> Any:
    """Submit a prompt (optionally with ``_meta``); the result is its prompt id or a full queue."""
    return await _submit(world, args, args["_meta"])


@register_action("retry", session=F.SESSION, label=F.NEW_PROMPT, text=F.Field(F.string, default="retry"),
                 _meta=F.Field(F.obj))
async def retry(world: World, args: dict[str, Any]) -> Any:
    """Submit a trusted retry: a prompt with ``_meta.retry: true``."""
    return await _submit(world, args, {**(args["_meta"] or {}), "retry": True})


@register_action("mid_turn", session=F.SESSION, text=F.Field(F.string, required=True),
                 message_id=F.Field(F.string))
async def mid_turn(world: World, args: dict[str, Any]) -> Any:
    """Post a mid-turn message; the result is ``{accepted, messageId}`` or ``{accepted: false, reason}``."""
    return await world.session(args["session"]).post_mid_turn_message(args["text"], args["message_id"])


@register_action("abort", session=F.SESSION, prompt=F.Field(F.prompt_label, required=True))
async def abort(world: World, args: dict[str, Any]) -> Any:
    """Abort a prompt by its label (queued: removed and cancelled; running: its turn is cancelled)."""
    prompt_id = world.prompts.get(args["prompt"])
    if prompt_id is None:
        return {"error": "not_admitted"}
    return {"aborted": await world.session(args["session"]).abort_prompt(prompt_id)}


@register_action("cancel", session=F.SESSION)
async def cancel(world: World, args: dict[str, Any]) -> Any:
    """Cancel the session's running work, as the user."""
    return {"cancelled": await world.session(args["session"]).cancel()}


@register_action("close_session", session=F.SESSION)
async def close_session(world: World, args: dict[str, Any]) -> Any:
    """Close the session and everything under it."""
    await world.daemon.close_session(world.sessions[args["session"]].session_id)
    return {"closed": True}


@register_action("restart")
async def restart(world: World, args: dict[str, Any]) -> Any:
    """Close the daemon, open a new one on the same state dir, and load every session that was live."""
    live = world.live_sessions()
    await world.stop_daemon()
    await world.start_daemon()
    restored = {}
    for slot in live:
        new = await world.open_session(slot.label, slot.session_id, gen=slot.gen + 1)
        await world.daemon.load_session(new.session_id)
        restored[slot.label] = len(new.handle._session.history)
    return {"restored": restored}


@register_action("load", session=F.SESSION)
async def load(world: World, args: dict[str, Any]) -> Any:
    """Restore a session's conversation from disk (starting it again if it was closed)."""
    slot = world.sessions[args["session"]]
    if slot.handle._session.bus.closed:
        slot = await world.open_session(slot.label, slot.session_id, gen=slot.gen + 1)
    await world.daemon.load_session(slot.session_id)
    return {"messages": len(slot.handle._session.history)}
