"""read_file (actors/tools/read.py) on real files: ranges, bounds, refusals, and where it may look."""

from __future__ import annotations

import os

import pytest

from actors.tools import ReadFileTool
from actors.tools.common import MAX_FILE_BYTES, MAX_LINE_CHARS
from actors.tools.read import MAX_CHARS
from tests.actors.tools.harness import Services, call, runtime


def numbered(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(1, n + 1))


async def test_a_small_file_comes_back_exactly_with_its_location(tmp_path):
    (tmp_path / "a.txt").write_text("one\n  two\nthree")
    result = await call(ReadFileTool, tmp_path, {"path": "a.txt"})
    assert result.error is None
    assert result.content == "one\n  two\nthree"  # exactly the file: no line numbers, no newline added
    assert result.locations == ({"path": str(tmp_path / "a.txt"), "line": 1},)


async def test_offset_and_limit_choose_lines_and_the_rest_is_named_with_the_offset_that_reads_on(tmp_path):
    (tmp_path / "log.txt").write_text(numbered(950))
    result = await call(ReadFileTool, tmp_path, {"path": "log.txt", "offset": 101, "limit": 100})
    lines = result.content.split("\n")
    assert lines[0] == "line 101" and lines[99] == "line 200"
    assert result.content.endswith("[lines 201–950 of 950 not shown; read them with offset=201]")
    assert result.locations == ({"path": str(tmp_path / "log.txt"), "line": 101},)
    again = await call(ReadFileTool, tmp_path, {"path": "log.txt", "offset": 201})
    assert again.content.split("\n")[0] == "line 201" and again.content.endswith("line 950\n")
    assert "not shown" not in again.content


async def test_by_default_it_reads_2000_lines(tmp_path):
    (tmp_path / "long.txt").write_text(numbered(2001))
    result = await call(ReadFileTool, tmp_path, {"path": "long.txt"})
    assert "line 2000\n" in result.content and "line 2001\n" not in result.content
    assert result.content.endswith("[line 2001 of 2001 not shown; read it with offset=2001]")


async def test_an_offset_past_the_end_is_a_failure_naming_the_length(tmp_path):
    (tmp_path / "a.txt").write_text(numbered(3))
    result = await call(ReadFileTool, tmp_path, {"path": "a.txt", "offset": 4})
    assert result.error == "offset 4 is past the end of a.txt, which has 3 lines"


async def test_bad_arguments_are_failures_naming_them(tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    assert (await call(ReadFileTool, tmp_path, {"path": "a.txt", "offset": 0})).error == \
        "read_file: arguments.offset: expected at least 1, got 0"
    assert (await call(ReadFileTool, tmp_path, {"path": "a.txt", "limit": "5"})).error == \
        'read_file: arguments.limit: expected integer, got "5"'
    assert 'arguments: unexpected property "lines"' in \
        (await call(ReadFileTool, tmp_path, {"path": "a.txt", "lines": 1})).error
    assert (await call(ReadFileTool, tmp_path, {})).error == "read_file: arguments.path: required"


async def test_the_output_is_capped_in_characters_at_whole_lines(tmp_path):
    line = "x" * 1000
    (tmp_path / "wide.txt").write_text((line + "\n") * 300)
    result = await call(ReadFileTool, tmp_path, {"path": "wide.txt"})
    shown = result.content.split("\n\n[")[0].split("\n")
    assert all(s == line for s in shown) and len(shown) < 300
    assert len(result.content) <= MAX_CHARS + 200
    assert (f"[lines {len(shown) + 1}–300 of 300 not shown (the output is capped at 100,000 characters); "
            f"read them with offset={len(shown) + 1}]") in result.content


async def test_a_very_long_line_is_cut_saying_how_much(tmp_path):
    (tmp_path / "min.js").write_text("a" * (MAX_LINE_CHARS + 500) + "\nshort\n")
    result = await call(ReadFileTool, tmp_path, {"path": "min.js"})
    assert result.content.startswith("a" * MAX_LINE_CHARS + "… [500 characters cut]\nshort")
    assert "[1 line over 2,000 characters cut short]" in result.content


async def test_a_file_over_the_size_limit_is_refused_with_a_way_to_read_it(tmp_path):
    with open(tmp_path / "huge.log", "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: no 10 MiB written
    result = await call(ReadFileTool, tmp_path, {"path": "huge.log"})
    assert result.error is not None
    assert f"huge.log is {MAX_FILE_BYTES + 1:,} bytes; read_file reads files up to {MAX_FILE_BYTES:,} bytes" \
        in result.error
    assert "grep" in result.error


async def test_a_binary_file_is_refused_and_nothing_of_it_is_returned(tmp_path):
    (tmp_path / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDRsecret")
    result = await call(ReadFileTool, tmp_path, {"path": "img.png"})
    assert result.error == "cannot read img.png: it is a binary file (it has NUL bytes)"
    assert "secret" not in result.content
    (tmp_path / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    result = await call(ReadFileTool, tmp_path, {"path": "latin1.txt"})
    assert result.error == "cannot read latin1.txt: it is not UTF-8 text (byte 3 cannot be decoded)"


async def test_missing_files_directories_and_empty_files(tmp_path):
    assert (await call(ReadFileTool, tmp_path, {"path": "nope.txt"})).error == "nope.txt does not exist"
    (tmp_path / "dir").mkdir()
    assert (await call(ReadFileTool, tmp_path, {"path": "dir"})).error == "dir is a directory, not a file"
    (tmp_path / "empty").write_text("")
    result = await call(ReadFileTool, tmp_path, {"path": "empty"})
    assert result.error is None and result.content == "[empty is empty]"


async def test_the_whole_file_comes_back_byte_for_byte_crlf_included(tmp_path):
    (tmp_path / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    assert (await call(ReadFileTool, tmp_path, {"path": "dos.txt"})).content == "one\r\ntwo\r\n"


async def test_paths_outside_the_cwd_are_refused_by_default_symlinks_included(tmp_path):
    cwd, outside = tmp_path / "work", tmp_path / "outside"
    cwd.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (cwd / "inside.txt").write_text("fine\n")
    os.symlink(outside / "secret.txt", cwd / "link.txt")
    os.symlink(outside, cwd / "linkdir")
    for path in (str(outside / "secret.txt"), "../outside/secret.txt", "link.txt", "linkdir/secret.txt"):
        result = await call(ReadFileTool, cwd, {"path": path})
        assert result.error is not None and "lies outside the session's working directory" in result.error, path
        assert "secret\n" not in result.content
    # An absolute path under the cwd is fine, and so is a symlink that stays inside.
    os.symlink(cwd / "inside.txt", cwd / "alias.txt")
    assert (await call(ReadFileTool, cwd, {"path": str(cwd / "inside.txt")})).content == "fine\n"
    assert (await call(ReadFileTool, cwd, {"path": "alias.txt"})).content == "fine\n"


async def test_the_setting_allows_paths_outside_the_cwd(tmp_path):
    cwd, outside = tmp_path / "work", tmp_path / "outside"
    cwd.mkdir()
    outside.mkdir()
    (outside / "notes.txt").write_text("elsewhere\n")
    services = Services(runtime=runtime(paths_outside_cwd=True))
    result = await call(ReadFileTool, cwd, {"path": str(outside / "notes.txt")}, services)
    assert result.error is None and result.content == "elsewhere\n"


async def test_the_state_directory_and_settings_file_are_never_read_even_under_the_cwd(tmp_path):
    state = tmp_path / ".trellis"
    state.mkdir()
    (state / "token").write_text("s3cret-token")
    settings_file = tmp_path / "settings.json"
    settings_file.write_text("{}")
    services = Services(runtime=runtime(state, paths_outside_cwd=True, path=str(settings_file)))
    for path in (".trellis/token", str(state / "token"), "settings.json", ".trellis"):
        result = await call(ReadFileTool, tmp_path, {"path": path}, services)
        assert result.error is not None and "the daemon's own state; file tools never touch it" in result.error
        assert "s3cret" not in result.content


async def test_the_credentials_the_sandbox_hides_in_the_home_are_never_read(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # a session working in the home directory itself
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    (tmp_path / ".netrc").write_text("machine x password p\n")
    (tmp_path / "notes.txt").write_text("fine\n")
    for path in (".ssh/id_ed25519", "~/.netrc"):
        result = await call(ReadFileTool, tmp_path, {"path": path})
        assert "file tools never touch it" in result.error and "PRIVATE" not in result.content
    assert (await call(ReadFileTool, tmp_path, {"path": "notes.txt"})).content == "fine\n"
    from actors.tools import GlobTool, GrepTool

    assert (await call(GlobTool, tmp_path, {"pattern": ".ssh/*"})).content.startswith("No files match")
    assert (await call(GrepTool, tmp_path, {"pattern": "PRIVATE|password"})).content.startswith("No matches")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/etc/shadow"),
                    reason="a root daemon's file tools (CI runs as root), on a system with /etc/shadow")
async def test_a_root_daemons_file_tools_never_read_what_only_root_may_even_outside_the_cwd(tmp_path):
    # Red team round 6: the sandbox hides /etc/shadow from a root daemon's commands; the file tools, which run
    # in the daemon as uid 0, read it once allowPathsOutsideCwd let them out of the cwd.
    services = Services(runtime=runtime(tmp_path / "state", paths_outside_cwd=True))
    result = await call(ReadFileTool, tmp_path, {"path": "/etc/shadow"}, services)
    assert result.error is not None and "file tools never touch it" in result.error, result
    assert "root:" not in result.content
    from actors.tools import GrepTool

    grep = await call(GrepTool, tmp_path, {"pattern": "^root:", "path": "/etc"}, services)
    assert "shadow" not in grep.content, grep.content
    assert (await call(ReadFileTool, tmp_path, {"path": "/etc/hostname"}, services)).error is None
