"""``python -m actors.replay [PATH ...] [--seed S | --seeds N | --explore N [--from S]] [--jitter KEY=SECONDS]
[--shrink] [--update] [--trace]``.

Replays each scenario (PATH: files or directories; default: the bundled library,
``actors/replay/scenarios/``, wherever the command runs from),
checks its expectations and invariants, and compares each seed's trace digest
with the golden one beside the file. On failure it prints the seed and a
command that reproduces it. ``--explore N`` replays N fresh seeds instead (no
goldens) and reports, per scenario, the distinct traces and the failing seeds;
``--shrink`` reduces a failing seed's windows to the smallest schedule that
still fails. Exit status: 0 all passed, 1 a replay failed, 2 a scenario file
is invalid (or nothing to replay, or a bad ``--jitter``).

``--recording FILE`` replays a session a daemon recorded (``--record DIR``, :mod:`.recorder`) instead and
compares its events (:mod:`.playback`): 0 identical, 1 at the first difference (both printed, with the
step and the virtual time), 2 not a recording. With ``--to-scenario OUT`` it writes the recording as a
scenario of the library (:mod:`.to_scenario`) and replays that.
"""

from __future__ import annotations

import argparse
import hashlib
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from .explore import (
    MIN_RACE_TRACES,
    Exploration,
    explore,
    fresh_base,
    order_digest,
    shrink,
)
from .fields import ScenarioError
from .golden import read_goldens, write_goldens
from .jitter import BadOverride, parse_override
from .runner import Result, replay
from .scenario import Scenario, load_scenario
from .trace import format_trace

DESCRIPTION = ("Replay concurrency scenarios deterministically under virtual time, checking their expectations, "
               "invariants and golden trace digests; or replay a session a daemon recorded (--recording FILE) and "
               "compare its events.")

SUFFIXES = (".json", ".toml")
# The scenario library ships inside the package (package data), so the default works from any directory
# and from an installed, non-editable package alike. (The repository's ./scenarios links here.)
BUNDLED = Path(__file__).resolve().parent / "scenarios"
MAX_FAILING_SEEDS_SHOWN = 3
CI_SEEDS = 20  # what CI replays; a race must show MIN_RACE_TRACES distinct traces over this many


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


def default_paths() -> list[str]:
    """The bundled library: relative to the working directory when under it (shorter lines), else absolute."""
    try:
        return [str(BUNDLED.relative_to(Path.cwd().resolve()))]
    except ValueError:
        return [str(BUNDLED)]


def reproduce_command(path: str, seed: int, jitters: dict[str, float] | None = None) -> str:
    extra = "".join(f" --jitter {shlex.quote(f'{k}={v:g}')}" for k, v in sorted((jitters or {}).items()))
    return f"python -m actors.replay {shlex.quote(path)} --seed {seed}{extra} --trace"


def combined_digest(digests: dict[int, str]) -> str:
    """One digest for a set of seeds (what two processes compare when replaying many seeds)."""
    text = "".join(f"{seed} {d}\n" for seed, d in sorted(digests.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def _seeds(args: argparse.Namespace) -> list[int]:
    if args.seed is not None:
        return [args.seed]
    return list(range(args.seeds if args.seeds is not None else 1))


def _load(path: str, say: Callable[[str], None]) -> tuple[Scenario, dict[int, str]] | None:
    try:
        return load_scenario(path), read_goldens(Path(path))
    except ScenarioError as exc:
        say(f"ERROR {exc}")
        return None


def _diversity(scenario: Scenario, results: list[Result]) -> str:
    traces = len({r.digest for r in results})
    text = f"{traces} distinct trace(s)"
    if scenario.races:
        text += f", {len({order_digest(r.trace) for r in results})} distinct order(s) (race)"
    return text


def _explores_too_little(scenario: Scenario, results: list[Result]) -> str | None:
    """A race must show that it explores: at least MIN_RACE_TRACES traces over CI's 20 seeds."""
    traces = len({r.digest for r in results})
    if scenario.races and len(results) >= CI_SEEDS and traces < MIN_RACE_TRACES:
        return (f"a race that explores too little: {traces} distinct trace(s) over {len(results)} seeds "
                f"(at least {MIN_RACE_TRACES}): widen its windows")
    return None


def _report_failures(name: str, path: str, failing: dict[int, list[str]], total: int, say: Any,
                     jitters: dict[str, float] | None = None) -> None:
    for seed in sorted(failing)[:MAX_FAILING_SEEDS_SHOWN]:
        for failure in failing[seed]:
            say(f"FAIL  {name}  seed {seed}: {failure}")
    more = len(failing) - MAX_FAILING_SEEDS_SHOWN
    if more > 0:
        say(f"FAIL  {name}  ... and {more} more failing seeds: {sorted(failing)[MAX_FAILING_SEEDS_SHOWN:]}")
    say(f"      {len(failing)} of {total} seeds failed; reproduce: {reproduce_command(path, min(failing), jitters)}")


def _shrink_and_report(scenario: Scenario, path: str, seed: int, say: Any) -> None:
    if not scenario.windows:
        say(f"      {scenario.name}: no windows to shrink; seed {seed}'s failure is the scheduler's alone")
        return
    result = shrink(scenario, seed)
    moved = ", ".join(f"{k} {a:g} -> {b:g}" for k, (a, b) in result.changed.items()) or "nothing could move"
    say(f"      shrunk seed {seed} ({result.kind}, {result.replays} replays): {moved}")
    say("      minimal schedule: " + " ".join(f"{k}={v:g}" for k, v in result.after.items()))
    say(f"      reproduce: {reproduce_command(path, seed, result.after)}")


def run_file(path: str, seeds: list[int], *, update: bool, show_trace: bool, out: TextIO | None = None,
             jitters: dict[str, float] | None = None, do_shrink: bool = False) -> int:
    """Replay one file over ``seeds``; prints its report; returns 0, 1 (failed) or 2 (invalid)."""
    def say(text: str = "") -> None:
        print(text, file=out or sys.stdout)

    loaded = _load(path, say)
    if loaded is None:
        return 2
    scenario, goldens = loaded
    results: list[Result] = []
    for seed in seeds:
        try:
            result = replay(scenario, seed, jitters=jitters)
        except BadOverride as exc:
            say(f"ERROR {path}: --jitter: {exc}")
            return 2
        results.append(result)
        if show_trace:
            say(f"--- {scenario.name} seed {seed} digest {result.digest}")
            say(format_trace(result.trace))
    digests = {r.seed: r.digest for r in results}
    failing: dict[int, list[str]] = {r.seed: list(r.failures) for r in results if r.failures}
    if scenario.known_bug:
        return _known_bug(scenario.name, path, scenario.known_bug, seeds, digests, failing, say)
    if not update and not jitters:  # an overridden schedule is not the seed's: no golden to compare
        for seed, digest in digests.items():
            golden = goldens.get(seed)
            if golden is not None and golden != digest:
                failing.setdefault(seed, []).append(
                    f"trace digest {digest[:16]}… differs from the golden {golden[:16]}… "
                    f"(behaviour or trace changed: inspect with --trace; accept with --update)")
    too_little = _explores_too_little(scenario, results)
    name = scenario.name
    if failing or too_little:
        if failing:
            _report_failures(name, path, failing, len(seeds), say, jitters)
            if do_shrink:
                _shrink_and_report(scenario, path, min(failing), say)
        if too_little:
            say(f"FAIL  {name}  {too_little}")
        if update:
            say(f"      {name}: goldens not updated (the scenario fails)")
        return 1
    if update:
        write_goldens(Path(path), digests)
        note = "golden updated"
    elif jitters:
        note = "jitters overridden: goldens not compared"
    else:
        missing = [s for s in seeds if s not in goldens]
        note = (f"no golden digest for {len(missing)} seed(s) (record with --update)" if missing
                else "matches golden")
    if len(seeds) == 1:
        say(f"ok    {name:<36} seed {seeds[0]:<6} {digests[seeds[0]]}  {note}")
    else:
        span = f"{seeds[0]}..{seeds[-1]}"
        say(f"ok    {name:<36} seeds {span:<5} {combined_digest(digests)}  {_diversity(scenario, results)}; {note}")
    return 0


def explore_file(path: str, seeds: list[int], *, do_shrink: bool, out: TextIO | None = None) -> int:
    """``--explore``: fresh seeds, no goldens; distinct traces and failing seeds per scenario."""
    def say(text: str = "") -> None:
        print(text, file=out or sys.stdout)

    loaded = _load(path, say)
    if loaded is None:
        return 2
    scenario = loaded[0]
    found: Exploration = explore(scenario, seeds)
    failing = {r.seed: list(r.failures) for r in found.failing}
    span = f"{seeds[0]}..{seeds[-1]}"
    summary = (f"{found.traces} distinct trace(s), {found.orders} distinct order(s); "
               f"{len(failing)} failing seed(s), {found.invariant_failures} with invariant failures")
    if scenario.known_bug:
        verdict = "xfail" if failing else "XPASS"
        say(f"{verdict:<5} {scenario.name:<36} seeds {span}: {summary} (known bug: {scenario.known_bug})")
        return 0 if failing else 1
    if not failing:
        say(f"ok    {scenario.name:<36} seeds {span}: {summary}")
        return 0
    say(f"FAIL  {scenario.name:<36} seeds {span}: {summary}")
    _report_failures(scenario.name, path, failing, len(seeds), say)
    if do_shrink:
        _shrink_and_report(scenario, path, min(failing), say)
    return 1


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


def _parser(prog: str = "python -m actors.replay") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("paths", nargs="*", metavar="PATH", help="scenario files or directories (default: the bundled library, "
                             "actors/replay/scenarios/)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seed", type=int, metavar="S", help="replay with this seed only (default 0)")
    which.add_argument("--seeds", type=int, metavar="N", help="replay seeds 0..N-1 (CI: 20)")
    which.add_argument("--explore", type=int, metavar="N",
                       help="replay N fresh seeds per scenario (no goldens): distinct traces, failing seeds")
    parser.add_argument("--from", dest="base", type=int, metavar="S",
                        help="with --explore: the first seed (default: a random one, printed)")
    parser.add_argument("--jitter", action="append", default=[], metavar="KEY=SECONDS",
                        help="replace the value a seed picks for one window (repeatable; what --shrink prints)")
    parser.add_argument("--shrink", action="store_true",
                        help="reduce a failing seed's windows to the smallest schedule that still fails")
    parser.add_argument("--update", action="store_true", help="rewrite the golden digests of the seeds run")
    parser.add_argument("--trace", action="store_true", help="print each replay's trace readably")
    parser.add_argument("--recording", metavar="FILE",
                        help="replay a recorded live session (trellis serve --record DIR) and compare its "
                             "events: exit 0 when identical, 1 at the first difference")
    parser.add_argument("--to-scenario", metavar="OUT",
                        help="with --recording: write the recording as a scenario of the library (JSON) to OUT, "
                             "then replay that scenario once")
    return parser


def recording_to_scenario(path: str, target: str, out: TextIO | None = None) -> int:
    """``--recording FILE --to-scenario OUT``: 0 written and it replays, 1 it fails, 2 not a recording."""
    import json

    from .recording import RecordingError, read_recording
    from .to_scenario import to_scenario

    def say(text: str) -> None:
        print(text, file=out or sys.stdout)

    try:
        recording = read_recording(path)
    except RecordingError as exc:
        say(f"ERROR {exc}")
        return 2
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in Path(target).stem) or "recorded"
    data, notes = to_scenario(recording, name)
    Path(target).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    say(f"wrote {target}: {len(data['timeline'])} step(s), {len(data['model'])} model response(s), "
        f"{len(data.get('tool_results', {}))} recorded tool result(s)")
    for note in notes:
        say(f"note  {note}")
    return run_file(target, [0], update=False, show_trace=False, out=out)


def replay_recording_file(path: str, out: TextIO | None = None) -> int:
    """``--recording FILE``: 0 identical, 1 differs (both printed), 2 not a recording."""
    from .playback import replay_recording
    from .recording import RecordingError

    def say(text: str) -> None:
        print(text, file=out or sys.stdout)

    try:
        result = replay_recording(path)
    except RecordingError as exc:
        say(f"ERROR {exc}")
        return 2
    if result.ok:
        say(f"ok    {path}: identical ({result.events} events, {result.model_calls} model calls, "
            f"{result.tools} tool calls)")
        return 0
    assert result.difference is not None
    say(f"FAIL  {path}: {result.difference.describe()}")
    return 1


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m actors.replay") -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    if args.to_scenario is not None and args.recording is None:
        parser.error("--to-scenario OUT goes with --recording FILE")
    if args.recording is not None:
        if args.paths or args.explore is not None or args.update or args.jitter or args.seeds is not None:
            parser.error("--recording FILE replays one recording: no scenario paths, --seeds, --explore, "
                         "--jitter or --update")
        if args.to_scenario is not None:
            return recording_to_scenario(args.recording, args.to_scenario)
        return replay_recording_file(args.recording)
    if args.seeds is not None and args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.explore is not None and args.explore < 1:
        parser.error("--explore must be at least 1")
    if args.seed is not None and args.seed < 0:
        parser.error("--seed must be non-negative")
    if args.base is not None and args.explore is None:
        parser.error("--from goes with --explore")
    if args.explore is not None and (args.update or args.jitter or args.trace):
        parser.error("--explore replays fresh seeds: reproduce a failing one with --seed S (--trace, --jitter)")
    if args.update and args.jitter:
        parser.error("--update records the seeds' own schedules: drop --jitter")
    try:
        jitters = dict(parse_override(j) for j in args.jitter)
    except BadOverride as exc:
        parser.error(f"--jitter: {exc}")
    paths = args.paths or default_paths()
    files = collect(paths)
    if not files:
        print(f"no scenario files in {' '.join(paths)}")
        return 2
    start = time.perf_counter()
    worst = 0
    if args.explore is not None:
        base = args.base if args.base is not None else fresh_base()
        seeds = list(range(base, base + args.explore))
        print(f"exploring seeds {seeds[0]}..{seeds[-1]} (repeat with --explore {args.explore} --from {base})")
        for path in files:
            worst = max(worst, explore_file(path, seeds, do_shrink=args.shrink))
    else:
        seeds = _seeds(args)
        for path in files:
            worst = max(worst, run_file(path, seeds, update=args.update, show_trace=args.trace,
                                        jitters=jitters or None, do_shrink=args.shrink))
    elapsed = time.perf_counter() - start
    print(f"{len(files)} scenario(s) x {len(seeds)} seed(s) in {elapsed:.2f}s: "
          f"{'all passed' if worst == 0 else 'FAILED'}")
    return worst
