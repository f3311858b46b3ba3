"""The runtime's local date: kept briefly, never past the local midnight, and the injected clock's when one is given."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import actors.runtime as runtime
from actors import Settings
from actors.model.scripted import ScriptedModel
from actors.runtime import Runtime, local_today


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """``time.time`` as ``actors.runtime`` sees it, set by the test; the kept date starts empty."""
    now = [0.0]
    monkeypatch.setattr(runtime, "_today", (0.0, ""))
    monkeypatch.setattr(runtime.time, "time", lambda: now[0])
    return now


def local_date(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().date().isoformat()


def test_the_date_changes_at_the_local_midnight_though_it_was_kept(clock: list[float]) -> None:
    midnight = datetime.now().astimezone().replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=3)
    clock[0] = midnight.timestamp() - 20  # 23:59:40 local
    before = local_today()
    assert before == local_date(clock[0])
    clock[0] += 15
    assert local_today() == before  # kept
    clock[0] += 10  # 00:00:05: the kept date ends at midnight, not a minute after it was taken
    assert local_today() == local_date(clock[0]) != before


def test_a_kept_date_is_taken_again_after_a_minute(clock: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    clock[0] = datetime.now().astimezone().replace(hour=12, minute=0).timestamp()
    local_today()
    taken: list[float] = []
    real = datetime

    class Watched(datetime):
        @classmethod
        def fromtimestamp(cls, t, tz=None):  # type: ignore[override]
            taken.append(t)
            return real.fromtimestamp(t, tz)

    monkeypatch.setattr(runtime, "datetime", Watched)
    clock[0] += 59
    local_today()
    assert taken == []
    clock[0] += 2
    local_today()
    assert taken == [clock[0]]


def test_an_injected_clock_gives_its_own_date() -> None:
    fixed = datetime(2031, 5, 17, 23, 30, tzinfo=timezone.utc)
    rt = Runtime(settings=Settings(), provider=ScriptedModel([]), now=lambda: fixed)
    assert rt.today() == "2031-05-17"
