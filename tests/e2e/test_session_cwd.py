"""A session's cwd is resolved the same way at create and at a change: workspace-relative, symlinks resolved."""

from __future__ import annotations

import os

from functools import partial

import httpx
import trio

from actors import Settings, open_daemon
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
