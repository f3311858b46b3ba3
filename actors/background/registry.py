"""The per-session registry of background work, and the baseline snapshot the guard needs.

Every background item — a shell, a monitor, a wakeup, a cron job, a subagent
run (kind ``agent``) — has an id and a kind. The session snapshots the ids
that are live or queued at the start of a work chain (:class:`Baseline`); work
whose id is not in that snapshot is *new* to the chain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

import attrs

Kind = Literal["agent", "shell", "monitor", "wakeup", "cron"]
KINDS: tuple[Kind, ...] = ("agent", "shell", "monitor", "wakeup", "cron")
LIVE_STATES = frozenset({"running", "paused", "scheduled"})
FINISHED_KEPT = 200  # finished items remembered for status and shell_output


@attrs.define
class BackgroundItem:
    task_id: str
    kind: Kind
    label: str
    state: str = "running"  # running | paused | scheduled | completed | failed | killed | fired | cancelled
    exit_code: int | None = None
    started_at: float = 0.0
    ended_at: float | None = None
    notified: bool = False  # its terminal notification was delivered to the model
    actor: Any = attrs.field(default=None, repr=False, eq=False)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    def to_wire(self, epoch_ms: Callable[[float], int] | None = None) -> dict[str, Any]:
        """The status entry; ``epoch_ms`` turns a Trio clock reading into milliseconds since the epoch, to give
        ``startedAt`` and (once it ended) ``endedAt``."""
        out: dict[str, Any] = {"taskId": self.task_id, "kind": self.kind, "status": self.state, "label": self.label}
        if self.exit_code is not None:
            out["exitCode"] = self.exit_code
        if epoch_ms is not None and self.state != "scheduled":  # a timer that has not fired has not started
            out["startedAt"] = epoch_ms(self.started_at)
            if self.ended_at is not None:
                out["endedAt"] = epoch_ms(self.ended_at)
        return out


@attrs.frozen
class Baseline:
    """The ids of background work live or queued when a work chain started."""

    ids: frozenset[str] = frozenset()

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.ids


class BackgroundRegistry:
    """Background items by id; finished ones are kept (bounded) for status and output reads."""

    def __init__(self) -> None:
        self._items: dict[str, BackgroundItem] = {}

    def add(self, item: BackgroundItem) -> BackgroundItem:
        if item.task_id in self._items:
            raise ValueError(f"duplicate background task id {item.task_id!r}")
        self._items[item.task_id] = item
        self._forget_old()
        return item

    def get(self, task_id: str) -> BackgroundItem | None:
        return self._items.get(task_id)

    def __iter__(self) -> Iterator[BackgroundItem]:
        return iter(list(self._items.values()))

    def live(self, kind: Kind | None = None) -> list[BackgroundItem]:
        return [i for i in self._items.values() if i.live and (kind is None or i.kind == kind)]

    def snapshot(self, queued_task_ids: frozenset[str] = frozenset()) -> Baseline:
        """Live ids, plus the task ids of notifications and wakeups already queued."""
        return Baseline(frozenset(i.task_id for i in self._items.values() if i.live) | queued_task_ids)

    def _forget_old(self) -> None:
        finished = [i for i in self._items.values() if not i.live]
        for item in finished[: max(0, len(finished) - FINISHED_KEPT)]:
            del self._items[item.task_id]
