"""Transcripts: one JSONL file per session under the state directory.

Each line is one conversation message in the model-facing shape. The file is
kept open between appends by the store's :class:`~actors.storage.files.AppendFiles`
(at most a few hundred files at a time, least recently used closed first, and
closed with the session), and each line is one ``write(2)``, so a daemon
restarted on the same directory loses nothing that was said. The Todo Stop
Guard's state is deliberately never written here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson

from ..model import ChatMessage, ToolCall
from ..storage.files import AppendFiles

# A session id names the session's files: ``sessions/<id>`` + a suffix (``.jsonl``, the transcript, here, and
# ``.journal.jsonl``, ``.replay.jsonl``, ``.session.json`` in :mod:`actors.storage.local`), its checkpoint log
# ``checkpoints/sessions/<id>.json``, its home ``homes/<id>/``. Every suffix starts with a dot, so with no dot
# in an id the id is all of a file name before its first dot: two ids never name one file, whatever the
# suffixes (``<sid>.journal`` was an id once, and its transcript was session ``<sid>``'s journal). The daemon
# mints ``session-<hex>`` and qwen's clients send those or UUIDs; a dotted id only ever came from a client.
SESSION_ID_RULE = "letters, digits, '_' and '-' (no '.': a file's suffix starts with one), at most 128"
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
TRANSCRIPT_SUFFIX = ".jsonl"


class TranscriptError(ValueError):
    """A transcript line that cannot be read back."""


def is_safe_session_id(session_id: str) -> bool:
    """Whether ``session_id`` is a session id (:data:`SESSION_ID_RULE`): the one check of every id a client
    gives, a store lists or a file is named by."""
    return bool(_SAFE_ID.fullmatch(session_id))


def message_to_dict(m: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls]
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        out["name"] = m.name
    if m.origin is not None:
        out["origin"] = m.origin
    return out


def message_from_dict(d: Any, where: str) -> ChatMessage:
    if not isinstance(d, dict) or d.get("role") not in ("system", "user", "assistant", "tool"):
        raise TranscriptError(f"{where}: not a conversation message")
    calls = d.get("tool_calls") or []
    try:
        tool_calls = tuple(ToolCall(c["id"], c["name"], c.get("arguments")) for c in calls)
    except (KeyError, TypeError):
        raise TranscriptError(f"{where}: malformed tool_calls") from None
    return ChatMessage(d["role"], str(d.get("content", "")), tool_calls, d.get("tool_call_id"), d.get("name"),
                       d.get("origin"))


class Transcript:
    """The append-only conversation log of one session."""

    def __init__(self, state_dir: Path | None, session_id: str, *, files: AppendFiles | None = None) -> None:
        self.path = None if state_dir is None else Path(state_dir) / "sessions" / f"{session_id}{TRANSCRIPT_SUFFIX}"
        self._files = files if files is not None else AppendFiles(limit=1)

    @property
    def exists(self) -> bool:
        return self.path is not None and self.path.exists()

    def append(self, message: ChatMessage) -> None:
        self.append_record({"type": "message", "message": message_to_dict(message)})

    def append_record(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        self._files.append(self.path, orjson.dumps(record) + b"\n", fsync=False)

    def records(self) -> list[dict[str, Any]]:
        """Every readable record; a torn last line (a crash mid-write) is skipped."""
        if not self.exists:
            return []
        assert self.path is not None
        out = []
        lines = self.path.read_bytes().splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                if n == len(lines):
                    break
                raise TranscriptError(f"{self.path}:{n}: invalid JSON") from None
        return out

    def messages(self) -> list[ChatMessage]:
        return [
            message_from_dict(r.get("message"), f"{self.path}:{i}")
            for i, r in enumerate(self.records(), 1)
            if r.get("type") == "message"
        ]

    def rewrite(self, messages: list[ChatMessage]) -> None:
        """Replace the whole transcript (rewind)."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._files.forget(self.path)  # the open descriptor would write to the replaced file
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_bytes(b"".join(orjson.dumps({"type": "message", "message": message_to_dict(m)}) + b"\n"
                                 for m in messages))
        tmp.replace(self.path)
