"""The background registry (actors/background/registry.py): items by id and kind, the baseline snapshot."""

from __future__ import annotations

import pytest

from actors.background import registry as r
from actors.background.registry import BackgroundItem, BackgroundRegistry, Baseline


def test_add_get_and_live_by_kind() -> None:
    reg = BackgroundRegistry()
    shell = reg.add(BackgroundItem("shell-1", "shell", "sleep 5"))
    monitor = reg.add(BackgroundItem("monitor-1", "monitor", "tail -f log"))
    wakeup = reg.add(BackgroundItem("wakeup-1", "wakeup", "check", state="scheduled"))
    done = reg.add(BackgroundItem("shell-2", "shell", "true", state="completed", exit_code=0))

    assert reg.get("shell-1") is shell
    assert reg.get("missing") is None
    assert reg.live("shell") == [shell]
    assert reg.live("monitor") == [monitor]
    assert reg.live("wakeup") == [wakeup]
    assert reg.live("cron") == []
    assert reg.live() == [shell, monitor, wakeup]
    assert list(reg) == [shell, monitor, wakeup, done]


def test_live_states() -> None:
    for state in ("running", "paused", "scheduled"):
        assert BackgroundItem("x", "shell", "", state=state).live
    for state in ("completed", "failed", "killed", "fired", "cancelled"):
        assert not BackgroundItem("x", "shell", "", state=state).live


def test_duplicate_id_refused() -> None:
    reg = BackgroundRegistry()
    first = reg.add(BackgroundItem("shell-1", "shell", "a"))
    with pytest.raises(ValueError, match="duplicate.*shell-1"):
        reg.add(BackgroundItem("shell-1", "monitor", "b"))
    assert reg.get("shell-1") is first
    assert len(list(reg)) == 1


def test_snapshot_has_live_and_queued_ids_not_finished_ones() -> None:
    reg = BackgroundRegistry()
    reg.add(BackgroundItem("shell-1", "shell", "sleep 5"))
    reg.add(BackgroundItem("cron-1", "cron", "* * * * *: hi", state="scheduled"))
    reg.add(BackgroundItem("agent-1", "agent", "subagent", state="paused"))
    reg.add(BackgroundItem("shell-2", "shell", "true", state="completed", exit_code=0))
    reg.add(BackgroundItem("wakeup-1", "wakeup", "later", state="fired"))
    finishing = reg.add(BackgroundItem("shell-3", "shell", "false"))

    finishing.state = "failed"
    base = reg.snapshot(frozenset({"wakeup-1", "notif-task-9"}))

    assert isinstance(base, Baseline)
    assert base.ids == frozenset({"shell-1", "cron-1", "agent-1", "wakeup-1", "notif-task-9"})
    assert "shell-1" in base
    assert "shell-2" not in base
    assert "shell-3" not in base
    assert reg.snapshot().ids == frozenset({"shell-1", "cron-1", "agent-1"})
    assert "anything" not in Baseline()


def test_finished_items_forgotten_beyond_the_bound() -> None:
    reg = BackgroundRegistry()
    live = reg.add(BackgroundItem("shell-live", "shell", "sleep 100"))
    for n in range(r.FINISHED_KEPT + 5):
        reg.add(BackgroundItem(f"shell-{n}", "shell", "true", state="completed", exit_code=0))

    items = list(reg)
    finished = [i for i in items if not i.live]
    assert len(finished) == r.FINISHED_KEPT
    assert reg.get("shell-live") is live  # a live item is never forgotten
    for n in range(5):  # the oldest finished ones went first
        assert reg.get(f"shell-{n}") is None
    assert reg.get("shell-5") is not None
    assert reg.get(f"shell-{r.FINISHED_KEPT + 4}") is not None


def test_to_wire() -> None:
    running = BackgroundItem("shell-1", "shell", "sleep 5")
    assert running.to_wire() == {"taskId": "shell-1", "kind": "shell", "status": "running", "label": "sleep 5"}
    done = BackgroundItem("shell-2", "shell", "exit 3", state="failed", exit_code=3)
    assert done.to_wire() == {"taskId": "shell-2", "kind": "shell", "status": "failed", "label": "exit 3",
                              "exitCode": 3}
    zero = BackgroundItem("shell-3", "shell", "true", state="completed", exit_code=0)
    assert zero.to_wire()["exitCode"] == 0
