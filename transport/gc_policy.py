"""The daemon's garbage-collection policy: what survives a full collection is frozen, and all of it is thawed
for one full collection once as many sessions have closed since the last thaw as are open.

CPython 3.11's full collection walks every tracked object the process has, in one step of the event loop, and
an open session keeps hundreds (its tasks' coroutines, its ring's events, its subscribers' connections): with
thousands of sessions a pass stops every stream for a good part of a second (``bench/README.md``, "Scale").
Frozen objects (``gc.freeze``) are out of its walk, and still freed by reference counting when their last
reference goes; so each full collection walks only what has become old since the one before, and freezes
what it found alive. What freezing loses is cyclic garbage among frozen objects: a structure that lived past a
full collection and then became unreachable as a cycle stays until the next thaw. A turn (finished or
cancelled), its shell commands, its event stream, its HTTP connections and a closed session leave no such
cycles (a session's parts call back into it weakly, ``actors.weak``; ``tests/transport/test_gc_policy.py``
checks a served daemon's). What no test covers may, so a *thaw* (``gc.unfreeze``: the next full collection
walks everything, then freezes again) comes once the sessions closed since the last thaw are as many as the
open ones (and at least :data:`THAW_AFTER_CLOSED`). Its pause is the whole heap's walk, as every full pass
was before, but it comes only as sessions close: its work is paid for by them, and what can wait for it is
at most what they left.

The states, on the end of each middle (generation 1) or full (generation 2) collection (``gc.callbacks``
``stop``). A thaw may begin after a middle one: with sessions freed by reference counting little survives
into the old generation, full collections come seldom, and a thaw due should not wait for one.

    ======== ========== =========================================== ============ =========
    state    collection condition                                   does         next
    ======== ========== =========================================== ============ =========
    frozen   middle     closed since thaw >= max(open, minimum)     gc.unfreeze  thawing
    frozen   middle     otherwise                                   (nothing)    frozen
    frozen   full       closed since thaw >= max(open, minimum)     gc.unfreeze  thawing
    frozen   full       otherwise                                   gc.freeze    frozen
    thawing  middle                                                 (nothing)    thawing
    thawing  full       (this collection walked everything)         gc.freeze    frozen
    ======== ========== =========================================== ============ =========

The thresholds: CPython's own for the young and middle generations (larger young ones make larger middle and
full passes, and with survivors frozen save no work a turn), and a full collection after every middle one
once CPython's quarter rule allows: the old generation holds only what became old since the last, so a full
pass is short.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

YOUNG_THRESHOLD = 700
MIDDLE_THRESHOLD = 10
OLD_THRESHOLD = 1
THAW_AFTER_CLOSED = 64  # sessions closed before a thaw, however few are open


def thaw_due(closed_since_thaw: int, open_sessions: int, minimum: int = THAW_AFTER_CLOSED) -> bool:
    """Whether the next full collection should walk everything: as many sessions closed since the last thaw
    as are open (and at least ``minimum``)."""
    return closed_since_thaw >= max(open_sessions, minimum)


class FreezeSurvivors:
    """The policy above, for one process: :meth:`install` once start-up is done, :meth:`uninstall` to restore
    CPython's own.

    ``open_sessions`` and ``closed_sessions`` count the daemon's sessions open now and closed since it started
    (:attr:`actors.daemon.Daemon.sessions_closed`); :attr:`thaws` counts the thaws begun.
    """

    def __init__(self, open_sessions: Callable[[], int], closed_sessions: Callable[[], int], *,
                 minimum: int = THAW_AFTER_CLOSED) -> None:
        self._open = open_sessions
        self._closed = closed_sessions
        self._minimum = minimum
        self._closed_at_thaw = 0
        self._thawing = False
        self._thresholds: tuple[int, int, int] | None = None
        self.thaws = 0

    @property
    def thawing(self) -> bool:
        """Whether the next full collection walks everything (a thaw has begun)."""
        return self._thawing

    def install(self) -> None:
        """Freeze what start-up made, set the thresholds, and act at the end of each full collection."""
        self._thresholds = gc.get_threshold()
        self._closed_at_thaw = self._closed()
        gc.freeze()
        gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
        gc.callbacks.append(self._after_collection)

    def uninstall(self) -> None:
        """CPython's policy again: nothing frozen, its thresholds as they were."""
        if self._after_collection in gc.callbacks:
            gc.callbacks.remove(self._after_collection)
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None
        gc.unfreeze()

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        generation = info.get("generation")
        if phase != "stop" or generation not in (1, 2):
            return
        if not self._thawing:
            closed = self._closed()
            if thaw_due(closed - self._closed_at_thaw, self._open(), self._minimum):
                self._closed_at_thaw = closed
                self._thawing = True
                self.thaws += 1
                gc.unfreeze()  # into the old generation: the next full collection walks it all
                return
        if generation == 2:
            self._thawing = False
            gc.freeze()  # a full collection has just emptied the younger generations: only its survivors


__all__ = ["FreezeSurvivors", "MIDDLE_THRESHOLD", "OLD_THRESHOLD", "THAW_AFTER_CLOSED", "YOUNG_THRESHOLD",
           "thaw_due"]
