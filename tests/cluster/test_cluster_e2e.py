"""Three real daemons on one PostgreSQL and one Redis: any node takes any request, failover, fencing, drain."""

from __future__ import annotations

import secrets
import signal
from pathlib import Path

import psycopg
import trio

from .nodes import LEASE, answers, cluster, events_until, text, wait_turn

STALLED = {"responses": [{"delay": 300, "steps": [{"text": "never"}]}]}


def owner_of(url: str, sid: str) -> tuple[str | None, int]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT node_id, epoch FROM trellis_leases WHERE session_id = %s", (sid,)).fetchone()
    return (row[0], row[1]) if row else (None, 0)


def journal(url: str, sid: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT record FROM trellis_journal WHERE session_id = %s ORDER BY seq",
                                           (sid,))]


async def wait_owner(url: str, sid: str, not_node: str, timeout: float) -> tuple[str, float]:
    """The node that owns ``sid`` once it is not ``not_node``, and how long that took."""
    start = trio.current_time()
    with trio.fail_after(timeout):
        while True:
            node, _ = await trio.to_thread.run_sync(owner_of, url, sid)
            if node is not None and node != not_node:
                return node, trio.current_time() - start
            await trio.sleep(0.05)


async def test_a_prompt_admitted_on_a_non_owner_runs_on_the_owner(tmp_path, postgres_url, redis_url):
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        nodes = {"a": await c.start("a", answers("a")), "b": await c.start("b", answers("b"))}
        created = (await nodes["b"].client.post("/session", json={})).json()  # placed: a, unless a seemed busy
        sid = created["sessionId"]
        owner = owner_of(postgres_url, sid)[0]
        a, b = nodes[owner], nodes["b" if owner == "a" else "a"]  # a: the owner; b: the other one
        for bad, code in (({"prompt": "not blocks"}, "invalid_request"), ({"prompt": []}, "empty_prompt")):
            refused = await b.client.post(f"/session/{sid}/prompt", json=bad)
            assert refused.status_code == 400 and refused.json()["code"] == code, refused.text
        with psycopg.connect(postgres_url) as conn:  # refused on b: nothing reached the inbox
            assert conn.execute("SELECT count(*) FROM trellis_inbox").fetchone() == (0,)
        admitted = await b.client.post(f"/session/{sid}/prompt", json=text("hello from b's client"))
        assert admitted.status_code == 202, admitted.text
        body = admitted.json()
        assert set(body) == {"promptId", "lastEventId", "eventEpoch"}
        status = (await a.client.get(f"/session/{sid}/status")).json()
        assert body["eventEpoch"] is not None
        turn = await wait_turn(a.client, sid, body["promptId"])
        assert turn["state"] == "completed"
        transcript = (await a.client.get(f"/session/{sid}/transcript")).json()["entries"]
        said = [e["message"]["content"] for e in transcript if e.get("type") == "message"]
        assert said[:2] == ["hello from b's client", f"{owner} answer 0"]  # the owner's model answered
        assert status["sessionId"] == sid
        # Everything else reaches the owner too: b forwards it and answers as a did.
        forwarded = await b.client.get(f"/session/{sid}/turns/{body['promptId']}")
        assert forwarded.status_code == 200 and forwarded.json()["state"] == "completed"
        missing = await b.client.get(f"/session/{sid}/turns/prompt-nope")
        assert missing.status_code == 404 and missing.json()["code"] == "turn_not_found"
        # Only one node runs it: b never starts it while a holds it, however it is asked.
        for path, body in (("/session", {"sessionId": sid}), (f"/session/{sid}/load", {})):
            refused = await b.local("POST", path, json=body)
            assert refused.status_code == 503 and refused.json()["code"] == "session_elsewhere", refused.text
        assert owner_of(postgres_url, sid)[0] == owner
        attached = await b.client.post("/session", json={"sessionId": sid})  # routed: attaches on the owner
        assert attached.status_code == 200 and attached.json()["attached"] is True


async def test_sse_on_another_node_follows_the_session(tmp_path, postgres_url, redis_url):
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        a = await c.start("a", answers("a"))
        b = await c.start("b", answers("b"))
        sid = (await a.client.post("/session", json={})).json()["sessionId"]
        first = (await a.client.post(f"/session/{sid}/prompt", json=text("one"))).json()
        await wait_turn(a.client, sid, first["promptId"])
        on_a = await events_until(a.client, sid, lambda e: e["type"] == "replay_complete", last_event_id=0)
        on_b = await events_until(b.client, sid, lambda e: e["type"] == "replay_complete", last_event_id=0)
        ids_a = [e["id"] for e in on_a if "id" in e]
        assert ids_a and [e["id"] for e in on_b if "id" in e] == ids_a  # the same events, the same ids
        assert [e["type"] for e in on_b if "id" in e] == [e["type"] for e in on_a if "id" in e]

        async def follow(results: list) -> None:
            results.extend(await events_until(b.client, sid, lambda e: e["type"] == "turn_complete",
                                              last_event_id=ids_a[-1], epoch=first["eventEpoch"]))

        live: list = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow, live)
            await trio.sleep(0.3)  # the follower is tailing before the prompt
            second = (await a.client.post(f"/session/{sid}/prompt", json=text("two"))).json()
        ids = [e["id"] for e in live if "id" in e]
        assert ids[0] == ids_a[-1] + 1 and ids == list(range(ids[0], ids[0] + len(ids)))  # no gap, no duplicate
        assert live[-1]["promptId"] == second["promptId"]


async def test_sigkill_of_the_owner_mid_turn_fails_over(tmp_path, postgres_url, redis_url):
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        a = await c.start("a", STALLED)
        b = await c.start("b", answers("b"))
        await c.start("c", answers("c"))
        sid = (await a.client.post("/session", json={})).json()["sessionId"]
        admitted = [(await a.client.post(f"/session/{sid}/prompt", json=text(f"prompt {n}"))).json()
                    for n in range(3)]
        ids = [p["promptId"] for p in admitted]
        epoch = admitted[0]["eventEpoch"]
        with trio.fail_after(10):
            while (await a.client.get(f"/session/{sid}/turns/{ids[0]}")).json()["state"] != "running":
                await trio.sleep(0.02)
        seen = await events_until(a.client, sid, lambda e: e["type"] == "replay_complete", last_event_id=0)
        last_seen = max(e["id"] for e in seen if "id" in e)
        a.kill()
        codes: list[int] = []

        async def poll() -> None:  # a client asking all along: it races the takeover on b
            while True:
                r = await b.client.get(f"/session/{sid}/turns/{ids[0]}")
                codes.append(r.status_code)
                if r.status_code == 200 and r.json()["state"] == "error":
                    return
                await trio.sleep(0.005)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            node, took = await wait_owner(postgres_url, sid, "a", timeout=4 * LEASE + 5)
        # Within the lease time after a's last renewal, plus at most one claim round (lease/3) and slack.
        assert node in ("b", "c") and took <= LEASE * 4 / 3 + 1.0, took
        assert 500 not in codes and codes[-1] == 200  # 503 owner_unreachable while a's lease ran, then the answer
        turns = [await wait_turn(b.client, sid, pid) for pid in ids]
        assert (turns[0]["state"], turns[0]["errorCode"]) == ("error", "node_lost")
        assert [t["state"] for t in turns[1:]] == ["completed", "completed"]
        assert turns[1]["endedAt"] <= turns[2]["startedAt"]  # in order
        # A client reconnecting to b with its cursor: no gap and no duplicate (or an explicit resync).
        after = await events_until(b.client, sid, lambda e: e["type"] == "replay_complete",
                                   last_event_id=last_seen, epoch=epoch)
        if after[0]["type"] != "state_resync_required":
            ids_after = [e["id"] for e in after if "id" in e]
            assert ids_after[0] == last_seen + 1
            assert ids_after == list(range(last_seen + 1, last_seen + 1 + len(ids_after)))
        lost = [e for e in after if e["type"] == "turn_error"]
        assert [e["data"]["code"] for e in lost] == ["node_lost"]
        transcript = (await b.client.get(f"/session/{sid}/transcript")).json()["entries"]
        users = [e["message"]["content"] for e in transcript
                 if e.get("type") == "message" and e["message"]["role"] == "user"]
        assert users == ["prompt 0", "prompt 1", "prompt 2"]  # each once: the lost one is never re-run


def pids_with(word: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and word.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def test_a_paused_owner_that_wakes_writes_nothing_and_stops_its_sessions(tmp_path, postgres_url, redis_url):
    word = f"300.{secrets.randbelow(10**6):06d}"  # `sleep 300.NNNNNN`: this test's background command
    script = {"responses": [
        [{"tool_call": {"name": "shell", "arguments": {"command": f"sleep {word}", "run_in_background": True}}}],
        {"delay": 300, "steps": [{"text": "never"}]}]}
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        a = await c.start("a", script)
        b = await c.start("b", answers("b"))
        sid = (await a.client.post("/session", json={})).json()["sessionId"]
        await a.client.post(f"/session/{sid}/approval-mode", json={"mode": "yolo"})
        running = (await a.client.post(f"/session/{sid}/prompt", json=text("stalls"))).json()["promptId"]
        with trio.fail_after(10):
            while (await a.client.get(f"/session/{sid}/turns/{running}")).json()["state"] != "running" \
                    or not pids_with(word):
                await trio.sleep(0.02)
        a.signal(signal.SIGSTOP)
        await wait_owner(postgres_url, sid, "a", timeout=4 * LEASE + 5)
        await wait_turn(b.client, sid, running)
        records_before = journal(postgres_url, sid)
        a.signal(signal.SIGCONT)
        with trio.fail_after(4 * LEASE + 5):  # a's next lease round finds the session gone and stops it
            while (await a.local("GET", f"/session/{sid}/status")).status_code != 404:
                await trio.sleep(0.05)
        await trio.sleep(LEASE)  # a whole lease more: nothing a writes lands
        assert journal(postgres_url, sid) == records_before
        assert pids_with(word) == []  # the old owner killed its session's background command
        assert owner_of(postgres_url, sid)[0] == "b"
        assert "lease of session" in a.log_text() and "lost" in a.log_text()


async def test_sigterm_hands_sessions_over_without_node_lost(tmp_path, postgres_url, redis_url):
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        a = await c.start("a", answers("a"))
        b = await c.start("b", answers("b"))
        sid = (await a.client.post("/session", json={})).json()["sessionId"]
        done = (await a.client.post(f"/session/{sid}/prompt", json=text("before"))).json()["promptId"]
        await wait_turn(a.client, sid, done)
        _, epoch_before = owner_of(postgres_url, sid)
        a.signal(signal.SIGTERM)
        with trio.fail_after(15):
            assert await a.proc.wait() == 0
        node, took = await wait_owner(postgres_url, sid, "a", timeout=5)
        assert node == "b" and took < LEASE  # woken to claim at once, not after a lease ran out
        after = (await b.client.post(f"/session/{sid}/prompt", json=text("after"))).json()["promptId"]
        turn = await wait_turn(b.client, sid, after)
        assert turn["state"] == "completed"
        records = "".join(journal(postgres_url, sid))
        assert "node_lost" not in records and "daemon_restarted" not in records
        assert owner_of(postgres_url, sid)[1] == epoch_before + 1


async def test_a_node_restarted_under_its_own_id_takes_back_what_it_held(tmp_path, postgres_url, redis_url):
    # Alone in the cluster: no other node claims its sessions, and its new process renews leases naming
    # its id, which would keep them alive and unrun forever if it did not take them over itself.
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        a = await c.start("a", STALLED)
        sid = (await a.client.post("/session", json={})).json()["sessionId"]
        ids = [(await a.client.post(f"/session/{sid}/prompt", json=text(f"p{n}"))).json()["promptId"]
               for n in range(2)]
        with trio.fail_after(10):
            while (await a.client.get(f"/session/{sid}/turns/{ids[0]}")).json()["state"] != "running":
                await trio.sleep(0.02)
        a.kill()
        with trio.fail_after(10):
            await a.proc.wait()
        _, epoch = owner_of(postgres_url, sid)
        again = await c.start("a", answers("a"))
        with trio.fail_after(4 * LEASE + 5):  # taken over on its own, before any request names the session
            while owner_of(postgres_url, sid) != ("a", epoch + 1):
                await trio.sleep(0.05)
        turns = [await wait_turn(again.client, sid, pid) for pid in ids]
        assert [(t["state"], t.get("errorCode")) for t in turns] == [("error", "node_lost"), ("completed", None)]
        assert owner_of(postgres_url, sid) == ("a", epoch + 1)


async def test_new_sessions_go_to_the_least_loaded_node_and_every_node_lists_them(tmp_path, postgres_url,
                                                                                   redis_url):
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        a = await c.start("a", answers("a"))
        await c.start("b", answers("b"))
        await c.start("c", answers("c"), "--max-sessions", "1")
        sids = [(await a.client.post("/session", json={})).json()["sessionId"] for _ in range(5)]
        placed = [owner_of(postgres_url, sid)[0] for sid in sids]
        assert sorted(placed[:3]) == ["a", "b", "c"]  # one each while all are empty...
        assert placed.count("c") == 1  # ...and never past c's cap
        for node in c.nodes.values():
            listed = {s["sessionId"]: s for s in (await node.client.get("/session")).json()["sessions"]}
            assert set(listed) == set(sids)
            assert all(listed[sid]["live"] and listed[sid]["node"] == where for sid, where in zip(sids, placed))


async def test_a_title_set_on_any_node_is_listed_by_every_node_and_survives_a_handover(tmp_path, postgres_url,
                                                                                       redis_url):
    async with cluster(tmp_path, postgres_url, redis_url) as c:
        nodes = {"a": await c.start("a", answers("a")), "b": await c.start("b", answers("b"))}
        sid = (await nodes["a"].client.post("/session", json={"title": "first name"})).json()["sessionId"]
        owner = owner_of(postgres_url, sid)[0]
        other = nodes["b" if owner == "a" else "a"]
        renamed = await other.client.post(f"/session/{sid}/title", json={"title": "Picnic plan"})
        assert renamed.status_code == 200 and renamed.json() == {"sessionId": sid, "title": "Picnic plan"}
        for node in nodes.values():
            listed = {s["sessionId"]: s for s in (await node.client.get("/session")).json()["sessions"]}
            assert listed[sid]["title"] == "Picnic plan", node.name
        nodes[owner].signal(signal.SIGTERM)  # handed over: the new owner restores the record with its title
        with trio.fail_after(15):
            assert await nodes[owner].proc.wait() == 0
        await wait_owner(postgres_url, sid, owner, timeout=5)
        listed = {s["sessionId"]: s for s in (await other.client.get("/session")).json()["sessions"]}
        assert listed[sid]["title"] == "Picnic plan"
        status = (await other.client.get(f"/session/{sid}/status")).json()
        assert status["title"] == "Picnic plan"  # the new owner runs it under the same title
