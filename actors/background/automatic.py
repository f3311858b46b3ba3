"""The automatic queue: what an idle session runs without a user prompt.

Terminal notifications (a shell, monitor or agent finished), @wakeups and cron
fires wait here while foreground work runs. It is bounded: deferred fires of
one recurring cron job coalesce into the one already queued, and the
notification queue holds at most 20, evicting unrelated items first — so a
stalled dependency cannot grow it without limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import attrs

Source = Literal["notification", "wakeup", "cron", "loop"]
MAX_NOTIFICATIONS = 20
MAX_TIMED = 20  # queued wakeup and cron items
LABEL_CHARS = 160  # of a label shown with a notification (the model reads the whole text)
# qwen's Web Shell knows these three as ended (a background item's "killed" is its "cancelled").
_SHOWN_STATUS = {"killed": "cancelled"}
_NOTIFICATION = re.compile(r'<task-notification task_id="(?P<task>[^"]*)" kind="(?P<kind>[^"]*)">\n(?P<text>.*)\n'
                           r'</task-notification>', re.DOTALL)


@attrs.define
class AutomaticItem:
    item_id: str
    source: Source
    task_id: str  # the background item it comes from (baseline relationships use this)
    text: str
    recurring: bool = False
    coalesced: int = 0  # deferred fires folded into this one
    kind: str = ""  # for notifications: the kind of background item it is about
    status: str = ""  # for notifications: the item's state when it was posted (a monitor's batch: running)
    label: str = ""  # for notifications: the item's label (a shell's command, a monitor's, a run's name)

    def prompt_text(self) -> str:
        """What the model reads for this item."""
        if self.is_notification:
            return f'<task-notification task_id="{self.task_id}" kind="{self.kind}">\n{self.text}\n</task-notification>'
        if self.coalesced:
            return f"{self.text}\n(this scheduled prompt fired {self.coalesced + 1} times while the session was busy)"
        return self.text

    @property
    def is_notification(self) -> bool:
        return self.source == "notification"

    def background_task(self) -> dict[str, Any]:
        """What a client is shown of a notification's item: ``_meta.backgroundTask`` of its
        ``background_notification`` message, in qwen's form (a shell's command as ``commandLabel``, another
        item's label as ``description``)."""
        task: dict[str, Any] = {"taskId": self.task_id, "kind": self.kind}
        if self.status:
            task["status"] = _SHOWN_STATUS.get(self.status, self.status)
        if self.label:
            label = self.label if len(self.label) <= LABEL_CHARS else self.label[:LABEL_CHARS - 1] + "…"
            task["commandLabel" if self.kind == "shell" else "description"] = label
        return task


def parse_notification(prompt_text: str) -> AutomaticItem | None:
    """The notification a model-facing ``<task-notification>`` text was made from (:meth:`AutomaticItem.prompt_text`),
    as far as the text keeps it (no status, no label); ``None`` for any other text."""
    found = _NOTIFICATION.fullmatch(prompt_text)
    if found is None:
        return None
    return AutomaticItem("", "notification", found["task"], found["text"], kind=found["kind"])


@attrs.frozen
class Posted:
    accepted: bool
    evicted: AutomaticItem | None = None
    coalesced_into: AutomaticItem | None = None


class AutomaticQueue:
    """FIFO of automatic items with per-task coalescing and bounded size."""

    def __init__(self, *, on_post: Callable[[], None] = lambda: None,
                 max_notifications: int = MAX_NOTIFICATIONS, max_timed: int = MAX_TIMED) -> None:
        self._items: list[AutomaticItem] = []
        self._on_post = on_post
        self._max_notifications = max_notifications
        self._max_timed = max_timed
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def items(self) -> tuple[AutomaticItem, ...]:
        return tuple(self._items)

    def queued_task_ids(self) -> frozenset[str]:
        return frozenset(i.task_id for i in self._items)

    def post(self, item: AutomaticItem, related: Callable[[AutomaticItem], bool] = lambda _: False) -> Posted:
        """Queue ``item``; ``related`` says which queued items the current work chain depends on."""
        if item.recurring:
            for queued in self._items:
                if queued.recurring and queued.task_id == item.task_id:
                    queued.coalesced += 1
                    return Posted(True, coalesced_into=queued)
        same_kind = [i for i in self._items if i.is_notification == item.is_notification]
        limit = self._max_notifications if item.is_notification else self._max_timed
        evicted = None
        if len(same_kind) >= limit:
            victim = next((i for i in same_kind if not related(i)), None)
            if victim is None and related(item):
                # All queued items are related, and so is this one: the oldest related one goes.
                victim = same_kind[0]
            if victim is None:
                self.dropped += 1
                return Posted(False)
            self._items.remove(victim)
            evicted = victim
            self.dropped += 1
        self._items.append(item)
        self._on_post()
        return Posted(True, evicted=evicted)

    def peek(self, allowed: Callable[[AutomaticItem], bool] = lambda _: True) -> AutomaticItem | None:
        return next((i for i in self._items if allowed(i)), None)

    def take(self, item: AutomaticItem) -> AutomaticItem:
        self._items.remove(item)
        return item

    def remove_task(self, task_id: str) -> int:
        """Drop every queued item of one task (a deleted cron job); returns how many."""
        before = len(self._items)
        self._items = [i for i in self._items if i.task_id != task_id]
        return before - len(self._items)
