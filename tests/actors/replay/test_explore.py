"""Seed exploration finds a broken invariant, and the printed command reproduces it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from actors.replay import load_scenario, replay
from actors.replay.explore import shrink

ROOT = Path(__file__).resolve().parents[3]


def race(first: str, then: str) -> dict:
    """Two sessions answer at the same virtual time; the invariant claims ``first`` always finishes first."""
    return {
        "name": "race",
        "description": "A deliberately broken invariant: which session finishes first is up to the scheduler.",
        "model": [[{"sleep": 1}, {"text": "x"}], [{"sleep": 1}, {"text": "y"}]],
        "timeline": [
            {"at": 0, "do": "create_session", "label": "a"},
            {"at": 0, "do": "create_session", "label": "b"},
            {"at": 0, "do": "prompt", "session": "a", "text": "to a"},
            {"at": 0, "do": "prompt", "session": "b", "text": "to b"},
        ],
        "invariants": ["one_terminal_per_prompt", {
            "name": "precedes",
            "first": {"type": "turn_complete", "session": first},
            "then": {"type": "turn_complete", "session": then},
        }],
    }


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "actors.replay", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": "random"})


def test_seeds_find_a_broken_invariant_and_the_command_reproduces_it(tmp_path: Path) -> None:
    path = tmp_path / "race.json"
    # Make the claim true for seed 0, so only exploring other seeds can refute it.
    path.write_text(json.dumps(race("a", "b")))
    if not replay(path, seed=0).ok:
        path.write_text(json.dumps(race("b", "a")))
    assert replay(path, seed=0).ok

    single = cli(str(path))
    assert single.returncode == 0, single.stdout + single.stderr

    explored = cli(str(path), "--seeds", "20")
    assert explored.returncode == 1, explored.stdout + explored.stderr
    assert "invariant precedes" in explored.stdout
    m = re.search(r"reproduce: (python -m actors\.replay .* --seed (\d+) --trace)$", explored.stdout, re.M)
    assert m, explored.stdout
    seed = int(m[2])
    assert seed != 0

    argv = shlex.split(m[1])
    assert argv[:3] == ["python", "-m", "actors.replay"]
    again = cli(*argv[3:])
    assert again.returncode == 1
    assert f"FAIL  race  seed {seed}: invariant precedes" in again.stdout
    assert "turn_complete" in again.stdout and "model call 2" in again.stdout  # the trace, printed readably
    assert replay(path, seed=seed).failures == replay(path, seed=seed).failures != []


# ----------------------------------------------------------------- --explore and --shrink


def windowed_race(window: list[float]) -> dict:
    """Session a's prompt comes at a time in ``window``, b's at 2: the claim "a finishes first" is false
    whenever a comes after b — a failure that only some schedules show."""
    doc = race("a", "b")
    doc["timeline"][2]["at"] = {"between": window}
    doc["timeline"][3]["at"] = 2
    return doc


def test_explore_prints_distinct_traces_failing_seeds_and_a_reproduction(tmp_path: Path) -> None:
    path = tmp_path / "windowed.json"
    path.write_text(json.dumps(windowed_race([0, 4])))
    explored = cli(str(path), "--explore", "20", "--from", "5000")
    assert explored.returncode == 1, explored.stdout + explored.stderr
    assert "exploring seeds 5000..5019 (repeat with --explore 20 --from 5000)" in explored.stdout
    m = re.search(r"FAIL  race +seeds 5000\.\.5019: (\d+) distinct trace\(s\), (\d+) distinct order\(s\); "
                  r"(\d+) failing seed\(s\), (\d+) with invariant failures", explored.stdout)
    assert m, explored.stdout
    traces, orders, failing, invariant = map(int, m.groups())
    assert traces >= 5 and orders >= 2 and 0 < failing < 20 and invariant == failing
    line = re.search(r"reproduce: (python -m actors\.replay .* --seed (\d+) --trace)$", explored.stdout, re.M)
    assert line, explored.stdout
    assert int(line[2]) >= 5000
    again = cli(*shlex.split(line[1])[3:])
    assert again.returncode == 1 and f"seed {line[2]}: invariant precedes" in again.stdout


def test_explore_of_a_passing_library_race_finds_no_failure() -> None:
    explored = cli(str(ROOT / "actors" / "replay" / "scenarios" / "guard_mid_turn_races_queued_prompt.json"), "--explore", "10")
    assert explored.returncode == 0, explored.stdout
    assert re.search(r"ok    guard_mid_turn_races_queued_prompt +seeds \d+\.\.\d+: \d+ distinct trace\(s\), "
                     r"\d+ distinct order\(s\); 0 failing seed\(s\)", explored.stdout), explored.stdout


def test_shrink_moves_each_window_to_the_smallest_value_that_still_fails(tmp_path: Path) -> None:
    path = tmp_path / "windowed.json"
    path.write_text(json.dumps(windowed_race([0, 4])))
    scenario = load_scenario(path)
    seed = next(s for s in range(100) if not replay(scenario, s).ok and replay(scenario, s).schedule[KEY] > 2.5)
    shrunk = shrink(scenario, seed)
    assert shrunk.kind == "invariant precedes"
    assert shrunk.after[KEY] < shrunk.before[KEY]
    # The smallest failing value: just after b's prompt at 2 (at 2 itself a still goes first, in file order).
    assert 2.0 <= shrunk.after[KEY] <= 2.01, shrunk
    assert not replay(scenario, seed, jitters={KEY: shrunk.after[KEY] - 0.001}).failures
    assert replay(scenario, seed, jitters=shrunk.after).failures

    printed = cli(str(path), "--seed", str(seed), "--shrink")
    assert printed.returncode == 1
    assert f"shrunk seed {seed} (invariant precedes" in printed.stdout and "minimal schedule: " in printed.stdout
    m = re.search(r"      reproduce: (python -m actors\.replay .*)$", printed.stdout, re.M)
    assert m and "--jitter" in m[1], printed.stdout
    again = cli(*shlex.split(m[1])[3:])
    assert again.returncode == 1 and "invariant precedes" in again.stdout
    assert f"(overridden: {KEY})" in again.stdout  # the trace says the schedule was not the seed's own


KEY = "timeline[2].at"


def test_a_race_that_explores_too_little_fails_with_20_seeds(tmp_path: Path) -> None:
    doc = race("a", "b")
    doc["invariants"] = ["one_terminal_per_prompt"]
    doc["timeline"][2]["at"] = {"between": [0, 0]}  # a window that leaves nothing open
    for step in doc["timeline"][:2]:  # titled: no title event at admission to interleave across the sessions
        step["title"] = step["label"]
    path = tmp_path / "narrow.json"
    path.write_text(json.dumps(doc))
    ran = cli(str(path), "--seeds", "20")
    assert ran.returncode == 1
    assert "a race that explores too little" in ran.stdout
