"""A session's cwd is resolved the same way at create and at a change: workspace-relative, symlinks resolved."""

from __future__ import annotations

import os

from functools import partial

import httpx
import trio

from actors import Settings, open_daemon
from tests.e2e.sse_client import frames
from transport import serve


async def test_create_and_change_resolve_alike_and_refuse_the_state_directory(tmp_path):
    (tmp_path / "ws" / "real").mkdir(parents=True)
    (tmp_path / "ws" / "link").symlink_to(tmp_path / "ws" / "real")
    real = os.path.realpath(tmp_path / "ws" / "real")
    with trio.fail_after(20):
        async with open_daemon(Settings(), state_dir=tmp_path / "state", workspace=str(tmp_path / "ws")) as daemon:
            (tmp_path / "state" / "inner").mkdir()
            async with trio.open_nursery() as nursery:
                url = await nursery.start(partial(serve, daemon, port=0, token="t"))
                async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer t"}) as client:
                    created = (await client.post("/session", json={"cwd": "link"})).json()
                    assert created["workspaceCwd"] == real
                    sid = created["sessionId"]
                    other = (await client.post("/session", json={"cwd": "."})).json()["sessionId"]
                    # relative to the workspace at a change too, not to the session's current cwd
                    moved = await client.post(f"/session/{other}/cwd", json={"cwd": "link"})
                    assert moved.json() == {"workspaceCwd": real}
                    for path in (str(tmp_path / "state"), str(tmp_path / "state" / "inner"), "../state/inner"):
                        refused = await client.post("/session", json={"cwd": path})
                        assert refused.status_code == 400 and refused.json()["code"] == "invalid_cwd"
                        assert "inside the state directory" in refused.json()["error"]
                        changed = await client.post(f"/session/{sid}/cwd", json={"cwd": path})
                        assert changed.status_code == 400 and changed.json()["code"] == "invalid_cwd"
                    assert (await client.get(f"/session/{sid}/status")).json()["workspaceCwd"] == real
                nursery.cancel_scope.cancel()


async def test_a_cwd_with_a_nul_is_the_same_clear_400_on_every_route(tmp_path):
    """``os.path.realpath`` raises on a NUL; no route may let that out as a 500, nor take the value."""
    (tmp_path / "ws").mkdir()
    work = str(tmp_path / "ws")
    refusal = {"error": "cwd contains a NUL character (\\u0000), which no path can hold", "code": "invalid_cwd",
               "path": "$.cwd"}
    with trio.fail_after(20):
        async with open_daemon(Settings(), state_dir=tmp_path / "state", workspace=work) as daemon:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(partial(serve, daemon, port=0, token="t"))
                async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer t"}) as client:
                    live = (await client.post("/session", json={})).json()["sessionId"]
                    stored = (await client.post("/session", json={})).json()["sessionId"]
                    assert (await client.delete(f"/session/{stored}")).status_code in (200, 204)
                    assert daemon.restorable(stored)
                    listed = (await client.get("/session")).json()
                    for cwd in ("\x00", f"{work}\x00", f"{work}/\x00/x", "\x00" * 4096):
                        answers = [
                            await client.post("/session", json={"cwd": cwd}),
                            await client.post("/session", json={"cwd": cwd, "sessionId": "fresh"}),
                            await client.post(f"/session/{live}/cwd", json={"cwd": cwd}),
                            await client.post(f"/session/{live}/load", json={"cwd": cwd}),
                            await client.post(f"/session/{live}/resume", json={"cwd": cwd}),
                            await client.post(f"/session/{stored}/load", json={"cwd": cwd}),
                            await client.post(f"/session/{stored}/resume", json={"cwd": cwd}),
                        ]
                        for r in answers:
                            assert (r.status_code, r.json()) == (400, refusal), (r.request.url, r.text)
                    # Nothing started, restored or moved.
                    assert (await client.get("/session")).json() == listed
                    assert (await client.get(f"/session/{live}/status")).json()["workspaceCwd"] == \
                        os.path.realpath(work)

                    # ACP's session/new and session/load: invalid params naming $.cwd, in the same words.
                    r = await client.post("/acp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                                        "params": {"protocolVersion": 1}})
                    connection = r.headers["Acp-Connection-Id"]
                    headers = {"Acp-Connection-Id": connection}
                    for rpc_id, method, params in ((2, "session/new", {}), (3, "session/load", {"sessionId": stored})):
                        r = await client.post("/acp", headers=headers, json={
                            "jsonrpc": "2.0", "id": rpc_id, "method": method,
                            "params": {**params, "cwd": f"{work}\x00", "mcpServers": []}})
                        assert r.status_code == 202, r.text
                    answers = {}
                    async with client.stream("GET", "/acp", headers=headers) as stream:
                        async for frame in frames(stream):
                            answers[frame.get("id")] = frame
                            if {2, 3} <= set(answers):
                                break
                    for rpc_id in (2, 3):
                        error = answers[rpc_id]["error"]
                        assert error["code"] == -32602, error
                        assert refusal["error"] in error["message"] and "$.cwd" in str(error), error
                nursery.cancel_scope.cancel()
