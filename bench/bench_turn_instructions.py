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
is counted; its count then agrees within about 0.01 % from run to run, but a
fake that answers 50 times faster than usual changes how the daemon's reads
split (about 15 % fewer instructions a turn), so it suits comparing two
versions of the daemon, not the fake. No target: the
issue's target is CPU time (``bench_turn_cpu``). Without valgrind it prints
nothing and says why.

    python bench/bench_turn_instructions.py [--sessions 10] [--turns 3] [--fake-native] [--json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _callgrind  # noqa: E402
from _common import GUARD_SETTINGS, Daemon, FakeModel, Figure, canonical_turn, emit  # noqa: E402
from bench_turn_cpu import run_turns  # noqa: E402


def measure(quick: bool = False, sessions: int | None = None, turns: int | None = None,
            fake_native: bool = False) -> list[Figure]:
    if not _callgrind.available():
        print("bench_turn_instructions: valgrind (with callgrind_control) is not installed; skipped",
              file=sys.stderr)
        return []
    sessions = sessions or (5 if quick else 10)
    turns = turns or (2 if quick else 3)
    total = sessions * turns
    responses = [r for n in range(sessions * (turns + 1)) for r in canonical_turn(n)]
    daemon_count, fake_count = _callgrind.Counted("daemon"), _callgrind.Counted("fake")
    try:
        with FakeModel(responses, wrapper=() if fake_native else fake_count.wrapper) as fake:
            daemon = Daemon("--model", "openai", "--openai-base-url", fake.url, "--openai-model", "fake",
                            settings=GUARD_SETTINGS, env={"OPENAI_API_KEY": "bench"}, wrapper=daemon_count.wrapper)
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
        raise SystemExit(f"not the canonical turn: guard attempts {wrong[0]} in {len(wrong)} turns")
    how = "fake model native" if fake_native else "both under callgrind"
    return [Figure("turn_instructions", f"daemon instructions per canonical turn ({sessions} sessions x {turns} turns, "
                   f"{how})", ours, floor, "M", floor_name="" if fake_native else "fake model's instructions")]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not {text!r}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=_positive, default=10)
    parser.add_argument("--turns", type=_positive, default=3, help="measured turns per session")
    parser.add_argument("--fake-native", action="store_true",
                        help="count only the daemon, the fake model running natively (for comparing daemon versions)")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    emit(measure(sessions=args.sessions, turns=args.turns, fake_native=args.fake_native),
         title="instructions per canonical guard turn (callgrind)", as_json=args.json)


if __name__ == "__main__":
    main()
