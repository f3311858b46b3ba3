"""``python -m transport``: flags, the listening line, refusals."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx

from transport.cli import build_parser


def run_cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "transport", *args], capture_output=True, text=True, timeout=timeout)


def test_help_documents_every_flag():
    out = run_cli("--help").stdout
    for flag in ("--port", "--hostname", "--token", "--require-auth", "--workspace", "--settings", "--state-dir",
                 "--model", "--script", "--max-sessions", "--max-pending-prompts", "--event-ring-size"):
        assert flag in out, flag
    for action in build_parser()._actions:
        assert action.help, action.dest


def test_port_zero_prints_the_bound_url_and_serves(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:")
        url = line.split()[-1]
        assert httpx.get(f"{url}/health", timeout=5).json() == {"status": "ok"}
        caps = httpx.get(f"{url}/capabilities", timeout=5).json()
        assert "non_blocking_prompt" in caps["features"] and isinstance(caps["features"], list)
    finally:
        proc.terminate()
        proc.wait(10)


def test_non_loopback_bind_without_token_refuses_to_start():
    result = run_cli("--hostname", "0.0.0.0", "--port", "0")
    assert result.returncode == 2
    assert "without a token" in result.stderr


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
