"""Each scenario's expectations fail when the behaviour it covers is removed (one mutation per scenario).

The mutations are monkeypatched into the real actors; the replay runs in this
process, so it sees them. If a patched name disappears, ``monkeypatch`` raises:
update the mutation to the new code rather than dropping it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from actors.background import automatic
from actors.background.automatic import AutomaticItem
from actors.guard import INACTIVE, TodoStopGuard
from actors.replay import replay
from actors.session import authorizer, chain, conversation, drains, fifo, prompt_queue, stop, turn, work_item
from actors.subagents.run import SubagentRun

SCENARIOS = Path(__file__).resolve().parents[3] / "actors" / "replay" / "scenarios"


def take_newest(self: prompt_queue.PromptQueue, now: int) -> Any:
    """LIFO instead of FIFO."""
    queued = [e for e in self.entries if e.state == "queued"]
    if queued:
        entry = queued[-1]
        self.entries.remove(entry)
        self.entries.insert(0, entry)
    return ORIGINAL_TAKE(self, now)


ORIGINAL_TAKE = prompt_queue.PromptQueue.take
ORIGINAL_PREPARE = chain.WorkChain.prepare_for_prompt


async def _async_none() -> None:
    return None


def never_drain(self: prompt_queue.PromptQueue, watch_queued_prompt: bool) -> Any:
    """Mid-turn input is never handed to the turn."""
    return prompt_queue.Step(fifo.DrainResult((), (), False))


# ----------------------------------------------------------------- guard-area mutations


async def forget_late_drains(self: drains.MidTurnInput, watch_queued_prompt: bool = False) -> Any:
    """A drain that missed its deadline is dropped: its late answer is never recovered."""
    result = await ORIGINAL_DRAIN(self, watch_queued_prompt)
    self.take_late()
    return result


ORIGINAL_DRAIN = drains.MidTurnInput.drain


def relevant_ignoring_baseline(self: chain.WorkChain) -> bool:
    """Every live agent/shell/monitor/wakeup counts as relevant, whatever chain started it."""
    if any(item.kind in chain.RELEVANT_LIVE_KINDS for item in self.background.registry.live()):
        return True
    return any(q.source in chain.RELEVANT_QUEUED_SOURCES for q in self.background.queue.items)


def automatic_turn_always_new_chain(self: chain.WorkChain, item: AutomaticItem, *, plan: bool) -> None:
    """A related background result no longer continues the chain: every automatic turn starts afresh."""
    self.guard.clear_trust()
    self.baseline = self.background.snapshot()


def select_ignoring_chain(self: chain.WorkChain) -> AutomaticItem | None:
    """The automatic queue is plain FIFO: a resumable chain holds nothing back."""
    return None if self.queued_prompt_priority else self.background.queue.peek()


def post_without_coalescing(self: automatic.AutomaticQueue, item: AutomaticItem, related: Any = lambda _: False) -> Any:
    """Recurring cron fires no longer coalesce per task."""
    item.recurring = False
    return ORIGINAL_POST(self, item, related)


ORIGINAL_POST = automatic.AutomaticQueue.post


async def stop_hooks_without_cap(ports: Any, t: Any) -> Any:
    """The Stop-hook cap is never reached: the hook's count is forgotten before each run."""
    t.hook_blocks = 0
    return await ORIGINAL_STOP_HOOKS(ports, t)


ORIGINAL_STOP_HOOKS = stop.stop_hooks


async def stop_hooks_on_every_turn(ports: Any, t: Any) -> Any:
    """External Stop hooks also run for automatic turns."""
    t.foreground = True
    return await ORIGINAL_STOP_HOOKS(ports, t)


class NeverRaised(Exception):
    """Stands in for ContextWindowExceeded, so a token rejection is handled like any other failure."""


async def cancel_after_grace_regardless(self: authorizer.Authorizer) -> None:
    """Grace expiry cancels pending permissions even though a client came back."""
    import trio
    await trio.sleep(self.grace_seconds)
    self.broker.cancel_all()


# ----------------------------------------------------------------- subagent goal-loop mutations


ORIGINAL_LOOP = SubagentRun.goal_loop
ORIGINAL_SIGNAL = SubagentRun.record_signal


async def loop_always_toward_a_goal(self: SubagentRun, turns: Any, spawned: Any) -> str:
    """The no-goal branch is gone: a run without a goal is driven as if its brief were its goal."""
    self.spec = attrs.evolve(self.spec, goal=self.spec.goal or self.spec.brief)
    return await ORIGINAL_LOOP(self, turns, spawned)


async def loop_without_reprompt(self: SubagentRun, turns: Any, spawned: Any) -> str:
    """The goal loop never re-prompts: a run with a goal ends after its first turn."""
    self.spec = attrs.evolve(self.spec, goal=None)
    return await ORIGINAL_LOOP(self, turns, spawned)


def signal_that_does_not_stop_the_loop(self: SubagentRun, kind: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """A signal is recorded, but the loop goes on re-prompting as if nothing had said stop."""
    answer = ORIGINAL_SIGNAL(self, kind, arguments)
    self.end_reason = None
    return answer


def signal_without_needs_help_state(self: SubagentRun, kind: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    """need_help is recorded, but the run does not show the blocked state while it winds down."""
    answer = ORIGINAL_SIGNAL(self, kind, arguments)
    if self.state == "needs_help" and not self.ended.is_set():
        self.state = "running"
    return answer


MUTATIONS: list[tuple[str, Any, str, Any, str]] = [
    # (scenario, object, attribute, replacement, a failure it must cause)
    ("fifo_order", prompt_queue.PromptQueue, "take", take_newest, "expect.events"),
    ("abort_queued", prompt_queue.PromptQueue, "abort", lambda self, prompt_id, now: prompt_queue.Step(False),
     "expect.prompts.two"),
    ("cancel_running", work_item.WorkItem, "cancel", lambda self, prompt_id=None: work_item.CancelOutcome.NOTHING,
     "expect.prompts.slow"),
    ("mid_turn_injection", prompt_queue.PromptQueue, "drain", never_drain, "expect.model_requests (call 2)"),
    ("api_error_then_retry", fifo.PendingPrompt, "is_trusted_retry", property(lambda self: False),
     "expect.model_requests (call 2)"),
    ("restart_restores_transcript", conversation.Conversation, "reload", lambda self: [],
     "expect.model_requests (call 2)"),
    # The Todo Stop Guard (spec 000), one area each.
    ("guard_canonical", TodoStopGuard, "decide", lambda self, has_relevant_background_input: INACTIVE,
     "expect.guard_attempts.work"),
    ("guard_fifo_priority", TodoStopGuard, "await_queued_prompt", lambda self: False, "expect.guard_attempts.work"),
    ("guard_fifo_abort_releases", chain.WorkChain, "release_queued_prompt_wait", lambda self, **kwargs: False,
     "expect.model_calls"),
    ("guard_mid_turn_resets_budget", TodoStopGuard, "accept_mid_turn_user_input", lambda self: None,
     "expect.guard_attempts.work"),
    ("guard_late_drain_recovery", drains.MidTurnInput, "drain", forget_late_drains,
     "expect.guard_attempts.work"),
    ("guard_background_baseline", chain.WorkChain, "has_relevant_background_input", relevant_ignoring_baseline,
     "expect.guard_attempts.work"),
    ("guard_related_background", chain.WorkChain, "prepare_for_automatic_turn", automatic_turn_always_new_chain,
     "expect.guard_attempts.@auto"),
    ("guard_notification_deferred", chain.WorkChain, "select_automatic", select_ignoring_chain,
     "expect.guard_attempts.@auto"),
    ("guard_notification_released_on_error", chain.WorkChain, "invalidate", lambda self, *, turn_running: None,
     "expect.model_calls"),
    ("cron_coalescing", automatic.AutomaticQueue, "post", post_without_coalescing, "expect.model_calls"),
    ("guard_stop_cancel", TodoStopGuard, "suspend", lambda self: None, "expect.prompts.again"),
    ("guard_stop_permission_grace", authorizer.Authorizer, "clients_left", lambda self: None, "did not settle"),
    ("permission_reattach_within_grace", authorizer.Authorizer, "cancel_after_grace",
     cancel_after_grace_regardless, "expect.guard_attempts.work"),
    ("guard_stop_post_tool_use", turn.Turn, "post_tool_use", lambda self, call, result: _async_none(),
     "expect.model_calls"),
    ("guard_stop_hook_cap", stop, "stop_hooks", stop_hooks_without_cap, "expect.prompts.work"),
    ("guard_stop_token_limit", turn, "ContextWindowExceeded", NeverRaised, "expect.prompts.work"),
    ("guard_api_error_retry", chain.WorkChain, "prepare_for_prompt",
     lambda self, *, trusted_retry, plan: ORIGINAL_PREPARE(self, trusted_retry=False, plan=plan),
     "expect.guard_attempts.again"),
    ("guard_lifecycle_rewind", chain.WorkChain, "invalidate", lambda self, *, turn_running: None,
     "expect.prompts.again"),
    ("guard_lifecycle_restore", chain.WorkChain, "invalidate", lambda self, *, turn_running: None,
     "expect.prompts.again"),
    ("guard_lifecycle_cwd", chain.WorkChain, "invalidate", lambda self, *, turn_running: None,
     "expect.prompts.again"),
    ("guard_bridge_queue_release", chain.WorkChain, "release_queued_prompt_wait", lambda self, **kwargs: False,
     "expect.model_calls"),
    ("guard_suggestions_suppressed", chain.WorkChain, "suggestions_allowed", property(lambda self: True),
     "expect.model_calls"),
    ("guard_cron_turn_chain", stop, "stop_hooks", stop_hooks_on_every_turn, "expect.hook_runs.always-block"),
    ("guard_lifecycle_keeps_chain", chain.WorkChain, "prepare_for_prompt",
     lambda self, *, trusted_retry, plan: ORIGINAL_PREPARE(self, trusted_retry=False, plan=plan),
     "expect.guard_attempts.again"),
    # Subagent runs (spec 003): the goal loop's four end reasons.
    ("subagent_no_goal", SubagentRun, "goal_loop", loop_always_toward_a_goal, "expect.subagent.counter.end_reason"),
    ("subagent_goal_reached", SubagentRun, "goal_loop", loop_without_reprompt, "expect.subagent.fixer.end_reason"),
    ("subagent_goal_reached", SubagentRun, "record_signal", signal_that_does_not_stop_the_loop, "expect.model_calls"),
    ("subagent_need_help", SubagentRun, "record_signal", signal_without_needs_help_state, "timeline[1].expect"),
    # The cap check lets one more turn through (removing it outright would loop forever at one instant).
    ("subagent_turn_cap", SubagentRun, "max_turns", property(lambda self: self.spec.max_turns + 1),
     "expect.model_calls"),
]


@pytest.mark.parametrize(("name", "owner", "attribute", "replacement", "failure"), MUTATIONS,
                         ids=[m[0] if [n[0] for n in MUTATIONS].count(m[0]) == 1 else f"{m[0]}-{m[2]}"
                              for m in MUTATIONS])
def test_removing_the_behaviour_fails_the_scenario(monkeypatch: pytest.MonkeyPatch, name: str, owner: Any,
                                                   attribute: str, replacement: Any, failure: str) -> None:
    path = SCENARIOS / f"{name}.json"
    assert replay(path).ok
    monkeypatch.setattr(owner, attribute, replacement)
    failures = replay(path).failures
    assert any(f.startswith(failure) for f in failures), failures
