"""The timeline's actions: what a step's ``do`` names, each a function with its fields.

Each action is an ``async def action(world, args) -> result`` registered with
:func:`~.registry.register_action` (in the table from the name to the function),
which declares its fields (checked when the scenario is loaded, with errors
naming file and field). The result is recorded in the trace and can be
checked with the step's ``expect``. This module holds the built-in ones;
:mod:`.cursors` and :mod:`.discovered` register the cursor clients' and the
discovered tools'. To add an action::

    from actors.replay import fields as F, register_action

    @register_action("context_window", tokens=F.Field(F.count, required=True))
    async def context_window(world, args):
        world.model.inner.context_window = args["tokens"]  # world.session(label) is a SessionHandle
        return {"tokens": args["tokens"]}

Every step also takes ``at`` (virtual seconds), ``do`` and ``expect`` (a value the
result must match; objects match as subsets).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import trio

from .. import wire
from .._actor import ActorGone, MailboxFull, PendingReply, reply_pair
from ..session.fifo import Admitted, Drain, DrainResult
from ..settings import APPROVAL_MODES
from ..subagents import status_text
from ..subagents.client import SignalRefused
from ..subagents.files import read_signal_url
from . import fields as F
from . import jitter as J
from .registry import register_action
from .subagents import SIGNAL_TOOLS
from .trace import STATUS_KEYS
from .world import BackgroundSlot, World


# ----------------------------------------------------------------- helpers


def _auto_session_label(ctx: F.ParseContext, where: str) -> str:
    label = "main" if "main" not in ctx.sessions else f"session{len(ctx.sessions) + 1}"
    ctx.sessions.append(label)
    ctx.define("session", label)
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
                 session_id=F.Field(F.string), title=F.Field(F.string))
async def create_session(world: World, args: dict[str, Any]) -> Any:
    """Start a session known to the scenario as ``label`` (default ``main``); with ``title``, titled (its first
    prompt then publishes no ``session_info_update``)."""
    slot = await world.open_session(args["label"], args["session_id"], title=args["title"])
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
        restored[slot.label] = len(new.handle._session.conversation)
    return {"restored": restored}


@register_action("load", session=F.SESSION)
async def load(world: World, args: dict[str, Any]) -> Any:
    """Restore a session's conversation from disk (starting it again if it was closed)."""
    slot = world.sessions[args["session"]]
    if slot.handle._session.bus.closed:
        slot = await world.open_session(slot.label, slot.session_id, gen=slot.gen + 1)
    await world.daemon.load_session(slot.session_id)
    return {"messages": len(slot.handle._session.conversation)}


# ----------------------------------------------------------------- background work, wakeups, cron

BACKGROUND = F.Field(F.new_label("background", "background task"), required=True)
KNOWN_BACKGROUND = F.Field(F.label_of("background", "background task"), required=True)
FINISH_STATES = ("completed", "failed", "killed")


def _finish(world: World, label: str, state: str, text: str | None) -> bool:
    slot = world.background[label]
    item = slot.manager.registry.get(slot.task_id)
    kind = item.kind if item is not None else "task"
    return slot.manager.finish(slot.task_id, state=state, text=text or f"The {kind} {label} {state}.")


@register_action("background", session=F.SESSION, label=BACKGROUND,
                 kind=F.Field(F.one_of("agent", "shell", "monitor"), default="agent"),
                 finish_at=F.Field(J.seconds), state=F.Field(F.one_of(*FINISH_STATES), default="completed"),
                 text=F.Field(F.string))
async def background(world: World, args: dict[str, Any]) -> Any:
    """Track a fake background task (it runs nowhere); it finishes at ``finish_at`` or by ``finish_background``.

    Real shells are subprocesses and cannot be replayed; a tracked task takes part in work-chain
    baselines and posts its terminal notification (``text``) exactly like one.
    """
    manager = world.session(args["session"])._session.background
    item = manager.track(args["kind"], args["label"])
    world.background[args["label"]] = BackgroundSlot(args["label"], args["session"], item.task_id, manager)
    if args["finish_at"] is not None:
        def finish() -> None:
            _finish(world, args["label"], args["state"], args["text"])

        world.later(args["finish_at"], finish)
    return {"taskId": item.task_id}


@register_action("finish_background", label=KNOWN_BACKGROUND,
                 state=F.Field(F.one_of(*FINISH_STATES), default="completed"), text=F.Field(F.string))
async def finish_background(world: World, args: dict[str, Any]) -> Any:
    """Finish a task started by ``background``: it posts its notification; ``{finished: false}`` if it was over."""
    return {"finished": _finish(world, args["label"], args["state"], args["text"])}


@register_action("wakeup", session=F.SESSION, label=BACKGROUND, delay=F.Field(J.seconds, required=True),
                 note=F.Field(F.string, required=True))
async def wakeup(world: World, args: dict[str, Any]) -> Any:
    """Schedule an @wakeup as the ``schedule_wakeup`` tool would: it fires ``delay`` virtual seconds later."""
    manager = world.session(args["session"])._session.background
    item = await manager.schedule_wakeup(delay=args["delay"], at=None, note=args["note"])
    world.background[args["label"]] = BackgroundSlot(args["label"], args["session"], item.task_id, manager)
    return {"taskId": item.task_id}


@register_action("cron", session=F.SESSION, label=BACKGROUND, schedule=F.Field(F.string, required=True),
                 prompt=F.Field(F.string, required=True), recurring=F.Field(F.boolean, default=True))
async def cron(world: World, args: dict[str, Any]) -> Any:
    """Create a cron job as the ``cron_create`` tool would; it fires on the virtual wall clock
    (``2026-11-30T12:00:30Z`` at t = 0)."""
    manager = world.session(args["session"])._session.background
    item = await manager.create_cron(args["schedule"], args["prompt"], args["recurring"])
    world.background[args["label"]] = BackgroundSlot(args["label"], args["session"], item.task_id, manager)
    return {"taskId": item.task_id}


@register_action("kill_background", label=KNOWN_BACKGROUND)
async def kill_background(world: World, args: dict[str, Any]) -> Any:
    """Stop a wakeup or cron job (as ``kill_task``/``cron_delete``); a tracked task is killed with no notification."""
    slot = world.background[args["label"]]
    item = slot.manager.registry.get(slot.task_id)
    if item is not None and item.actor is None:  # tracked work: nothing to stop but its record
        return {"killed": slot.manager.finish(slot.task_id, state="killed", text="", notify=False)}
    return {"killed": await slot.manager.kill(slot.task_id)}


# ----------------------------------------------------------------- clients and permissions

CLIENT = F.Field(F.label_text, default="client")


@register_action("attach", session=F.SESSION, client=CLIENT)
async def attach(world: World, args: dict[str, Any]) -> Any:
    """A client subscribes to the session's live events (it keeps pending permissions alive)."""
    slot = world.sessions[args["session"]]
    if args["client"] in slot.clients:
        raise ValueError(f"client {args['client']!r} is already attached")
    # It never reads: a queue this deep cannot overflow in a replay, and no reader task adds interleavings.
    slot.clients[args["client"]] = slot.handle.subscribe(max_queued=1 << 30)
    return {"subscribers": slot.handle._session.bus.subscriber_count}


@register_action("disconnect", session=F.SESSION, client=CLIENT)
async def disconnect(world: World, args: dict[str, Any]) -> Any:
    """A client's subscription closes; when it was the last, pending permissions get the grace period."""
    slot = world.sessions[args["session"]]
    subscription = slot.clients.pop(args["client"], None)
    if subscription is None:
        raise ValueError(f"client {args['client']!r} is not attached")
    subscription.close()
    return {"subscribers": slot.handle._session.bus.subscriber_count}


def _permission_request(world: World, session: str, which: str) -> str:
    slot = world.sessions[session]
    pending = set(slot.handle._session.authorizer.broker.pending_ids)
    requests = [r for r in world.trace.events() if r["type"] == "permission_request"
                and r["session"] == session and r["gen"] == slot.gen and r["data"]["requestId"] in pending]
    if which != "latest":
        requests = [r for r in requests
                    if which in (r["data"]["requestId"], (r["data"].get("toolCall") or {}).get("toolCallId"))]
    if not requests:
        raise LookupError(f"no pending permission request {which!r} (pending: {sorted(pending)})")
    return requests[-1]["data"]["requestId"]


@register_action("vote", session=F.SESSION, request=F.Field(F.label_text, default="latest"),
                 outcome=F.Field(F.one_of("selected", "cancelled"), default="selected"),
                 option=F.Field(F.string, default="proceed_once"))
async def vote(world: World, args: dict[str, Any]) -> Any:
    """Answer a pending permission request: ``latest``, or by request id or the tool call id it asks about."""
    request_id = _permission_request(world, args["session"], args["request"])
    option = args["option"] if args["outcome"] == "selected" else None
    voted = await world.session(args["session"]).vote(request_id, args["outcome"], option)
    return {"voted": voted, "requestId": request_id}


# ----------------------------------------------------------------- lifecycle and settings


@register_action("approval_mode", session=F.SESSION, mode=F.Field(F.one_of(*APPROVAL_MODES), required=True))
async def approval_mode(world: World, args: dict[str, Any]) -> Any:
    """Change the approval mode (entering Plan clears guard trust; other modes keep the chain)."""
    return {"mode": await world.session(args["session"]).set_approval_mode(args["mode"])}


@register_action("model", session=F.SESSION, model=F.Field(F.string, required=True))
async def set_model(world: World, args: dict[str, Any]) -> Any:
    """Switch the session's model name (the work chain goes on)."""
    return {"model": await world.session(args["session"]).set_model(args["model"])}


@register_action("cwd", session=F.SESSION, path=F.Field(F.string, required=True),
                 create=F.Field(F.boolean, default=True))
async def cwd(world: World, args: dict[str, Any]) -> Any:
    """Change the working directory (relative to the current one; created first unless ``create: false``).
    A successful change clears guard trust."""
    handle = world.session(args["session"])
    if args["create"]:
        (Path(handle.cwd) / args["path"]).mkdir(parents=True, exist_ok=True)
    return {"cwd": await handle.change_cwd(args["path"])}


@register_action("rewind", session=F.SESSION, turn=F.Field(F.count, required=True))
async def rewind(world: World, args: dict[str, Any]) -> Any:
    """Drop user turn ``turn`` (from 0) and what follows; clears guard trust. ``{messages}`` kept."""
    return {"messages": await world.session(args["session"]).rewind(args["turn"])}


@register_action("fork", session=F.SESSION, label=F.Field(F.new_session_label, required=True))
async def fork(world: World, args: dict[str, Any]) -> Any:
    """Fork the session into a new one known as ``label``; neither keeps guard trust."""
    slot = await world.fork_session(args["session"], args["label"])
    return {"sessionId": slot.session_id, "messages": len(slot.handle._session.conversation)}


@register_action("release_queue", session=F.SESSION)
async def release_queue(world: World, args: dict[str, Any]) -> Any:
    """A bridge says the queued prompt the guard yielded to is gone (``craft/todoStopGuardQueueReleased``)."""
    return {"released": await world.session(args["session"]).release_queued_prompt_wait()}


@register_action("status", session=F.SESSION)
async def status(world: World, args: dict[str, Any]) -> Any:
    """The session's status now (the stable fields a trace records)."""
    value = await world.session(args["session"]).status()
    return {k: value[k] for k in STATUS_KEYS if k in value}


# ----------------------------------------------------------------- a bridge's drain source


def _drain_answer(value: Any, where: str, ctx: F.ParseContext) -> dict[str, Any]:
    return F.parse_fields(value, {"messages": F.Field(F.string_list, default=[]),
                                  "has_queued_prompt": F.Field(F.boolean, default=False)}, where, ctx)


@register_action("bridge_drain", session=F.SESSION, delay=F.Field(J.seconds, required=True),
                 times=F.Field(F.count, default=1), answer=F.Field(_drain_answer),
                 only_watching=F.Field(F.boolean, default=False))
async def bridge_drain(world: World, args: dict[str, Any]) -> Any:
    """Answer the session's mid-turn drains as a slow bridge: the next ``times`` drains (0: all) are
    answered ``delay`` virtual seconds late — with ``answer`` (the bridge's own queue: messages and
    hasQueuedPrompt), else with the FIFO's drain taken at answer time; later drains go to the FIFO at once.
    With ``only_watching``, only drains that ask about queued prompts (the stop path's) are slow.

    The session waits 2 s for a drain; a later answer's messages are recovered by its next drain and
    its queued-prompt snapshot is discarded.
    """
    label = args["session"]
    handle = world.session(label)
    session = handle._session
    delay, times, answer, only_watching = args["delay"], args["times"], args["answer"], args["only_watching"]
    asked = slow = 0

    def fifo_drain(watch: bool) -> PendingReply[DrainResult]:
        return session.fifo_ref.ask_nowait(lambda r: Drain(watch, r))

    def source(watch: bool) -> PendingReply[DrainResult]:
        nonlocal asked, slow
        asked += 1
        n = asked
        world.trace.bridge(label, "asked", n, watch=watch)
        if (times and slow >= times) or (only_watching and not watch):
            return fifo_drain(watch)
        slow += 1
        answer_to, pending = reply_pair()

        async def reply() -> None:
            if answer is None:
                try:
                    result = await fifo_drain(watch).wait()
                except (ActorGone, MailboxFull):
                    return  # the session closed meanwhile
            else:
                result = DrainResult(tuple(answer["messages"]), (), answer["has_queued_prompt"])
            world.trace.bridge(label, "answered", n, messages=list(result.messages),
                               hasQueuedPrompt=result.has_queued_prompt)
            answer_to.send(result)

        world.later(trio.current_time() + delay, reply)
        return pending

    await handle.set_drain_source(source)
    return {"installed": True}


@register_action("restore", session=F.SESSION)
async def restore(world: World, args: dict[str, Any]) -> Any:
    """History restore: the same as ``load`` (the conversation from disk; clears guard trust)."""
    return await load(world, args)


# ----------------------------------------------------------------- subagent runs

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # actors.subagents.registry.NAME


def _new_run_label(value: Any, where: str, ctx: F.ParseContext) -> str:
    label = F.label_text(value, where, ctx)
    if not RUN_NAME.match(label):
        raise ctx.fail(where, "a run name: letters, digits, '.', '_' or '-', starting with a letter or digit", value)
    if label in ctx.sessions:
        raise ctx.fail(where, f"a run label that is not a session label (known sessions: {ctx.sessions})", value)
    return F.new_label(F.SUBAGENT, "subagent run")(label, where, ctx)


def _turns(value: Any, where: str, ctx: F.ParseContext) -> int:
    if type(value) is not int or value < 1:
        raise ctx.fail(where, "a positive integer", value)
    return value


NEW_RUN = F.Field(_new_run_label, required=True)
KNOWN_RUN = F.Field(F.label_of(F.SUBAGENT, "subagent run"), required=True)


def _run_answer(status: dict[str, Any]) -> dict[str, Any]:
    """A run's status as the parent gets it: the fields, and ``text`` (with ``turn N of M``)."""
    return {**status, "text": status_text(status)}


@register_action("subagent_start", label=NEW_RUN, brief=F.Field(F.string, required=True), goal=F.Field(F.string),
                 max_turns=F.Field(_turns), report_file=F.Field(F.string))
async def subagent_start(world: World, args: dict[str, Any]) -> Any:
    """Start a subagent run named ``label`` on the ``session`` runner (a child session on the scenario's
    model), as the ``start`` tool does; ``report_file`` is relative to the replay's workspace."""
    arguments: dict[str, Any] = {"brief": args["brief"], "runner": "session"}
    arguments.update({k: args[k] for k in ("goal", "max_turns", "report_file") if args[k] is not None})
    run = await world.start_subagent(args["label"], arguments)
    assert run.config_path is not None
    world.signal_urls[args["label"]] = read_signal_url(run.config_path)  # what its subagent would read
    return {"name": run.name, "runner": run.spec.runner, "maxTurns": run.max_turns}


@register_action("subagent_signal", label=KNOWN_RUN, signal=F.Field(F.one_of(*SIGNAL_TOOLS), required=True),
                 summary=F.Field(F.string), question=F.Field(F.string), report_file=F.Field(F.string))
async def subagent_signal(world: World, args: dict[str, Any]) -> Any:
    """The run's subagent signals from outside its model: the URL from its MCP config file, served in process
    like its own tools' calls. ``{isError, text}``, or ``{refused}`` once the token is revoked."""
    arguments = {k: args[k] for k in ("summary", "question", "report_file") if args[k] is not None}
    endpoint = world.daemon.subagents.signal_client
    try:
        is_error, text = await endpoint(world.signal_urls[args["label"]], args["signal"], arguments)
    except SignalRefused as exc:
        return {"refused": str(exc)}
    return {"isError": is_error, "text": text}


@register_action("subagent_status", label=KNOWN_RUN)
async def subagent_status(world: World, args: dict[str, Any]) -> Any:
    """The run's ``status`` now: its fields and ``text`` (``turn N of M``, end reason)."""
    return _run_answer(world.daemon.subagents.status(args["label"]))


@register_action("subagent_stop", label=KNOWN_RUN)
async def subagent_stop(world: World, args: dict[str, Any]) -> Any:
    """Stop the run as the parent's ``stop`` does (its turn is cancelled); answers once it settled."""
    return _run_answer(await world.daemon.subagents.stop(args["label"]))


@register_action("subagent_await", label=KNOWN_RUN, timeout=F.Field(F.number, default=30.0))
async def subagent_await(world: World, args: dict[str, Any]) -> Any:
    """``await_resume``: wait up to ``timeout`` virtual seconds for the run to end or need help;
    ``{outcome, ...status, text}`` with outcome ``ended``, ``needs_help`` or ``underway``."""
    return _run_answer(await world.daemon.subagents.await_resume(args["label"], args["timeout"]))
