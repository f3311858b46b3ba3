"""``trellis open``: the UI's URL with the token in its fragment, handed to the browser ``$BROWSER`` names."""

from __future__ import annotations

import stat
import sys
from urllib.parse import parse_qs, urlsplit

from tests.sync_daemon import free_port
from tests.trellis.helpers import client_env, daemon_args, scripted_daemon, trellis


async def test_print_gives_the_page_with_the_token_and_session_in_the_fragment(tmp_path):
    async with scripted_daemon(tmp_path) as daemon:
        async with daemon.client(daemon.token()) as client:
            sid = (await client.post("/session", json={})).json()["sessionId"]
        plain = await trellis("open", *daemon_args(daemon), "--print", cwd=tmp_path)
        with_session = await trellis("open", *daemon_args(daemon), "--print", "--session", sid, cwd=tmp_path)
        unknown = await trellis("open", *daemon_args(daemon), "--print", "--session", "nope", cwd=tmp_path)
        token = daemon.token()
    assert plain.code == 0, plain.stderr
    parts = urlsplit(plain.stdout.strip())
    assert f"{parts.scheme}://{parts.netloc}" == daemon.url and parts.path == "/" and parts.query == ""
    assert parse_qs(parts.fragment) == {"token": [token]}
    assert parse_qs(urlsplit(with_session.stdout.strip()).fragment) == {"token": [token], "session": [sid]}
    # A session the daemon does not have: said here, not by a page that finds nothing to show.
    assert unknown.code == 2 and unknown.stdout == "" and "has no session 'nope'" in unknown.stderr


async def test_the_browser_gets_the_url_and_nothing_prints_the_token(tmp_path):
    seen = tmp_path / "browser-saw"
    browser = tmp_path / "browser"
    browser.write_text(f"#!{sys.executable}\nimport sys\nopen({str(seen)!r}, 'w').write(sys.argv[1])\n")
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    async with scripted_daemon(tmp_path) as daemon:
        opened = await trellis("open", *daemon_args(daemon), cwd=tmp_path,
                               env=client_env(BROWSER=f"{browser} %s"))
        token = daemon.token()
    assert opened.code == 0, opened.stderr
    assert seen.read_text() == f"{daemon.url}/#token={token}"
    assert token not in opened.stdout + opened.stderr
    assert f"opened {daemon.url}/" in opened.stderr


async def test_a_refused_token_or_no_daemon_exits_2_without_opening_anything(tmp_path):
    seen = tmp_path / "browser-saw"
    env = client_env(BROWSER=f"touch {seen} %s")
    async with scripted_daemon(tmp_path) as daemon:
        wrong = await trellis("open", "--url", daemon.url, "--token", "not-the-token", cwd=tmp_path, env=env)
    url = f"http://127.0.0.1:{free_port()}"
    absent = await trellis("open", "--url", url, cwd=tmp_path, env=env)
    assert wrong.code == 2 and "refused the token" in wrong.stderr and "not-the-token" not in wrong.stderr
    assert absent.code == 2 and f"cannot reach the daemon at {url}" in absent.stderr
    assert not seen.exists()
