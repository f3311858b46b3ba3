"""Refused starts are warnings in the log: a session at the cap, and work asked of a daemon shutting down."""

from __future__ import annotations

import logging

import trio

from actors import Settings
from actors.settings import Limits
from tests.conftest import live_daemon
from tests.e2e.test_openai_daemon import prompt


def reasons(caplog, logger: str) -> list[tuple[str, dict]]:
    return [(r.reason, r.__dict__) for r in caplog.records if r.name == logger and r.levelno == logging.WARNING]  # type: ignore[attr-defined]


async def test_a_session_refused_at_the_cap_is_a_warning(tmp_path, caplog):
    settings = Settings(limits=Limits(max_sessions=1))
    with caplog.at_level(logging.WARNING, logger="trellis"), trio.fail_after(20):
        async with live_daemon(settings=settings, state_dir=tmp_path) as (daemon, client):
            assert (await client.post("/session", json={})).status_code == 200
            refused = await client.post("/session", json={})
            assert refused.status_code == 503 and refused.json()["code"] == "too_many_sessions"
    [(reason, record)] = reasons(caplog, "trellis.daemon")
    assert reason == "too_many_sessions" and record["limit"] == 1
    assert "session refused reason=too_many_sessions limit=1" in caplog.text


async def test_work_refused_while_shutting_down_is_a_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="trellis"), trio.fail_after(20):
        async with live_daemon(state_dir=tmp_path) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            daemon._shutting_down = True  # as shutdown_gracefully sets it first thing
            try:
                assert (await client.post(f"/session/{sid}/prompt", json=prompt("x"))).status_code == 503
                assert (await client.get(f"/session/{sid}/status")).status_code == 200  # reads: no warning
            finally:
                daemon._shutting_down = False
    [(reason, record)] = reasons(caplog, "trellis.daemon")
    assert reason == "shutting_down" and record["path"] == f"/session/{sid}/prompt" and record["method"] == "POST"
