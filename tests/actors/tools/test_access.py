"""The file backend (actors/tools/access.py): local files, and another backend behind the same seam."""

from __future__ import annotations

import errno
import os

import pytest

from actors.tools import EditTool, ReadFileTool, WriteFileTool
from actors.tools.access import LOCAL, NotText, TooLarge, files_of
from tests.actors.tools.harness import Services, call


async def test_local_files_round_trip_text_exactly_and_create_parents(tmp_path):
    path = str(tmp_path / "a" / "b" / "c.txt")
    await LOCAL.write_text(path, "one\r\ntwo — ü\n")
    assert (tmp_path / "a" / "b" / "c.txt").read_bytes() == "one\r\ntwo — ü\n".encode()
    assert await LOCAL.read_text(path) == "one\r\ntwo — ü\n"


async def test_local_files_refuse_binary_non_utf8_and_too_large_files(tmp_path):
    (tmp_path / "bin").write_bytes(b"ab\x00cd")
    (tmp_path / "latin").write_bytes(b"caf\xe9")
    (tmp_path / "big").write_text("x" * 11)
    with pytest.raises(NotText, match="binary"):
        await LOCAL.read_text(str(tmp_path / "bin"))
    with pytest.raises(NotText, match="not UTF-8"):
        await LOCAL.read_text(str(tmp_path / "latin"))
    with pytest.raises(TooLarge) as caught:
        await LOCAL.read_text(str(tmp_path / "big"), max_bytes=10)
    assert (caught.value.size, caught.value.limit) == (11, 10)
    with pytest.raises(FileNotFoundError):
        await LOCAL.read_text(str(tmp_path / "nope"))


class MemoryFiles:
    """Another FileAccess, as an ACP client's fs/read_text_file and fs/write_text_file would be: no disk."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    async def read_text(self, path: str, *, max_bytes: int | None = None) -> str:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    async def write_text(self, path: str, text: str) -> None:
        self.files[path] = text


def test_a_session_without_a_backend_gets_local_files():
    assert files_of(None) is LOCAL and files_of(Services()) is LOCAL
    memory = MemoryFiles({})
    assert files_of(Services(files=memory)) is memory


async def test_the_tools_read_and_write_through_the_sessions_backend(tmp_path):
    unsaved = str(tmp_path / "buffer.py")  # an editor buffer: not on disk
    memory = MemoryFiles({unsaved: "value = 1\n"})
    services = Services(files=memory)
    assert (await call(ReadFileTool, tmp_path, {"path": "buffer.py"}, services)).content == "value = 1\n"
    result = await call(EditTool, tmp_path, {"path": "buffer.py", "old_string": "1", "new_string": "2"}, services)
    assert result.error is None and memory.files[unsaved] == "value = 2\n"
    await call(WriteFileTool, tmp_path, {"path": "new.py", "content": "x\n"}, services)
    assert memory.files[str(tmp_path / "new.py")] == "x\n"
    assert not (tmp_path / "buffer.py").exists() and not (tmp_path / "new.py").exists()


async def test_local_files_refuse_a_symlink_swapped_into_a_checked_path(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "outside").mkdir()
    checked = str(tmp_path / "sub" / "a.txt")  # resolved and checked: no symlink in it
    (tmp_path / "sub").rmdir()
    os.symlink(tmp_path / "outside", tmp_path / "sub")
    with pytest.raises(OSError) as caught:
        await LOCAL.write_text(checked, "x")
    assert caught.value.errno == errno.ELOOP
    (tmp_path / "outside" / "a.txt").write_text("outside")
    with pytest.raises(OSError):
        await LOCAL.read_text(checked)
    assert list((tmp_path / "outside").iterdir()) == [tmp_path / "outside" / "a.txt"]


async def test_a_directory_swapped_for_a_symlink_while_a_write_awaits_approval_is_refused(tmp_path):
    cwd, outside = tmp_path / "work", tmp_path / "outside"
    (cwd / "sub").mkdir(parents=True)
    outside.mkdir()

    def swap() -> None:  # a background command, while the user looks at the request
        (cwd / "sub").rename(cwd / "sub.old")
        os.symlink(outside, cwd / "sub")

    result = await call(WriteFileTool, cwd, {"path": "sub/a.txt", "content": "escaped"}, Services(while_asked=swap))
    assert result.error == "sub/a.txt: a symlink appeared in its path since it was checked; nothing was done"
    assert list(outside.iterdir()) == []
