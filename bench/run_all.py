"""Every benchmark, one table: each ``bench_*.py`` (and ``peer_*.py``) ``measure(quick)`` in turn, then all figures.

Each figure is ours beside its floor (or peer) from the same run, interleaved
(see ``bench/_common.py``). A benchmark that raises is reported by name and
makes the exit status 1; a missed target does not (the summary line counts
them). ``--quick`` runs every benchmark smaller (still at least five rounds).

    python bench/run_all.py [--quick] [--only NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Figure, client_pinned, layout_note, print_figures, unpin_client  # noqa: E402

BENCHMARKS = ("admission", "sse_http", "long_conversation", "turn_cpu", "turn_instructions", "stream", "idle_sessions",
              "openai_client", "turn_end", "journal", "background_shells", "replay", "sandbox", "acp", "cluster",
              "peer_qwen")


def module_name(name: str) -> str:
    """``bench_<name>``; the peer benchmarks (``peer_*.py``, no figures when the peer is not installed) as named."""
    return name if name.startswith("peer_") else f"bench_{name}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (a few minutes in all)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME", choices=BENCHMARKS,
                        help=f"run only these ({', '.join(BENCHMARKS)})")
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    args = parser.parse_args()
    figures: list[Figure] = []
    failed: list[str] = []
    took: dict[str, float] = {}
    pinned = False
    for name in args.only or BENCHMARKS:
        print(f"running {module_name(name)} ...", file=sys.stderr, flush=True)
        unpin_client()  # each starts where it would alone, not where the last one (or bench_replay) left it
        start = time.perf_counter()
        try:
            figures += importlib.import_module(module_name(name)).measure(quick=args.quick)
            pinned = pinned or client_pinned()
        except BaseException as exc:  # SystemExit too: a benchmark that gives up is a failed benchmark
            if isinstance(exc, KeyboardInterrupt):
                raise
            failed.append(name)
            traceback.print_exc()
        took[name] = time.perf_counter() - start
        print(f"{module_name(name)}: {took[name]:.1f} s{' (FAILED)' if name in failed else ''}", file=sys.stderr, flush=True)
    if args.json:
        for f in figures:
            print(json.dumps(f.as_json()))
    else:
        print_figures(figures, title=f"all benchmarks{' (quick)' if args.quick else ''}")
        note = layout_note(pinned=pinned)
        if note:
            print(note)
    judged = [f for f in figures if f.met is not None]
    print(f"\ntargets met: {sum(1 for f in judged if f.met)} of {len(judged)}", file=sys.stderr if args.json else sys.stdout)
    print("runtimes: " + ", ".join(f"{name} {s:.1f} s" for name, s in took.items()) + f"; total {sum(took.values()):.1f} s",
          file=sys.stderr if args.json else sys.stdout)
    if failed:
        print(f"benchmarks that raised: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
