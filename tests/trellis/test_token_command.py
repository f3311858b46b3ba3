"""``trellis token rotate``: a new token in the state directory, which the daemon takes at its next start."""

from __future__ import annotations

import os
import stat

import trio

from tests.conftest import daemon_process
from tests.trellis.helpers import client_env, trellis
from transport.auth import read_token_file


async def test_rotate_writes_a_new_owner_only_token_and_the_restarted_daemon_takes_it(tmp_path):
    state = tmp_path / "state"
    with trio.fail_after(60):
        async with daemon_process(state_dir=state) as first:
            old = first.token()
            rotated = await trellis("token", "rotate", "--state-dir", str(state), cwd=tmp_path)
            new = read_token_file(state)
            async with first.client(old) as client:  # the running daemon keeps the token it started with
                assert (await client.get("/capabilities")).status_code == 200
        async with daemon_process(state_dir=state) as second:
            async with second.client(old) as client:
                assert (await client.get("/capabilities")).status_code == 401
            async with second.client(new) as client:
                assert (await client.get("/capabilities")).status_code == 200
    assert rotated.code == 0, rotated.stderr
    assert rotated.stdout == f"wrote a new token to {state / 'token'}\n"
    assert f"(pid {first.pid}) accepts the old token until it restarts" in rotated.stderr
    assert new != old and new not in rotated.stdout + rotated.stderr  # never printed
    assert stat.S_IMODE(os.stat(state / "token").st_mode) == 0o600


async def test_rotate_finds_the_state_directory_as_clients_do(tmp_path):
    home = tmp_path / "home"
    (tmp_path / "work").mkdir()
    env = client_env(HOME=str(home), XDG_STATE_HOME="")
    # Nowhere a token yet: ./.trellis, the daemon's default.
    first = await trellis("token", "rotate", cwd=tmp_path / "work", env=env)
    assert first.code == 0 and first.stdout == "wrote a new token to .trellis/token\n"
    # The per-user directory, when it has the token and ./.trellis does not.
    user = home / ".local" / "state" / "trellis"
    user.mkdir(parents=True)
    (user / "token").write_text("old")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    second = await trellis("token", "rotate", cwd=elsewhere, env=env)
    assert second.code == 0 and second.stdout == f"wrote a new token to {user / 'token'}\n"
    assert read_token_file(user) != "old"
    # $TRELLIS_STATE_DIR wins over both.
    third = await trellis("token", "rotate", cwd=elsewhere, env={**env, "TRELLIS_STATE_DIR": str(tmp_path / "s")})
    assert third.code == 0 and (tmp_path / "s" / "token").exists()


async def test_rotate_into_a_directory_it_cannot_write_fails_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    done = await trellis("token", "rotate", "--state-dir", str(blocker), cwd=tmp_path)
    assert done.code == 2 and str(blocker / "token") in done.stderr and done.stdout == ""
