"""Authentication is on by default: the minted token file, ``serve``'s rules, and the daemon as a subprocess."""

from __future__ import annotations

import os
import stat
from functools import partial

import httpx
import pytest
import trio

from actors import open_daemon
from tests.conftest import daemon_process
from transport import InsecureBind, serve
from transport.auth import (
    TokenFileError, mint_token_file, persisted_token, read_token_file, token_path, write_token_file,
)

UNAUTHORIZED = {"code": "unauthorized", "path": "header.Authorization"}


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def refused(response: httpx.Response) -> bool:
    body = response.json()
    return (response.status_code == 401 and set(body) == {"error", "code", "path"}
            and {k: body[k] for k in UNAUTHORIZED} == UNAUTHORIZED)


# ------------------------------------------------------------------ the token file


def test_the_token_file_is_owner_only_whatever_the_umask(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    old = os.umask(0)  # the most permissive umask must not widen the file
    try:
        token, path = mint_token_file(state)
    finally:
        os.umask(old)
    assert path == state / "token" == token_path(state)
    assert (mode(path), mode(state)) == (0o600, 0o700)
    assert len(token) >= 43 and read_token_file(state) == token
    assert [p.name for p in state.iterdir()] == ["token"]  # no temporary file left behind


def test_each_mint_is_a_fresh_token_replacing_the_file(tmp_path):
    first, _ = mint_token_file(tmp_path)
    second, _ = mint_token_file(tmp_path)
    assert first != second and read_token_file(tmp_path) == second


def test_token_file_errors_name_the_path(tmp_path):
    with pytest.raises(TokenFileError, match=str(tmp_path / "token")):
        read_token_file(tmp_path)
    (tmp_path / "token").write_text("\n")
    with pytest.raises(TokenFileError, match="is empty"):
        read_token_file(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(TokenFileError, match=str(blocker / "token")):
        write_token_file(blocker, "t")


def test_a_persisted_token_is_trusted_only_when_the_owner_alone_can_read_it(tmp_path):
    assert persisted_token(tmp_path) is None  # none yet
    token, path = mint_token_file(tmp_path)
    assert persisted_token(tmp_path) == token
    os.chmod(path, 0o640)
    with pytest.raises(TokenFileError, match=r"mode 0640 lets the group or others read it.*trellis token rotate"):
        persisted_token(tmp_path)
    os.chmod(path, 0o600)
    path.write_text("  \n")
    assert persisted_token(tmp_path) is None  # empty: none, a new one is minted
    path.unlink()
    os.symlink(tmp_path / "elsewhere", path)
    with pytest.raises(TokenFileError, match="symlink"):
        persisted_token(tmp_path)


# ------------------------------------------------------------------ serve()


async def test_serve_keeps_the_token_of_the_state_directory_across_starts(tmp_path):
    tokens = []
    with trio.fail_after(20):
        for _ in range(2):
            async with open_daemon(state_dir=tmp_path) as daemon, trio.open_nursery() as nursery:
                url = await nursery.start(partial(serve, daemon, port=0))
                tokens.append(read_token_file(tmp_path))
                async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
                    ok = await client.get("/capabilities", headers={"Authorization": f"Bearer {tokens[-1]}"})
                    assert ok.status_code == 200
                nursery.cancel_scope.cancel()
    assert tokens[0] == tokens[1]


async def test_serve_refuses_a_token_file_others_can_read_before_binding(tmp_path):
    write_token_file(tmp_path, "t")
    os.chmod(token_path(tmp_path), 0o644)
    async with open_daemon(state_dir=tmp_path) as daemon:
        with pytest.raises(TokenFileError, match="refusing the token file"):
            await serve(daemon, port=0)
        daemon.shutdown()


async def test_serve_mints_the_token_file_by_default(tmp_path):
    with trio.fail_after(20):
        async with open_daemon(state_dir=tmp_path) as daemon, trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, daemon, port=0))
            token = read_token_file(tmp_path)  # there by the time the URL is reported
            async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
                assert refused(await client.get("/capabilities"))
                assert refused(await client.get("/capabilities", headers={"Authorization": "Bearer wrong"}))
                assert refused(await client.get("/capabilities", headers={"Authorization": token}))
                ok = await client.get("/capabilities", headers={"Authorization": f"Bearer {token}"})
                assert ok.status_code == 200
                # The scheme is case-insensitive (RFC 9110); a 401 names the scheme it wants.
                assert (await client.get("/capabilities", headers={"Authorization": f"bearer {token}"})).status_code \
                    == 200
                assert (await client.get("/capabilities")).headers["www-authenticate"] == "Bearer"
                assert (await client.get("/health")).status_code == 200
            nursery.cancel_scope.cancel()


async def test_serve_with_a_token_writes_no_file(tmp_path):
    with trio.fail_after(20):
        async with open_daemon(state_dir=tmp_path) as daemon, trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, daemon, port=0, token="given"))
            async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
                assert (await client.get("/capabilities", headers={"Authorization": "Bearer given"})).status_code \
                    == 200
            nursery.cancel_scope.cancel()
    assert not token_path(tmp_path).exists()


async def test_serve_refuses_what_it_cannot_secure():
    async with open_daemon() as daemon:  # no state dir: nowhere to mint a token
        with pytest.raises(ValueError, match="pass token=, or open the daemon with a state_dir"):
            await serve(daemon, port=0)
        with pytest.raises(InsecureBind, match="without authentication"):
            await serve(daemon, host="0.0.0.0", port=0, auth=False)
        with pytest.raises(ValueError, match="either token= or auth=False"):
            await serve(daemon, port=0, token="t", auth=False)
        daemon.shutdown()


async def test_serve_without_auth_on_loopback_is_open():
    with trio.fail_after(20):
        async with open_daemon() as daemon, trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, daemon, port=0, auth=False))
            async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
                assert (await client.post("/session", json={})).status_code == 200
            nursery.cancel_scope.cancel()


# ------------------------------------------------------------------ python -m transport


async def test_the_daemon_started_without_a_token_wants_the_minted_one(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(30):
        async with daemon_process(state_dir=state) as daemon:
            token = daemon.token()
            async with daemon.client() as anonymous:
                assert refused(await anonymous.get("/capabilities"))
                assert refused(await anonymous.post("/session", json={}))
                assert refused(await anonymous.get("/capabilities", headers={"Authorization": "Bearer wrong"}))
                assert (await anonymous.get("/health")).json() == {"status": "ok"}
            async with daemon.client(token) as client:
                assert (await client.get("/capabilities")).status_code == 200
                assert (await client.post("/session", json={})).status_code == 200
            assert (mode(state / "token"), mode(state)) == (0o600, 0o700)
    stderr, stdout = daemon.stderr.decode(), daemon.stdout.decode()
    assert f"token: {state / 'token'} (send it as Authorization: Bearer)" in stderr
    assert token not in stderr and token not in stdout


async def test_a_restart_keeps_the_token_and_a_rotated_one_replaces_it(tmp_path):
    with trio.fail_after(40):
        async with daemon_process(state_dir=tmp_path) as first:
            old = first.token()
        async with daemon_process(state_dir=tmp_path) as second:
            assert second.token() == old  # clients keep working across a restart
        new, _ = mint_token_file(tmp_path)  # what `trellis token rotate` does
        async with daemon_process(state_dir=tmp_path) as third:
            async with third.client(old) as stale:
                assert refused(await stale.get("/capabilities"))
            async with third.client(new) as client:
                assert (await client.get("/capabilities")).status_code == 200


async def test_a_given_token_is_the_one_and_is_never_printed(tmp_path):
    with trio.fail_after(30):
        async with daemon_process("--token", "given-token-1234", state_dir=tmp_path) as daemon:
            async with daemon.client("given-token-1234") as client:
                assert (await client.get("/capabilities")).status_code == 200
            async with daemon.client() as anonymous:
                assert refused(await anonymous.get("/capabilities"))
    assert not (tmp_path / "token").exists()
    assert "given-token-1234" not in daemon.stderr.decode() + daemon.stdout.decode()


async def test_no_auth_on_loopback_serves_open_with_a_warning(tmp_path):
    with trio.fail_after(30):
        async with daemon_process("--no-auth", state_dir=tmp_path) as daemon:
            async with daemon.client() as anonymous:
                assert (await anonymous.get("/capabilities")).status_code == 200
                assert (await anonymous.post("/session", json={})).status_code == 200
    assert "warning: --no-auth: authentication is off" in daemon.stderr.decode()
    assert not (tmp_path / "token").exists()
