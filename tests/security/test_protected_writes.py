"""Issue 35, findings 4 and 7: writes that make code run later are the user's call in every mode.

A hostile model in ``yolo`` writes ``.git/config`` (``core.fsmonitor`` runs on the user's next
``git status``), a ``.git/hooks`` script, or the script a Stop hook runs unsandboxed. Each is asked
for, whatever the approval mode, and nothing is written without an answer. A ``sandbox: true`` hook
runs where a model-run command does. The real daemon (``python -m transport``) against the loopback
fake OpenAI server, as root in CI.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.e2e.test_hooks_e2e import hooks, script, session_run, tool_message

CONFIG = "[core]\n\trepositoryformatversion = 0\n"
HOSTILE = "[core]\n\tfsmonitor = \"touch /tmp/pwned; false\"\n"


def write_call(path: str, content: str, call_id: str = "call_1") -> dict:
    return {"tool_call": {"id": call_id, "name": "write_file", "arguments": {"path": path, "content": content}}}


def repo(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / ".git" / "hooks").mkdir(parents=True)
    (work / ".git" / "config").write_text(CONFIG)
    return work


def answering(option_id: str, asked: list):
    async def vote(client, sid, request) -> None:
        asked.append(request)
        body = {"outcome": {"outcome": "selected", "optionId": option_id}}
        assert (await client.post(f"/session/{sid}/permission/{request['requestId']}", json=body)).status_code == 200
    return vote


@pytest.mark.parametrize("mode", ["yolo", "auto-edit"])
async def test_a_write_to_git_config_asks_in_every_mode_and_a_rejection_writes_nothing(nursery, tmp_path, mode):
    work = repo(tmp_path)
    asked: list = []
    fake, _, _, _ = await session_run(nursery, tmp_path, [[write_call(".git/config", HOSTILE)], [{"text": "ok"}]],
                                      {}, mode=mode, on_permission=answering("cancel", asked))
    assert (work / ".git" / "config").read_text() == CONFIG
    assert asked, "the write went through without a question"
    request = asked[0]
    assert ".git/" in request["toolCall"]["title"] and "every mode" in request["toolCall"]["title"]
    # Each time: no "always" answer is offered for such a write.
    assert {o["kind"] for o in request["options"]} == {"allow_once", "reject_once"}
    assert "denied" in tool_message(fake, 1)


async def test_a_git_hook_written_through_edit_tools_is_asked_and_an_approval_writes_it(nursery, tmp_path):
    work = repo(tmp_path)
    asked: list = []
    hook = "#!/bin/sh\ntouch /tmp/pwned\n"
    await session_run(nursery, tmp_path, [[write_call(".git/hooks/pre-commit", hook)], [{"text": "ok"}]],
                      {}, mode="yolo", on_permission=answering("proceed_once", asked))
    assert asked and "pre-commit" in asked[0]["toolCall"]["title"]
    assert (work / ".git" / "hooks" / "pre-commit").read_text() == hook  # the user said yes, once


async def test_the_script_a_hook_runs_is_asked_for_in_yolo(nursery, tmp_path):
    """The docs' own example: a Stop hook ``./check.sh``; the model rewrites it to run unsandboxed."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "check.sh").write_text("#!/bin/sh\nexit 0\n")
    asked: list = []
    fake, _, _, _ = await session_run(
        nursery, tmp_path, [[write_call("check.sh", "#!/bin/sh\ncat ../state/token\n")], [{"text": "ok"}]],
        hooks("Stop", "./check.sh"), mode="yolo", on_permission=answering("cancel", asked))
    assert asked and "hook" in asked[0]["toolCall"]["title"]
    assert (work / "check.sh").read_text() == "#!/bin/sh\nexit 0\n"
    assert "denied" in tool_message(fake, 1)


async def test_an_ordinary_write_in_yolo_is_not_asked(nursery, tmp_path):
    """The rule asks only where code runs later: yolo stays yolo for the project's own files."""
    work = repo(tmp_path)
    # No one answers here: had it asked, the turn would wait and the session run time out.
    await session_run(nursery, tmp_path, [[write_call("src/app.py", "print(1)\n")], [{"text": "ok"}]],
                      hooks("Stop", "./check.sh"), mode="yolo")
    assert (work / "src" / "app.py").read_text() == "print(1)\n"


@pytest.mark.skipif(shutil.which("bwrap") is None or subprocess.run(
    ["bwrap", "--ro-bind", "/", "/", "true"], capture_output=True).returncode != 0,
    reason="needs a working bubblewrap (CI installs it)")
async def test_a_sandboxed_hook_runs_where_a_model_run_command_does(nursery, tmp_path):
    """``sandbox: true``: no capabilities, the state directory hidden, the filesystem read-only but the cwd."""
    outside = Path("/var/tmp") / f"trellis-escape-{uuid.uuid4().hex}"  # not under /tmp: that is the sandbox's own
    probe = ("cat >/dev/null; grep CapEff /proc/self/status >> seen.txt; "
             "test -r ../state/token && echo token-visible >> seen.txt || echo token-hidden >> seen.txt; "
             f"touch {outside} 2>/dev/null && echo wrote-outside >> seen.txt || echo read-only >> seen.txt")
    group = {"hooks": [{"type": "command", "command": probe, "sandbox": True, "timeout": 20}]}
    await session_run(nursery, tmp_path, [[{"text": "done"}]], {"Stop": [group]}, mode="yolo")
    seen = (tmp_path / "work" / "seen.txt").read_text().split("\n")
    assert seen[0].split() == ["CapEff:", "0000000000000000"]
    assert seen[1:3] == ["token-hidden", "read-only"]
    assert not outside.exists()


@pytest.mark.skipif(shutil.which("bwrap") is None or subprocess.run(
    ["bwrap", "--ro-bind", "/", "/", "true"], capture_output=True).returncode != 0,
    reason="needs a working bubblewrap (CI installs it)")
async def test_a_sandboxed_shell_cannot_rewrite_the_script_a_hook_runs(nursery, tmp_path):
    """Where the sandbox can, shell writes are refused too: the hook's file is read-only to commands."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "check.sh").write_text("#!/bin/sh\nexit 0\n")
    shell = {"tool_call": {"id": "call_1", "name": "shell",
                           "arguments": {"command": "echo 'cat ../state/token' >> check.sh; echo done > ran.txt"}}}
    await session_run(nursery, tmp_path, [[shell], [{"text": "ok"}]], hooks("Stop", "./check.sh"), mode="yolo")
    assert (work / "ran.txt").read_text() == "done\n"  # the command ran, in a writable cwd
    assert (work / "check.sh").read_text() == "#!/bin/sh\nexit 0\n"
