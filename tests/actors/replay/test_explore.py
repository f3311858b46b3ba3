"""Seed exploration finds a broken invariant, and the printed command reproduces it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from actors.replay import replay

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
