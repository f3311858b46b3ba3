"""Each scenario's expectations fail when the behaviour it covers is removed (one mutation per scenario).

The mutations are monkeypatched into the real actors; the replay runs in this
process, so it sees them. If a patched name disappears, ``monkeypatch`` raises:
update the mutation to the new code rather than dropping it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.replay import replay
from actors.session import fifo, session

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def take_newest(self: fifo.PromptFifo) -> Any:
    """LIFO instead of FIFO."""
    queued = [e for e in self._entries if e.state == "queued"]
    if not queued:
        return None
    entry = queued[-1]
    self._entries.remove(entry)
    self._entries.insert(0, entry)
    return ORIGINAL_TAKE_NEXT(self)


ORIGINAL_TAKE_NEXT = fifo.PromptFifo._take_next


def never_drain(self: fifo.PromptFifo, watch_queued_prompt: bool) -> fifo.DrainResult:
    """Mid-turn input is never handed to the turn."""
    return fifo.DrainResult((), (), False)


MUTATIONS: list[tuple[str, Any, str, Any, str]] = [
    # (scenario, object, attribute, replacement, a failure it must cause)
    ("fifo_order", fifo.PromptFifo, "_take_next", take_newest, "expect.events"),
    ("abort_queued", fifo.PromptFifo, "_abort", lambda self, prompt_id: False, "expect.prompts.two"),
    ("cancel_running", session.Session, "_cancel_current", lambda self, reason: False, "expect.prompts.slow"),
    ("mid_turn_injection", fifo.PromptFifo, "_drain", never_drain, "expect.model_requests (call 2)"),
    ("api_error_then_retry", fifo.PendingPrompt, "is_trusted_retry", property(lambda self: False),
     "expect.model_requests (call 2)"),
    ("restart_restores_transcript", session.Session, "restore_from_disk", lambda self: 0,
     "expect.model_requests (call 2)"),
]


@pytest.mark.parametrize(("name", "owner", "attribute", "replacement", "failure"), MUTATIONS,
                         ids=[m[0] for m in MUTATIONS])
def test_removing_the_behaviour_fails_the_scenario(monkeypatch: pytest.MonkeyPatch, name: str, owner: Any,
                                                   attribute: str, replacement: Any, failure: str) -> None:
    path = SCENARIOS / f"{name}.json"
    assert replay(path).ok
    monkeypatch.setattr(owner, attribute, replacement)
    failures = replay(path).failures
    assert any(f.startswith(failure) for f in failures), failures
