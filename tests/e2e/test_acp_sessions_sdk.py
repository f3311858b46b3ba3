"""The ACP SDK's client over stdio: session/list, resume and fork, the slash commands and image prompts.

The agent (``python -m transport acp``) runs the ``openai`` provider against the
loopback fake OpenAI server, served from a thread of this process, so every
model request the agent makes can be read here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

acp = pytest.importorskip("acp")
from acp import image_block, spawn_agent_process, text_block  # noqa: E402

from tests.e2e.test_acp_stdio import TIMEOUT, RecordingClient  # noqa: E402
from transport.fake_openai import FakeOpenAI  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


class FakeServerThread:
    """A :class:`FakeOpenAI` answering ``ok`` to everything, served by Trio in a thread."""

    def __init__(self) -> None:
        self.fake = FakeOpenAI()
        self.url = ""
        self._ready = threading.Event()
        self._token: Any = None
        self._scope: Any = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            self.url = await nursery.start(self.fake.serve)
            self._token = trio.lowlevel.current_trio_token()
            self._scope = nursery.cancel_scope
            self._ready.set()

    def __enter__(self) -> FakeServerThread:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(10)

    def last(self) -> dict[str, Any]:
        return self.fake.requests[-1].body

    def user_texts(self) -> list[Any]:
        return [m["content"] for m in self.last()["messages"] if m["role"] == "user"]


def spawn(client: Any, tmp_path: Path, url: str) -> Any:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"model": {"provider": "openai", "baseUrl": url, "name": "fake-model",
                                              "apiKey": "sk-test", "supportsImages": True}}))
    command = (sys.executable, "-m", "transport", "acp", "--settings", str(settings),
               "--state-dir", str(tmp_path / "state"))
    return spawn_agent_process(client, *command, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))


def commands_of(client: RecordingClient) -> list[list[str]]:
    return [[c.name for c in u.available_commands] for u in client.updates
            if u.session_update == "available_commands_update"]


def test_list_resume_fork_commands_and_images_with_the_sdk(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    with FakeServerThread() as server:

        async def first() -> str:
            client = RecordingClient()
            async with spawn(client, tmp_path, server.url) as (conn, _):
                init = await asyncio.wait_for(conn.initialize(protocol_version=1), TIMEOUT)
                caps = init.agent_capabilities
                assert caps.session_capabilities.list is not None and caps.session_capabilities.resume is not None
                assert caps.session_capabilities.fork is not None and caps.prompt_capabilities.image is True
                session = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=[]), TIMEOUT)
                sid = session.session_id
                await client.wait_for(lambda u: u.session_update == "available_commands_update")
                assert commands_of(client) == [["compact", "clear", "model"]]

                async def prompt(session_id: str, *blocks: Any) -> None:
                    done = await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=list(blocks)), TIMEOUT)
                    assert done.stop_reason == "end_turn"

                await prompt(sid, text_block("one"))
                listed = await asyncio.wait_for(conn.list_sessions(cwd=str(work)), TIMEOUT)
                assert [(s.session_id, s.cwd) for s in listed.sessions] == [(sid, str(work))]

                forked = await asyncio.wait_for(conn.fork_session(session_id=sid, cwd=str(work)), TIMEOUT)
                assert forked.session_id != sid
                await prompt(forked.session_id, text_block("two"))
                assert server.user_texts() == ["one", "two"]  # the fork carries the conversation
                assert len(commands_of(client)) == 2

                requests = len(server.fake.requests)
                await prompt(sid, text_block("/model other-model"))
                await prompt(sid, text_block("three"))
                assert len(server.fake.requests) == requests + 1  # the command called no model
                assert server.last()["model"] == "other-model"

                await prompt(sid, text_block("/clear"))
                await prompt(sid, text_block("four"))
                assert server.user_texts() == ["four"]  # no earlier messages

                await prompt(sid, text_block("look"), image_block(PNG, "image/png"))
                parts = server.user_texts()[-1]
                assert parts[1] == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
            return sid

        async def second(sid: str) -> None:
            client = RecordingClient()
            async with spawn(client, tmp_path, server.url) as (conn, _):
                await asyncio.wait_for(conn.initialize(protocol_version=1), TIMEOUT)
                listed = await asyncio.wait_for(conn.list_sessions(), TIMEOUT)
                stored = {s.session_id: s for s in listed.sessions}
                assert sid in stored and len(stored) == 2  # the session and its fork, restorable
                assert stored[sid].field_meta["trellis.dev/live"] is False
                resumed = await asyncio.wait_for(conn.resume_session(session_id=sid, cwd=str(work)), TIMEOUT)
                assert resumed.modes.current_mode_id == "default"
                # Resuming replays nothing (unlike session/load): only the commands were announced.
                assert [u.session_update for u in client.updates] == ["available_commands_update"]
                done = await asyncio.wait_for(conn.prompt(session_id=sid, prompt=[text_block("five")]), TIMEOUT)
                assert done.stop_reason == "end_turn"
                assert server.user_texts()[0] == "four" and server.user_texts()[-1] == "five"

        session_id = asyncio.run(first())
        asyncio.run(second(session_id))
