"""``python -m actors.replay [PATH ...] [--seed S | --seeds N] [--update] [--trace]``.

Replays each scenario (PATH: files or directories; default ``scenarios/``),
checks its expectations and invariants, and compares each seed's trace digest
with the golden one beside the file. On failure it prints the seed and a
command that reproduces it. Exit status: 0 all passed, 1 a replay failed,
2 a scenario file is invalid (or nothing to replay).
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from .fields import ScenarioError
from .golden import read_goldens, write_goldens
from .runner import Result, replay
from .scenario import load_scenario
from .trace import format_trace

SUFFIXES = (".json", ".toml")
MAX_FAILING_SEEDS_SHOWN = 3


def collect(paths: Sequence[str]) -> list[str]:
    """Scenario files named by ``paths``; a directory contributes its ``*.json`` and ``*.toml``, sorted."""
    out: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out += [str(path / f.name) for f in sorted(path.iterdir()) if f.suffix in SUFFIXES and f.is_file()]
        else:
            out.append(p)
    return out


def reproduce_command(path: str, seed: int) -> str:
    return f"python -m actors.replay {shlex.quote(path)} --seed {seed} --trace"


def combined_digest(digests: dict[int, str]) -> str:
    """One digest for a set of seeds (what two processes compare when replaying many seeds)."""
    text = "".join(f"{seed} {d}\n" for seed, d in sorted(digests.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _seeds(args: argparse.Namespace) -> list[int]:
    if args.seed is not None:
        return [args.seed]
    return list(range(args.seeds if args.seeds is not None else 1))


def run_file(path: str, seeds: list[int], *, update: bool, show_trace: bool, out: TextIO | None = None) -> int:
    """Replay one file over ``seeds``; prints its report; returns 0, 1 (failed) or 2 (invalid)."""
    def say(text: str = "") -> None:
        print(text, file=out or sys.stdout)

    try:
        scenario = load_scenario(path)
        goldens = read_goldens(Path(path))
    except ScenarioError as exc:
        say(f"ERROR {exc}")
        return 2
    results: list[Result] = []
    for seed in seeds:
        result = replay(scenario, seed)
        results.append(result)
        if show_trace:
            say(f"--- {scenario.name} seed {seed} digest {result.digest}")
            say(format_trace(result.trace))
    digests = {r.seed: r.digest for r in results}
    failing: dict[int, list[str]] = {r.seed: list(r.failures) for r in results if r.failures}
    if scenario.known_bug:
        return _known_bug(scenario.name, path, scenario.known_bug, seeds, digests, failing, say)
    if not update:
        for seed, digest in digests.items():
            golden = goldens.get(seed)
            if golden is not None and golden != digest:
                failing.setdefault(seed, []).append(
                    f"trace digest {digest[:16]}… differs from the golden {golden[:16]}… "
                    f"(behaviour or trace changed: inspect with --trace; accept with --update)")
    name = scenario.name
    if failing:
        for seed in sorted(failing)[:MAX_FAILING_SEEDS_SHOWN]:
            for failure in failing[seed]:
                say(f"FAIL  {name}  seed {seed}: {failure}")
        more = len(failing) - MAX_FAILING_SEEDS_SHOWN
        if more > 0:
            say(f"FAIL  {name}  ... and {more} more failing seeds: {sorted(failing)[MAX_FAILING_SEEDS_SHOWN:]}")
        say(f"      {len(failing)} of {len(seeds)} seeds failed; reproduce: "
            f"{reproduce_command(path, min(failing))}")
        if update:
            say(f"      {name}: goldens not updated (the scenario fails)")
        return 1
    distinct = len(set(digests.values()))
    if update:
        write_goldens(Path(path), digests)
        note = "golden updated"
    else:
        missing = [s for s in seeds if s not in goldens]
        note = (f"no golden digest for {len(missing)} seed(s) (record with --update)" if missing
                else "matches golden")
    if len(seeds) == 1:
        say(f"ok    {name:<36} seed {seeds[0]:<6} {digests[seeds[0]]}  {note}")
    else:
        span = f"{seeds[0]}..{seeds[-1]}"
        say(f"ok    {name:<36} seeds {span:<5} {combined_digest(digests)}  "
            f"{distinct} distinct trace(s); {note}")
    return 0


def _known_bug(name: str, path: str, bug: str, seeds: list[int], digests: dict[int, str],
               failing: dict[int, list[str]], say: Any) -> int:
    """A scenario marked ``known_bug`` must fail (it states the right behaviour); it has no goldens.

    One line: ``xfail`` while it fails (exit status unaffected), ``XPASS`` (a failure) once every
    seed passes — the bug is fixed: remove ``known_bug`` and record goldens.
    """
    span = f"seed {seeds[0]:<6}" if len(seeds) == 1 else f"seeds {f'{seeds[0]}..{seeds[-1]}':<5}"
    digest = digests[seeds[0]] if len(seeds) == 1 else combined_digest(digests)
    if not failing:
        say(f"XPASS {name:<36} {span} {digest}  passes now: remove known_bug and record goldens ({bug})")
        return 1
    first = failing[min(failing)][0]
    say(f"xfail {name:<36} {span} {digest}  known bug, {len(failing)} of {len(seeds)} seeds fail as expected: "
        f"{first} (reproduce: {reproduce_command(path, min(failing))})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m actors.replay", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", metavar="PATH", help="scenario files or directories (default: scenarios/)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, metavar="S", help="replay with this seed only (default 0)")
    which.add_argument("--seeds", type=int, metavar="N", help="explore seeds 0..N-1")
    parser.add_argument("--update", action="store_true", help="rewrite the golden digests of the seeds run")
    parser.add_argument("--trace", action="store_true", help="print each replay's trace readably")
    args = parser.parse_args(argv)
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.seed is not None and args.seed < 0:
        parser.error("--seed must be non-negative")
    files = collect(args.paths or ["scenarios"])
    if not files:
        print(f"no scenario files in {' '.join(args.paths or ['scenarios'])}")
        return 2
    seeds = _seeds(args)
    start = time.perf_counter()
    worst = 0
    for path in files:
        worst = max(worst, run_file(path, seeds, update=args.update, show_trace=args.trace))
    elapsed = time.perf_counter() - start
    print(f"{len(files)} scenario(s) x {len(seeds)} seed(s) in {elapsed:.2f}s: "
          f"{'all passed' if worst == 0 else 'FAILED'}")
    return worst
