"""The official ACP SDK's (experimental) Streamable HTTP client drives ``/acp`` of ``python -m transport``."""

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
from transport.auth import read_token_file  # noqa: E402
from transport.process_image import SECRET_ENV  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_the_sdk_http_client_runs_a_prompt_with_a_permission(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = write_script(tmp_path / "script.json", [{"text": "Asking. "}, call("shell", command="echo via-http > f")],
                          [{"text": "Done."}])
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV} | {"PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "transport", "--port", "0", "--script", str(script),
                               "--state-dir", str(state), "--acp-grace", "1"],
                              cwd=str(ROOT), env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("listening on http://127.0.0.1:"), line
        url = line.split()[-1]
        token = read_token_file(state)  # minted at start; the daemon only names the file

        async def scenario() -> None:
            client = RecordingClient()
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(timeout=httpx.Timeout(None), headers=headers) as http:
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
