"""``trellis serve`` plays the showcase demo by default; ``python -m transport`` keeps the todo demo."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import trio

from tests.trellis.helpers import client_env


async def first_permission_title(command: list[str], tmp_path) -> str | None:
    """Start the daemon ``command``, send one prompt, and return the title of its first permission request
    (``None`` when the turn ends without one)."""
    state = tmp_path / "state"
    process = await trio.lowlevel.open_process([*command, "--port", "0", "--state-dir", str(state)],
                                               env=client_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        with trio.fail_after(30):
            line = b""
            while b"\n" not in line:
                line += await process.stdout.receive_some()
            url = line.decode().split()[-1]
            token = (state / "token").read_text().strip()
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                         trust_env=False) as client:
                sid = (await client.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
                await client.post(f"/session/{sid}/prompt", json={"prompt": [{"type": "text", "text": "hi"}]})
                async with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as events:
                    async for text in events.aiter_lines():
                        if text.startswith("event: turn_complete"):
                            return None
                        if text.startswith("data: "):
                            frame = json.loads(text[6:])
                            if frame.get("type") == "permission_request":
                                return frame["data"]["toolCall"]["title"]
    finally:
        process.terminate()
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await process.wait()
    return None


async def test_trellis_serve_plays_the_showcase_and_python_m_transport_the_todo_demo(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert await first_permission_title([sys.executable, "-m", "trellis", "serve"], tmp_path / "a") == "ls -la"
    assert await first_permission_title([sys.executable, "-m", "transport"], tmp_path / "b") is None
