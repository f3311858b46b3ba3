"""A 202 survives the daemon: SIGKILL mid-turn with a queue, restart, and nothing admitted is lost or run twice."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from transport.auth import read_token_file
from transport.process_image import SECRET_ENV


@attrs.define
class Daemon:
    proc: trio.Process
    client: httpx.AsyncClient

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)


@asynccontextmanager
async def daemon(state: Path, script: dict[str, Any], *extra: str) -> AsyncIterator[Daemon]:
    """``python -m transport`` on ``state`` with the scripted model; SIGKILLed at the end if still running."""
    script_file = state.parent / f"script-{random.getrandbits(32):08x}.json"
    script_file.write_text(json.dumps(script))
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
    log = open(state.parent / "daemon.log", "ab")  # noqa: SIM115 - the daemon writes to it until killed
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(state), "--script", str(script_file),
         *extra], env=env, stdout=subprocess.PIPE, stderr=log)
    try:
        line = b""
        with trio.fail_after(30):
            while b"\n" not in line:
                chunk = await proc.stdout.receive_some()
                assert chunk, (state.parent / "daemon.log").read_text()
                line += chunk
        url = line.decode().split()[-1]
        headers = {"Authorization": f"Bearer {read_token_file(state)}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=20) as client:
            yield Daemon(proc, client)
    finally:
        if proc.returncode is None:
            proc.kill()
        with trio.move_on_after(10):
            await proc.wait()
        log.close()


def text(body: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": body}]}


def quick(n: int) -> dict[str, Any]:
    return {"responses": [[{"text": f"answer {i}"}] for i in range(n)]}


async def wait_idle(client: httpx.AsyncClient, sid: str, timeout: float = 30) -> None:
    with trio.fail_after(timeout):
        while True:
            status = (await client.get(f"/session/{sid}/status")).json()
            pending = (await client.get(f"/session/{sid}/pending-prompts")).json()["pendingPrompts"]
            if status["state"] == "idle" and not pending:
                return
            await trio.sleep(0.05)


async def test_sigkill_with_one_running_and_three_queued_then_restart(tmp_path):
    state = tmp_path / "state"
    work = tmp_path / "work"
    work.mkdir()
    stalled = {"responses": [{"delay": 300, "steps": [{"text": "never"}]}]}
    async with daemon(state, stalled) as d:
        created = (await d.client.post("/session", json={"cwd": str(work)})).json()
        sid = created["sessionId"]
        await d.client.post(f"/session/{sid}/approval-mode", json={"mode": "auto-edit"})
        await d.client.post(f"/session/{sid}/model", json={"model": "other-model"})
        ids = [(await d.client.post(f"/session/{sid}/prompt", json=text(f"prompt {n}"))).json()["promptId"]
               for n in range(4)]
        with trio.fail_after(10):
            while (await d.client.get(f"/session/{sid}/turns/{ids[0]}")).json()["state"] != "running":
                await trio.sleep(0.02)
        mid = await d.client.post(f"/session/{sid}/mid-turn-message", json={"message": "and one more thing"})
        assert mid.json()["accepted"] is True
        d.kill()

    async with daemon(state, quick(10)) as d:
        listed = (await d.client.get("/session")).json()["sessions"]
        assert [(s["sessionId"], s["live"], s["restorable"], s["pendingCount"], s["midTurnQueued"])
                for s in listed] == [(sid, False, True, 4, 1)]
        loaded = await d.client.post(f"/session/{sid}/load", json={})
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["workspaceCwd"] == os.path.realpath(work)  # its own cwd, not the daemon's
        await wait_idle(d.client, sid)
        turns = [(await d.client.get(f"/session/{sid}/turns/{pid}")).json() for pid in ids]
        assert (turns[0]["state"], turns[0]["errorCode"]) == ("error", "daemon_restarted")
        assert [t["state"] for t in turns[1:]] == ["completed"] * 3
        assert turns[1]["endedAt"] <= turns[2]["startedAt"] and turns[2]["endedAt"] <= turns[3]["startedAt"]
        status = (await d.client.get(f"/session/{sid}/status")).json()
        assert (status["approvalMode"], status["model"]) == ("auto-edit", "other-model")
        assert status["todoStopGuard"]["armed"] is False  # a restart clears trust
        events = []
        async with d.client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if events[-1]["type"] == "replay_complete":
                        break
        restarted = [e for e in events if e["type"] == "turn_error" and e["data"]["code"] == "daemon_restarted"]
        assert [e["data"]["promptId"] for e in restarted] == [ids[0]]
        transcript = (await d.client.get(f"/session/{sid}/transcript")).json()["entries"]

    users = [e["message"]["content"] for e in transcript if e.get("type") == "message"
             and e["message"]["role"] == "user"]
    # each once, in order; the mid-turn input its turn never took runs on its own, first
    assert users == ["prompt 0", "and one more thing", "prompt 1", "prompt 2", "prompt 3"]
    assert [e["promptId"] for e in transcript if e.get("type") == "turn_error"] == [ids[0]]

    # A second restart does not end it again, nor run anything twice.
    async with daemon(state, quick(0)) as d:
        await d.client.post(f"/session/{sid}/load", json={})
        await wait_idle(d.client, sid)
        again = (await d.client.get(f"/session/{sid}/transcript")).json()["entries"]
        assert [e for e in again if e.get("type") == "turn_error"] == \
            [e for e in transcript if e.get("type") == "turn_error"]
        assert (await d.client.get(f"/session/{sid}/turns/{ids[3]}")).json()["state"] == "completed"


async def test_a_read_only_state_directory_refuses_admission_and_loses_nothing(tmp_path):
    state = tmp_path / "state"
    async with daemon(state, {"responses": [{"delay": 300, "steps": [{"text": "x"}]}]}) as d:
        sid = (await d.client.post("/session", json={})).json()["sessionId"]
        first = (await d.client.post(f"/session/{sid}/prompt", json=text("kept"))).json()["promptId"]
        queued = (await d.client.post(f"/session/{sid}/prompt", json=text("also kept"))).json()["promptId"]
        journal = state / "sessions" / f"{sid}.journal.jsonl"
        before = journal.read_bytes()
        with _read_only(journal):
            refused = await d.client.post(f"/session/{sid}/prompt", json=text("refused"))
            assert refused.status_code == 503 and refused.json()["code"] == "storage_unavailable"
            assert str(journal) in refused.json()["error"]
            pending = (await d.client.get(f"/session/{sid}/pending-prompts")).json()["pendingPrompts"]
            assert [p["promptId"] for p in pending] == [first, queued]
            assert journal.read_bytes() == before  # nothing half-written
        accepted = await d.client.post(f"/session/{sid}/prompt", json=text("after"))
        assert accepted.status_code == 202  # writable again: admission resumes


@contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """Make ``path`` unwritable even for root: the immutable attribute where chattr works, else mode bits."""
    made_immutable = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
    if not made_immutable:
        if os.geteuid() == 0:
            pytest.skip("cannot make a file read-only for root here (no chattr +i)")
        path.chmod(0o400)
    try:
        yield
    finally:
        if made_immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        else:
            path.chmod(0o600)


# ------------------------------------------------------------------ a burst under random kills

SESSIONS = 10
PROMPTS = 200


async def test_random_kills_during_a_burst_lose_no_admitted_prompt_and_run_none_twice(tmp_path):
    rng = random.Random(int(os.environ.get("TRELLIS_KILL_SEED", "20261201")))
    state = tmp_path / "state"
    slow = {"responses": [{"delay": 0.01, "steps": [{"text": "ok"}]}] * (PROMPTS + 50)}
    admitted: dict[str, tuple[str, str]] = {}  # promptId -> (session, text)
    sessions: list[str] = []
    sent = 0
    with trio.fail_after(240):
        while sent < PROMPTS:
            async with daemon(state, slow) as d:
                if not sessions:
                    sessions = [(await d.client.post("/session", json={})).json()["sessionId"]
                                for _ in range(SESSIONS)]
                else:
                    for sid in sessions:
                        assert (await d.client.post(f"/session/{sid}/load", json={})).status_code == 200
                burst = min(PROMPTS - sent, rng.randint(20, 60))
                # Killed once a random share of the burst is admitted, the rest still in flight: counted in
                # answers, not seconds, so a loaded machine (slower answers) kills no earlier in the burst.
                kill_after = rng.randint(burst // 3, burst)
                answered = finished = 0
                enough = trio.Event()

                async def send(n: int) -> None:
                    nonlocal answered, finished
                    sid = sessions[n % SESSIONS]
                    body = f"p{n}"
                    try:
                        r = await d.client.post(f"/session/{sid}/prompt", json=text(body))
                    except httpx.HTTPError:
                        return  # killed before it answered: no promise was made
                    finally:
                        finished += 1
                        if finished == burst:
                            enough.set()  # all answered (some refused): killed now, turns running
                    if r.status_code == 202:
                        admitted[r.json()["promptId"]] = (sid, body)
                        answered += 1
                        if answered >= kill_after:
                            enough.set()

                async with trio.open_nursery() as nursery:
                    for n in range(sent, sent + burst):
                        nursery.start_soon(send, n)
                    await enough.wait()
                    d.kill()
                sent += burst

        async with daemon(state, slow) as d:
            for sid in sessions:
                assert (await d.client.post(f"/session/{sid}/load", json={})).status_code == 200
            for sid in sessions:
                await wait_idle(d.client, sid, timeout=60)
            outcomes = {}
            for pid, (sid, _) in admitted.items():
                r = await d.client.get(f"/session/{sid}/turns/{pid}")
                assert r.status_code == 200, f"{pid} was admitted and is missing"
                turn = r.json()
                outcomes[pid] = turn["state"] if turn["state"] != "error" else turn.get("errorCode")
            transcripts = {sid: (await d.client.get(f"/session/{sid}/transcript")).json()["entries"]
                           for sid in sessions}

    assert len(admitted) >= PROMPTS // 4  # the kills left plenty admitted to check
    assert set(outcomes.values()) <= {"completed", "daemon_restarted"}
    for pid, (sid, body) in admitted.items():
        said = [e for e in transcripts[sid] if e.get("type") == "message" and e["message"]["role"] == "user"
                and e["message"]["content"] == body]
        # completed: said exactly once; ended by a restart: once if it had started, never twice
        assert len(said) == 1 if outcomes[pid] == "completed" else len(said) <= 1, (pid, outcomes[pid], said)


async def test_a_deleted_session_does_not_bring_its_queue_back(tmp_path):
    state = tmp_path / "state"
    async with daemon(state, {"responses": [{"delay": 300, "steps": [{"text": "x"}]}]}) as d:
        sid = (await d.client.post("/session", json={})).json()["sessionId"]
        ids = [(await d.client.post(f"/session/{sid}/prompt", json=text(f"p{n}"))).json()["promptId"]
               for n in range(3)]
        with trio.fail_after(10):
            while (await d.client.get(f"/session/{sid}/turns/{ids[0]}")).json()["state"] != "running":
                await trio.sleep(0.02)
        assert (await d.client.delete(f"/session/{sid}")).status_code == 204
    async with daemon(state, quick(5)) as d:
        listed = {s["sessionId"]: s for s in (await d.client.get("/session")).json()["sessions"]}
        assert listed[sid]["pendingCount"] == 0
        assert (await d.client.post("/session", json={"sessionId": sid})).status_code == 200
        await wait_idle(d.client, sid)
        states = [(await d.client.get(f"/session/{sid}/turns/{pid}")).json()["state"] for pid in ids]
        assert states == ["cancelled"] * 3  # none of them ran after the delete
