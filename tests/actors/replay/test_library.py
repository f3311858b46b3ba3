"""The shipped scenario library: each passes with 20 seeds and matches its golden digests (CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.replay import load_scenario, replay
from actors.replay.golden import read_goldens

ROOT = Path(__file__).resolve().parents[3]
FILES = sorted((ROOT / "scenarios").glob("*.json")) + sorted((ROOT / "scenarios").glob("*.toml"))
SEEDS = range(20)
REQUIRED = {"fifo_order", "abort_queued", "cancel_running", "mid_turn_injection", "api_error_then_retry",
            "restart_restores_transcript"}


def test_the_library_has_the_required_scenarios() -> None:
    assert REQUIRED <= {f.stem for f in FILES}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_scenario_passes_with_20_seeds_and_matches_its_goldens(path: Path) -> None:
    scenario = load_scenario(path)
    goldens = read_goldens(path)
    assert set(SEEDS) <= set(goldens), f"record goldens: python -m actors.replay {path} --seeds 20 --update"
    for seed in SEEDS:
        result = replay(scenario, seed)
        assert result.ok, (f"seed {seed}: {result.failures}; reproduce: "
                           f"python -m actors.replay {path.relative_to(ROOT)} --seed {seed} --trace")
        assert result.digest == goldens[seed], (
            f"seed {seed}: the trace changed; inspect with python -m actors.replay {path.relative_to(ROOT)} "
            f"--seed {seed} --trace, accept with --seeds 20 --update")
