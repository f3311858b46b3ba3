"""``trellis sessions``, ``trellis status``, ``trellis cancel``: tables and the daemon's JSON."""

from __future__ import annotations

import io
import json
import os
import re
import sys

import trio

from tests.trellis.helpers import client_env, daemon_args, running_trellis, scripted_daemon, trellis
from trellis.tables import sessions_table, status_table, table

SLOW = [{"text": "working "}, {"sleep": 30}]


def fields(text: str) -> dict[str, str]:
    """A plain two-column table: field -> value (columns are at least two spaces apart)."""
    return dict(re.split(r"\s{2,}", line, maxsplit=1) for line in text.splitlines())


async def test_sessions_lists_live_and_restorable_sessions(tmp_path):
    async with scripted_daemon(tmp_path, [{"text": "done"}]) as daemon:
        args = daemon_args(daemon)
        empty = await trellis("sessions", *args, cwd=tmp_path)
        closed = await trellis("prompt", *args, "-v", "hi there\nmore", cwd=tmp_path)  # closed after: restorable
        async with daemon.client(daemon.token()) as client:
            live = (await client.post("/session", json={"title": "My [bold]work"})).json()["sessionId"]
            expected = (await client.get("/session")).json()
        plain = await trellis("sessions", *args, cwd=tmp_path)
        as_json = await trellis("sessions", *args, "--json", cwd=tmp_path)
    assert empty.code == 0 and empty.stdout == "no sessions\n"
    restored = closed.stderr.split("session ")[1].split(",")[0]
    assert plain.code == 0, plain.stderr
    header, *rows = plain.stdout.splitlines()
    assert header.split() == ["SESSION", "STATE", "QUEUED", "UPDATED", "CWD", "TITLE"]
    by_id = {row.split()[0]: re.split(r"\s{2,}", row) for row in rows}
    assert by_id[live][1:3] == ["idle", "0"] and by_id[restored][1:3] == ["restorable", "0"]
    assert by_id[restored][-2:] == [str(tmp_path), "hi there"]  # the directory `trellis prompt` ran in, its title
    assert by_id[live][-1] == "My [bold]work"
    assert as_json.code == 0 and json.loads(as_json.stdout) == expected


async def test_status_shows_a_session_and_json_is_the_daemons(tmp_path):
    async with scripted_daemon(tmp_path, SLOW) as daemon:
        args = daemon_args(daemon)
        async with daemon.client(daemon.token()) as client:
            sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            idle = await trellis("status", *args, sid, cwd=tmp_path)
            admitted = (await client.post(f"/session/{sid}/prompt",
                                          json={"prompt": [{"type": "text", "text": "slow"}]})).json()
            with trio.fail_after(10):
                while (await client.get(f"/session/{sid}/status")).json()["state"] != "running":
                    await trio.sleep(0.01)
            running = await trellis("status", *args, sid, cwd=tmp_path)
            as_json = await trellis("status", *args, sid, "--json", cwd=tmp_path)
            await client.post(f"/session/{sid}/cancel")
        missing = await trellis("status", *args, "no-such", cwd=tmp_path)
    assert idle.code == 0, idle.stderr
    rows = fields(idle.stdout)
    assert rows["title"] == "-" and rows["queued prompts"] == "0"
    assert fields(running.stdout)["title"] == "slow" and fields(running.stdout)["queued prompts"] == "0"
    assert rows["session"] == sid and rows["cwd"] == str(tmp_path) and rows["state"] == "idle"
    assert rows["approval mode"] == "default" and rows["todo stop guard"] == "off"
    assert fields(running.stdout)["state"] == f"running (prompt {admitted['promptId']})"
    status = json.loads(as_json.stdout)
    assert status["sessionId"] == sid and status["currentPromptId"] == admitted["promptId"]
    assert missing.code == 2 and "HTTP 404 session_not_found" in missing.stderr and missing.stdout == ""


async def test_cancel_cancels_the_running_turn_and_says_so(tmp_path):
    async with scripted_daemon(tmp_path, SLOW) as daemon:
        args = daemon_args(daemon)
        async with daemon.client(daemon.token()) as client:
            sid = (await client.post("/session", json={})).json()["sessionId"]
            idle = await trellis("cancel", *args, sid, cwd=tmp_path)
            async with running_trellis("prompt", *args, "--session", sid, "--json", "slow", cwd=tmp_path) as run:
                await run.read_until('"working "')
                prompt_id = json.loads(run.stdout.decode().splitlines()[0])["promptId"]
                cancelled = await trellis("cancel", *args, sid, "--json", cwd=tmp_path)
                result = await run.finish()
            record = (await client.get(f"/session/{sid}/turns/{prompt_id}")).json()
        missing = await trellis("cancel", *args, "no-such", cwd=tmp_path)
    assert idle.code == 0 and idle.stdout == f"session {sid} was idle: nothing to cancel\n"
    assert cancelled.code == 0
    assert json.loads(cancelled.stdout) == {"sessionId": sid, "cancelled": True, "promptId": prompt_id}
    assert result.code == 4 and json.loads(result.stdout.splitlines()[-1])["data"]["stopReason"] == "cancelled"
    assert record["state"] == "cancelled"
    assert missing.code == 2 and "session_not_found" in missing.stderr


async def test_delete_deletes_live_and_stored_sessions_and_names_what_it_could_not(tmp_path):
    async with scripted_daemon(tmp_path, [{"text": "done"}]) as daemon:
        args = daemon_args(daemon)
        async with daemon.client(daemon.token()) as client:
            live = (await client.post("/session", json={"title": "live one"})).json()["sessionId"]
            stored = (await client.post("/session", json={"title": "stored one"})).json()["sessionId"]
            assert (await client.delete(f"/session/{stored}")).status_code == 204
            deleted = await trellis("delete", *args, live, stored, cwd=tmp_path)
            left = {s["sessionId"] for s in (await client.get("/session")).json()["sessions"]}
            partly = await trellis("delete", *args, live, "--json", cwd=tmp_path)
            bad = await trellis("delete", *args, "../x", cwd=tmp_path)
    assert deleted.code == 0, deleted.stderr
    assert deleted.stdout == f"deleted session {live}\ndeleted session {stored}\n"
    assert not {live, stored} & left
    assert partly.code == 1 and json.loads(partly.stdout) == {"removed": [], "notFound": [live], "errors": []}
    assert f"no session {live}" in partly.stderr
    assert bad.code == 1 and "session ../x not deleted: not a session id" in bad.stderr


def test_plain_tables_align_columns_and_cut_nothing():
    out = io.StringIO()
    table(["A", "LONGER"], [["x" * 30, "1"], ["y", "22"]], out)
    assert out.getvalue().splitlines() == [
        "A" + " " * 31 + "LONGER",
        "x" * 30 + "  1",
        "y" + " " * 31 + "22",
    ]
    out = io.StringIO()
    sessions_table([{"sessionId": "s1", "live": True, "state": "running", "queuedCount": 2, "pendingCount": 3,
                     "midTurnQueued": 1, "cwd": "/w", "updatedAt": None, "title": None}], out)
    row = re.split(r"\s{2,}", out.getvalue().splitlines()[1])
    # Queued is queuedCount: the running prompt (pendingCount's third) is not queued.
    assert row == ["s1", "running", "2 (+1 mid-turn)", "-", "/w", "-"]
    out = io.StringIO()
    status_table({"sessionId": "s1", "state": "idle", "todoStopGuard": {"enabled": True, "armed": True,
                                                                         "attempts": 1, "maxAttempts": 2,
                                                                         "unfinishedCount": 3}}, out)
    assert "armed, attempt 1 of 2, 3 unfinished" in out.getvalue()


async def test_status_names_the_configured_model_not_its_provider(tmp_path):
    """The status's ``model`` is only a ``/model`` override (as qwen's); its ``modelName`` is the model the
    session calls, and the table names it."""
    env = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_MODEL": "local-model-7b", "OPENAI_API_KEY": "sk-x"}
    async with scripted_daemon(tmp_path, args=("--model", "openai"), env=env) as daemon:
        args = daemon_args(daemon)
        async with daemon.client(daemon.token()) as client:
            sid = (await client.post("/session", json={})).json()["sessionId"]
            before = (await client.get(f"/session/{sid}/status")).json()
            configured = await trellis("status", *args, sid, cwd=tmp_path)
            await client.post(f"/session/{sid}/model", json={"model": "other-model"})
            after = (await client.get(f"/session/{sid}/status")).json()
            overridden = await trellis("status", *args, sid, cwd=tmp_path)
    assert (before["model"], before["modelName"]) == (None, "local-model-7b")
    assert (after["model"], after["modelName"]) == ("other-model", "other-model")
    assert configured.code == 0, configured.stderr
    assert fields(configured.stdout)["model"] == "local-model-7b"
    assert fields(configured.stdout)["context"] == "window not known, no model call yet"
    assert fields(overridden.stdout)["model"] == "other-model"


async def test_a_closed_stdout_ends_a_command_quietly(tmp_path):
    """``trellis sessions | head``: the reader left; no traceback, as a Unix tool exits on a closed pipe."""
    async with scripted_daemon(tmp_path) as daemon:
        async with daemon.client(daemon.token()) as client:
            sid = (await client.post("/session", json={"title": "listed"})).json()["sessionId"]
        for command in (["sessions"], ["status", sid], ["sessions", "--json"]):
            read, write = os.pipe()
            os.close(read)  # the reader is gone before the first line is written
            try:
                with trio.fail_after(30):
                    done = await trio.run_process([sys.executable, "-m", "trellis", *command, *daemon_args(daemon)],
                                                  stdout=write, capture_stderr=True, check=False, cwd=tmp_path,
                                                  env=client_env())
            finally:
                os.close(write)
            assert done.returncode == 0, (command, done.stderr)
            assert done.stderr == b"", (command, done.stderr)
