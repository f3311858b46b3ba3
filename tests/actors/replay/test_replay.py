"""The replay runner (actors/replay): digests are stable in a process and across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from actors.replay import format_trace, parse_scenario, replay

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = ROOT / "actors" / "replay" / "scenarios"


def run_cli(*args: str, hash_seed: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run([sys.executable, "-m", "actors.replay", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def start_cli(*args: str, hash_seed: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen([sys.executable, "-m", "actors.replay", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_same_digest_twice_in_one_process() -> None:
    path = SCENARIOS / "abort_queued.json"
    first = replay(path, seed=3)
    replay(path, seed=4)  # other runs in between change nothing
    _junk = [object() for _ in range(10_000)]
    second = replay(path, seed=3)
    assert first.ok and second.ok, first.failures + second.failures
    assert first.digest == second.digest
    assert first.trace.lines() == second.trace.lines()


def test_same_digest_in_two_processes() -> None:
    path = str(SCENARIOS / "abort_queued.json")
    procs = [start_cli(path, "--seed", "3", hash_seed=h) for h in ("1", "999")]
    outputs = [p.communicate(timeout=120) for p in procs]
    a, b = (subprocess.CompletedProcess(p.args, p.returncode, out, err) for p, (out, err) in zip(procs, outputs))
    assert a.returncode == 0 and b.returncode == 0, a.stdout + a.stderr + b.stdout + b.stderr
    digest = replay(path, seed=3).digest
    assert digest in a.stdout and digest in b.stdout


def test_two_processes_replaying_the_library_print_identical_digests() -> None:
    # Both at once (they share nothing but the files they read). Five seeds each: test_library.py
    # replays all 20 in this process against goldens recorded by another, and each of these checks
    # its seeds' goldens too, so the whole library is compared across processes either way.
    procs = [start_cli("--seeds", "5", hash_seed=h) for h in ("1", "31337")]
    outputs = [p.communicate(timeout=300) for p in procs]
    a, b = (subprocess.CompletedProcess(p.args, p.returncode, out, err) for p, (out, err) in zip(procs, outputs))
    assert a.returncode == 0, a.stdout + a.stderr
    strip = lambda out: [line for line in out.splitlines() if " scenario(s) x " not in line]  # noqa: E731 (timing)
    assert strip(a.stdout) == strip(b.stdout)
    assert len(strip(a.stdout)) == len(list(SCENARIOS.glob("*.json")))


def test_seeds_explore_different_interleavings() -> None:
    digests = {replay(SCENARIOS / "fifo_order.json", seed=s).digest for s in range(20)}
    assert len(digests) > 1


def test_the_function_api_takes_parsed_data_and_reports_failures() -> None:
    scenario = parse_scenario({
        "name": "inline",
        "model": [[{"text": "hello"}]],
        "timeline": [{"at": 0, "do": "create_session"}, {"at": 1, "do": "prompt", "label": "p", "text": "hi"}],
        "expect": {"model_calls": 2, "prompts": {"p": "cancelled"}},
    })
    result = replay(scenario, seed=0)
    assert not result.ok
    assert "expect.model_calls: 1 model calls, expected 2" in result.failures
    assert any(f.startswith("expect.prompts.p: got {'state': 'completed'") for f in result.failures)
    text = format_trace(result.trace)
    assert "model call 1" in text and "turn_complete" in text
    assert result.digest == replay(scenario, seed=0).digest


def test_an_unsettled_replay_fails_with_a_timeout() -> None:
    scenario = parse_scenario({
        "name": "slow",
        "timeout": 50,
        "model": [[{"sleep": 100}, {"text": "late"}]],
        "timeline": [{"at": 0, "do": "create_session"}, {"at": 0, "do": "prompt", "text": "hi"}],
    })
    result = replay(scenario)
    assert "did not settle within 50 virtual seconds" in result.failures


def test_a_failing_action_is_recorded_as_its_result() -> None:
    scenario = parse_scenario({
        "name": "closed",
        "model": [],
        "timeline": [
            {"at": 0, "do": "create_session"},
            {"at": 0, "do": "close_session"},
            {"at": 1, "do": "prompt", "text": "anyone?", "expect": {"error": "ActorGone"}},
        ],
        "invariants": ["no_events_after_close", "ids_rise"],
    })
    result = replay(scenario)
    assert result.ok, result.failures


def test_trace_holds_no_wall_clock_or_temporary_paths() -> None:
    result = replay(SCENARIOS / "restart_restores_transcript.json")
    text = "\n".join(result.trace.lines())
    assert "serverTimestamp" not in text and "/tmp" not in text and "trellis-replay-" not in text


def test_scripted_hooks_stand_in_for_processes_only_during_a_replay() -> None:
    from actors.session import hooks

    original = hooks.run_hook_command
    result = replay(SCENARIOS / "guard_stop_hook_cap.json")
    assert result.ok, result.failures
    assert hooks.run_hook_command is original
    runs = list(result.trace.of_kind("hook"))
    assert [(r["command"], r["event"], r["n"]) for r in runs] == [("check-tests", "Stop", 1),
                                                                   ("check-tests", "Stop", 2)]
    assert "hook Stop 'check-tests' run 1" in format_trace(result.trace)


def test_a_scripted_hook_slower_than_its_timeout_times_out_in_virtual_time() -> None:
    scenario = parse_scenario({
        "name": "slow_hook",
        "settings": {"hooks": {"Stop": [{"hooks": [{"command": "slow", "timeout": 5}]}]}},
        "hooks": {"slow": [{"delay": 30, "stdout": {"decision": "block", "reason": "never seen"}}]},
        "model": [[{"text": "done"}]],
        "timeline": [{"at": 0, "do": "create_session"}, {"at": 0, "do": "prompt", "label": "p", "text": "hi"}],
        "expect": {
            "model_calls": 1, "prompts": {"p": "completed"}, "hook_runs": {"slow": 1}, "settled_by": 5,
            "events": [{"type": "hook_result", "data": {"failures": ["'slow': timed out after 5 s"]}}],
        },
    })
    result = replay(scenario)
    assert result.ok, result.failures


def test_a_scheduled_wakeup_holds_the_replay_open_until_it_fires() -> None:
    scenario = parse_scenario({
        "name": "wakeup",
        "settings": {"approval_mode": "yolo"},
        "model": [[{"text": "checked the build"}]],
        "timeline": [{"at": 0, "do": "create_session"},
                     {"at": 0, "do": "wakeup", "label": "w", "delay": 90, "note": "check the build"}],
        "expect": {
            "model_calls": 1, "settled_by": 90,
            "events": [{"type": "session_update", "update": "user_message_chunk",
                        "data": {"update": {"content": {"text": "@wakeup: check the build"},
                                            "_meta": {"source": "wakeup", "taskId": "wakeup-1"}}}}],
            "status": {"main": {"backgroundTasks": [{"taskId": "wakeup-1", "status": "fired"}]}},
        },
    })
    result = replay(scenario)
    assert result.ok, result.failures
    assert next(r for r in result.trace.records if r["kind"] == "model")["t"] == 90


def test_guard_state_changes_are_in_the_trace() -> None:
    result = replay(SCENARIOS / "guard_canonical.json")
    changes = [r["changed"] for r in result.trace.of_kind("guard")]
    assert changes == [{"armed": True, "unfinishedCount": 2}, {"attempts": 1}, {"attempts": 2},
                       {"suspended": True, "exhaustionReported": True}]
    final = result.trace.final_status("main")
    assert final is not None and final["todoStopGuard"]["suspended"] is True
