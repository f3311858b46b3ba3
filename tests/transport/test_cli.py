"""``python -m transport``: flags, the listening line, refusals."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import httpx
import trio

from tests.conftest import daemon_process
from transport.cli import build_parser
from transport.process_image import SECRET_ENV


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}  # a developer's own token changes nothing
    return subprocess.run([sys.executable, "-m", "transport", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_help_documents_every_flag():
    out = run_cli("--help").stdout
    for flag in ("--port", "--hostname", "--token", "--no-auth", "--workspace", "--settings", "--state-dir",
                 "--model", "--script", "--max-sessions", "--max-pending-prompts", "--event-ring-size"):
        assert flag in out, flag
    assert "--require-auth" not in out  # authentication is the default now
    assert "--secrets-fd" not in out  # internal (transport.process_image)
    for action in build_parser()._actions:
        if action.help is not argparse.SUPPRESS:
            assert action.help, action.dest


async def test_port_zero_prints_the_bound_url_and_serves(tmp_path):
    with trio.fail_after(30):
        async with daemon_process(state_dir=tmp_path) as daemon:
            assert daemon.url.startswith("http://127.0.0.1:")
            async with daemon.client(daemon.token()) as client:
                assert (await client.get("/health")).json() == {"status": "ok"}
                caps = (await client.get("/capabilities")).json()
    assert "non_blocking_prompt" in caps["features"] and isinstance(caps["features"], list)


def test_require_auth_is_gone():
    result = run_cli("--require-auth", "--port", "0")
    assert result.returncode == 2 and "--require-auth" in result.stderr


def test_no_auth_off_loopback_refuses_to_start():
    result = run_cli("--no-auth", "--hostname", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert "refusing to serve on 0.0.0.0 without authentication" in result.stderr
    assert "listening" not in result.stdout


def test_a_non_loopback_bind_without_a_token_refuses_to_start():
    result = run_cli("--hostname", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert "refusing to serve on 0.0.0.0 without a token: pass --token or set TRELLIS_TOKEN" in result.stderr
    assert "listening" not in result.stdout


def test_no_auth_with_a_token_is_a_usage_error():
    result = run_cli("--no-auth", "--token", "x", "--port", "0")
    assert result.returncode == 2 and "--no-auth" in result.stderr and "--token" in result.stderr


def test_flags_take_no_abbreviations():
    # An abbreviated --token would keep its value in /proc/<pid>/cmdline (transport.process_image).
    result = run_cli("--tok", "abbreviated-secret", "--port", "0")
    assert result.returncode == 2 and "unrecognized arguments" in result.stderr


def test_bad_settings_are_reported_with_the_key_and_nothing_starts(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"experimental": {"todoStopGuard": "yes"}}))
    result = run_cli("--settings", str(path), "--port", "0")
    assert result.returncode == 2
    assert "experimental.todoStopGuard" in result.stderr and str(path) in result.stderr
    assert "listening" not in result.stdout


def test_bad_script_is_reported_with_the_file_and_path(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"responses": [[{"txet": "typo"}]]}))
    result = run_cli("--script", str(path), "--port", "0")
    assert result.returncode == 2
    assert f"{path}.responses[0].steps[0]" in result.stderr


def test_invalid_limit_is_a_usage_error():
    result = run_cli("--max-sessions", "0")
    assert result.returncode == 2 and "--max-sessions" in result.stderr


def test_a_required_sandbox_that_cannot_run_refuses_to_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TRELLIS_TOKEN", "OPENAI_API_KEY")}
    env["PATH"] = str(tmp_path)  # no bwrap on it
    for extra in (["--sandbox", "bwrap"], ["--settings", str(_settings(tmp_path, {"sandbox": "bwrap"}))]):
        result = subprocess.run([sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(tmp_path), *extra],
                                capture_output=True, text=True, timeout=20, env=env)
        assert result.returncode == 2, result.stderr
        assert 'sandbox "bwrap" is required but unavailable: bwrap is not installed' in result.stderr
        assert "listening" not in result.stdout and "Traceback" not in result.stderr


def test_without_a_sandbox_the_daemon_says_commands_run_with_your_rights(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TRELLIS_TOKEN", "OPENAI_API_KEY")}
    proc = subprocess.Popen([sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(tmp_path),
                             "--sandbox", "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = proc.stdout.readline().split()[-1]
        token = (tmp_path / "token").read_text().strip()
        caps = httpx.get(f"{url}/capabilities", headers={"Authorization": f"Bearer {token}"}, timeout=5).json()
        assert caps["sandbox"] == "off"
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert "no sandbox" in stderr and "commands the model runs have your rights and can read your files" in stderr


def _settings(tmp_path, data):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(data))
    return path
