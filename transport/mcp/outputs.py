"""The ``outputSchema`` of every ``/mcp`` tool that returns ``structuredContent``.

A run's status is :meth:`actors.subagents.run.SubagentRun.status`; these
schemas describe it field by field (JSON Schema 2020-12, MCP's default
dialect). They leave ``additionalProperties`` open on purpose: a field added
to the status later must not make every client refuse every answer. The tests
check the other direction — no field the daemon sends goes undeclared.
"""

from __future__ import annotations

from typing import Any

from actors.subagents.registry import RUNNERS
from actors.subagents.texts import END_REASONS

STATES = ["starting", "running", "idle", "needs_help"]
OUTCOMES = ["ended", "needs_help", "underway"]

_NULLABLE_TEXT = {"type": ["string", "null"]}

RUN_FIELDS: dict[str, Any] = {
    "name": {"type": "string", "description": "the run's name"},
    "state": {"type": "string", "enum": STATES},
    "turn": {"type": "integer", "minimum": 0, "description": "the turn underway or last run (turn N of M)"},
    "maxTurns": {"type": "integer", "minimum": 1},
    "endReason": {"type": ["string", "null"], "enum": [*END_REASONS, None],
                  "description": "null while underway; goal_reached is self-reported by the subagent"},
    "lastEventAgeS": {"type": "number", "minimum": 0, "description": "seconds since the run last did anything"},
    "ended": {"type": "boolean"},
    "runner": {"type": "string", "enum": list(RUNNERS)},
    "goal": _NULLABLE_TEXT,
    "goalReachedSelfReported": {"type": "boolean"},
    "question": {**_NULLABLE_TEXT, "description": "need_help's question"},
    "reportFile": {**_NULLABLE_TEXT, "description": "where the done message is appended"},
    "done": {"type": "string", "description": "the done message so far, one line per stop"},
    "reportError": {"type": "string", "description": "why the report file could not be written"},
    "outputTail": {"type": "string", "description": "the command runner's last output"},
    "childSessionId": {"type": "string", "description": "the session runner's child session"},
    "waitingForVote": {"type": "array", "description": "the child's permission requests nobody has answered "
                                                       "(a client of the child session answers them)",
                       "items": {"type": "object", "properties": {"requestId": {"type": "string"},
                                                                  "title": {"type": "string"}},
                                 "required": ["requestId", "title"]}},
}
RUN_REQUIRED = ["name", "state", "turn", "maxTurns", "endReason", "lastEventAgeS", "ended", "runner", "goal",
                "goalReachedSelfReported", "question", "reportFile", "done"]

RUN_STATUS: dict[str, Any] = {"type": "object", "properties": RUN_FIELDS, "required": RUN_REQUIRED}

START_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "runner": {"type": "string", "enum": list(RUNNERS)},
        "maxTurns": {"type": "integer", "minimum": 1, "description": "1 without a goal"},
        "configFile": {"type": "string", "description": "the run's own MCP config file (its signal URL)"},
    },
    "required": ["name", "runner", "maxTurns", "configFile"],
}

# ``list`` leaves out each run's done message (``status`` has it).
LIST_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {"runs": {"type": "array", "items": {
        "type": "object",
        "properties": {k: v for k, v in RUN_FIELDS.items() if k != "done"},
        "required": [k for k in RUN_REQUIRED if k != "done"],
    }}},
    "required": ["runs"],
}

AWAIT_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {"outcome": {"type": "string", "enum": OUTCOMES,
                               "description": "ended, needs_help, or underway (the wait timed out)"},
                   **RUN_FIELDS},
    "required": ["outcome", *RUN_REQUIRED],
}
