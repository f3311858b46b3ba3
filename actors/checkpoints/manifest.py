"""Checkpoint manifests, their differences and what a restore does: pure (no Trio, no I/O).

A **manifest** is the state of a session's cwd at one moment: ``{relpath: Entry}``
where an entry is a regular ``file`` (its sha256, size and permission bits), a
``link`` (its target text; never followed) or a ``dir`` (so a directory a turn
created is removed on restore). Besides its entries it says what it does not
cover: ``skipped`` (path -> reason: over the per-file cap, unreadable, the
session's cap reached, not a regular file), ``ignored`` (the paths the
``.gitignore`` rules left out, where the walk met them: a restore leaves them
alone) and ``complete`` (false when the walk stopped early: a restore then
deletes nothing the manifest lacks).

Relative paths use ``/``; no entry is ever ``.git`` or under one, nor one of the
daemon's hidden paths (the walk never records them).

:func:`changes` compares two manifests; :func:`plan_restore` turns (the tree
now, a target) into a :class:`Plan`; :func:`changed_outside` names the paths a
plan would touch that changed since a reference manifest (someone else edited
them).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs

FILE, LINK, DIR = "file", "link", "dir"
MAX_IGNORED = 20_000  # ignored paths one manifest records; past it the manifest is incomplete

# Built-in tools that never change the session's files: no checkpoint is taken for them. Every other tool
# (shell, monitor, write_file, edit, agent, an MCP server's or a client's) may, so one is taken first.
LEAVES_FILES_ALONE = frozenset({"read_file", "glob", "grep", "todo_write", "web_fetch", "shell_output", "kill_task",
                                "schedule_wakeup", "cron_create", "cron_delete"})


@attrs.frozen
class Entry:
    """One path of a manifest. ``stat`` is ``(size, mtime_ns, inode, ctime_ns)`` of a file as hashed: a later
    walk that finds the same reuses ``sha`` without reading the file; never compared."""

    kind: str
    sha: str | None = None
    size: int = 0
    mode: int = 0  # permission bits (files and directories)
    target: str | None = None
    stat: tuple[int, int, int, int] | None = attrs.field(default=None, eq=False)

    def same(self, other: Entry | None) -> bool:
        """The same content: kind, bytes and permission bits of a file, target of a link (a directory's mode
        is not compared)."""
        if other is None or other.kind != self.kind:
            return False
        if self.kind == FILE:
            return self.sha == other.sha and (self.mode & 0o777) == (other.mode & 0o777)
        if self.kind == LINK:
            return self.target == other.target
        return True

    def to_json(self) -> list[Any]:
        if self.kind == FILE:
            return [FILE, self.sha, self.size, self.mode, list(self.stat) if self.stat else None]
        if self.kind == LINK:
            return [LINK, self.target]
        return [DIR, self.mode]

    @classmethod
    def from_json(cls, raw: list[Any]) -> Entry:
        kind = raw[0]
        if kind == FILE:
            return cls(FILE, sha=raw[1], size=raw[2], mode=raw[3], stat=tuple(raw[4]) if raw[4] else None)
        if kind == LINK:
            return cls(LINK, target=raw[1])
        return cls(DIR, mode=raw[1])


@attrs.frozen
class Manifest:
    entries: dict[str, Entry] = attrs.field(factory=dict)
    skipped: dict[str, str] = attrs.field(factory=dict)
    ignored: frozenset[str] = frozenset()
    complete: bool = True

    def to_bytes(self) -> bytes:
        return json.dumps({"v": 1, "entries": {p: e.to_json() for p, e in sorted(self.entries.items())},
                           "skipped": dict(sorted(self.skipped.items())), "ignored": sorted(self.ignored),
                           "complete": self.complete}, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        raw = json.loads(data)
        return cls({p: Entry.from_json(e) for p, e in raw["entries"].items()}, dict(raw["skipped"]),
                   frozenset(raw["ignored"]), bool(raw["complete"]))

    def id(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    def covers(self, path: str) -> bool:
        """Whether the manifest knows ``path``'s state: not skipped, not ignored (nor under an ignored or
        skipped directory)."""
        for prefix in _self_and_parents(path):
            if prefix in self.skipped or prefix in self.ignored:
                return False
        return True


def _self_and_parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:n]) for n in range(len(parts), 0, -1)]


# ----------------------------------------------------------------- differences


@attrs.frozen
class Change:
    path: str
    change: str  # "added", "deleted", "modified"
    kind: str  # the entry's kind after (before, for a deletion)


def changes(before: Manifest, after: Manifest) -> list[Change]:
    """The paths whose entry differs between two manifests, in path order (directories included). A path one
    of them skipped or ignored is not listed: neither knows what it held."""
    out = []
    for path in sorted(before.entries.keys() | after.entries.keys()):
        old, new = before.entries.get(path), after.entries.get(path)
        if old is not None and old.same(new):
            continue
        if old is None and not before.covers(path) or new is None and not after.covers(path):
            continue
        if old is None:
            assert new is not None
            out.append(Change(path, "added", new.kind))
        elif new is None:
            out.append(Change(path, "deleted", old.kind))
        else:
            out.append(Change(path, "modified", new.kind))
    return out


# ----------------------------------------------------------------- restoring


@attrs.frozen
class Plan:
    """What a restore does, in this order: ``deletes`` (files and links, deepest first), ``rmdirs``
    (directories, deepest first; one not empty is left), ``mkdirs`` (shallowest first), ``writes`` (files and
    links from the target). ``skipped``: paths that differ but are left alone, with the reason."""

    deletes: tuple[str, ...] = ()
    rmdirs: tuple[str, ...] = ()
    mkdirs: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    skipped: dict[str, str] = attrs.field(factory=dict)

    @property
    def touched(self) -> list[str]:
        return sorted({*self.deletes, *self.rmdirs, *self.mkdirs, *self.writes})


def _depth(path: str) -> int:
    return path.count("/")


def plan_restore(current: Manifest, target: Manifest) -> Plan:
    """How to turn the tree ``current`` describes into ``target``'s.

    Left alone: a path either manifest skipped or ignored (its content is not saved: changing it could
    lose something), and, when ``target`` is incomplete, anything it lacks.
    """
    deletes: list[str] = []
    rmdirs: list[str] = []
    mkdirs: list[str] = []
    writes: list[str] = []
    skipped: dict[str, str] = {}
    for path in sorted(current.entries.keys() | target.entries.keys()):
        now, then = current.entries.get(path), target.entries.get(path)
        if then is not None and then.same(now):
            continue
        reason = _left_alone(path, current, target, then)
        if reason is not None:
            skipped[path] = reason
            continue
        if now is not None and (then is None or then.kind != now.kind):
            (rmdirs if now.kind == DIR else deletes).append(path)
        if then is not None:
            if then.kind == DIR:
                if now is None or now.kind != DIR:
                    mkdirs.append(path)
            else:
                writes.append(path)
    return Plan(tuple(sorted(deletes, key=_depth, reverse=True)), tuple(sorted(rmdirs, key=_depth, reverse=True)),
                tuple(sorted(mkdirs, key=_depth)), tuple(writes), skipped)


def _left_alone(path: str, current: Manifest, target: Manifest, then: Entry | None) -> str | None:
    for prefix in _self_and_parents(path):
        for manifest, when in ((current, "now"), (target, "in the checkpoint")):
            if prefix in manifest.skipped:
                return f"not covered {when}: {manifest.skipped[prefix]}"
            if prefix in manifest.ignored:
                return f"ignored {when} (.gitignore)"
    if then is None and not target.complete:
        return "the checkpoint is incomplete (its walk stopped early): nothing it lacks is deleted"
    return None


def changed_outside(reference: Manifest, current: Manifest, paths: list[str]) -> list[str]:
    """Of ``paths``, those whose state now differs from ``reference``'s (someone changed them since)."""
    out = []
    for path in paths:
        old, new = reference.entries.get(path), current.entries.get(path)
        if old is None and new is None:
            continue
        if old is None or not old.same(new):
            out.append(path)
    return out


def text_hash(text: str) -> str:
    """What identifies a user turn's message (a checkpoint is matched to its turn by it)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


__all__ = ["Change", "DIR", "Entry", "FILE", "LINK", "MAX_IGNORED", "Manifest", "Plan", "changed_outside", "changes",
           "plan_restore", "text_hash"]
