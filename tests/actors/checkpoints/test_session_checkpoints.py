"""Checkpoints in a session, through its handle: which checkpoint a turn number means, undo of an undo, /clear."""

from __future__ import annotations

import pytest
import trio

from actors import CountingIds, Settings, load_script, open_daemon
from actors.checkpoints import CheckpointRefused

LIMIT = 30


def write(path: str, content: str) -> list[dict]:
    return [{"tool_call": {"name": "write_file", "arguments": {"path": path, "content": content}}}]


async def run_turn(handle, text: str) -> None:
    events = handle.subscribe()
    prompt_id = (await handle.prompt(text)).prompt_id
    async for event in events:
        if event.type in ("turn_complete", "turn_error") and event.data.get("promptId") == prompt_id:
            return


async def open_session(tmp_path, responses):
    work = tmp_path / "work"
    work.mkdir()
    (work / "f.txt").write_text("start\n")
    daemon_cm = open_daemon(Settings(), model=load_script({"responses": responses}), ids=CountingIds(),
                            state_dir=tmp_path / "state", workspace=str(work))
    return work, daemon_cm


async def test_a_turn_number_means_the_checkpoint_of_the_turn_at_that_place_now(tmp_path):
    responses = [write("f.txt", "one\n"), [{"text": "ok"}], write("f.txt", "two\n"), [{"text": "ok"}],
                 write("f.txt", "three\n"), [{"text": "ok"}]]
    work, daemon_cm = await open_session(tmp_path, responses)
    with trio.fail_after(LIMIT):
        async with daemon_cm as daemon:
            handle, _ = await daemon.create_session(str(work))
            await handle.set_approval_mode("yolo")
            await run_turn(handle, "first")
            await run_turn(handle, "second")
            assert (await handle.rewind(1)) == 4  # the conversation only: f.txt stays "two"
            assert (work / "f.txt").read_text() == "two\n"
            await run_turn(handle, "second, again")  # a new turn 1, starting from "two"
            assert (work / "f.txt").read_text() == "three\n"
            listed = await handle.checkpoints("list")
            assert [c["turn"] for c in listed["checkpoints"]] == [0, 1]
            done = await handle.checkpoints("rewind", turn=1)
            assert (work / "f.txt").read_text() == "two\n"  # the start of the new turn 1, not of the old one
            assert done["historyLength"] == 4

            # An undo is undoable too.
            undone = await handle.checkpoints("undo", undo_id=done["undoId"])
            assert (work / "f.txt").read_text() == "three\n"
            assert undone["historyLength"] == 8
            await handle.checkpoints("undo", undo_id=undone["undoId"])
            assert (work / "f.txt").read_text() == "two\n"
            assert len((await handle.checkpoints("list"))["checkpoints"]) == 1


async def test_after_a_clear_earlier_turns_have_no_checkpoint(tmp_path):
    responses = [write("f.txt", "one\n"), [{"text": "ok"}], [{"text": "after the clear"}]]
    work, daemon_cm = await open_session(tmp_path, responses)
    with trio.fail_after(LIMIT):
        async with daemon_cm as daemon:
            handle, _ = await daemon.create_session(str(work))
            await handle.set_approval_mode("yolo")
            await run_turn(handle, "first")
            await run_turn(handle, "/clear")
            await run_turn(handle, "fresh start")
            listed = await handle.checkpoints("list")
            assert listed["checkpoints"] == []  # the new turn 0 ran no tool that changes files: it took none
            done = await handle.checkpoints("rewind", turn=0)
            assert (work / "f.txt").read_text() == "one\n"  # the start of the new turn 0: as it is
            assert (done["restored"], done["deleted"]) == ([], [])
            with pytest.raises(CheckpointRefused) as refused:
                await handle.checkpoints("rewind", turn=0)
            assert refused.value.code == "invalid_turn"


async def test_a_turn_that_only_talks_and_reads_walks_nothing(tmp_path):
    read = [{"tool_call": {"name": "read_file", "arguments": {"path": "f.txt"}}}]
    responses = [read, [{"text": "read it"}], [{"text": "just talk"}], write("f.txt", "changed\n"), [{"text": "ok"}]]
    work, daemon_cm = await open_session(tmp_path, responses)
    objects = tmp_path / "state" / "checkpoints" / "objects"
    with trio.fail_after(LIMIT):
        async with daemon_cm as daemon:
            handle, _ = await daemon.create_session(str(work))
            await handle.set_approval_mode("yolo")
            await run_turn(handle, "read the file")
            await run_turn(handle, "say something")
            assert not objects.exists() or not any(objects.rglob("*"))  # no walk, nothing stored
            await run_turn(handle, "change it")
            listed = await handle.checkpoints("list")
            assert [(c["turn"], [f["path"] for f in c["files"]]) for c in listed["checkpoints"]] == [(2, ["f.txt"])]
            done = await handle.checkpoints("rewind", turn=1)  # a turn without its own: the next one's start
            assert (work / "f.txt").read_text() == "start\n" and done["restored"] == ["f.txt"]
