"""One session's checkpoints: the thin Trio shell over :mod:`.store` and :mod:`.manifest`.

The session calls :meth:`Checkpoints.turn_started` when a user prompt's turn
begins, :meth:`Checkpoints.before_change` before any tool that may change files
runs (in any turn), :meth:`Checkpoints.turn_ended` after a user turn and
:meth:`Checkpoints.settled` after other work (an automatic turn). The walks are
lazy, because a walk of a big tree costs far more than a turn: a user turn's
checkpoint (the state it can be rewound to) is taken just before its first tool
that may change files runs, and the end state (against which "changed outside
the session" is judged) only after work that ran such a tool. A turn that only
talks and reads walks nothing; nothing the session did can have changed the
files between its start and that first tool.
Every walk, hash and restore runs in a worker thread (under virtual time, a
test's or a replay's ``MockClock``, on the loop: a thread would let the clock
jump), one at a time under :attr:`Checkpoints.lock`, which a restore holds from
its check to its conversation change, so no turn starts in between.

The session's log (``sessions/<id>.json``)::

    {"entries": [{"id", "turn", "promptId", "at", "start", "end", "text"}],   # one a user turn, in order
                                         # ("start": null: the cap withheld it; "end": null: not taken)
     "live": {"<turn>": entryId},        # the checkpoint of each turn of the conversation now
     "lastEnd": manifestId,              # the tree as the session last left it
     "undo": [{"id", "at", "kind", "turn", "manifest", "history", "live", "lastEnd"}],
     "storedBytes": n,                   # bytes of the new objects the session stored (see the cap, below)
     "stoppedAtCap": cap | null}         # the cap in force when a checkpoint was first withheld for it

A turn's entry is matched to the conversation by position and by the hash of its
user message (``text``): one whose message is no longer at its position (a
compaction, a ``/clear``) is not offered.

The cap (``checkpoints.maxSessionBytes``) counts what the session's checkpoints
keep: every object they wrote (file contents, manifests, a rewind's copy of the
conversation; an object stored already, by this session or another, costs
nothing) and the log itself (its size as last written; ``blobBytes``, an older
daemon's count of file contents only, is taken as the start). A walk stores new
file contents only while they fit; its manifest is stored only if it fits after
them, else the checkpoint is withheld. Once the count reaches the cap, or a
checkpoint was withheld for it, the session takes no more checkpoints (no walk,
no object: until the cap is raised above ``stoppedAtCap``) and its clients get
one notice. A user turn whose checkpoint is withheld gets an entry with
``"start": null`` (only the first of a run of such turns: the turns after it,
up to the next checkpoint, are judged by it), so a rewind with files to it or to
a turn it follows is refused rather than restoring the wrong files. The
objects and the log together never exceed the cap but by a few hundred bytes of
log (written after the check: the entry of the last checkpoint taken, and the
one marking the first turn without; one more such mark after each change of the
conversation, a ``/clear``, a compaction, a rewind), whatever the number of
turns; and for a rewind or an undo a client asks for: its two manifests and its
copy of the conversation are stored whatever the cap (counted, so no checkpoint
follows), since the undo needs them.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, Protocol

import orjson
import trio

from ..storage import StorageError
from ..tools.paths import Scope
from . import manifest as m
from .store import Store, apply, read_tree_file, unified_diff, walk_tree

log = logging.getLogger("trellis.checkpoints")

MAX_UNDO = 50  # undo entries kept per session (the oldest go)
MAX_NOTICE_PATHS = 10
CAP_REFUSAL = ("the session's checkpoints stopped at checkpoints.maxSessionBytes before that turn: its files "
               "were not saved; rewind without files")


class CheckpointRefused(Exception):
    """A checkpoint request refused: ``code`` (an error code of the REST surface), the sentence, paths."""

    def __init__(self, code: str, message: str, paths: list[str] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.paths = paths or []


class ConversationPort(Protocol):
    """What a restore needs of the session's conversation (called on the event loop, under the lock)."""

    def busy(self) -> bool: ...
    def turn_texts(self) -> list[str]: ...  # the user message of each turn, as Conversation.rewind counts them
    def dump(self) -> list[dict[str, Any]]: ...
    def rewind(self, turn: int) -> int | str: ...
    def replace(self, messages: list[dict[str, Any]]) -> int: ...


async def _off_loop(fn: Callable[[], Any]) -> Any:
    # trio.testing imports pytest where it is installed (megabytes a daemon never uses); a MockClock exists
    # only once something imported it
    testing = sys.modules.get("trio.testing")
    if testing is not None and isinstance(trio.lowlevel.current_clock(), testing.MockClock):
        return fn()  # virtual time: a worker thread would let the clock jump while it runs
    return await trio.to_thread.run_sync(fn)


class Checkpoints:
    """The checkpoints of one session, kept in ``store``."""

    def __init__(self, store: Store, session_id: str, *, cwd: Callable[[], str], scope: Callable[[str], Scope],
                 notice: Callable[[str, str | None], None], clock_ms: Callable[[], int], new_id: Callable[[], str],
                 max_file_bytes: int, max_session_bytes: int) -> None:
        self.store = store
        self.session_id = session_id
        self.cwd = cwd
        self.scope = scope
        self.notice = notice
        self.clock_ms = clock_ms
        self.new_id = new_id
        self.max_file_bytes = max_file_bytes
        self.max_session_bytes = max_session_bytes
        self.lock = trio.Lock()
        self.restoring = False
        self._log: dict[str, Any] | None = None
        self._log_bytes = 0  # the log's size as last read or written (counted against the cap)
        self._stop_noticed = False  # the clients were told the cap stopped the checkpoints
        self._last: m.Manifest | None = None  # the latest manifest walked: the next walk reuses its hashes
        self._noticed: set[str] = set()
        # The user turn begun whose checkpoint is not taken yet: its prompt id, and how to read the turns' texts.
        self._pending: tuple[str, Callable[[], list[str]]] | None = None
        self._dirty = False  # a tool that may change files ran since the end state was last taken

    # ------------------------------------------------------------- the log

    def _load(self) -> dict[str, Any]:
        if self._log is None:
            raw = self.store.read_log(self.session_id)
            raw.setdefault("v", 1)
            raw.setdefault("entries", [])
            raw.setdefault("live", {})
            raw.setdefault("lastEnd", None)
            raw.setdefault("undo", [])
            older = raw.pop("blobBytes", 0)  # an older daemon's count: file contents only
            raw.setdefault("storedBytes", older if isinstance(older, int) else 0)
            raw.setdefault("stoppedAtCap", None)
            self._log = raw
            self._log_bytes = len(orjson.dumps(raw))
        return self._log

    def _save(self) -> None:
        assert self._log is not None
        self._log_bytes = self.store.write_log(self.session_id, self._log)

    # ------------------------------------------------------------- the cap

    def _used(self, log_: dict[str, Any]) -> int:
        """What the session's checkpoints keep, as ``checkpoints.maxSessionBytes`` counts it: the objects they
        wrote and the log."""
        return int(log_["storedBytes"]) + self._log_bytes

    def _stopped(self, log_: dict[str, Any]) -> bool:
        """Whether the cap stops the session's checkpoints: reached, or a checkpoint withheld under it (or a
        lower one)."""
        stopped_at = log_["stoppedAtCap"]
        return self._used(log_) >= self.max_session_bytes or (
            isinstance(stopped_at, int) and stopped_at >= self.max_session_bytes)

    def _capped_run(self, log_: dict[str, Any], turn: int, texts: list[str]) -> bool:
        """Whether the nearest checkpointed turn before ``turn`` had its checkpoint withheld: ``turn`` is in its
        run, judged by its entry."""
        for earlier in range(min(turn, len(texts)) - 1, -1, -1):
            entry = self._live_ok(log_, earlier, texts)
            if entry is not None:
                return entry["start"] is None
        return False

    def _previous(self) -> m.Manifest | None:
        if self._last is None:
            log_ = self._load()
            latest = log_["lastEnd"] or next((e["start"] for e in reversed(log_["entries"]) if e["start"]), None)
            if latest is not None:
                try:
                    self._last = self.store.manifest(latest)
                except (StorageError, ValueError, KeyError):
                    self._last = None
        return self._last

    def _snapshot(self, *, over_cap: bool = False) -> tuple[m.Manifest | None, str | None, list[str]]:
        """The tree now, stored (in the worker thread); ``(None, None, [])`` when the cap withholds it (the
        caller saves the log: what was stored is counted). ``over_cap``: a restore's, whose manifest is stored
        whatever the cap (the undo needs it; new file contents still only within it)."""
        log_ = self._load()
        if not over_cap and self._stopped(log_):
            return None, None, []  # nothing walked, nothing stored
        root = self.cwd()
        left = max(0, self.max_session_bytes - self._used(log_))
        manifest, new_bytes, notes = walk_tree(root, self.scope(root), self.store, self._previous(),
                                               max_file_bytes=self.max_file_bytes, bytes_left=left)
        log_["storedBytes"] += new_bytes
        self._last = manifest  # its contents are stored: the next walk may reuse its hashes
        manifest_id, written = self.store.put_within(manifest.to_bytes(), None if over_cap else left - new_bytes)
        log_["storedBytes"] += written
        if manifest_id is None:
            log_["stoppedAtCap"] = self.max_session_bytes
            return None, None, []
        return manifest, manifest_id, notes

    def _announce(self, manifest: m.Manifest, notes: list[str], prompt_id: str | None) -> None:
        """A notice naming what a checkpoint does not cover, once per path (on the loop)."""
        fresh = [p for p in manifest.skipped if p not in self._noticed]
        self._noticed.update(fresh)
        lines = [f"{p}: {manifest.skipped[p]}" for p in fresh[:MAX_NOTICE_PATHS]]
        if len(fresh) > MAX_NOTICE_PATHS:
            lines.append(f"and {len(fresh) - MAX_NOTICE_PATHS} more")
        lines += notes
        if lines:
            self.notice("[checkpoint: not covered, a rewind leaves these alone: " + "; ".join(lines) + "]",
                        prompt_id)

    @staticmethod
    def _live_ok(log_: dict[str, Any], turn: int, texts: list[str]) -> dict[str, Any] | None:
        entry_id = log_["live"].get(str(turn))
        if entry_id is None or turn >= len(texts):
            return None
        entry = next((e for e in reversed(log_["entries"]) if e["id"] == entry_id), None)
        if entry is None or entry.get("text") not in (None, m.text_hash(texts[turn])):
            return None
        return entry

    # ------------------------------------------------------------- turns

    async def turn_started(self, prompt_id: str, turn_texts: Callable[[], list[str]]) -> None:
        """A user prompt's turn begins (before its first model call); its checkpoint is taken by
        :meth:`before_change`, if the turn runs a tool that may change files. Nothing is computed here: a long
        conversation's turn texts are read only when a checkpoint is taken."""
        self._pending = (prompt_id, turn_texts)

    async def before_change(self) -> None:
        """A tool that may change files is about to run: the running user turn's checkpoint, if not taken (an
        entry without one if the cap withholds it, unless the turn is in the run of one that has such)."""
        self._dirty = True
        if self._pending is None:
            return
        prompt_id, turn_texts = self._pending
        self._pending = None
        texts = turn_texts()
        turn = len(texts) - 1  # the running turn's message is the conversation's last user turn by now
        async with self.lock:
            def work() -> tuple[m.Manifest | None, list[str]]:
                log_ = self._load()
                manifest, manifest_id, notes = self._snapshot()
                log_["live"] = {k: v for k, v in log_["live"].items()
                                if int(k) < turn and self._live_ok(log_, int(k), texts) is not None}
                if manifest_id is None and self._capped_run(log_, turn, texts):
                    self._save()  # what a withheld walk stored is counted
                    return None, []
                entry_id = self.new_id()
                log_["entries"].append({"id": entry_id, "turn": turn, "promptId": prompt_id, "at": self.clock_ms(),
                                        "start": manifest_id, "end": None, "text": None})
                log_["live"][str(turn)] = entry_id
                self._save()
                return manifest, notes

            await self._guarded(work, prompt_id)

    async def turn_ended(self, prompt_id: str, added: Callable[[], str | None], turn_texts: Callable[[], list[str]],
                         *, processes_live: bool = False) -> None:
        """After a user prompt's turn: its end state, if it ran a tool that may change files, or background
        processes ran (``processes_live``: they still do, so the next end state is taken too); ``added`` gives
        the user message it added (None: none), read only then."""
        self._pending = None
        if not (self._dirty or processes_live):
            return
        self._dirty = processes_live
        async with self.lock:
            texts = turn_texts()
            message = added()

            def work() -> tuple[m.Manifest | None, list[str]]:
                log_ = self._load()
                manifest, manifest_id, notes = self._snapshot()
                if manifest_id is not None:  # else withheld: the turn's end state is not known
                    log_["lastEnd"] = manifest_id
                entry = next((e for e in reversed(log_["entries"]) if e["promptId"] == prompt_id), None)
                if entry is not None:
                    if manifest_id is not None:
                        entry["end"] = manifest_id
                    for key in [k for k, v in log_["live"].items() if v == entry["id"]]:
                        del log_["live"][key]
                    if message is not None and texts:
                        entry["text"] = m.text_hash(message)
                        entry["turn"] = len(texts) - 1  # where its message stands now (a compaction moves it)
                        log_["live"][str(entry["turn"])] = entry["id"]
                self._save()
                return manifest, notes

            await self._guarded(work, prompt_id)

    async def settled(self, *, processes_live: bool = False) -> None:
        """Other work (an automatic turn) ended: the tree as the session left it, if the work ran a tool that may
        change files or background processes ran."""
        if not (self._dirty or processes_live):
            return
        self._dirty = processes_live
        async with self.lock:
            def work() -> tuple[m.Manifest | None, list[str]]:
                manifest, manifest_id, notes = self._snapshot()
                if manifest_id is not None:
                    self._load()["lastEnd"] = manifest_id
                self._save()
                return manifest, notes

            await self._guarded(work, None)

    async def _guarded(self, work: Callable[[], tuple[m.Manifest | None, list[str]]], prompt_id: str | None
                       ) -> None:
        """A checkpoint never fails a turn: what went wrong is a notice. ``work`` answers None for a checkpoint
        the cap withheld: the notice that the cap stopped the checkpoints, once."""
        try:
            manifest, notes = await _off_loop(work)
        except Exception as exc:  # StorageError, a full disk, a mangled log: never the turn's failure
            log.warning("checkpoint of session %s failed: %r", self.session_id, exc)
            self.notice(f"[checkpoint failed: {exc}; a rewind to this turn cannot restore files]", prompt_id)
            return
        if manifest is not None:
            self._stop_noticed = False  # taken (the cap was raised): a later stop is told again
            self._announce(manifest, notes, prompt_id)
        elif not self._stop_noticed:
            self._stop_noticed = True
            log_ = self._load()
            self.notice(f"[checkpoint: not taken, nor any more for this session: its checkpoints keep "
                        f"{self._used(log_):,} bytes and checkpoints.maxSessionBytes is "
                        f"{self.max_session_bytes:,}; a rewind with files to a turn from here on is refused]",
                        prompt_id)

    # ------------------------------------------------------------- reading

    async def listing(self, turn_texts: list[str]) -> dict[str, Any]:
        """Each turn of the conversation that has a checkpoint, with the files it changed; the undo entries."""
        async with self.lock:
            return await _off_loop(lambda: self._listing(turn_texts))

    def _listing(self, texts: list[str]) -> dict[str, Any]:
        log_ = self._load()
        rows = []
        now: list[m.Manifest] = []  # the tree now, walked read only once if needed
        for turn in range(len(texts)):
            entry = self._live_ok(log_, turn, texts)
            if entry is None or entry["start"] is None:  # none, or withheld by the cap
                continue
            before = self.store.manifest(entry["start"])
            after, _ = self._after(log_, entry, turn, texts, now)
            rows.append({"turn": turn, "promptId": entry["promptId"], "at": entry["at"],
                         "files": [{"path": c.path, "change": c.change, "kind": c.kind}
                                   for c in m.changes(before, after)],
                         "notCovered": sorted(set(before.skipped) | set(after.skipped))})
        undo = [{"undoId": u["id"], "at": u["at"], "kind": u["kind"], "turn": u.get("turn")} for u in log_["undo"]]
        return {"checkpoints": rows, "undo": undo}

    def _after(self, log_: dict[str, Any], entry: dict[str, Any], turn: int, texts: list[str],
               now: list[m.Manifest]) -> tuple[m.Manifest, bool]:
        """The state at a turn's end: its end snapshot (or the next turn's start), or for the latest turn (and
        one whose end was never taken, nor the next turn's start: the cap withheld them) the tree now, walked
        read only. ``now`` caches that walk."""
        if turn < len(texts) - 1:
            if entry["end"] is not None:
                return self.store.manifest(entry["end"]), False
            following = self._live_ok(log_, turn + 1, texts)
            if following is not None and following["start"] is not None:
                return self.store.manifest(following["start"]), False
        if not now:
            root = self.cwd()
            now.append(walk_tree(root, self.scope(root), None, self._previous(),
                                 max_file_bytes=self.max_file_bytes, bytes_left=0)[0])
        return now[0], True

    async def diff(self, turn: int, turn_texts: list[str]) -> dict[str, Any]:
        """A unified diff of what turn ``turn`` changed."""
        async with self.lock:
            return await _off_loop(lambda: self._diff(turn, turn_texts))

    def _diff(self, turn: int, texts: list[str]) -> dict[str, Any]:
        log_ = self._load()
        if not 0 <= turn < len(texts):
            raise CheckpointRefused("invalid_turn", f"turn must be from 0 to {len(texts) - 1}" if texts
                                    else "there is no user turn")
        entry = self._live_ok(log_, turn, texts)
        if entry is None or entry["start"] is None:
            raise CheckpointRefused("checkpoint_not_found", f"turn {turn} has no checkpoint" if entry is None
                                    else f"turn {turn} has no checkpoint: {CAP_REFUSAL}")
        before = self.store.manifest(entry["start"])
        after, live = self._after(log_, entry, turn, texts, [])
        paths = [c.path for c in m.changes(before, after)]
        root = self.cwd()

        def old(e: m.Entry) -> bytes | None:
            return self.store.get(e.sha) if e.sha else None

        def new(path: str, e: m.Entry) -> bytes | None:
            if live:
                return read_tree_file(root, path, e.size)
            return self.store.get(e.sha) if e.sha else None

        return {"turn": turn, "promptId": entry["promptId"], "files": paths,
                "diff": unified_diff(before, after, paths, old, new)}

    # ------------------------------------------------------------- restoring

    async def rewind(self, turn: int, force: bool, conversation: ConversationPort) -> dict[str, Any]:
        """Files back to the start of turn ``turn``, then the conversation rewound; :class:`CheckpointRefused`."""
        async with self.lock:
            if conversation.busy():
                raise CheckpointRefused("session_busy", "the session is busy; cancel the running work first")
            texts = conversation.turn_texts()
            if not 0 <= turn < len(texts):
                raise CheckpointRefused("invalid_turn", f"turn must be from 0 to {len(texts) - 1}" if texts
                                        else "there is no user turn to rewind to")
            target = await _off_loop(lambda: self._rewind_target(turn, texts))
            done = await self._restore(target, force, "rewind", turn, conversation.dump())
            kept = conversation.rewind(turn)
            assert isinstance(kept, int)
            log_ = self._load()
            log_["live"] = {k: v for k, v in log_["live"].items() if int(k) < turn}
            await _off_loop(self._save)
            return {"historyLength": kept, **done}

    def _rewind_target(self, turn: int, texts: list[str]) -> str | None:
        """The files at the start of turn ``turn``: its checkpoint, else the first later turn's (a turn that ran
        no tool that may change files took none, and changed nothing before the next one that did); ``None``:
        no later turn changed files either, so the files stay as they are (the answer restores nothing).
        Refused when that checkpoint was withheld by the cap, or ``turn`` is in the run of one that was."""
        log_ = self._load()
        if self._live_ok(log_, turn, texts) is None and self._capped_run(log_, turn, texts):
            raise CheckpointRefused("checkpoint_not_found", f"turn {turn} has no checkpoint: {CAP_REFUSAL}")
        for later in range(turn, len(texts)):
            entry = self._live_ok(log_, later, texts)
            if entry is not None:
                if entry["start"] is None:
                    raise CheckpointRefused("checkpoint_not_found", f"turn {turn} has no checkpoint: {CAP_REFUSAL}")
                return str(entry["start"])
        return None

    async def undo(self, undo_id: str, force: bool, conversation: ConversationPort) -> dict[str, Any]:
        """Undo a rewind (or an undo): the files and the conversation as they were before it."""
        async with self.lock:
            if conversation.busy():
                raise CheckpointRefused("session_busy", "the session is busy; cancel the running work first")
            log_ = await _off_loop(self._load)
            found = next((u for u in log_["undo"] if u["id"] == undo_id), None)
            if found is None:
                raise CheckpointRefused("checkpoint_not_found", f"no undo entry {undo_id!r} in this session")
            history = await _off_loop(lambda: orjson.loads(self.store.get(found["history"])))
            done = await self._restore(found["manifest"], force, "undo", None, conversation.dump())
            kept = conversation.replace(history)
            log_["live"] = dict(found["live"])
            await _off_loop(self._save)
            return {"historyLength": kept, **done}

    async def _restore(self, target_id: str | None, force: bool, kind: str, turn: int | None,
                       history: list[dict[str, Any]]) -> dict[str, Any]:
        self.restoring = True
        try:
            return await _off_loop(lambda: self._restore_files(target_id, force, kind, turn, history))
        finally:
            self.restoring = False

    def _restore_files(self, target_id: str | None, force: bool, kind: str, turn: int | None,
                       history: list[dict[str, Any]]) -> dict[str, Any]:
        log_ = self._load()
        reference_id = log_["lastEnd"] or next((e["start"] for e in reversed(log_["entries"]) if e["start"]), None)
        current, current_id, _ = self._snapshot(over_cap=True)  # stored: it is the undo's state
        assert current is not None and current_id is not None
        target = current if target_id is None else self.store.manifest(target_id)  # None: the files stay
        plan = m.plan_restore(current, target)
        if reference_id is not None and not force:
            outside = m.changed_outside(self.store.manifest(reference_id), current, plan.touched)
            if outside:
                self._save()  # the objects the walk stored are counted
                stopped = (" (the session's checkpoints stopped at checkpoints.maxSessionBytes: its own changes "
                           "since count too)") if self._stopped(log_) else ""
                raise CheckpointRefused(
                    "files_changed_outside",
                    f"{len(outside)} file(s) the restore would change were changed outside the session since its "
                    f"last checkpoint{stopped}: {', '.join(outside[:20])}; give force: true to restore anyway (an "
                    f"undo entry keeps them)", outside)
        history_id, written = self.store.put_within(orjson.dumps(history))
        log_["storedBytes"] += written
        undo_id = self.new_id()
        log_["undo"].append({"id": undo_id, "at": self.clock_ms(), "kind": kind, "turn": turn,
                             "manifest": current_id, "history": history_id, "live": dict(log_["live"]),
                             "lastEnd": log_["lastEnd"]})
        del log_["undo"][:-MAX_UNDO]
        self._save()  # the undo is durable before any file changes
        restored, deleted, skipped = apply(self.cwd(), plan, target, self.store)
        _, after_id, _ = self._snapshot(over_cap=True)
        log_["lastEnd"] = after_id
        self._save()
        return {"restored": restored, "deleted": deleted,
                "skipped": [{"path": p, "reason": r} for p, r in sorted(skipped.items())], "undoId": undo_id}


__all__ = ["CheckpointRefused", "Checkpoints", "ConversationPort"]
