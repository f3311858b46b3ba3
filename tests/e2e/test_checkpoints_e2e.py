"""Checkpoints over REST against the real daemon: rewind the files with the conversation, undo, refusals, restarts."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import trio

from actors import load_script
from tests.conftest import live_daemon
from tests.e2e.sse_client import frames


def call(name: str, **arguments) -> dict:
    return {"tool_call": {"name": name, "arguments": arguments}}


def git_state(work: Path) -> dict[str, str]:
    """Every file, link and directory under .git/, hashed (the bytes, the link target, the mode)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(work / ".git"):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                out[str(path)] = "link:" + os.readlink(path)
            elif path.is_dir():
                out[str(path)] = f"dir:{st.st_mode:o}"
            else:
                out[str(path)] = f"{st.st_mode:o}:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def files_only(state: dict[str, str]) -> dict[str, str]:
    return {p: v for p, v in state.items() if not v.startswith("dir:")}


def make_repo(work: Path) -> None:
    """A workspace with a .git directory (written by hand: its bytes are what matters) and a .gitignore."""
    work.mkdir()
    git = work / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "objects" / "ab").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (git / "index").write_bytes(bytes(range(256)))
    (git / "refs" / "heads" / "main").write_text("0" * 40 + "\n")
    (git / "refs" / "stash").write_text("1" * 40 + "\n")
    (git / "objects" / "ab" / "cdef").write_bytes(b"\x78\x01blob")
    (work / ".gitignore").write_text("*.log\nbuild/\n")
    (work / "notes.txt").write_text("original notes\n")
    (work / "keep.txt").write_text("keep me\n")
    (work / "debug.log").write_text("ignored\n")


async def prompt_and_wait(client, sid: str, text: str) -> str:
    pid = (await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": text}]})).json()[
        "promptId"]
    async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
        async for frame in frames(r):
            if frame["type"] in ("turn_complete", "turn_error") and frame["data"].get("promptId") == pid:
                assert frame["type"] == "turn_complete", frame
                return pid
    raise AssertionError("the event stream ended first")


ACCEPTANCE_SCRIPT = [
    [call("write_file", path="first.txt", content="turn 0\n")], [{"text": "wrote it"}],
    [{"text": "just talking"}],
    [call("shell", command="echo changed > notes.txt && rm keep.txt")], [{"text": "changed"}],
    [call("edit", path="notes.txt", old_string="changed", new_string="edited")], [{"text": "edited"}],
]


async def test_acceptance_shell_and_edit_rewound_with_files_and_undone(tmp_path):
    work = tmp_path / "work"
    make_repo(work)
    git_before = git_state(work)
    with trio.fail_after(60):
        async with live_daemon(model=load_script(ACCEPTANCE_SCRIPT), state_dir=tmp_path / "state") as (_, client):
            sid = (await client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"})).json()["sessionId"]
            for text in ("write", "talk", "shell", "edit"):
                await prompt_and_wait(client, sid, text)
            assert (work / "notes.txt").read_text() == "edited\n"
            assert not (work / "keep.txt").exists()
            # The sandbox may have made an empty read-only .git/hooks for the shell; every file is as it was.
            assert files_only(git_state(work)) == files_only(git_before)
            git_before = git_state(work)

            listed = (await client.get(f"/session/{sid}/checkpoints")).json()
            assert [c["turn"] for c in listed["checkpoints"]] == [0, 2, 3]  # turn 1 only talked: it took none
            changed = {c["turn"]: {(f["path"], f["change"]) for f in c["files"]} for c in listed["checkpoints"]}
            assert changed[0] == {("first.txt", "added")}
            assert changed[2] == {("notes.txt", "modified"), ("keep.txt", "deleted")}
            assert changed[3] == {("notes.txt", "modified")}
            diff = (await client.get(f"/session/{sid}/checkpoints/2/diff")).json()
            assert "-original notes" in diff["diff"] and "+changed" in diff["diff"]
            assert "a/keep.txt" in diff["diff"]

            r = await client.post(f"/session/{sid}/rewind", json={"turn": 2, "files": True})
            assert r.status_code == 200, r.text
            rewound = r.json()
            assert (work / "notes.txt").read_text() == "original notes\n"
            assert (work / "keep.txt").read_text() == "keep me\n"
            assert (work / "first.txt").read_text() == "turn 0\n"
            assert (work / "debug.log").read_text() == "ignored\n"
            assert sorted(rewound["restored"]) == ["keep.txt", "notes.txt"]
            assert rewound["deleted"] == []
            listed = (await client.get(f"/session/{sid}/checkpoints")).json()
            assert [c["turn"] for c in listed["checkpoints"]] == [0]  # two turns left; the second took none
            transcript = (await client.get(f"/session/{sid}/transcript")).json()["entries"]
            users = [e["message"]["content"] for e in transcript if e["message"]["role"] == "user"]
            assert users == ["write", "talk"]
            assert git_state(work) == git_before

            r = await client.post(f"/session/{sid}/checkpoints/undo/{rewound['undoId']}", json={})
            assert r.status_code == 200, r.text
            assert (work / "notes.txt").read_text() == "edited\n"
            assert not (work / "keep.txt").exists()
            transcript = (await client.get(f"/session/{sid}/transcript")).json()["entries"]
            users = [e["message"]["content"] for e in transcript if e["message"]["role"] == "user"]
            assert users == ["write", "talk", "shell", "edit"]
            listed = (await client.get(f"/session/{sid}/checkpoints")).json()
            assert [c["turn"] for c in listed["checkpoints"]] == [0, 2, 3]
            assert git_state(work) == git_before


async def test_a_file_changed_outside_is_refused_unless_forced(tmp_path):
    work = tmp_path / "work"
    make_repo(work)
    script = [[call("write_file", path="notes.txt", content="by the model\n")], [{"text": "ok"}],
              [{"text": "second"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), state_dir=tmp_path / "state") as (_, client):
            sid = (await client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, sid, "one")
            await prompt_and_wait(client, sid, "two")
            # Listing waits for the end checkpoint (taken just after turn_complete; the talking turn two takes
            # none): what changes after it changed outside the session.
            assert len((await client.get(f"/session/{sid}/checkpoints")).json()["checkpoints"]) == 1
            (work / "notes.txt").write_text("the user's own edit\n")  # outside the session
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True})
            assert r.status_code == 409
            assert r.json()["code"] == "files_changed_outside" and r.json()["paths"] == ["notes.txt"]
            assert (work / "notes.txt").read_text() == "the user's own edit\n"  # nothing done
            assert len((await client.get(f"/session/{sid}/checkpoints")).json()["checkpoints"]) == 1

            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True, "force": True})
            assert r.status_code == 200, r.text
            assert (work / "notes.txt").read_text() == "original notes\n"
            # Nothing is lost: the undo brings the user's edit back.
            r = await client.post(f"/session/{sid}/checkpoints/undo/{r.json()['undoId']}", json={"force": True})
            assert r.status_code == 200, r.text
            assert (work / "notes.txt").read_text() == "the user's own edit\n"


async def test_files_false_keeps_todays_answer_and_errors(tmp_path):
    work = tmp_path / "work"
    make_repo(work)
    script = [[{"text": "one"}], [{"text": "two"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), state_dir=tmp_path / "state") as (_, client):
            sid = (await client.post("/session", json={"cwd": str(work)})).json()["sessionId"]
            await prompt_and_wait(client, sid, "one")
            await prompt_and_wait(client, sid, "two")
            (work / "notes.txt").write_text("changed by hand\n")
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 1})
            assert r.json() == {"historyLength": 2}
            assert (work / "notes.txt").read_text() == "changed by hand\n"
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 5, "files": True})
            assert r.status_code == 400 and r.json()["code"] == "invalid_turn"
            r = await client.get(f"/session/{sid}/checkpoints/9/diff")
            assert r.status_code == 400 and r.json()["code"] == "invalid_turn"
            r = await client.post(f"/session/{sid}/checkpoints/undo/nope", json={})
            assert r.status_code == 404 and r.json()["code"] == "checkpoint_not_found"


async def test_without_a_state_dir_there_are_no_checkpoints(tmp_path):
    work = tmp_path / "work"
    make_repo(work)
    with trio.fail_after(30):
        async with live_daemon(model=load_script([[{"text": "one"}]])) as (_, client):
            sid = (await client.post("/session", json={"cwd": str(work)})).json()["sessionId"]
            await prompt_and_wait(client, sid, "one")
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True})
            assert r.status_code == 409 and r.json()["code"] == "checkpoints_unavailable"


async def test_checkpoints_survive_a_restart_and_a_restored_session_rewinds(tmp_path):
    work = tmp_path / "work"
    make_repo(work)
    state = tmp_path / "state"
    script = [[call("shell", command="echo changed > notes.txt && rm keep.txt && mkdir -p new/dir && "
                                      "echo x > new/dir/f")], [{"text": "done"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), state_dir=state) as (_, client):
            sid = (await client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, sid, "shell")
        assert (work / "new" / "dir" / "f").exists()
        async with live_daemon(model=load_script([]), state_dir=state) as (_, client):
            r = await client.post(f"/session/{sid}/load", json={"cwd": str(work)})
            assert r.status_code == 200, r.text
            listed = (await client.get(f"/session/{sid}/checkpoints")).json()
            assert [c["turn"] for c in listed["checkpoints"]] == [0]
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True})
            assert r.status_code == 200, r.text
            assert (work / "notes.txt").read_text() == "original notes\n"
            assert (work / "keep.txt").read_text() == "keep me\n"
            assert not (work / "new").exists()
            assert r.json()["historyLength"] == 0


async def wait_idle(client, sid: str) -> None:
    while True:
        status = (await client.get(f"/session/{sid}/status")).json()
        if status["state"] == "idle" and not status["automaticQueue"] and not status["queuedCount"]:
            return
        await trio.sleep(0.05)


async def test_a_background_jobs_file_is_rewound(tmp_path):
    work = tmp_path / "work"
    make_repo(work)
    script = [[call("shell", command="sleep 0.3 && echo bg > bg.txt && sed -i s/original/bg/ notes.txt",
                    run_in_background=True)], [{"text": "started"}],
              [{"text": "the job ended"}], [{"text": "two"}], [{"text": "spare"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), state_dir=tmp_path / "state") as (_, client):
            sid = (await client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, sid, "one")
            while not (work / "bg.txt").exists():
                await trio.sleep(0.05)
            await trio.sleep(0.3)
            await wait_idle(client, sid)
            await prompt_and_wait(client, sid, "two")
            assert (work / "notes.txt").read_text() == "bg notes\n"
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True})
            assert r.status_code == 200, r.text
            assert not (work / "bg.txt").exists()
            assert (work / "notes.txt").read_text() == "original notes\n"
            assert sorted(r.json()["deleted"]) == ["bg.txt"]


async def test_a_file_over_the_cap_is_noticed_and_left_alone(tmp_path):
    from actors.settings import Settings

    work = tmp_path / "work"
    make_repo(work)
    (work / "big.bin").write_bytes(b"\0\1" * 600)
    script = [[call("shell", command="printf changed > big.bin && echo new > notes.txt")], [{"text": "ok"}]]
    settings = Settings(checkpoint_max_file_bytes=1000)
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), settings=settings, state_dir=tmp_path / "state") as (
                _, client):
            sid = (await client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, sid, "one")
            listed = (await client.get(f"/session/{sid}/checkpoints")).json()
            assert "big.bin" in listed["checkpoints"][0]["notCovered"]
            events = []
            async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as r:
                async for frame in frames(r):
                    events.append(frame)
                    if frame["type"] == "turn_complete":
                        break
            notices = [f["data"]["update"]["content"]["text"] for f in events if f["type"] == "session_update"
                       and f["data"]["update"].get("_meta", {}).get("source") == "daemon"]
            assert any("big.bin" in n and "per-file cap" in n for n in notices), notices
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True})
            assert r.status_code == 200, r.text
            assert (work / "notes.txt").read_text() == "original notes\n"
            assert (work / "big.bin").read_bytes() == b"changed"  # not saved at the turn's start: left alone
            assert "big.bin" not in r.json()["restored"]


async def test_a_rewind_with_files_while_the_session_works_is_refused(tmp_path):
    work = tmp_path / "work"
    make_repo(work)
    script = [[{"text": "one"}], [call("shell", command="sleep 20")], [{"text": "cancelled"}]]
    with trio.fail_after(60):
        async with live_daemon(model=load_script(script), state_dir=tmp_path / "state") as (_, client):
            sid = (await client.post("/session", json={"cwd": str(work), "approvalMode": "yolo"})).json()["sessionId"]
            await prompt_and_wait(client, sid, "one")
            await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "sleep"}]})
            while (await client.get(f"/session/{sid}/status")).json()["state"] != "running":
                await trio.sleep(0.02)
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True})
            assert r.status_code == 409 and r.json()["code"] == "session_busy"
            await client.post(f"/session/{sid}/cancel")
            await wait_idle(client, sid)
            r = await client.post(f"/session/{sid}/rewind", json={"turn": 0, "files": True})
            assert r.status_code == 200, r.text
            assert r.json()["historyLength"] == 0


async def test_capabilities_name_the_feature_when_checkpoints_are_kept(tmp_path):
    with trio.fail_after(30):
        async with live_daemon(state_dir=tmp_path / "state") as (_, client):
            assert "checkpoints" in (await client.get("/capabilities")).json()["features"]
        async with live_daemon() as (_, client):
            assert "checkpoints" not in (await client.get("/capabilities")).json()["features"]
