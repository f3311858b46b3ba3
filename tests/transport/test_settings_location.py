"""Where the daemon finds its settings when ``--settings`` is not given: the per-user file."""

from __future__ import annotations

import json
import os

import trio

from tests.conftest import daemon_process
from transport.bootstrap import load_daemon_config, settings_path
from transport.cli import build_parser


def _write(path, data) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def _config(argv, environ):
    return load_daemon_config(build_parser().parse_args(argv), environ)


def test_the_per_user_file_is_read_when_no_file_is_given(tmp_path):
    _write(tmp_path / "config" / "trellis" / "settings.json", {"limits": {"maxSessions": 7}})
    config = _config([], {"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert config.settings.limits.max_sessions == 7
    assert config.settings.path == str(tmp_path / "config" / "trellis" / "settings.json")


def test_a_given_file_wins_over_the_per_user_one(tmp_path):
    _write(tmp_path / "config" / "trellis" / "settings.json", {"limits": {"maxSessions": 7}})
    given = _write(tmp_path / "mine.json", {"limits": {"maxSessions": 3}})
    config = _config(["--settings", given], {"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert config.settings.limits.max_sessions == 3


def test_without_a_per_user_file_the_defaults_hold(tmp_path):
    config = _config([], {"XDG_CONFIG_HOME": str(tmp_path / "nothing-here")})
    assert config.settings.path is None
    assert settings_path(None, {"XDG_CONFIG_HOME": str(tmp_path / "nothing-here")}) is None


def test_an_unset_or_relative_xdg_config_home_means_dot_config_in_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = _write(tmp_path / ".config" / "trellis" / "settings.json", {})
    assert settings_path(None, {}) == expected
    assert settings_path(None, {"XDG_CONFIG_HOME": "relative/dir"}) == expected  # the XDG rules ignore it


def test_a_broken_per_user_file_is_an_error_naming_it(tmp_path, capsys):
    bad = _write(tmp_path / "config" / "trellis" / "settings.json", "{not json")
    assert _config([], {"XDG_CONFIG_HOME": str(tmp_path / "config")}) is None
    err = capsys.readouterr().err
    assert bad in err and "invalid JSON" in err


async def test_the_daemon_process_reads_the_per_user_file(tmp_path):
    config_home = tmp_path / "config"
    _write(config_home / "trellis" / "settings.json", {"limits": {"maxSessions": 1}})
    with trio.fail_after(30):
        async with daemon_process(state_dir=tmp_path / "state", env={"XDG_CONFIG_HOME": str(config_home)}) as daemon:
            async with daemon.client(daemon.token()) as client:
                first = await client.post("/session", json={"cwd": str(tmp_path)})
                second = await client.post("/session", json={"cwd": str(tmp_path)})
    assert first.status_code == 200, first.text
    assert second.status_code == 503 and second.json()["code"] == "too_many_sessions", second.text
    assert os.environ["XDG_CONFIG_HOME"] != str(config_home)  # the suite's own stays isolated
