"""The automatic queue (actors/background/automatic.py): FIFO, coalescing, bounds."""

from __future__ import annotations

from actors.background.automatic import MAX_NOTIFICATIONS, MAX_TIMED, AutomaticItem, AutomaticQueue


def note(n: int | str, task: str | None = None) -> AutomaticItem:
    return AutomaticItem(f"auto-n{n}", "notification", task or f"shell-{n}", f"shell {n} finished", kind="shell")


def cron(n: int | str, task: str = "cron-1", recurring: bool = True) -> AutomaticItem:
    return AutomaticItem(f"auto-c{n}", "cron", task, "check the build", recurring=recurring)


def test_fifo_order() -> None:
    q = AutomaticQueue()
    items = [note(1), cron(1, "cron-1"), AutomaticItem("auto-w", "wakeup", "wakeup-1", "@wakeup: x"), note(2)]
    for item in items:
        assert q.post(item).accepted
    assert q.items == tuple(items)
    assert len(q) == 4 and q
    assert q.peek() is items[0]
    assert q.take(items[0]) is items[0]
    assert q.peek() is items[1]
    assert q.peek(lambda i: i.source == "wakeup") is items[2]
    assert q.peek(lambda i: False) is None
    for item in items[1:]:
        q.take(item)
    assert not q and len(q) == 0 and q.peek() is None


def test_recurring_items_of_one_task_coalesce() -> None:
    q = AutomaticQueue()
    first = cron(0)
    assert q.post(first).accepted
    for n in range(1, 25):
        posted = q.post(cron(n))
        assert posted.accepted and posted.coalesced_into is first
    assert q.items == (first,)
    assert first.coalesced == 24
    text = first.prompt_text()
    assert text.startswith("check the build")
    assert "fired 25 times" in text


def test_coalescing_is_per_task_and_only_for_recurring() -> None:
    q = AutomaticQueue()
    q.post(cron(1, "cron-1"))
    q.post(cron(2, "cron-2"))
    q.post(cron(3, "cron-1"))
    assert [i.task_id for i in q.items] == ["cron-1", "cron-2"]
    assert q.items[0].coalesced == 1 and q.items[1].coalesced == 0

    q2 = AutomaticQueue()
    for n in range(3):
        assert q2.post(cron(n, "cron-9", recurring=False)).coalesced_into is None
    assert len(q2) == 3
    assert all(i.coalesced == 0 for i in q2.items)
    # a single un-coalesced recurring item reads as itself
    assert cron(0).prompt_text() == "check the build"


def test_a_taken_recurring_item_no_longer_absorbs_fires() -> None:
    q = AutomaticQueue()
    first = cron(1)
    q.post(first)
    q.take(first)
    second = cron(2)
    assert q.post(second).coalesced_into is None
    assert q.items == (second,)


def test_notification_prompt_text() -> None:
    text = note(7).prompt_text()
    assert 'task_id="shell-7"' in text and 'kind="shell"' in text and "shell 7 finished" in text


def test_cap_evicts_oldest_unrelated_first_and_keeps_related() -> None:
    q = AutomaticQueue()
    related_ids = {"shell-0", "shell-2"}
    related = lambda i: i.task_id in related_ids  # noqa: E731
    for n in range(MAX_NOTIFICATIONS):
        assert q.post(note(n), related).accepted
    posted = q.post(note(100), related)
    assert posted.accepted
    assert posted.evicted is not None and posted.evicted.task_id == "shell-1"  # oldest unrelated
    assert len(q) == MAX_NOTIFICATIONS
    posted = q.post(note(101), related)
    assert posted.evicted is not None and posted.evicted.task_id == "shell-3"
    ids = [i.task_id for i in q.items]
    assert "shell-0" in ids and "shell-2" in ids
    assert ids[-2:] == ["shell-100", "shell-101"]
    assert q.dropped == 2


def test_all_related_drops_an_unrelated_newcomer() -> None:
    q = AutomaticQueue()
    related = lambda i: i.task_id.startswith("shell-r")  # noqa: E731
    for n in range(MAX_NOTIFICATIONS):
        q.post(note(f"r{n}"), related)
    before = q.items
    posted = q.post(note("x"), related)
    assert not posted.accepted and posted.evicted is None
    assert q.items == before
    assert q.dropped == 1


def test_all_related_and_related_newcomer_evicts_oldest_related() -> None:
    q = AutomaticQueue()
    related = lambda i: True  # noqa: E731
    for n in range(MAX_NOTIFICATIONS):
        q.post(note(n), related)
    newcomer = note(99)
    posted = q.post(newcomer, related)
    assert posted.accepted
    assert posted.evicted is not None and posted.evicted.task_id == "shell-0"
    assert len(q) == MAX_NOTIFICATIONS
    assert q.items[-1] is newcomer
    assert q.dropped == 1


def test_timed_items_have_their_own_cap() -> None:
    q = AutomaticQueue()
    for n in range(MAX_NOTIFICATIONS):
        q.post(note(n))
    # a full notification queue does not stop wakeups and cron fires
    wakeups = [AutomaticItem(f"auto-w{n}", "wakeup", f"wakeup-{n}", f"@wakeup: {n}") for n in range(MAX_TIMED)]
    for w in wakeups:
        posted = q.post(w)
        assert posted.accepted and posted.evicted is None
    assert len(q) == MAX_NOTIFICATIONS + MAX_TIMED
    extra = AutomaticItem("auto-wx", "wakeup", "wakeup-x", "@wakeup: x")
    posted = q.post(extra)
    assert posted.accepted and posted.evicted is wakeups[0]  # the oldest timed item, not a notification
    assert sum(1 for i in q.items if i.is_notification) == MAX_NOTIFICATIONS
    assert sum(1 for i in q.items if not i.is_notification) == MAX_TIMED
    # and a full timed queue does not stop notifications beyond their own cap's rules
    posted = q.post(note(500))
    assert posted.evicted is not None and posted.evicted.is_notification


def test_remove_task() -> None:
    q = AutomaticQueue()
    q.post(cron(1, "cron-1", recurring=False))
    q.post(note(1))
    q.post(cron(2, "cron-1", recurring=False))
    q.post(cron(3, "cron-2", recurring=False))
    assert q.remove_task("cron-1") == 2
    assert [i.task_id for i in q.items] == ["shell-1", "cron-2"]
    assert q.remove_task("cron-1") == 0


def test_on_post_called_for_each_accepted_post() -> None:
    calls: list[int] = []
    q = AutomaticQueue(on_post=lambda: calls.append(len(q)))
    q.post(note(1))
    q.post(cron(1))
    q.post(AutomaticItem("auto-w", "wakeup", "wakeup-1", "@wakeup"))
    assert calls == [1, 2, 3]  # called after the item is queued

    full = AutomaticQueue(on_post=lambda: calls.append(-1), max_notifications=1)
    full.post(note("r1"), lambda i: True)
    calls.clear()
    assert not full.post(note("u"), lambda i: i.task_id == "shell-r1").accepted
    assert calls == []  # a dropped item wakes nobody


def test_queued_task_ids() -> None:
    q = AutomaticQueue()
    assert q.queued_task_ids() == frozenset()
    q.post(note(1))
    q.post(cron(1, "cron-1"))
    q.post(cron(2, "cron-1"))
    q.post(AutomaticItem("auto-w", "wakeup", "wakeup-1", "@wakeup"))
    assert q.queued_task_ids() == frozenset({"shell-1", "cron-1", "wakeup-1"})
    q.take(q.items[0])
    assert q.queued_task_ids() == frozenset({"cron-1", "wakeup-1"})


def test_a_notification_is_shown_in_qwens_background_notification_form() -> None:
    from actors import wire
    from actors.background.automatic import LABEL_CHARS, parse_notification
    from actors.wire import event_data

    item = AutomaticItem("auto-1", "notification", "shell-1", "Background shell shell-1 was killed.", kind="shell",
                         status="killed", label="x" * 300)
    update = wire.background_notification_update(item.text, item.background_task())
    assert update["content"] == {"type": "text", "text": item.text}  # the model's <task-notification> is not shown
    meta = wire.converter.structure(update["_meta"], event_data.BackgroundNotificationMeta)
    task = meta.backgroundTask
    assert (task.taskId, task.kind, task.status) == ("shell-1", "shell", "cancelled")  # qwen's word for killed
    assert len(task.commandLabel) == LABEL_CHARS and task.commandLabel.endswith("…") and not task.description
    monitor = AutomaticItem("auto-2", "notification", "monitor-1", "a line", kind="monitor", status="running",
                            label="tail -f log")
    assert monitor.background_task() == {"taskId": "monitor-1", "kind": "monitor", "status": "running",
                                         "description": "tail -f log"}
    # A transcript's automatic message (a session restored without its compacted replay) is read back
    back = parse_notification(item.prompt_text())
    assert back is not None and (back.task_id, back.kind, back.text) == ("shell-1", "shell", item.text)
    assert parse_notification("@wakeup: check the build") is None
