"""``trellis.connect``: which daemon, which token — flags first, then the environment, then the defaults."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from trellis import connect


@pytest.fixture
def listener() -> Iterator[Callable[[], str]]:
    """Opens sockets listening on loopback in this process, as a daemon's; each call: a new one's URL."""
    held: list[socket.socket] = []

    def listen() -> str:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        held.append(sock)
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    yield listen
    for sock in held:
        sock.close()


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    connect.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_url_is_the_flag_then_the_environment_then_the_default():
    env = {"TRELLIS_URL": "http://10.0.0.2:9000/"}
    assert connect.target(parse("--url", "http://h:1/"), env).url == "http://h:1"  # trailing slash dropped
    assert connect.target(parse(), env).url == "http://10.0.0.2:9000"
    nowhere = {"TRELLIS_STATE_DIR": "/nonexistent/trellis-state"}
    assert connect.target(parse(), nowhere).url == connect.DEFAULT_URL == "http://127.0.0.1:4170"
    assert connect.target(parse(), {**nowhere, "TRELLIS_URL": ""}).url == connect.DEFAULT_URL


def test_the_token_is_the_flag_then_the_environment_then_the_state_directory_file(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    (state / "token").write_text("from-file\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "token").write_text("from-env-dir")
    env = {"TRELLIS_TOKEN": "from-env", "TRELLIS_STATE_DIR": str(other)}
    assert connect.target(parse("--token", "from-flag", "--state-dir", str(state)), env).token == "from-flag"
    assert connect.target(parse("--state-dir", str(state)), env).token == "from-env"
    assert connect.target(parse("--state-dir", str(state)), {"TRELLIS_STATE_DIR": str(other)}).token == "from-file"
    assert connect.target(parse(), {"TRELLIS_STATE_DIR": str(other)}).token == "from-env-dir"
    # The default state directory is ./.trellis, read relative to where the command runs.
    monkeypatch.chdir(tmp_path)
    home = {"HOME": str(tmp_path / "home")}  # no per-user state directory
    assert connect.target(parse(), home).token is None
    (tmp_path / ".trellis").mkdir()
    (tmp_path / ".trellis" / "token").write_text("default-dir")
    assert connect.target(parse(), home).token == "default-dir"


def test_no_token_anywhere_sends_no_authorization(tmp_path):
    (tmp_path / "token").write_text("   \n")  # an empty file is no token
    target = connect.target(parse("--state-dir", str(tmp_path)), {})
    assert target.token is None and target.headers == {}
    assert connect.target(parse("--state-dir", str(tmp_path / "missing")), {}).headers == {}
    given = connect.target(parse("--token", "s3cret"), {})
    assert given.headers == {"Authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(given)  # never printed


def announce(state_dir, url: str, pid: int, token: str | None = None) -> None:
    """What a daemon knowing ``token`` writes (transport.daemon_lock); ``None``: one run with ``--no-auth``."""
    state_dir.mkdir(parents=True, exist_ok=True)
    proof = {"proof": connect.daemon_file_proof(token, url.rstrip("/"), pid)} if token else {}
    (state_dir / "daemon.json").write_text(json.dumps({"url": url, "pid": pid, **proof}))


def test_a_running_daemons_file_names_the_url_after_the_flag_and_the_environment(tmp_path, listener):
    state = tmp_path / "state"
    url = listener()
    announce(state, url + "/", os.getpid(), "its-token")  # a live pid, listening there: this test's
    (state / "token").write_text("its-token")
    given = ["--state-dir", str(state)]
    assert connect.target(parse(*given), {}).url == url
    assert connect.target(parse(*given), {}).token == "its-token"
    assert connect.target(parse(*given), {"TRELLIS_URL": "http://h:2"}).url == "http://h:2"
    assert connect.target(parse(*given, "--url", "http://h:1"), {"TRELLIS_URL": "http://h:2"}).url == "http://h:1"


def test_a_daemon_file_whose_process_is_gone_is_ignored(tmp_path):
    state = tmp_path / "state"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          check=True).stdout
    announce(state, "http://127.0.0.1:5555", int(dead))  # that process has exited
    assert connect.target(parse("--state-dir", str(state)), {}).url == connect.DEFAULT_URL
    (state / "daemon.json").write_text("{not json")
    assert connect.target(parse("--state-dir", str(state)), {}).url == connect.DEFAULT_URL


def test_without_a_state_directory_given_the_current_one_comes_before_the_per_user_one(tmp_path, monkeypatch,
                                                                                       listener):
    monkeypatch.chdir(tmp_path)
    xdg = tmp_path / "xdg"
    user = xdg / "trellis"
    env = {"XDG_STATE_HOME": str(xdg), "HOME": str(tmp_path / "home")}
    assert connect.user_state_dir(env) == str(user)
    assert connect.user_state_dir({"HOME": "/h"}) == "/h/.local/state/trellis"
    assert connect.user_state_dir({"HOME": "/h", "XDG_STATE_HOME": "relative"}) == "/h/.local/state/trellis"
    # Only the per-user daemon runs: clients anywhere find it, and its token.
    per_user, local = listener(), listener()
    announce(user, per_user, os.getpid(), "user-token")
    (user / "token").write_text("user-token")
    found = connect.target(parse(), env)
    assert (found.url, found.token, found.state_dir) == (per_user, "user-token", str(user))
    # One in ./.trellis too: it wins.
    announce(tmp_path / ".trellis", local, os.getpid(), "local-token")
    (tmp_path / ".trellis" / "token").write_text("local-token")
    found = connect.target(parse(), env)
    assert (found.url, found.token) == (local, "local-token")
    # --url naming the per-user daemon takes that directory's token.
    found = connect.target(parse("--url", per_user + "/"), env)
    assert (found.url, found.token) == (per_user, "user-token")
    # A --url no daemon file names: the first token file, as before.
    assert connect.target(parse("--url", "http://elsewhere:1"), env).token == "local-token"


def test_a_client_below_the_daemons_directory_finds_its_state_directory(tmp_path, monkeypatch, listener):
    project = tmp_path / "project"
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    url = listener()
    announce(project / ".trellis", url, os.getpid(), "project-token")
    (project / ".trellis" / "token").write_text("project-token")
    monkeypatch.chdir(deep)
    env = {"HOME": str(tmp_path / "home")}
    found = connect.target(parse(), env)
    assert (found.url, found.token, found.state_dir) == (url, "project-token", str(project / ".trellis"))
    # A nearer one wins, and in the current directory it is named as before.
    monkeypatch.chdir(project)
    assert connect.state_dirs(parse(), env)[0] == ".trellis"


def test_a_state_directory_others_may_write_or_another_user_owns_is_passed_over(tmp_path, monkeypatch, listener):
    project = tmp_path / "project"
    (project / "sub").mkdir(parents=True)
    url = listener()
    announce(project / ".trellis", url, os.getpid(), "my-secret")  # run with $TRELLIS_TOKEN
    planted = project / "sub" / ".trellis"  # as another user could leave one in /tmp
    announce(planted, "http://attacker.example:80", os.getpid(), "my-secret")  # as if it knew it
    planted.chmod(0o777)
    monkeypatch.chdir(project / "sub")
    env = {"HOME": str(tmp_path / "home"), "TRELLIS_TOKEN": "my-secret"}
    found = connect.target(parse(), env)
    assert found.url == url  # the token is never sent to the planted URL
    assert connect.skipped_state_dirs() == [f"{planted} is writable by others (mode 777)"]
    if os.geteuid() == 0:  # only root can give a directory away
        planted.chmod(0o700)
        os.chown(planted, 65534, 65534)
        assert connect.target(parse(), env).url == url
        assert connect.skipped_state_dirs() == [f"{planted} belongs to uid 65534, not to you"]


def test_a_state_directory_passed_over_is_never_taken_as_the_default_either(tmp_path, monkeypatch):
    """Nothing trusted above: the planted ``./.trellis`` is not read as the default (before, it was)."""
    work = tmp_path / "shared"
    work.mkdir()
    planted = work / ".trellis"
    announce(planted, "http://attacker.example:80", os.getpid())
    (planted / "token").write_text("theirs")
    planted.chmod(0o777)
    monkeypatch.chdir(work)
    env = {"HOME": str(tmp_path / "home"), "TRELLIS_TOKEN": "my-secret"}
    assert connect.state_dirs(parse(), env) == [connect.user_state_dir(env)]
    found = connect.target(parse(), env)
    assert found.url == connect.DEFAULT_URL and found.state_dir is None and found.token == "my-secret"
    # With no .trellis here at all, the default is still ./.trellis (where `trellis serve` would make one).
    monkeypatch.chdir(tmp_path)
    assert connect.state_dirs(parse(), env)[0] == ".trellis"


def test_a_daemon_file_that_does_not_prove_the_token_never_draws_it(tmp_path, monkeypatch, listener):
    """Red team round 5: a sandboxed command wrote ``.trellis/daemon.json`` in its cwd (the user's own, mode
    0755), naming a listener of its own with a live pid; ``trellis sessions`` run there sent it the token of
    ``$TRELLIS_TOKEN``, and the model drove the daemon with it."""
    xdg = tmp_path / "xdg"
    real, models = listener(), listener()
    announce(xdg / "trellis", real, os.getpid(), "my-secret")  # the real daemon, per-user
    project = tmp_path / "project"
    planted = project / ".trellis"
    announce(planted, models, os.getpid())  # no proof: it cannot make one without the token
    planted.chmod(0o755)
    monkeypatch.chdir(project)
    env = {"XDG_STATE_HOME": str(xdg), "HOME": str(tmp_path / "home"), "TRELLIS_TOKEN": "my-secret"}
    found = connect.target(parse(), env)
    assert (found.url, found.token) == (real, "my-secret")
    # A proof made with another token (its own token file's) does not do either.
    announce(planted, models, os.getpid(), "the-models-own")
    (planted / "token").write_text("the-models-own")
    assert connect.target(parse(), env).url == real


def test_a_daemon_run_without_auth_is_found_by_a_client_with_no_token_only(tmp_path, listener):
    state = tmp_path / "state"
    url = listener()
    announce(state, url, os.getpid())  # --no-auth: no proof
    assert connect.target(parse("--state-dir", str(state)), {}).url == url
    assert connect.target(parse("--state-dir", str(state)), {"TRELLIS_TOKEN": "t"}).url == connect.DEFAULT_URL


LISTENER = """
import socket, sys
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
print(sock.getsockname()[1], flush=True)
sys.stdin.read()
"""


def test_a_daemon_file_counts_only_if_the_process_it_names_listens_there(tmp_path, monkeypatch, listener):
    """Red team round 5's residual: with no token given, a planted ``.trellis`` holding its own ``token``, and a
    ``daemon.json`` proving it, named the model's listener with a live pid (1: init, alive everywhere), and a
    client run there sent that listener whatever the user typed. The pid must listen on that URL's port."""
    project = tmp_path / "project"
    planted = project / ".trellis"
    models = subprocess.Popen([sys.executable, "-c", LISTENER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        url = f"http://127.0.0.1:{int(models.stdout.readline())}"
        (planted).mkdir(parents=True)
        (planted / "token").write_text("the-models-own")
        planted.chmod(0o755)
        monkeypatch.chdir(project)
        env = {"HOME": str(tmp_path / "home")}
        for pid in (1, os.getpid()):  # alive, in this PID namespace, and listening elsewhere or nowhere
            announce(planted, url, pid, "the-models-own")
            assert connect.target(parse(), env).url == connect.DEFAULT_URL, pid
            assert connect.listens_on(pid, url) is False
        announce(planted, url, models.pid, "the-models-own")  # the pid that really listens there
        assert connect.listens_on(models.pid, url) is True
        assert connect.target(parse(), env).url == url
        assert connect.listens_on(models.pid, listener()) is False  # another port: not its
    finally:
        models.kill()
        models.wait()


def descendants(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            for child in map(int, f.read().split()):
                out += [child, *descendants(child)]
    return out


@pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap"), reason="needs bubblewrap")
def test_a_listener_in_a_sandboxes_pid_namespace_is_not_taken_even_named_by_its_real_pid(tmp_path, monkeypatch):
    project = tmp_path / "project"
    planted = project / ".trellis"
    planted.mkdir(parents=True)
    (planted / "token").write_text("the-models-own")
    planted.chmod(0o755)
    sandboxed = subprocess.Popen(["/usr/bin/bwrap", "--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc",
                                  sys.executable, "-c", LISTENER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
    try:
        url = f"http://127.0.0.1:{int(sandboxed.stdout.readline())}"
        inside = [p for p in descendants(sandboxed.pid)
                  if open(f"/proc/{p}/cmdline", "rb").read().startswith(sys.executable.encode() + b"\0")]
        assert len(inside) == 1  # the listener's pid as this namespace counts it (a model cannot learn it)
        announce(planted, url, inside[0], "the-models-own")
        monkeypatch.chdir(project)
        assert connect.listens_on(inside[0], url) is False
        assert connect.target(parse(), {"HOME": str(tmp_path / "home")}).url == connect.DEFAULT_URL
    finally:
        sandboxed.kill()
        sandboxed.wait()
