"""The shipped scenario library: each passes with 20 seeds and matches its golden digests (CI); a
scenario built on a race shows at least five distinct traces over those seeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.replay import load_scenario, replay
from actors.replay.explore import MIN_RACE_TRACES
from actors.replay.golden import read_goldens

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = ROOT / "actors" / "replay" / "scenarios"
FILES = sorted(SCENARIOS.glob("*.json")) + sorted(SCENARIOS.glob("*.toml"))
SEEDS = range(20)
REQUIRED = {
    "fifo_order", "abort_queued", "cancel_running", "mid_turn_injection", "api_error_then_retry",
    "restart_restores_transcript",
    # issue 6's list: the Todo Stop Guard's behaviours, one scenario (at least) each
    "guard_canonical", "guard_fifo_priority", "guard_fifo_abort_releases", "guard_mid_turn_resets_budget",
    "guard_late_drain_recovery", "guard_background_baseline", "guard_related_background",
    "guard_notification_deferred", "guard_notification_released_on_error", "cron_coalescing",
    "guard_stop_cancel", "guard_stop_permission_grace", "guard_stop_post_tool_use", "guard_stop_hook_cap",
    "guard_stop_token_limit", "guard_api_error_retry", "guard_lifecycle_rewind", "guard_lifecycle_restore",
    "guard_lifecycle_cwd", "guard_lifecycle_keeps_chain", "guard_bridge_queue_release", "guard_suggestions_suppressed",
    "guard_cron_turn_chain", "permission_reattach_within_grace",
    # issue 6: subagent goal-loop scenarios, one per end reason
    "subagent_no_goal", "subagent_goal_reached", "subagent_need_help", "subagent_turn_cap",
    # issue 16: the gaps, and races that explore
    "guard_stop_loop_protection", "guard_shadowed_todo_write", "guard_duplicate_todo_write", "guard_no_third_stream",
    "guard_fifo_skips_stop_hook", "guard_failed_write_extra_argument", "guard_reconnect_during_continuation",
    "guard_mid_turn_races_queued_prompt", "guard_fifo_priority_race", "guard_cancel_race", "subagent_child_no_guard",
}
RACES = {"guard_reconnect_during_continuation", "guard_mid_turn_races_queued_prompt", "guard_fifo_priority_race",
         "guard_cancel_race"}


def test_the_library_has_the_required_scenarios() -> None:
    assert REQUIRED <= {f.stem for f in FILES}
    assert RACES <= {f.stem for f in FILES if load_scenario(f).races}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_scenario_passes_with_20_seeds_and_matches_its_goldens(path: Path) -> None:
    scenario = load_scenario(path)
    if scenario.known_bug:
        # It states the right behaviour, which the runtime does not have yet: it must fail (strictly).
        failing = [seed for seed in SEEDS if not replay(scenario, seed).ok]
        assert failing, (f"{path.name} passes now: the known bug is fixed ({scenario.known_bug}); remove "
                         f"known_bug and record goldens: python -m actors.replay {path} --seeds 20 --update")
        assert not read_goldens(path), "a known-bug scenario has no goldens"
        pytest.xfail(f"known bug: {scenario.known_bug}")
    goldens = read_goldens(path)
    assert set(SEEDS) <= set(goldens), f"record goldens: python -m actors.replay {path} --seeds 20 --update"
    if scenario.races:  # seeded exploration that finds nothing new is a promise not kept
        assert len({goldens[seed] for seed in SEEDS}) >= MIN_RACE_TRACES, f"{path.name} explores too little"
    for seed in SEEDS:
        result = replay(scenario, seed)
        assert result.ok, (f"seed {seed}: {result.failures}; reproduce: "
                           f"python -m actors.replay {path.relative_to(ROOT)} --seed {seed} --trace")
        assert result.digest == goldens[seed], (
            f"seed {seed}: the trace changed; inspect with python -m actors.replay {path.relative_to(ROOT)} "
            f"--seed {seed} --trace, accept with --seeds 20 --update")
