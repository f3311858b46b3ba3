"""Issue 35, finding 3: one regular expression froze the daemon.

``grep`` matched the model's pattern with ``re`` in a worker thread, and ``re`` holds the GIL while it
backtracks: ``/health`` waited seconds, SIGTERM too, and cancelling did not stop it. Glob patterns and
``.gitignore`` patterns (the model can write one) compile to regular expressions as well. The real daemon
(served on loopback port 0, a scripted model making the tool calls) must keep answering within 500 ms while
such a pattern is matched, and a grep that is too slow must end in a failure naming the pattern and the limit.
"""

from __future__ import annotations

import time
from pathlib import Path

import trio

from actors import load_script
from actors.tools.walk import MATCH_SECONDS
from tests.conftest import live_daemon
from tests.e2e.test_file_tools_e2e import call, events, open_session, prompt, text_of, tool_calls

# re held the GIL about 0.7 s a line here (the daemon answered nothing meanwhile, seconds in all); the bound
# stays under that, above what a machine shared with other test workers adds to a round trip.
HEALTH_WITHIN = 0.5


async def run_watching_health(tmp_path: Path, tool: dict) -> tuple[list[float], dict[str, list[dict]]]:
    """One turn in which the model makes ``tool``'s call, ``/health`` asked every 50 ms until the turn ends:
    each answer's latency, and the turn's tool calls."""
    model = load_script({"responses": [[tool], [{"text": "done"}]]})
    latencies: list[float] = []
    with trio.fail_after(60):
        async with live_daemon(model=model) as (_, client):
            sid = await open_session(client, tmp_path, "yolo")
            pid = await prompt(client, sid)

            async def health() -> None:
                while True:
                    started = time.perf_counter()
                    assert (await client.get("/health")).status_code == 200
                    latencies.append(time.perf_counter() - started)
                    await trio.sleep(0.05)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(health)
                while (await client.get(f"/session/{sid}/turns/{pid}")).json()["state"] not in (
                        "completed", "error", "cancelled"):
                    await trio.sleep(0.05)
                while not latencies:  # a call quicker than one /health round trip: still one answer to judge
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
            calls = tool_calls(await events(client, sid))
    return latencies, calls


def assert_answered_in_time(latencies: list[float], at_least: int) -> None:
    slow = [f"{s * 1000:.0f} ms" for s in latencies if s >= HEALTH_WITHIN]
    assert len(latencies) >= at_least and not slow, f"{len(latencies)} answers, slow ones: {slow}"


def long_names(tmp_path: Path) -> None:
    """Names ``re`` backtracks through for about half a second to a second each with ``*a*a*a*a*a*a*b``."""
    for n in (52, 54, 56):
        (tmp_path / ("a" * n)).write_text("")


async def test_a_catastrophic_grep_pattern_fails_naming_the_limit_while_the_daemon_answers(tmp_path):
    # Each line costs re about 0.7 s with the GIL held (ten of them: 7 s of a frozen daemon); regex lets go of
    # the GIL, and at 2 s a line the call's budget runs out on the third.
    (tmp_path / "big.txt").write_text(("a" * 32 + "!\n") * 10)
    latencies, calls = await run_watching_health(tmp_path, call("grep", pattern="(a|aa)+$"))
    grep = calls["grep"]
    assert grep[-1]["status"] == "failed", grep[-1]
    text = text_of(grep[-1])
    assert f"grep pattern '(a|aa)+$' took longer than {MATCH_SECONDS:g} s to match (one call's limit" in text
    assert "at big.txt:" in text and "nothing else was searched: simplify the pattern" in text
    assert_answered_in_time(latencies, at_least=int(MATCH_SECONDS / 0.25))


async def test_a_catastrophic_glob_pattern_does_not_hold_the_daemon(tmp_path):
    # re: about 2 s of the GIL held over the three names. regex does not backtrack through a glob's pieces
    # (none of the glob shapes tried took it over 50 ms): the call ends at once, nothing matched. A glob that
    # did run out of the budget would fail as grep does (tests/actors/tools/test_search.py).
    long_names(tmp_path)
    latencies, calls = await run_watching_health(tmp_path, call("glob", pattern="*a*a*a*a*a*a*b"))
    glob = calls["glob"]
    assert glob[-1]["status"] == "completed" and text_of(glob[-1]) == "No files match '*a*a*a*a*a*a*b' under .."
    assert_answered_in_time(latencies, at_least=1)


async def test_a_hostile_gitignore_does_not_freeze_a_walk(tmp_path):
    # The model wrote the .gitignore: each name walked past it cost re the same half second to a second.
    long_names(tmp_path)
    (tmp_path / ".gitignore").write_text("*a*a*a*a*a*a*b\n")
    (tmp_path / ("a" * 40 + "b")).write_text("")  # ignored by it
    latencies, calls = await run_watching_health(tmp_path, call("glob", pattern="*"))
    glob = calls["glob"]
    assert glob[-1]["status"] == "completed"
    assert text_of(glob[-1]).split("\n") == ["a" * 52, "a" * 54, "a" * 56]
    assert_answered_in_time(latencies, at_least=1)


def test_tool_call_arguments_with_an_unclosed_quote_are_measured_in_linear_time():
    """A model's arguments that are not JSON are measured for depth on the event loop: a string that never
    closes must not make the measure quadratic (it held every session for hours at the response bound)."""
    import subprocess
    import sys

    script = ("from actors.model.tool_calls import arguments_problem, text_depth\n"
              "hostile = '\"' + '\\\\\"' * 150_000\n"
              "assert text_depth(hostile) == 0 and arguments_problem(hostile) is None\n"
              "assert text_depth('[' * 70 + '\"never closed ' + '\\\\\"]' * 1000) == 70\n"
              "print('measured')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "measured", done.stderr
