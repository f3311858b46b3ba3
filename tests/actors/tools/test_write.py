"""write_file and edit (actors/tools/write.py) on real files: permission with a diff, refusals, exactness."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from actors.tools import EditTool, WriteFileTool
from actors.tools.common import MAX_DIFF_CHARS
from tests.actors.tools.harness import Services, call, runtime


def diff(path, old, new) -> dict:
    return {"type": "diff", "path": str(path), "oldText": old, "newText": new}


# ----------------------------------------------------------------- write_file


async def test_write_creates_the_file_and_its_parent_directories_after_asking_with_the_diff(tmp_path):
    services = Services()
    target = tmp_path / "src" / "pkg" / "new.py"
    result = await call(WriteFileTool, tmp_path, {"path": "src/pkg/new.py", "content": "x = 1\ny = 2\n"}, services)
    assert result.error is None and result.content == "Created src/pkg/new.py (2 lines)."
    assert target.read_text() == "x = 1\ny = 2\n"
    [asked] = services.asked
    assert asked["kind"] == "edit" and asked["title"] == "write_file src/pkg/new.py" and asked["planRefuses"]
    assert asked["content"] == [diff(target, None, "x = 1\ny = 2\n")]
    assert asked["locations"] == [{"path": str(target), "line": 1}]
    assert result.acp_content == (diff(target, None, "x = 1\ny = 2\n"),)
    assert result.locations == ({"path": str(target), "line": 1},)


async def test_write_overwrites_and_the_diff_has_the_old_text(tmp_path):
    (tmp_path / "a.txt").write_text("old\n")
    result = await call(WriteFileTool, tmp_path, {"path": "a.txt", "content": "new\nmore\n"})
    assert result.content == "Overwrote a.txt (2 lines; it had 1 line)."
    assert result.acp_content == (diff(tmp_path / "a.txt", "old\n", "new\nmore\n"),)
    assert (tmp_path / "a.txt").read_text() == "new\nmore\n"


async def test_a_denied_write_writes_nothing_and_says_why(tmp_path):
    services = Services(deny="the user denied this call")
    result = await call(WriteFileTool, tmp_path, {"path": "d/a.txt", "content": "x"}, services)
    assert result.error == "the user denied this call"
    assert not (tmp_path / "d").exists()


async def test_a_write_outside_the_cwd_is_refused_before_anyone_is_asked(tmp_path):
    cwd, outside = tmp_path / "work", tmp_path / "outside"
    cwd.mkdir()
    outside.mkdir()
    os.symlink(outside, cwd / "escape")
    services = Services()
    for path in (str(outside / "a.txt"), "../outside/a.txt", "escape/a.txt"):
        result = await call(WriteFileTool, cwd, {"path": path, "content": "x"}, services)
        assert "lies outside the session's working directory" in result.error, path
    assert services.asked == [] and list(outside.iterdir()) == []


async def test_with_the_setting_a_write_outside_the_cwd_is_asked_in_every_mode(tmp_path):
    cwd, outside = tmp_path / "work", tmp_path / "outside"
    cwd.mkdir()
    services = Services(runtime=runtime(paths_outside_cwd=True))
    result = await call(WriteFileTool, cwd, {"path": str(outside / "a.txt"), "content": "x"}, services)
    assert result.error is None and (outside / "a.txt").read_text() == "x"
    assert services.asked[0]["title"] == f"write_file {outside / 'a.txt'}"
    # ~/.gitconfig, ~/.local/bin/git: code the user runs later; yolo asks too
    assert "outside the session's working directory" in services.asked[0]["alwaysAsk"]
    inside = Services(runtime=runtime(paths_outside_cwd=True))
    await call(WriteFileTool, cwd, {"path": "a.txt", "content": "x"}, inside)
    assert inside.asked[0]["alwaysAsk"] is None  # under the cwd the mode decides


async def test_the_state_directory_is_never_written(tmp_path):
    state = tmp_path / ".trellis"
    state.mkdir()
    services = Services(runtime=runtime(state))
    result = await call(WriteFileTool, tmp_path, {"path": ".trellis/token", "content": "mine"}, services)
    assert "file tools never touch it" in result.error and not (state / "token").exists()


async def test_a_binary_file_is_not_overwritten(tmp_path):
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01\x02")
    result = await call(WriteFileTool, tmp_path, {"path": "blob.bin", "content": "text"})
    assert result.error == "blob.bin cannot be changed as text: it is a binary file (it has NUL bytes)"
    assert (tmp_path / "blob.bin").read_bytes() == b"\x00\x01\x02"


async def test_a_file_changed_while_the_request_waited_is_not_written(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("v1\n")
    services = Services(while_asked=lambda: target.write_text("v2 by the user\n"))
    result = await call(WriteFileTool, tmp_path, {"path": "a.txt", "content": "from the model\n"}, services)
    assert "a.txt changed while the call waited for approval; nothing was written" in result.error
    assert target.read_text() == "v2 by the user\n"


async def test_texts_too_large_for_an_event_carry_no_diff_and_say_so(tmp_path):
    big = "y" * (MAX_DIFF_CHARS + 1)
    services = Services()
    result = await call(WriteFileTool, tmp_path, {"path": "big.txt", "content": big}, services)
    assert result.error is None and (tmp_path / "big.txt").read_text() == big
    assert result.acp_content == () and services.asked[0]["content"] == []
    assert result.content.endswith("[no diff shown: the texts are too large]")


# ----------------------------------------------------------------- edit


async def test_edit_replaces_the_one_occurrence_exactly_and_carries_the_diff(tmp_path):
    target = tmp_path / "m.py"
    target.write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    services = Services()
    result = await call(EditTool, tmp_path, {"path": "m.py", "old_string": "    return 2",
                                             "new_string": "    return 3"}, services)
    new = "def f():\n    return 1\n\ndef g():\n    return 3\n"
    assert result.error is None and result.content == "Replaced 1 occurrence in m.py (first at line 5)."
    assert target.read_text() == new
    assert result.acp_content == (diff(target, "def f():\n    return 1\n\ndef g():\n    return 2\n", new),)
    assert result.locations == ({"path": str(target), "line": 5},)
    [asked] = services.asked
    assert asked["kind"] == "edit" and asked["title"] == "edit m.py"
    assert asked["content"] == list(result.acp_content) and asked["locations"] == [{"path": str(target), "line": 5}]


async def test_edit_of_absent_text_is_a_clear_failure_and_nothing_is_asked(tmp_path):
    (tmp_path / "a.txt").write_text("alpha\n")
    services = Services()
    result = await call(EditTool, tmp_path, {"path": "a.txt", "old_string": "beta", "new_string": "x"}, services)
    assert result.error.startswith("old_string was not found in a.txt")
    assert services.asked == [] and (tmp_path / "a.txt").read_text() == "alpha\n"


async def test_edit_of_ambiguous_text_names_how_many_times_it_occurs(tmp_path):
    (tmp_path / "a.txt").write_text("x = 1\nx = 1\nx = 1\n")
    result = await call(EditTool, tmp_path, {"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2"})
    assert result.error.startswith("old_string occurs 3 times in a.txt;") and "replace_all" in result.error
    assert (tmp_path / "a.txt").read_text() == "x = 1\nx = 1\nx = 1\n"


async def test_replace_all_replaces_every_occurrence(tmp_path):
    (tmp_path / "a.txt").write_text("keep\nx = 1\nx = 1\nx = 1\n")
    result = await call(EditTool, tmp_path, {"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2",
                                             "replace_all": True})
    assert result.content == "Replaced 3 occurrences in a.txt (first at line 2)."
    assert (tmp_path / "a.txt").read_text() == "keep\nx = 2\nx = 2\nx = 2\n"


async def test_edit_needs_an_existing_file_and_a_real_change(tmp_path):
    assert (await call(EditTool, tmp_path, {"path": "nope.txt", "old_string": "a", "new_string": "b"})).error == \
        "nope.txt does not exist; create it with write_file"
    (tmp_path / "a.txt").write_text("a\n")
    assert "old_string is empty" in (await call(EditTool, tmp_path, {"path": "a.txt", "old_string": "",
                                                                     "new_string": "b"})).error
    assert "the same" in (await call(EditTool, tmp_path, {"path": "a.txt", "old_string": "a",
                                                          "new_string": "a"})).error
    assert (await call(EditTool, tmp_path, {"path": "a.txt", "old_string": "a", "new_string": "b",
                                            "replace_all": "yes"})).error == \
        'edit: arguments.replace_all: expected boolean, got "yes"'


async def test_edit_keeps_the_rest_of_the_file_byte_for_byte(tmp_path):
    target = tmp_path / "dos.txt"
    target.write_bytes("first\r\nsecond — ü\r\nthird\r\n".encode())
    result = await call(EditTool, tmp_path, {"path": "dos.txt", "old_string": "second", "new_string": "2nd"})
    assert result.error is None
    assert target.read_bytes() == "first\r\n2nd — ü\r\nthird\r\n".encode()


async def test_a_denied_edit_changes_nothing(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    result = await call(EditTool, tmp_path, {"path": "a.txt", "old_string": "a", "new_string": "b"},
                        Services(deny="plan mode: execution is refused until the plan is approved"))
    assert result.error.startswith("plan mode") and (tmp_path / "a.txt").read_text() == "a\n"


# ----------------------------------------------------------------- git's control files, wherever they lie


def git(cwd, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


@needs_git
async def test_writes_to_gits_control_files_outside_a_dot_git_directory_are_asked_in_every_mode(tmp_path):
    """A gitdir a ``.git`` file names (``gitdir: ./.bare``), ``core.hooksPath``, ``include.path``: what the
    sandbox makes read-only for git's sake, reused from ``git_protections``."""
    git(tmp_path, "init", "-q", "--bare", str(tmp_path / ".bare"))
    (tmp_path / ".git").write_text("gitdir: ./.bare\n")
    git(tmp_path, "config", "core.hooksPath", "tools/hooks")
    git(tmp_path, "config", "include.path", "../project.gitconfig")
    (tmp_path / "tools" / "hooks").mkdir(parents=True)
    for path in (".bare/config", ".bare/hooks/pre-commit", "tools/hooks/pre-commit", "project.gitconfig", ".git"):
        services = Services(deny="no")
        await call(WriteFileTool, tmp_path, {"path": path, "content": "x"}, services)
        assert services.asked[0]["alwaysAsk"] is not None, path
    services = Services(deny="no")
    await call(WriteFileTool, tmp_path, {"path": "tools/build.sh", "content": "x"}, services)
    assert services.asked[0]["alwaysAsk"] is None


@needs_git
async def test_a_nested_repositorys_config_and_hooks_are_asked_for_too(tmp_path):
    git(tmp_path, "init", "-q", "vendor/lib")
    git(tmp_path / "vendor" / "lib", "config", "core.hooksPath", "githooks")
    (tmp_path / "vendor" / "lib" / "githooks").mkdir()
    for path in ("vendor/lib/.git/config", "vendor/lib/githooks/pre-push"):
        services = Services(deny="no")
        await call(WriteFileTool, tmp_path, {"path": path, "content": "x"}, services)
        assert services.asked[0]["alwaysAsk"] is not None, path


# ----------------------------------------------------------------- the cwd and the hidden paths, moved


async def test_a_cwd_replaced_by_a_symlink_is_refused_naming_what_happened(tmp_path):
    cwd, elsewhere = tmp_path / "proj", tmp_path / "elsewhere"
    cwd.mkdir()
    elsewhere.mkdir()
    services = Services()
    context_cwd = str(cwd)  # as the session resolved it when it started
    cwd.rename(tmp_path / "proj.orig")
    os.symlink(elsewhere, cwd)
    result = await call(WriteFileTool, context_cwd, {"path": "planted", "content": "x"}, services)
    assert result.error == (f"the session's working directory {cwd} was moved or replaced by a symlink since the "
                            f"session started (it now leads to {elsewhere}); nothing was done")
    assert services.asked == [] and list(elsewhere.iterdir()) == []


async def test_a_state_directory_whose_parent_was_renamed_is_still_refused(tmp_path):
    from actors.tools import GrepTool, ReadFileTool

    state = tmp_path / "proj" / "state"
    state.mkdir(parents=True)
    (state / "token").write_text("s3cret-token\n")
    services = Services(runtime=runtime(state))
    assert "file tools never touch it" in (await call(ReadFileTool, tmp_path, {"path": "proj/state/token"},
                                                      services)).error  # seen in its place once
    (tmp_path / "proj").rename(tmp_path / "proj2")
    result = await call(ReadFileTool, tmp_path, {"path": "proj2/state/token"}, services)
    assert result.error == "proj2/state/token is the daemon's own state; file tools never touch it"
    grep = await call(GrepTool, tmp_path, {"pattern": "s3cret"}, services)
    assert grep.content.startswith("No matches") and "s3cret-token" not in grep.content


async def test_a_hard_link_to_a_credential_in_the_home_is_refused_as_one(tmp_path, monkeypatch):
    from actors.tools import ReadFileTool

    home, work = tmp_path / "home", tmp_path / "home" / "work"
    work.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    (home / ".netrc").write_text("machine x password p\n")
    os.link(home / ".netrc", work / "notes.txt")
    for path in ("notes.txt", "~/.netrc"):
        result = await call(ReadFileTool, work, {"path": path})
        assert result.error == (f"{path} is a credential (in the home, or a file only root may read), hidden from "
                                f"the tools as from the sandbox's commands; file tools never touch it")
