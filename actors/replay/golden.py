"""Golden digests: ``<scenario>.digest`` beside each scenario file, one line per seed.

::

    # golden trace digests of fifo_order.json, one "<seed> <sha256>" line per seed
    0 3f2a...
    1 9b41...

CI replays seeds 0..19 and compares each. ``--update`` replaces the lines of
the seeds it ran and keeps the others, so a partial update leaves the rest to
fail loudly instead of silently dropping them.
"""

from __future__ import annotations

import re
from pathlib import Path

from .fields import ScenarioError

_LINE = re.compile(r"^(\d+) ([0-9a-f]{64})$")


def digest_path(scenario_path: Path) -> Path:
    return scenario_path.with_suffix(".digest")


def read_goldens(scenario_path: Path) -> dict[int, str]:
    """Seed -> golden digest; empty when the file does not exist."""
    path = digest_path(scenario_path)
    if not path.exists():
        return {}
    goldens: dict[int, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            raise ScenarioError(str(path), f"line {n}", '"<seed> <sha256 hex>"', line)
        goldens[int(m[1])] = m[2]
    return goldens


def write_goldens(scenario_path: Path, digests: dict[int, str]) -> dict[int, str]:
    """Merge ``digests`` into the scenario's digest file; returns what it now holds."""
    merged = {**read_goldens(scenario_path), **digests}
    lines = [f'# golden trace digests of {scenario_path.name}, one "<seed> <sha256>" line per seed;',
             f"# rewrite with: python -m actors.replay {scenario_path} --seeds 20 --update"]
    lines += [f"{seed} {merged[seed]}" for seed in sorted(merged)]
    digest_path(scenario_path).write_text("\n".join(lines) + "\n")
    return merged
