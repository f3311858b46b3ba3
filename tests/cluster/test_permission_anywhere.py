"""``POST /permission/:requestId`` (no session in the path) on a node that does not own the session: the vote
reaches the node where the request is pending (new-user report 4, D16)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import trio

from .nodes import cluster, events_until, text, wait_turn

WRITE = {"responses": [
    [{"tool_call": {"id": "call_write", "name": "write_file", "arguments": {"path": "NOTES.md", "content": "hi\n"}}}],
    [{"text": "written"}],
]}
VOTE = {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}


def owner_of(url: str, sid: str) -> str | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT node_id FROM trellis_leases WHERE session_id = %s", (sid,)).fetchone()
    return row[0] if row else None


async def test_a_vote_sent_to_a_non_owner_reaches_the_owner(tmp_path: Path, postgres_url: str,
                                                            redis_url: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        nodes = {"a": await c.start("a", WRITE), "b": await c.start("b", WRITE)}
        created = await nodes["a"].client.post("/session", json={"cwd": str(work)})
        assert created.status_code == 200, created.text
        sid = created.json()["sessionId"]
        owner = nodes[owner_of(postgres_url, sid)]
        other = nodes["b" if owner.name == "a" else "a"]
        prompt = (await owner.client.post(f"/session/{sid}/prompt", json=text("write the notes"))).json()
        asked = await events_until(other.client, sid, lambda e: e.get("type") == "permission_request")
        request_id = asked[-1]["data"]["requestId"]
        with trio.fail_after(20):
            bad = await other.client.post(f"/permission/{request_id}", json={"outcome": "maybe"})
            assert bad.status_code == 400, bad.text  # a bad body is refused where it arrives
            unknown = await other.client.post("/permission/perm-nope", json=VOTE)
            assert unknown.status_code == 404, unknown.text
            assert unknown.json()["code"] == "permission_not_found"
            assert "on any node" in unknown.json()["error"]
            voted = await other.client.post(f"/permission/{request_id}", json=VOTE)
            assert voted.status_code == 200, voted.text
            assert voted.json() == {"accepted": True, "requestId": request_id}
        turn = await wait_turn(other.client, sid, prompt["promptId"])
        assert turn["state"] == "completed", turn
        assert (work / "NOTES.md").read_text() == "hi\n"
        with trio.fail_after(20):
            again = await other.client.post(f"/permission/{request_id}", json=VOTE)
        assert again.status_code == 404 and again.json()["code"] == "permission_not_found", again.text
