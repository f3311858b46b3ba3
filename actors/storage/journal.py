"""The prompt journal: what a session admitted, as records, and what a restart makes of them.

Every change of a session's prompt FIFO that a crash must not lose is one
record, appended before the change is acknowledged (a 202 is a promise):

    op          fields                                   prompt state
    ---------   --------------------------------------   -------------------------------
    admitted    promptId, body, text, queuedAt,           -> queued (at the tail)
                clientId, waited
    promoted    promptId, text, queuedAt, messageIds      mid-turn input -> queued (at the head)
    aborted     promptId                                  queued -> cancelled
    started     promptId, startedAt                       queued -> running
    ended       promptId, state, stopReason, error,       queued | running -> terminal
                errorCode, endedAt
    turn        record (a terminal turn record, kept      terminal (written by compaction)
                when the journal is compacted)
    mid_turn    messageId, text, clientId?                mid-turn input waiting (its sender's client id)
    drained     messageIds                                mid-turn input taken by a turn
    usage       promptId, usage (one model call's         added to the prompt's turn record
                figures; from compaction, a running       (if it has one) and to the
                turn's so far)                            session's cumulative usage
    session_usage
                usage (the session's cumulative           replaces the cumulative usage
                figures)                                  (compaction writes it last)
    timer       taskId, kind (cron | wakeup), text,       a @wakeup or cron job scheduled
                schedule | at, recurring, createdAt
    timer_fired taskId, at                                fired (written before the fire is
                                                          queued); a one-shot one ends
    timer_ended taskId                                    killed, or ended: its schedule fires no more

:func:`replay` folds the records into what a restarted session resumes with:
queued prompts in their order, the prompts that were running when the daemon
died (they end ``daemon_restarted`` and are never re-run: their tools had side
effects), every turn record, the mid-turn input still waiting, and the session's
cumulative model usage (counts are summed as numbers, key by key), and the
@wakeups and cron jobs still scheduled, each with its last fire. It is pure:
no I/O, no clock. A record it does not understand is skipped, so a newer
daemon's journal does not stop an older one from restoring what it can.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import attrs

DAEMON_RESTARTED = "daemon_restarted"
RESTARTED_MESSAGE = ("the daemon restarted while this prompt ran; it was not run again, "
                     "because its tools may already have had effects")
NODE_LOST = "node_lost"  # cluster mode: the node running the prompt stopped renewing its lease
NODE_LOST_MESSAGE = ("the node running this session was lost while this prompt ran; another node took the session "
                     "over and did not run the prompt again, because its tools may already have had effects")


@attrs.define
class Replayed:
    queued: list[dict[str, Any]] = attrs.Factory(list)  # admitted/promoted records, in FIFO order
    interrupted: list[str] = attrs.Factory(list)  # prompt ids that were running
    turns: OrderedDict[str, dict[str, Any]] = attrs.Factory(OrderedDict)  # prompt id -> turn record (wire form)
    mid_turn: list[dict[str, Any]] = attrs.Factory(list)  # {messageId, text, clientId?}, in order
    usage: dict[str, Any] = attrs.Factory(dict)  # the session's model usage (wire form), cumulative
    timers: list[dict[str, Any]] = attrs.Factory(list)  # live "timer" records, each with "lastFired" (or None)


def replay(records: list[dict[str, Any]]) -> Replayed:
    """What the journal ``records`` leave behind (see the module docstring)."""
    out = Replayed()
    entries: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    running: set[str] = set()
    waiting: OrderedDict[str, dict[str, Any]] = OrderedDict()
    timers: OrderedDict[str, dict[str, Any]] = OrderedDict()
    for record in records:
        op, pid = record.get("op"), record.get("promptId")
        if op in ("admitted", "promoted") and isinstance(pid, str):
            entries[pid] = record
            order.insert(0, pid) if op == "promoted" else order.append(pid)
            out.turns[pid] = {"promptId": pid, "state": "queued", "promptText": record.get("text", ""),
                              "queuedAt": record.get("queuedAt")}
            for message_id in record.get("messageIds", ()):
                waiting.pop(message_id, None)
        elif op == "aborted" and pid in entries:
            _end(out, entries, order, running, pid, {"state": "cancelled", "stopReason": "cancelled"})
        elif op == "started" and pid in entries:
            running.add(pid)
            out.turns[pid].update(state="running", startedAt=record.get("startedAt"))
        elif op == "ended" and isinstance(pid, str):
            fields = {k: record.get(k) for k in ("state", "stopReason", "error", "errorCode", "endedAt")}
            _end(out, entries, order, running, pid, fields)
        elif op == "turn" and isinstance(record.get("record"), dict) \
                and isinstance(record["record"].get("promptId"), str):
            turn = record["record"]
            out.turns[turn["promptId"]] = dict(turn)
        elif op == "mid_turn" and isinstance(record.get("messageId"), str):
            waiting[record["messageId"]] = {"messageId": record["messageId"], "text": record.get("text", "")}
            if isinstance(record.get("clientId"), str):
                waiting[record["messageId"]]["clientId"] = record["clientId"]
        elif op == "drained":
            for message_id in record.get("messageIds", ()):
                waiting.pop(message_id, None)
        elif op == "usage" and isinstance(record.get("usage"), dict):
            out.usage = summed(out.usage, record["usage"])
            if pid in out.turns:
                out.turns[pid]["usage"] = summed(out.turns[pid].get("usage"), record["usage"])
        elif op == "session_usage" and isinstance(record.get("usage"), dict):
            out.usage = summed({}, record["usage"])
        elif op == "timer" and isinstance(record.get("taskId"), str):
            timers[record["taskId"]] = {**record, "lastFired": record.get("lastFired")}
        elif op == "timer_fired" and record.get("taskId") in timers:
            timer = timers[record["taskId"]]
            if timer.get("kind") == "wakeup" or not timer.get("recurring"):
                del timers[record["taskId"]]  # a one-shot one is done
            else:
                timer["lastFired"] = record.get("at")
        elif op == "timer_ended":
            timers.pop(record.get("taskId"), None)  # type: ignore[arg-type]
    out.queued = [entries[pid] for pid in order if pid not in running]
    out.interrupted = [pid for pid in order if pid in running]
    out.mid_turn = list(waiting.values())
    out.timers = list(timers.values())
    return out


def summed(into: Any, more: dict[str, Any]) -> dict[str, Any]:
    """A new dict: ``into`` plus ``more``, integer by integer, nested objects alike (other values skipped)."""
    out = dict(into) if isinstance(into, dict) else {}
    for key, value in more.items():
        if isinstance(value, dict):
            out[key] = summed(out.get(key), value)
        elif type(value) is int:
            previous = out.get(key)
            out[key] = (previous if type(previous) is int else 0) + value
    return out


def _end(out: Replayed, entries: dict[str, Any], order: list[str], running: set[str], pid: str,
         fields: dict[str, Any]) -> None:
    if pid in order:
        order.remove(pid)
    running.discard(pid)
    entries.pop(pid, None)
    turn = out.turns.setdefault(pid, {"promptId": pid, "promptText": "", "queuedAt": None})
    turn.update({k: v for k, v in fields.items() if v is not None})
