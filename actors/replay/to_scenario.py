"""A recording as a scenario of the library (``--recording FILE --to-scenario OUT``): an incident, a regression test.

Pure: :func:`to_scenario` maps a :class:`~.recording.Recording` to scenario data (the JSON form of
``actors/replay/scenarios/README.md``):

- ``settings`` — the recorded ones that differ from the defaults;
- ``model`` — each recorded call as a scripted response: its ``delay``, its chunks with a ``sleep``
  before each that came later, a refusal (``refuse``) or a cut (``fail``); a cancelled stream ends in
  a long ``sleep`` (the recorded cancel cuts it again);
- ``tool_results`` — each tool call but the session's own tools, answered as recorded (with the
  permissions it asked for) instead of running; ``hooks`` — the runs of each hook command;
- ``timeline`` — ``create_session`` with the recorded id, then the client's calls at their recorded
  times (prompts by label, a vote by the tool call its request asked about, a subscription as
  ``attach``/``disconnect``, a rewind, a cwd change inside the recorded cwd, a restore as ``restart``
  or, after the session was closed, ``load``); the others (a title, a checkpoint restore, a rule edit,
  ...) are left out with a note;
- ``expect`` — each prompt's recorded terminal state and the number of model calls; ``invariants``
  — the library's safety properties (and the guard's when it was on).
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from ..settings import Limits, Settings
from .recorded_tools import SESSION_TOOLS
from .recording import Recording

INVARIANTS = ["one_terminal_per_prompt", "ids_rise", "no_overlap", "no_events_after_close"]
GUARD_INVARIANTS = ["guard_bounded", "guard_streams_bounded", "no_guard_after_hard_stop"]
MIN_SLEEP = 0.001  # gaps shorter than this (a millisecond) are left out of the scripted responses
CANCELLED_TAIL = 3600.0  # a stream the session cancelled waits this long (the recorded cancel comes first)


def _t(value: float) -> float:
    return round(float(value), 6)


def _settings(recording: Recording) -> dict[str, Any]:
    defaults = Settings()
    out: dict[str, Any] = {}
    for name, value in recording.header.settings.items():
        if value is None or value == getattr(defaults, name, None):
            continue
        out[name] = value
    limits = {k: v for k, v in recording.header.limits.items()
              if k in attrs.fields_dict(Limits) and attrs.fields_dict(Limits)[k].default != v}
    limits.pop("mailbox_size", None)
    if limits:
        out["limits"] = limits
    return out


def _response(data: dict[str, Any]) -> Any:
    steps: list[dict[str, Any]] = []
    for item in data.get("items", []):
        if item.get("dt", 0) >= MIN_SLEEP:
            steps.append({"sleep": _t(item["dt"])})
        if "text" in item:
            steps.append({"text": item["text"]})
        elif "thought" in item:
            steps.append({"thought": item["thought"]})
        elif "tool_call" in item:
            c = item["tool_call"]
            steps.append({"tool_call": {"id": c["id"], "name": c["name"], "arguments": c["arguments"]}})
        elif "usage" in item:
            steps.append({"usage": {k: v for k, v in item["usage"].items() if v is not None}})
        elif "finish" in item and item["finish"] is not None:
            steps.append({"finish": item["finish"]})
    response: dict[str, Any] = {"steps": steps}
    if data.get("delay", 0) >= MIN_SLEEP:
        response["delay"] = _t(data["delay"])
    error = data.get("error")
    if error is not None:
        failure = {"code": error.get("code") or "server_error", "message": error.get("message") or ""}
        if error.get("committed"):
            steps.append({"fail": failure})
        else:
            response = {"steps": [], "refuse": failure, **({"delay": response["delay"]} if "delay" in response else {})}
    elif data.get("cancelled"):
        steps.append({"sleep": CANCELLED_TAIL})
    return response


def _rel(value: Any, cwd: str) -> Any:
    if isinstance(value, dict):
        return {k: _rel(v, cwd) for k, v in value.items()}
    if isinstance(value, list):
        return [_rel(v, cwd) for v in value]
    return value.replace(cwd, "$CWD") if isinstance(value, str) and cwd else value


def _background(recording: Recording, data: dict[str, Any]) -> list[dict[str, Any]]:
    """The background tasks a recorded call started, with their later events and notification."""
    events = recording.of_kind("event")
    before, after = data.get("events", [0, 0])
    notes = {e.data["taskId"]: e.data for e in recording.of_kind("background") if not e.data.get("merge")}
    out = []
    for entry in events[before:after]:
        d = entry.data.get("data") or {}
        if entry.data["type"] != "background_task" or d.get("status") != "started":
            continue
        task_id = d.get("taskId")
        later = [{"at": _t(e.t), **{k: v for k, v in (e.data.get("data") or {}).items()
                                    if k in ("status", "text", "truncated", "state", "exitCode")}}
                 for e in events[after:] if e.data["type"] == "background_task"
                 and (e.data.get("data") or {}).get("taskId") == task_id
                 and (e.data.get("data") or {}).get("status") in ("output", "finished")]
        task: dict[str, Any] = {"kind": d.get("kind"), "label": d.get("label", ""), "events": later}
        if task_id in notes:
            task["notification"] = notes[task_id]["text"].replace(task_id, "{taskId}")
        out.append(task)
    return out


def _tool_results(recording: Recording) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cwd = recording.header.cwd
    for entry in recording.of_kind("tool"):
        data = entry.data
        if data["name"] in SESSION_TOOLS or "result" not in data:
            continue
        answer = {
            "name": data["name"], "result": data["result"], "duration": _t(data.get("duration", 0)),
            "asks": [{"dt": _t(a.get("dt", 0)), "request": a["request"]} for a in data.get("asks", [])],
            "updates": data.get("updates", []),
        }
        background = _background(recording, data)
        if background:
            answer["background"] = background
            # the task id the result names is the replay's: the one its tracked task gets
            started = [e.data["data"]["taskId"] for e in recording.of_kind("event")[data["events"][0]:data["events"][1]]
                       if e.data["type"] == "background_task" and e.data["data"].get("status") == "started"]
            answer = _swap(answer, {tid: "{taskId}" for tid in started})
        out[data["toolCallId"]] = _rel(answer, cwd)
    return out


def _swap(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _swap(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap(v, names) for v in value]
    if isinstance(value, str):
        for old, new in names.items():
            value = value.replace(old, new)
    return value


def _hooks(recording: Recording) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in recording.of_kind("hook"):
        outcome = entry.data["outcome"]
        if isinstance(outcome, list):
            run = {"exit": outcome[0], "stdout": outcome[1], "stderr": outcome[2]}
        else:  # it did not run, or timed out: a failure as the runtime reports one
            run = {"exit": 1, "stderr": str(outcome)}
        if entry.data.get("duration"):
            run["delay"] = _t(entry.data["duration"])
        out.setdefault(entry.data["command"], []).append(run)
    return out


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def to_scenario(recording: Recording, name: str) -> tuple[dict[str, Any], list[str]]:
    """The scenario data, and notes on what could not be carried over."""
    notes: list[str] = []
    h = recording.header
    events = recording.of_kind("event")
    # a permission request's id -> the tool call it asks about, and when it was published
    requests = {e.data["data"].get("requestId"): e for e in events if e.data["type"] == "permission_request"}
    labels: dict[str, str] = {}  # recorded prompt id -> label
    timeline: list[dict[str, Any]] = [{"at": 0, "do": "create_session", "session_id": h.sessionId}]
    last = 0.0
    previous_cwd = h.cwd  # a scenario's cwd step is relative to the session's cwd then
    for entry in [e for e in recording.entries if e.kind in ("action", "restored")]:
        if entry.kind == "restored":
            closed = [e for e in events if e.n < entry.n and e.data["type"] == "session_closed"]
            if not [e for e in recording.entries if e.n < entry.n]:
                notes.append(f"step {entry.n}: the session was recorded from its restore on; the scenario starts it "
                             f"new (its restored state is not carried over)")
                continue
            reason = (closed[-1].data.get("data") or {}).get("reason") if closed else None
            timeline.append({"at": max(_t(entry.t), last),
                             **({"do": "load"} if reason == "closed" else {"do": "restart"})})
            last = max(_t(entry.t), last)
            continue
        do, args, result = entry.data["do"], entry.data.get("args") or {}, entry.data.get("result")
        at = max(_t(entry.t), last)
        step: dict[str, Any]
        if do == "prompt":
            label = f"p{len(labels) + 1}"
            blocks = args["body"].get("prompt", [])
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            step = {"do": "prompt", "label": label, "text": text}
            if isinstance(result, dict) and result.get("prompt_id"):
                labels[result["prompt_id"]] = label
        elif do == "mid_turn":
            step = {"do": "mid_turn", "text": args["text"]}
            if args.get("messageId"):
                step["message_id"] = args["messageId"]
        elif do == "abort" and args.get("promptId") in labels:
            step = {"do": "abort", "prompt": labels[args["promptId"]]}
        elif do == "cancel":
            step = {"do": "cancel"}
        elif do == "vote" and args.get("requestId") in requests:
            asked = requests[args["requestId"]]
            at = max(at, _t(asked.t + 1e-6))
            step = {"do": "vote", "request": asked.data["data"]["toolCall"]["toolCallId"],
                    "outcome": args["outcome"]}
            if args.get("optionId"):
                step["option"] = args["optionId"]
        elif do == "approval_mode":
            step = {"do": "approval_mode", "mode": args["mode"]}
        elif do == "model":
            step = {"do": "model", "model": args["model"]}
        elif do == "attach":
            step = {"do": "attach", "client": f"c{args['client']}"}
        elif do == "detach":
            step = {"do": "disconnect", "client": f"c{args['client']}"}
        elif do == "rewind" and isinstance(result, int):
            step = {"do": "rewind", "turn": args["turn"]}
        elif do == "cwd" and isinstance(result, str) and _inside(result, h.cwd):
            relative = os.path.relpath(result, previous_cwd)
            step = {"do": "cwd", "path": relative}
            previous_cwd = result
        elif do == "release_queue":
            step = {"do": "release_queue"}
        elif do == "load" and isinstance(result, int):
            step = {"do": "load"}
        else:
            notes.append(f"step {entry.n}: {do} {args} is not carried over (no scenario action takes it)")
            continue
        last = at
        timeline.append({"at": at, **step})
    expect: dict[str, Any] = {"model_calls": len(recording.of_kind("model"))}
    prompts: dict[str, Any] = {}
    for e in events:
        if e.data["type"] in ("turn_complete", "turn_error") and e.data.get("promptId") in labels:
            data = e.data["data"]
            if e.data["type"] == "turn_error":
                prompts[labels[e.data["promptId"]]] = {"state": "error", "code": data.get("code")}
            else:
                stop = data.get("stopReason")
                prompts[labels[e.data["promptId"]]] = {"state": "cancelled" if stop == "cancelled" else "completed",
                                                       "stop_reason": stop}
    if prompts:
        expect["prompts"] = prompts
    settings = _settings(recording)
    scenario: dict[str, Any] = {
        "name": name,
        "description": f"Recorded session {h.sessionId} ({h.startedAt}, model {h.model}), turned into a scenario "
                       f"by python -m actors.replay --recording FILE --to-scenario.",
        "settings": settings,
        "model": [_response(e.data) for e in recording.of_kind("model")],
        "timeline": timeline,
        "expect": expect,
        "invariants": INVARIANTS + (GUARD_INVARIANTS if settings.get("todo_stop_guard") else []),
    }
    hooks = _hooks(recording)
    if hooks:
        scenario["hooks"] = hooks
    tools = _tool_results(recording)
    if tools:
        scenario["tool_results"] = tools
    return scenario, notes
