"""An ACP client's filesystem and terminal stand in for the daemon's (``fs/*``, ``terminal/*``).

The official SDK's client drives ``python -m transport acp`` over stdio with the
scripted model; the client answers the agent's ``fs/read_text_file``,
``fs/write_text_file`` and ``terminal/*`` requests itself, as an editor would.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

acp = pytest.importorskip("acp")
from acp import schema, text_block  # noqa: E402

from tests.e2e.test_acp_stdio import TIMEOUT, RecordingClient, call, spawn, write_script  # noqa: E402

BUFFER = "unsaved buffer\n"


class EditorClient(RecordingClient):
    """A client with fs and terminal capabilities: its buffers differ from the disk; its terminal is fake."""

    def __init__(self, buffers: dict[str, str] | None = None, *, exits: bool = True) -> None:
        super().__init__()
        self.buffers = dict(buffers or {})
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.exits = exits  # False: the command runs until terminal/kill
        self.killed = asyncio.Event()
        self.created = asyncio.Event()

    async def read_text_file(self, session_id: str, path: str, line: int | None = None, limit: int | None = None,
                             **kwargs: Any) -> schema.ReadTextFileResponse:
        self.calls.append(("fs/read_text_file", {"path": path}))
        if path not in self.buffers:
            raise acp.RequestError.resource_not_found(path)
        return schema.ReadTextFileResponse(content=self.buffers[path])

    async def write_text_file(self, session_id: str, path: str, content: str,
                              **kwargs: Any) -> schema.WriteTextFileResponse:
        self.calls.append(("fs/write_text_file", {"path": path, "content": content}))
        self.buffers[path] = content
        return schema.WriteTextFileResponse()

    async def create_terminal(self, session_id: str, command: str, args: list[str] | None = None,
                              env: Any = None, cwd: str | None = None, output_byte_limit: int | None = None,
                              **kwargs: Any) -> schema.CreateTerminalResponse:
        self.calls.append(("terminal/create", {"command": command, "args": args, "cwd": cwd}))
        self.created.set()
        return schema.CreateTerminalResponse(terminal_id="term-1")

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str,
                                     **kwargs: Any) -> schema.WaitForTerminalExitResponse:
        self.calls.append(("terminal/wait_for_exit", {"terminalId": terminal_id}))
        if not self.exits:
            await self.killed.wait()
            return schema.WaitForTerminalExitResponse(signal="SIGKILL")
        return schema.WaitForTerminalExitResponse(exit_code=0)

    async def terminal_output(self, session_id: str, terminal_id: str,
                              **kwargs: Any) -> schema.TerminalOutputResponse:
        self.calls.append(("terminal/output", {"terminalId": terminal_id}))
        return schema.TerminalOutputResponse(output="hi from the editor\n", truncated=False,
                                             exit_status=schema.TerminalExitStatus(exit_code=0))

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> schema.KillTerminalResponse:
        self.calls.append(("terminal/kill", {"terminalId": terminal_id}))
        self.killed.set()
        return schema.KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str,
                               **kwargs: Any) -> schema.ReleaseTerminalResponse:
        self.calls.append(("terminal/release", {"terminalId": terminal_id}))
        return schema.ReleaseTerminalResponse()

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]


def capabilities(*, fs: bool = False, terminal: bool = False) -> schema.ClientCapabilities:
    return schema.ClientCapabilities(fs=schema.FileSystemCapabilities(read_text_file=fs, write_text_file=fs),
                                     terminal=terminal)


def results(client: RecordingClient) -> list[Any]:
    """The completed (or failed) tool call updates, in order."""
    return [u for u in client.updates if u.session_update == "tool_call_update" and u.status in ("completed", "failed")]


def texts_of(update: Any) -> list[str]:
    return [c.content.text for c in update.content or [] if c.type == "content"]


async def open_yolo(conn: Any, work: Path, caps: schema.ClientCapabilities) -> str:
    await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps)
    session = await conn.new_session(cwd=str(work), mcp_servers=[])
    await conn.set_session_mode(session_id=session.session_id, mode_id="yolo")
    return session.session_id


def test_file_tools_use_the_clients_buffers_and_write_nothing_to_disk(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("on disk\n")
    a, b = str(work / "a.txt"), str(work / "b.txt")
    script = write_script(
        tmp_path / "script.json",
        [call("read_file", path="a.txt"), call("write_file", path="b.txt", content="new\n"),
         call("edit", path="a.txt", old_string="unsaved", new_string="edited"), call("read_file", path="../x")],
        [{"text": "done"}],
    )

    async def scenario() -> None:
        client = EditorClient({a: BUFFER})
        async with spawn(client, tmp_path / "state", script) as (conn, _):
            session_id = await open_yolo(conn, work, capabilities(fs=True))
            done = await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=[text_block("go")]), TIMEOUT)
            assert done.stop_reason == "end_turn"
        read, written, edited, refused = results(client)
        assert texts_of(read) == [BUFFER]  # the editor's unsaved buffer, not the disk
        assert written.status == "completed" and edited.status == "completed"
        assert refused.status == "failed"  # a path outside the cwd never reaches the client
        assert client.buffers[b] == "new\n"
        assert client.buffers[a] == "edited buffer\n"
        writes = [c for c in client.calls if c[0] == "fs/write_text_file"]
        assert writes == [("fs/write_text_file", {"path": b, "content": "new\n"}),
                          ("fs/write_text_file", {"path": a, "content": "edited buffer\n"})]
        assert all(c[1]["path"] in (a, b) for c in client.calls)
        # Nothing was written to disk by the daemon.
        assert (work / "a.txt").read_text() == "on disk\n"
        assert not (work / "b.txt").exists()

    asyncio.run(scenario())


def test_without_the_capabilities_files_and_shells_are_local(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("on disk\n")
    script = write_script(tmp_path / "script.json",
                          [call("read_file", path="a.txt"), call("shell", command="echo local > out.txt")],
                          [{"text": "done"}])

    async def scenario() -> None:
        client = EditorClient({str(work / "a.txt"): BUFFER})
        async with spawn(client, tmp_path / "state", script) as (conn, _):
            session_id = await open_yolo(conn, work, capabilities())
            done = await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=[text_block("go")]), TIMEOUT)
            assert done.stop_reason == "end_turn"
        read, shell = results(client)
        assert texts_of(read) == ["on disk\n"]
        assert shell.status == "completed"
        assert client.calls == []  # never asked
        assert (work / "out.txt").read_text() == "local\n"

    asyncio.run(scenario())


def test_shell_runs_in_the_clients_terminal_embedded_in_the_tool_call(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = write_script(tmp_path / "script.json", [call("shell", command="echo hi > local.txt")],
                          [{"text": "done"}])

    async def scenario() -> None:
        client = EditorClient()
        async with spawn(client, tmp_path / "state", script) as (conn, _):
            session_id = await open_yolo(conn, work, capabilities(terminal=True))
            done = await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=[text_block("go")]), TIMEOUT)
            assert done.stop_reason == "end_turn"
        assert client.methods() == ["terminal/create", "terminal/wait_for_exit", "terminal/output",
                                    "terminal/release"]
        created = client.calls[0][1]
        assert created == {"command": "/bin/sh", "args": ["-c", "echo hi > local.txt"], "cwd": str(work)}
        embedded = [u for u in client.updates if u.session_update == "tool_call_update"
                    and any(c.type == "terminal" for c in u.content or [])]
        assert embedded and embedded[0].content[0].terminal_id == "term-1"
        [result] = results(client)
        assert result.status == "completed"
        assert texts_of(result) == ["hi from the editor\n\n[exit code 0]"]
        assert [c.terminal_id for c in result.content if c.type == "terminal"] == ["term-1"]
        assert not (work / "local.txt").exists()  # it ran on the editor's side, not here

    asyncio.run(scenario())


def test_a_cancelled_turn_kills_and_releases_the_terminal(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = write_script(tmp_path / "script.json", [call("shell", command="sleep 100")], [{"text": "never"}])

    async def scenario() -> None:
        client = EditorClient(exits=False)
        async with spawn(client, tmp_path / "state", script) as (conn, _):
            session_id = await open_yolo(conn, work, capabilities(terminal=True))
            running = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block("go")]))
            await asyncio.wait_for(client.created.wait(), TIMEOUT)
            await client.wait_for(lambda u: u.session_update == "tool_call_update"
                                  and any(c.type == "terminal" for c in u.content or []))
            await conn.cancel(session_id=session_id)
            cancelled = await asyncio.wait_for(running, TIMEOUT)
            assert cancelled.stop_reason == "cancelled"
        methods = client.methods()
        assert methods[0] == "terminal/create"
        assert "terminal/kill" in methods
        assert methods[-1] == "terminal/release"
        assert methods.index("terminal/kill") < methods.index("terminal/release")

    asyncio.run(scenario())
