"""Red team round 3, sandbox findings, against the real daemon with a hostile model and a real bwrap.

Finding 6 (no process-count limit): one shell call could start processes until the host has no pid left.
The loop here is bounded (120 forks, a timeout) and what it starts dies with the command (the sandbox's PID
namespace), so a limit that does not hold cannot hurt the machine. The cluster finding (Redis and PostgreSQL
that answer without a password, forged stream entries) is tested in tests/cluster/test_exposure.py.
"""

from __future__ import annotations

import pytest

from actors.process.limits import resolve_process_limit
from tests.e2e.isolation_harness import hostile_daemon, needs_bwrap, shell

LIMIT = 40
FORKS = 120
FORK_LOOP = (f"sh -c 'i=0; while [ $i -lt {FORKS} ]; do sleep 30 & i=$((i+1)); done' 2>/tmp/err; "
             "set -- /proc/[0-9]*; echo started=$#; read -r line </tmp/err; echo \"error=$line\"; "
             "kill -9 -1; echo END")


@needs_bwrap
async def test_one_shell_call_cannot_start_more_processes_than_the_limit(tmp_path):
    if resolve_process_limit(LIMIT).how == "none":
        pytest.skip("no pids cgroup can bound commands here")
    # The limit comes from the daemon's settings file, and only from there (no environment variable).
    async with hostile_daemon(tmp_path, [[shell(FORK_LOOP)], [{"text": "done"}]],
                              settings={"sandbox": {"mode": "bwrap", "maxProcesses": LIMIT}}) as d:
        sid = (await d.client.post("/session", json={})).json()["sessionId"]
        assert (await d.wait_turn(sid, await d.prompt(sid, "go")))["state"] == "completed"
        seen = d.tool_results()[0]
    assert "END" in seen, seen
    assert int(seen.split("started=")[1].split()[0]) <= LIMIT, seen
    assert "fork" in seen.split("error=")[1].lower(), seen
