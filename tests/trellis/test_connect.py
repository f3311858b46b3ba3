"""``trellis.connect``: which daemon, which token — flags first, then the environment, then the defaults."""

from __future__ import annotations

import argparse

from trellis import connect


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    connect.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_url_is_the_flag_then_the_environment_then_the_default():
    env = {"TRELLIS_URL": "http://10.0.0.2:9000/"}
    assert connect.target(parse("--url", "http://h:1/"), env).url == "http://h:1"  # trailing slash dropped
    assert connect.target(parse(), env).url == "http://10.0.0.2:9000"
    assert connect.target(parse(), {}).url == connect.DEFAULT_URL == "http://127.0.0.1:4170"
    assert connect.target(parse(), {"TRELLIS_URL": ""}).url == connect.DEFAULT_URL


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
    assert connect.target(parse(), {}).token is None
    (tmp_path / ".trellis").mkdir()
    (tmp_path / ".trellis" / "token").write_text("default-dir")
    assert connect.target(parse(), {}).token == "default-dir"


def test_no_token_anywhere_sends_no_authorization(tmp_path):
    (tmp_path / "token").write_text("   \n")  # an empty file is no token
    target = connect.target(parse("--state-dir", str(tmp_path)), {})
    assert target.token is None and target.headers == {}
    assert connect.target(parse("--state-dir", str(tmp_path / "missing")), {}).headers == {}
    given = connect.target(parse("--token", "s3cret"), {})
    assert given.headers == {"Authorization": "Bearer s3cret"}
    assert "s3cret" not in repr(given)  # never printed
