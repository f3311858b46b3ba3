"""The stop path: what happens at a natural model stop (spec 000, "Stop ordering").

1. Drain mid-turn user messages. If any exist, skip Stop hooks and the guard,
   reset the guard budget, and run the user continuation in the current loop.
2. If the FIFO holds a complete, non-aborted prompt, finish the request and mark
   the chain as awaiting it.
3. On foreground turns, evaluate external Stop hooks (their cap, fail-open errors).
4. Evaluate the guard when it is armed, not suspended or awaiting, has
   unfinished items, is outside Plan, and has no relevant background input.
5. If a hook and the guard both block, combine their reasons into one
   continuation model call (their counters stay independent).

With the guard off, steps 1, 2 and 4 do nothing: a stop behaves as it always did.
"""

from __future__ import annotations

from ..guard import Continue, Exhausted, continuation_prompt, exhaustion_update
from .drains import NOTHING
from .fifo import DrainResult
from .outcomes import Send, StopHookCapReached, mid_turn_parts
from .ports import TurnPorts
from .turn_state import TurnState


async def at_natural_stop(ports: TurnPorts, turn: TurnState) -> Send | None:
    """The next send that continues this turn, or ``None`` to end it."""
    chain = ports.chain
    if ports.plan_mode:
        chain.guard.clear_trust()  # forced off in Plan
    if chain.queued_prompt_priority:
        return None  # an earlier drain saw a queued prompt: FIFO priority stays in force

    drained = await drain_for_stop(ports, turn)                           # 1.
    if drained.messages:
        chain.guard.accept_mid_turn_user_input()
        return Send(mid_turn_parts(drained.messages))
    if chain.queued_prompt_priority:                                      # 2.
        return None

    hook_reason, late = await stop_hooks(ports, turn)                     # 3.
    if late.messages:
        # User input arrived during a slow hook: it runs first (a queued prompt seen with it
        # keeps its priority and ends the turn at the next stop); the hook's block still counts.
        chain.guard.accept_mid_turn_user_input()
        return combine(hook_reason, None, mid_turn_parts(late.messages))
    if chain.queued_prompt_priority:
        return None

    guard_part = guard_decision(ports, turn)                              # 4.
    return combine(hook_reason, guard_part)                               # 5.


async def drain_for_stop(ports: TurnPorts, turn: TurnState) -> DrainResult:
    """Step 1 (and the FIFO check of step 2): only while the guard inspects this stop."""
    guard = ports.chain.guard
    if not guard.needs_stop_inspection:
        return NOTHING
    guard.await_queued_prompt()  # before the drain: a bridge's release arriving meanwhile finds the chain awaiting
    drained = await ports.mid_turn.drain(watch_queued_prompt=True)
    # A priority set here stays even if a mid-turn continuation completes the todos.
    if not ports.chain.yield_to_queued_prompt(drained.has_queued_prompt):
        guard.resume_trusted_prompt()  # no queued prompt: stop awaiting
    return drained


async def stop_hooks(ports: TurnPorts, turn: TurnState) -> tuple[str | None, DrainResult]:
    """Step 3: a foreground turn's external Stop hooks. Their block reason, and input that came meanwhile."""
    chain = ports.chain
    groups = ports.hooks.config.stop
    if not turn.foreground or not groups:
        return None, NOTHING
    cap = ports.settings.stop_hook_block_cap
    if turn.hook_blocks >= cap:
        decision = chain.guard.decide(chain.has_relevant_background_input())
        if isinstance(decision, Exhausted):
            report_exhaustion(ports, turn, decision)  # reported before the hook's cap overrides the stop
        ports.publisher.notice(f"Stop hook blocked continuation {turn.hook_blocks} consecutive time(s); "
                               "overriding and ending the turn.", turn.prompt_id)
        raise StopHookCapReached()
    try:
        # A Stop hook refused for trust fails open (hooks.run_hooks): refused_blocks is PreToolUse's.
        outcome = await ports.hooks.run("Stop", groups, turn.prompt_id,
                                        stop_hook_active=turn.hook_blocks > 0,
                                        last_assistant_message=turn.last_text)
    except BaseException:
        chain.guard.pause_for_trusted_retry()
        raise
    reason = None
    if outcome.blocked:
        turn.hook_blocks += 1
        reason = "\n".join(outcome.block_reasons)
    else:
        turn.hook_blocks = 0
    late = NOTHING
    if chain.guard.needs_stop_inspection:
        # The hook may have been slow: look again for a queued prompt and for user input.
        late = await ports.mid_turn.drain(watch_queued_prompt=True)
        chain.yield_to_queued_prompt(late.has_queued_prompt)
    return reason, late


def guard_decision(ports: TurnPorts, turn: TurnState) -> Continue | None:
    """Step 4: the guard's own decision; exhaustion is reported once and ends the chain."""
    chain = ports.chain
    decision = chain.guard.decide(chain.has_relevant_background_input())
    if isinstance(decision, Exhausted):
        report_exhaustion(ports, turn, decision)
        return None
    return decision if isinstance(decision, Continue) else None


def report_exhaustion(ports: TurnPorts, turn: TurnState, decision: Exhausted) -> None:
    """The guard's budget ran out: said once per chain."""
    if ports.chain.guard.mark_exhaustion_reported():
        ports.publisher.update(exhaustion_update(decision), turn.prompt_id)
        ports.publisher.telemetry.guard_exhausted()


def combine(hook_reason: str | None, guard: Continue | None,
            mid_turn: tuple[tuple[str, str], ...] = ()) -> Send | None:
    """Step 5: one continuation for whatever blocked the stop."""
    parts: list[tuple[str, str]] = list(mid_turn)
    if hook_reason is not None:
        parts.append(("hook", hook_reason))
    if guard is not None:
        parts.append(("guard", continuation_prompt(guard.attempt, guard.unfinished_count)))
    if not parts:
        return None
    return Send(tuple(parts), guard, hook_reason is not None)
