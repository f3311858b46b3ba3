"""Checkpoints over ACP's extension methods: rewind the files with the conversation, list, undo, refusals."""

from __future__ import annotations

import trio

from actors import Settings
from tests.transport.acp.harness import acp_client, call, new_session, text


async def test_rewind_with_files_list_and_undo_over_acp(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("original notes\n")
    (work / "keep.txt").write_text("keep me\n")
    script = ([{"text": "first answer"}],
              [call("shell", command="echo changed > notes.txt && rm keep.txt")], [{"text": "done"}])
    with trio.fail_after(30):
        async with acp_client(*script, settings=Settings(approval_mode="yolo"),
                              state_dir=tmp_path / "state") as (daemon, client):
            sid = await new_session(client, str(work))
            for words in ("one", "two"):
                assert (await client.result("session/prompt", {"sessionId": sid, "prompt": text(words)}))[
                    "stopReason"] == "end_turn"
            assert (work / "notes.txt").read_text() == "changed\n" and not (work / "keep.txt").exists()

            listed = await client.result("_trellis/checkpoints", {"sessionId": sid})
            changed = {f["path"] for c in listed["checkpoints"] if c["turn"] == 1 for f in c["files"]}
            assert changed == {"notes.txt", "keep.txt"}, listed

            bad = await client.request("_trellis/rewind", {"sessionId": sid, "turn": 7, "files": True})
            assert bad["error"]["code"] == -32602 and bad["error"]["data"] == {"path": "$.turn"}, bad
            flag = await client.request("_trellis/rewind", {"sessionId": sid, "turn": 1, "files": "yes"})
            assert flag["error"]["data"] == {"path": "$.files"}

            rewound = await client.result("_trellis/rewind", {"sessionId": sid, "turn": 1, "files": True})
            assert (work / "notes.txt").read_text() == "original notes\n"
            assert (work / "keep.txt").read_text() == "keep me\n"
            assert sorted(rewound["restored"]) == ["keep.txt", "notes.txt"]

            (work / "notes.txt").write_text("edited by hand\n")  # someone else's change: the undo refuses it
            refused = await client.request("_trellis/checkpoints/undo",
                                           {"sessionId": sid, "undoId": rewound["undoId"]})
            assert refused["error"]["code"] == -32000
            assert refused["error"]["data"] == {"code": "files_changed_outside", "paths": ["notes.txt"]}
            await client.result("_trellis/checkpoints/undo",
                                {"sessionId": sid, "undoId": rewound["undoId"], "force": True})
            assert (work / "notes.txt").read_text() == "changed\n" and not (work / "keep.txt").exists()
            missing = await client.request("_trellis/checkpoints/undo", {"sessionId": sid, "undoId": "ck-nope"})
            assert missing["error"]["data"] == {"path": "$.undoId"}
