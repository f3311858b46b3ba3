"""Instructions per canonical guard turn, the daemon's beside the fake model's: ``bench_turn_cpu`` without the noise.

``bench_turn_cpu`` measures CPU time, and on a shared 2-core virtual machine
that moves with the hour: the same commit read 4.65 ms a turn (fake model
3.00 ms) one day and 8.3–12.1 ms (fake model 6.1–7.2 ms) the next. The count
of instructions executed does not move with the machine's load, so this is
the figure to compare commits by.

The same turns as ``bench_turn_cpu`` (its ``run_turns``: sessions each with an
SSE stream held open and a warm-up turn, then canonical turns: a todo write and
three natural stops, four model calls, guard attempts ``[1, 2, 2]``), with the
daemon and the fake model both under valgrind's callgrind (``_callgrind.py``),
counting from the first measured turn to the last. Both run about 50 times
slower, so their timing relative to each other stays close to a native run's,
and the daemon's socket reads and wake-ups split much as they do there. The
client runs natively.

Repeat runs agree within about 1 % (the daemon's count depends a little on how
the fake's writes fall into its reads). With ``--fake-native`` only the daemon
is counted; its count then agreed within about 0.01 % from run to run, and
within about 2 % since the daemon answers a prompt's admission at its connection
(whether a client's head and body come in one read or two decides how much
reading that takes: 7.87-8.06 M in three runs at 9162b1a), but a
fake that answers 50 times faster than usual changes how the daemon's reads
split (about 15 % fewer instructions a turn), so it suits comparing two
versions of the daemon, not the fake. No target: the
issue's target is CPU time (``bench_turn_cpu``). Without valgrind it prints
nothing and says why. The daemon of the day issue 17 was filed is counted the
same way after ours (``bench_turn_cpu`` says which), unless ``--no-issue-day``.

    python bench/bench_turn_instructions.py [--sessions 10] [--turns 3] [--fake-native] [--no-issue-day] [--json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _callgrind  # noqa: E402
from _common import (GUARD_SETTINGS, ISSUE_DAY_COMMIT, ROOT, Daemon, FakeModel, Figure, canonical_turn,  # noqa: E402
                     emit, issue_day_tree, positive_int)
from bench_turn_cpu import run_turns  # noqa: E402


def _count(root: Path, sessions: int, turns: int, fake_native: bool) -> tuple[float, float | None]:
    """The daemon of ``root`` and a fresh fake model: their instructions per measured turn, in millions (the
    fake's ``None`` when it runs natively)."""
    total = sessions * turns
    responses = [r for n in range(sessions * (turns + 1)) for r in canonical_turn(n)]
    daemon_count, fake_count = _callgrind.Counted("daemon"), _callgrind.Counted("fake")
    try:
        with FakeModel(responses, wrapper=() if fake_native else fake_count.wrapper) as fake:
            daemon = Daemon("--model", "openai", "--openai-base-url", fake.url, "--openai-model", "fake",
                            settings=GUARD_SETTINGS, env={"OPENAI_API_KEY": "bench"}, wrapper=daemon_count.wrapper,
                            root=root)
            counted = [(daemon_count, daemon.pid)] + ([] if fake_native else [(fake_count, fake.proc.pid)])
            try:
                attempts = trio.run(run_turns, daemon, sessions, turns,
                                    lambda: [c.start(pid) for c, pid in counted],
                                    lambda: [c.stop(pid) for c, pid in counted])
                ours = daemon_count.instructions(daemon.pid) / total / 1e6
                floor = None if fake_native else fake_count.instructions(fake.proc.pid) / total / 1e6
            finally:
                daemon.stop()
    finally:
        daemon_count.cleanup()
        fake_count.cleanup()
    wrong = [a for a in attempts if a != [1, 2, 2]]
    if wrong:
        raise SystemExit(f"not the canonical turn ({root}): guard attempts {wrong[0]} in {len(wrong)} turns")
    return ours, floor


def measure(quick: bool = False, sessions: int | None = None, turns: int | None = None,
            fake_native: bool = False, issue_day: bool = True) -> list[Figure]:
    if not _callgrind.available():
        print("bench_turn_instructions: valgrind (with callgrind_control) is not installed; skipped",
              file=sys.stderr)
        return []
    sessions = sessions or (5 if quick else 10)
    turns = turns or (2 if quick else 3)
    ours, floor = _count(ROOT, sessions, turns, fake_native)
    how = "fake model native" if fake_native else "both under callgrind"
    figures = [Figure("turn_instructions", f"daemon instructions per canonical turn ({sessions} sessions x {turns} "
                      f"turns, {how})", ours, floor, "M", floor_name="" if fake_native else "fake model's instructions")]
    tree = issue_day_tree() if issue_day else None
    if tree is not None:
        old, _ = _count(tree, sessions, turns, fake_native)
        figures.append(Figure("turn_instructions", f"the same, against the baseline daemon ({ISSUE_DAY_COMMIT}; "
                              "no target: the target is CPU time)", ours, old, "M",
                              floor_name=f"baseline daemon ({ISSUE_DAY_COMMIT})"))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=positive_int, default=10)
    parser.add_argument("--turns", type=positive_int, default=3, help="measured turns per session")
    parser.add_argument("--fake-native", action="store_true",
                        help="count only the daemon, the fake model running natively (for comparing daemon versions)")
    parser.add_argument("--no-issue-day", action="store_true",
                        help=f"leave out the issue-day daemon ({ISSUE_DAY_COMMIT}), about three times as long to count")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(sessions=args.sessions, turns=args.turns, fake_native=args.fake_native,
                 issue_day=not args.no_issue_day),
         title="instructions per canonical guard turn (callgrind)", as_json=args.json)


if __name__ == "__main__":
    main()
