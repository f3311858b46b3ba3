"""Host and Origin checks on a real daemon on loopback port 0 (DNS-rebinding protection, CORS)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from actors import CountingIds, open_daemon
from actors.model import ScriptedModel
from tests.conftest import daemon_process, live_daemon
from transport import serve
from transport.hosts import HostPolicy, parse_authority

TOKEN = "s3cret"


def port_of(client: httpx.AsyncClient) -> int:
    port = urlsplit(str(client.base_url)).port
    assert port
    return port


@asynccontextmanager
async def served(**kwargs: Any) -> AsyncIterator[tuple[Any, httpx.AsyncClient]]:
    """``serve`` on 127.0.0.1:0 with ``kwargs`` (allowed_hosts, allowed_origins) and a client for it."""
    async with open_daemon(model=ScriptedModel(), ids=CountingIds()) as daemon:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, daemon, host="127.0.0.1", port=0, token=TOKEN, **kwargs))
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                                         timeout=10, trust_env=False) as client:
                yield daemon, client
            nursery.cancel_scope.cancel()


def misdirected(r: httpx.Response) -> bool:
    return r.status_code == 421 and r.json()["code"] == "misdirected_host" and r.json()["path"] == "header.Host" \
        and "error" in r.json()


async def test_a_foreign_host_is_refused_before_any_handler_runs():
    with trio.fail_after(20):
        async with live_daemon(token=TOKEN) as (daemon, client):
            port = port_of(client)
            for host in ("evil.com", f"evil.com:{port}", f"127.0.0.1:{port + 1 if port < 65535 else 1}",
                         "127.0.0.1", "localhost", f"[::1]:{port}", f"0.0.0.0:{port}"):
                assert misdirected(await client.get("/health", headers={"Host": host})), host
            assert misdirected(await client.get("/capabilities", headers={"Host": "evil.com"}))
            assert misdirected(await client.post("/session", json={}, headers={"Host": f"evil.com:{port}"}))
            assert misdirected(await client.post("/acp", json={}, headers={"Host": "evil.com"}))
            assert misdirected(await client.post("/mcp", json={}, headers={"Host": "evil.com"}))
            # Before authentication too: a rebinding page has no token, and learns nothing else.
            assert misdirected(await client.get("/capabilities", headers={"Host": "evil.com", "Authorization": ""}))
            assert not list(daemon.sessions())
            assert (await client.get("/session")).json()["sessions"] == []


async def test_the_bound_address_and_localhost_with_the_bound_port_are_accepted():
    with trio.fail_after(20):
        async with live_daemon(token=TOKEN) as (daemon, client):
            port = port_of(client)
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}"):
                assert (await client.get("/health", headers={"Host": host})).status_code == 200, host
                assert (await client.get("/capabilities", headers={"Host": host})).status_code == 200, host
            r = await client.post("/session", json={}, headers={"Host": f"localhost:{port}"})
            assert r.status_code == 200
            assert (await client.get("/health")).status_code == 200  # httpx's own Host: 127.0.0.1:PORT


async def test_allowed_hosts_admit_a_name_with_the_bound_port_or_their_own():
    with trio.fail_after(20):
        async with served(allowed_hosts=("trellis.test", "proxy.test:8443")) as (daemon, client):
            port = port_of(client)
            assert (await client.get("/capabilities", headers={"Host": f"trellis.test:{port}"})).status_code == 200
            assert (await client.get("/capabilities", headers={"Host": "proxy.test:8443"})).status_code == 200
            assert misdirected(await client.get("/health", headers={"Host": "trellis.test"}))  # port 80
            assert misdirected(await client.get("/health", headers={"Host": f"proxy.test:{port}"}))
            assert misdirected(await client.get("/health", headers={"Host": f"other.test:{port}"}))


async def test_allow_host_flag_of_the_daemon(tmp_path):
    with trio.fail_after(30):
        async with daemon_process("--allow-host", "trellis.test", state_dir=tmp_path) as running:
            port = urlsplit(running.url).port
            async with running.client(running.token()) as client:
                assert (await client.get("/capabilities", headers={"Host": f"trellis.test:{port}"})).status_code == 200
                assert misdirected(await client.get("/health", headers={"Host": f"evil.test:{port}"}))
                assert (await client.get("/health")).status_code == 200


async def test_a_malformed_allow_host_is_a_usage_error(tmp_path):
    with trio.fail_after(30):
        result = await trio.run_process(
            [__import__("sys").executable, "-m", "transport", "--port", "0", "--state-dir", str(tmp_path),
             "--allow-host", "bad:port"], capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 2 and b"--allow-host" in result.stderr


async def test_origins_are_same_origin_or_explicitly_allowed():
    with trio.fail_after(20):
        async with live_daemon(token=TOKEN) as (daemon, client):
            port = port_of(client)
            other = port + 1 if port < 65535 else 1
            for origin in (f"http://localhost:{other}", f"http://127.0.0.1:{other}", f"http://[::1]:{port}",
                           "http://localhost", f"https://localhost:{port}", "null", f"http://evil.com:{port}"):
                r = await client.get("/capabilities", headers={"Origin": origin})
                assert r.status_code == 403 and r.json()["code"] == "origin_not_allowed", origin
                assert "access-control-allow-origin" not in r.headers
            for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
                r = await client.get("/capabilities", headers={"Origin": origin})
                assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin, origin
                assert "Origin" in r.headers["vary"]


async def test_allowed_origins_and_their_preflights():
    origin = "http://localhost:5173"
    with trio.fail_after(20):
        async with served(allowed_origins=(origin,)) as (daemon, client):
            pre = await client.options("/session", headers={"Origin": origin, "Authorization": "",
                                                             "Access-Control-Request-Method": "POST"})
            assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == origin
            assert "POST" in pre.headers["access-control-allow-methods"]
            r = await client.post("/session", json={}, headers={"Origin": origin})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
            # A preflight sent to a foreign Host is still misdirected, allowed origin or not.
            assert misdirected(await client.options("/session", headers={
                "Origin": origin, "Authorization": "", "Host": "evil.com", "Access-Control-Request-Method": "POST"}))
            r = await client.get("/capabilities", headers={"Origin": "http://localhost:5174"})
            assert r.status_code == 403


def test_host_policy_rules():
    policy = HostPolicy(["box.lan", "proxy.lan:443"], names=["127.0.0.1"])
    assert not policy.allows("127.0.0.1:4170")  # not bound yet: everything refused
    policy.bind(["http://127.0.0.1:4170"])
    assert policy.allows("127.0.0.1:4170") and policy.allows("localhost:4170") and policy.allows("box.lan:4170")
    assert policy.allows("proxy.lan:443") and not policy.allows("proxy.lan:4170")
    assert not policy.allows("127.0.0.1") and not policy.allows("10.0.0.1:4170") and not policy.allows(None)
    wildcard = HostPolicy()
    wildcard.bind(["http://0.0.0.0:4170"])
    assert wildcard.allows("10.0.0.1:4170") and wildcard.allows("[fe80::1]:4170") and wildcard.allows("localhost:4170")
    assert not wildcard.allows("evil.com:4170") and not wildcard.allows("10.0.0.1:80")
    on_80 = HostPolicy()
    on_80.bind(["http://127.0.0.1:80"])
    assert on_80.allows("127.0.0.1") and on_80.allows_origin("http://localhost")
    assert parse_authority("[::1]:80") == ("::1", 80) and parse_authority("Example.COM") == ("example.com", None)
    for bad in ("", "a:b", "[x]:1", "h:0", "a/b", "user@host"):
        with pytest.raises(ValueError):
            parse_authority(bad)


def test_host_verdicts_are_remembered_boundedly_and_forgotten_when_the_policy_binds_again():
    from transport.hosts import JUDGED_KEPT

    policy = HostPolicy()
    policy.bind(["http://127.0.0.1:4170"])
    for i in range(5 * JUDGED_KEPT):  # a client sending ever new names does not grow the memo
        assert not policy.allows(f"h{i}.example:4170")
        assert policy.allows("127.0.0.1:4170")
    assert len(policy._judged) <= JUDGED_KEPT
    policy.bind(["http://127.0.0.1:5000"])  # another port: verdicts given before no longer hold
    assert not policy.allows("127.0.0.1:4170") and policy.allows("127.0.0.1:5000")
