"""Red team, fifth round: ``checkpoints.maxSessionBytes`` against a model that makes its manifests huge.

The cap counted the file contents a session's checkpoints stored, not their manifests. A model that filled its
cwd with 20,000 empty files of 200-character names made every later checkpoint write a 6.8 MB manifest (and walk
the whole tree): with the cap at 1 KiB, each one-line turn still added megabytes to the state directory, linearly
in turns (wake-ups and cron give the model turns of its own).

Now the cap counts everything the checkpoints write (contents, manifests, a rewind's copy of the conversation)
and their log; only what is actually written (an identical manifest, stored already, costs nothing). A checkpoint
whose manifest would not fit is not taken, and the session takes no more (no walk, nothing written) with one
notice to its clients. The bound checked here: the session's objects and log stay within the cap plus
``SLACK`` bytes (the log entry marking the first turn without a checkpoint), whatever the number of turns after.

Each test drives the real daemon on a loopback port (:func:`tests.conftest.live_daemon`) with a scripted model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import trio

from actors import load_script
from actors.settings import Settings
from tests.conftest import live_daemon
from tests.e2e.sse_client import frames

N_FILES, NAME = 3000, 200  # about 1 MB of manifest
CAP = 4096
SLACK = 512  # the log entry of the first turn that took no checkpoint, and the counts' digits
LIMIT = 240


def call(name: str, n: int, **arguments: Any) -> list[dict[str, Any]]:
    return [{"tool_call": {"id": f"call_{n}", "name": name, "arguments": arguments}}]


MAKE = ("python3 -c \"import os\nos.makedirs('d', exist_ok=True)\n"
        f"for i in range({N_FILES}): open('d/%0{NAME}d' % i, 'w').close()\"")
FIRST = f"d/{0:0{NAME}d}"


def stored(state: Path) -> int:
    """The bytes under <state-dir>/checkpoints: objects and logs (one session here)."""
    root = state / "checkpoints"
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


async def settle(client, sid: str, turns: int) -> list[dict[str, Any]]:
    """Every frame until the session completed ``turns`` turns (user and automatic), then idle with its
    checkpoints written (the listing waits for the keeper)."""
    events: list[dict[str, Any]] = []
    done = 0
    async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
        async for frame in frames(r):
            events.append(frame)
            if frame["type"] in ("turn_complete", "turn_error"):
                assert frame["type"] == "turn_complete", frame
                done += 1
                if done == turns:
                    break
    while (await client.get(f"/session/{sid}/status")).json()["state"] != "idle":
        await trio.sleep(0.05)
    assert (await client.get(f"/session/{sid}/checkpoints")).status_code == 200
    return events


async def prompt(client, sid: str, text: str) -> None:
    r = await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": text}]})
    assert r.status_code in (200, 202), r.text


def notices(events: list[dict[str, Any]]) -> list[str]:
    return [f["data"]["update"]["content"]["text"] for f in events if f["type"] == "session_update"
            and (f["data"]["update"].get("_meta") or {}).get("source") == "daemon"]


async def test_manifests_count_against_the_session_cap_and_checkpoints_stop_with_a_notice(tmp_path):
    work, state = tmp_path / "work", tmp_path / "state"
    work.mkdir()
    (work / "f.txt").write_text("start\n")
    touches = 4
    script: list[Any] = [call("shell", 1, command=MAKE), [{"text": "made"}]]
    for t in range(touches):
        script += [call("shell", 10 + t, command=f"echo {t} >> {FIRST}"), [{"text": f"turn {t}"}]]
    # The last user turn schedules a wake-up; each automatic turn changes a file and schedules the next.
    automatic = 3
    script += [call("shell", 20, command=f"echo w >> {FIRST}"), call("schedule_wakeup", 21, delay=0, note="0"),
               [{"text": "scheduled"}]]
    for w in range(automatic):
        script += [call("shell", 30 + w, command=f"echo a{w} >> {FIRST}")]
        script += [call("schedule_wakeup", 40 + w, delay=0, note=str(w + 1))] if w < automatic - 1 else []
        script += [[{"text": f"woke {w}"}]]
    settings = Settings(checkpoint_max_session_bytes=CAP)
    with trio.fail_after(LIMIT):
        async with live_daemon(model=load_script({"responses": script}), settings=settings, state_dir=state) as (
                _, client):
            sid = (await client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt(client, sid, "make files")
            await settle(client, sid, 1)
            assert len(os.listdir(work / "d")) == N_FILES
            sizes = [stored(state)]
            for t in range(touches):
                await prompt(client, sid, f"touch {t}")
                await settle(client, sid, 2 + t)
                sizes.append(stored(state))
            await prompt(client, sid, "touch and wake")
            events = await settle(client, sid, 2 + touches + automatic)
            sizes.append(stored(state))
            assert (work / FIRST).read_text().splitlines()[-1] == f"a{automatic - 1}"  # the wake-ups all ran

            # Bounded: the cap plus the log line of the first turn without a checkpoint, whatever the turns after.
            assert max(sizes) <= CAP + SLACK, sizes
            assert sizes[-1] == sizes[1], sizes  # nothing more written once the checkpoints stopped

            said = [n for n in notices(events) if "maxSessionBytes" in n]
            assert len(said) == 1, notices(events)
            assert "no" in said[0] and "more" in said[0] and f"{CAP:,}" in said[0], said

            # The turn that met the cap took its start checkpoint; the later turns have none: a rewind with files
            # to one is refused, saying why, rather than restoring the wrong files.
            listed = (await client.get(f"/session/{sid}/checkpoints")).json()
            assert [c["turn"] for c in listed["checkpoints"]] == [0], listed
            for turn in (1, touches):
                r = await client.post(f"/session/{sid}/rewind", json={"turn": turn, "files": True})
                assert r.status_code == 404 and r.json()["code"] == "checkpoint_not_found", r.text
                assert "maxSessionBytes" in r.json()["error"], r.text
                r = await client.get(f"/session/{sid}/checkpoints/{turn}/diff")
                assert r.status_code == 404, r.text
            assert stored(state) == sizes[-1]  # refusals write nothing

            # A rewind a client asks for is not refused for the cap (it stores what its undo needs, past the
            # cap): turn 0's files come back. The later turns' changes count as outside (no end state taken).
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True})
            assert r.status_code == 409 and r.json()["code"] == "files_changed_outside", r.text
            assert "maxSessionBytes" in r.json()["error"]
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True, "force": True})
            assert r.status_code == 200, r.text
            assert sorted(os.listdir(work)) == ["f.txt"]
            r = await client.post(f"/session/{sid}/checkpoints/undo/{r.json()['undoId']}", json={"force": True})
            assert r.status_code == 200, r.text
            assert len(os.listdir(work / "d")) == N_FILES
            assert (work / FIRST).read_text().splitlines()[-1] == f"a{automatic - 1}"


async def test_an_identical_manifest_costs_nothing_so_checkpoints_go_on_under_the_cap(tmp_path):
    """Turns that change nothing store the same manifest again: content addressed, it is not written and does
    not count; only the log's entries do. Counted each time, they would pass this cap in a few turns."""
    work, state = tmp_path / "work", tmp_path / "state"
    work.mkdir()
    for i in range(40):
        (work / f"{i:0100d}.txt").write_text(f"{i}\n")  # a manifest of about 8 KB
    turns = 8
    script: list[Any] = []
    for t in range(turns):
        script += [call("shell", t, command="true"), [{"text": f"turn {t}"}]]
    cap = 24 * 1024
    settings = Settings(checkpoint_max_session_bytes=cap)
    with trio.fail_after(LIMIT):
        async with live_daemon(model=load_script({"responses": script}), settings=settings, state_dir=state) as (
                _, client):
            sid = (await client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"})).json()["sessionId"]
            objects = []
            for t in range(turns):
                await prompt(client, sid, f"turn {t}")
                events = await settle(client, sid, t + 1)
                objects.append(stored(state) - os.path.getsize(state / "checkpoints" / "sessions" / f"{sid}.json"))
            assert len(set(objects)) == 1, objects  # the first turn stored the tree; the others nothing
            listed = (await client.get(f"/session/{sid}/checkpoints")).json()
            assert [c["turn"] for c in listed["checkpoints"]] == list(range(turns))
            assert not [n for n in notices(events) if "maxSessionBytes" in n]
            assert stored(state) <= cap
