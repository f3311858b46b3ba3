"""The file backend (actors/tools/access.py): local files, and another backend behind the same seam."""

from __future__ import annotations

import errno
import os
import re
import socket
import stat
import threading
import time
from pathlib import Path

import pytest
import trio

from actors.tools import EditTool, GlobTool, GrepTool, ReadFileTool, WriteFileTool
from actors.tools import access
from actors.tools.access import FILE_THREADS, LOCAL, NotRegularFile, NotText, TooLarge, files_of, tool_threads
from tests.actors.tools.harness import Services, call, fifo_valve, runtime


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


# ----------------------------------------------------------------- only regular files, on threads of their own


@pytest.fixture
def specials(tmp_path):
    """A FIFO and a listening Unix socket in the cwd, and two devices: path -> the kind the tools name."""
    fifo, sock_path = tmp_path / "pipe", tmp_path / "sock"
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    sock.listen()
    try:
        yield {fifo: "a named pipe (FIFO)", sock_path: "a socket", Path("/dev/zero"): "a character device",
               Path("/dev/null"): "a character device"}
    finally:
        sock.close()


async def test_local_files_refuse_what_is_not_a_regular_file_naming_its_kind(tmp_path, specials):
    # A FIFO blocked open() until a writer came (a worker thread no cancel reached); /dev/zero never ends.
    with trio.fail_after(30):
        async with fifo_valve(tmp_path / "pipe") as valve:
            for path, kind in specials.items():
                with pytest.raises(NotRegularFile, match=re.escape(f"it is {kind}, not a regular file")):
                    await LOCAL.read_text(str(path), max_bytes=10)
                with pytest.raises(NotRegularFile, match=re.escape(f"it is {kind}, not a regular file")):
                    await LOCAL.write_text(str(path), "written")
    assert valve.stuck == 0  # no reader ever waited on a FIFO
    assert stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)


async def test_read_write_and_edit_of_a_fifo_or_a_device_fail_naming_the_path_and_its_kind(tmp_path, specials):
    outside = Services(runtime=runtime(paths_outside_cwd=True))
    with trio.fail_after(30):
        async with fifo_valve(tmp_path / "pipe") as valve:
            read = await call(ReadFileTool, tmp_path, {"path": "pipe"})
            written = await call(WriteFileTool, tmp_path, {"path": "pipe", "content": "x"})
            edited = await call(EditTool, tmp_path, {"path": "sock", "old_string": "a", "new_string": "b"})
            zero = await call(ReadFileTool, tmp_path, {"path": "/dev/zero"}, outside)
            null = await call(WriteFileTool, tmp_path, {"path": "/dev/null", "content": "x"}, outside)
    assert valve.stuck == 0  # no reader ever waited on a FIFO
    assert read.error == ("cannot read pipe: it is a named pipe (FIFO), not a regular file; the file tools use "
                          "regular files only")
    assert written.error == ("pipe cannot be changed as text: it is a named pipe (FIFO), not a regular file; the "
                             "file tools use regular files only")
    assert edited.error.startswith("sock cannot be changed as text: it is a socket, not a regular file")
    assert zero.error.startswith("cannot read /dev/zero: it is a character device, not a regular file")
    assert null.error.startswith("/dev/null cannot be changed as text: it is a character device")


async def test_a_fifo_swapped_in_after_the_check_is_refused_through_the_descriptor(tmp_path, monkeypatch):
    # The path was a regular file when looked at, a FIFO when opened: O_NONBLOCK and the fstat catch it.
    path = tmp_path / "swapped"
    real_open = os.open

    def swapping_open(name, flags, *args, **kwargs):
        if name == "swapped":
            os.unlink(path)
            os.mkfifo(path)
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swapping_open)
    with trio.fail_after(30):
        async with fifo_valve(path) as valve:
            path.write_text("regular\n")
            with pytest.raises(NotRegularFile, match="named pipe"):
                await LOCAL.read_text(str(path))
            path.unlink()
            path.write_text("regular\n")
            with pytest.raises(NotRegularFile, match="named pipe"):  # no reader: ENXIO, said as what it is
                await LOCAL.write_text(str(path), "x")
    assert valve.stuck == 0  # no reader ever waited on a FIFO


async def test_the_file_tools_do_not_wait_for_trios_default_worker_threads(tmp_path):
    # Storage and every other to_thread user share trio's default limiter: the tools have their own.
    (tmp_path / "a.txt").write_text("alpha\n")
    default = trio.to_thread.current_default_thread_limiter()
    holders = [object() for _ in range(int(default.total_tokens))]
    for holder in holders:
        default.acquire_on_behalf_of_nowait(holder)
    try:
        with trio.fail_after(10):
            assert await LOCAL.read_text(str(tmp_path / "a.txt")) == "alpha\n"
            await LOCAL.write_text(str(tmp_path / "b.txt"), "beta\n")
            grep = await call(GrepTool, tmp_path, {"pattern": "alpha"})
            glob = await call(GlobTool, tmp_path, {"pattern": "*.txt"})
    finally:
        for holder in holders:
            default.release_on_behalf_of(holder)
    assert grep.content == "a.txt:1:alpha" and glob.content == "a.txt\nb.txt"


async def test_a_cancelled_read_is_abandoned_and_stuck_reads_hold_only_the_tools_threads(tmp_path, monkeypatch):
    # A read stuck in the kernel (a hung network mount: nothing the tools can refuse by looking) must not hold
    # the turn, and many of them take at most FILE_THREADS threads, none of trio's default limiter's.
    (tmp_path / "a.txt").write_text("alpha\n")
    gate = threading.Event()

    def stuck(path, max_bytes):
        gate.wait(20)
        raise OSError(errno.EIO, "stuck")

    monkeypatch.setattr(access, "_read", stuck)
    limiter = tool_threads()
    try:
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            for _ in range(FILE_THREADS + 4):
                nursery.start_soon(LOCAL.read_text, str(tmp_path / "a.txt"))
            with trio.fail_after(10):
                while limiter.borrowed_tokens < FILE_THREADS:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()  # the turn is cancelled: every read returns now
        assert time.monotonic() - started < 10
        assert limiter.borrowed_tokens == FILE_THREADS  # the stuck threads still hold the tools' tokens...
        assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0  # ...and none of trio's
    finally:
        gate.set()
    with trio.fail_after(10):
        while limiter.borrowed_tokens:
            await trio.sleep(0.01)
