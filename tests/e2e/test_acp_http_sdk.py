"""The official ACP SDK's (experimental) Streamable HTTP client drives ``/acp`` of a daemon subprocess."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

acp = pytest.importorskip("acp")
httpx = pytest.importorskip("httpx")
from acp import connect_to_agent, text_block  # noqa: E402
from acp.http import create_http_stream  # noqa: E402

from tests.e2e.test_acp_stdio import TIMEOUT, RecordingClient, call, write_script  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# The daemon's HTTP app with /acp (what `python -m transport` serves once /acp is wired into create_app).
SERVER = """
import sys, trio
from functools import partial
from hypercorn.config import Config
from hypercorn.trio import serve
from actors import load_script, open_daemon
from tests.transport.acp.test_http import acp_app

async def main():
    async with open_daemon(model=load_script(sys.argv[1]), state_dir=sys.argv[2]) as daemon:
        app, _ = acp_app(daemon, 1.0)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = config.errorlog = None
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(partial(serve, app, config, shutdown_trigger=trio.sleep_forever))
            print(binds[0], flush=True)

trio.run(main)
"""


def test_the_sdk_http_client_runs_a_prompt_with_a_permission(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = write_script(tmp_path / "script.json", [{"text": "Asking. "}, call("shell", command="echo via-http > f")],
                          [{"text": "Done."}])
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(script), str(tmp_path / "state")], cwd=str(ROOT),
                              env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()  # type: ignore[union-attr]
        assert url.startswith("http://127.0.0.1:")

        async def scenario() -> None:
            client = RecordingClient()
            async with httpx.AsyncClient(timeout=httpx.Timeout(None)) as http:
                transport = create_http_stream(url + "/acp", client=http)
                conn = connect_to_agent(client, transport)
                try:
                    init = await asyncio.wait_for(conn.initialize(protocol_version=1), TIMEOUT)
                    assert init.agent_capabilities.load_session is True
                    session = await asyncio.wait_for(conn.new_session(cwd=str(work), mcp_servers=[]), TIMEOUT)
                    done = await asyncio.wait_for(
                        conn.prompt(session_id=session.session_id, prompt=[text_block("go")]), TIMEOUT)
                    assert done.stop_reason == "end_turn"
                    [asked] = client.permission_requests
                    assert asked["toolCall"].title == "echo via-http > f"
                    texts = [u.content.text for u in client.updates if u.session_update == "agent_message_chunk"]
                    assert texts == ["Asking. ", "Done."]
                finally:
                    await conn.close()

        asyncio.run(scenario())
    finally:
        server.terminate()
        server.wait(10)
    assert (work / "f").read_text() == "via-http\n"
