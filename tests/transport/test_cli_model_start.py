"""``--model openai`` starts only with a base URL and a model name, and says which is missing (the real CLI).

A key is optional (local servers want none): it is warned about only for a server off loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import daemon_process
from transport.process_image import SECRET_ENV

# The developer's own OPENAI_* must not change what these tests see.
CLEAN = {"OPENAI_BASE_URL": "", "OPENAI_MODEL": "", "OPENAI_API_KEY": ""}


def run_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in SECRET_ENV} | CLEAN | (env or {})
    return subprocess.run([sys.executable, "-m", "transport", "--port", "0", "--state-dir", str(tmp_path / "state"),
                           *args], env=environ, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_without_a_base_url_or_a_model_it_refuses_naming_both(tmp_path):
    done = run_cli(tmp_path, "--model", "openai")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: --model openai needs a base URL: --openai-base-url URL, $OPENAI_BASE_URL "
                                  "or settings model.baseUrl (e.g. http://127.0.0.1:8080/v1)")
    assert "a model name: --openai-model NAME, $OPENAI_MODEL or settings model.name" in done.stderr
    assert "listening on" not in done.stdout


@pytest.mark.parametrize(("args", "env", "missing", "given"), [
    (("--openai-base-url", "http://127.0.0.1:8080/v1"), {}, "a model name", "a base URL"),
    ((), {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}, "a model name", "a base URL"),
    (("--openai-model", "qwen3"), {}, "a base URL", "a model name"),
    ((), {"OPENAI_MODEL": "qwen3"}, "a base URL", "a model name"),
])
def test_it_names_the_one_setting_missing(tmp_path, args, env, missing, given):
    done = run_cli(tmp_path, "--model", "openai", *args, env=env)
    assert done.returncode == 2, done.stderr
    assert f"error: --model openai needs {missing}: " in done.stderr
    assert given not in done.stderr


def test_a_settings_provider_is_named_as_such(tmp_path):
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"model": {"provider": "openai", "baseUrl": "http://127.0.0.1:8080/v1"}}))
    done = run_cli(tmp_path, "--settings", str(settings))
    assert done.returncode == 2, done.stderr
    # The file that said so is named: it may be the per-user one, read without being given.
    assert f'error: {settings}: settings model.provider "openai" needs a model name: ' in done.stderr


@pytest.mark.parametrize("url", ["user:hunter2@127.0.0.1:8080/v1", "http://hunter2@[x/v1"])
def test_a_base_url_that_is_not_http_is_refused_without_echoing_it(tmp_path, url):
    done = run_cli(tmp_path, "--model", "openai", "--openai-base-url", url, "--openai-model", "m")
    assert done.returncode == 2, done.stderr
    assert "the base URL (--openai-base-url) must be an http:// or https:// URL with a host" in done.stderr
    assert "hunter2" not in done.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/v1", "http://localhost:9/v1", "http://[::1]:9/v1"])
async def test_a_loopback_server_without_a_key_starts_without_a_warning(tmp_path, url):
    async with daemon_process("--model", "openai", "--openai-base-url", url, "--openai-model", "m",
                              state_dir=tmp_path, env=CLEAN) as daemon:
        async with daemon.client(daemon.token()) as client:
            assert (await client.get("/capabilities")).json()["model"] == "openai"
    assert daemon.process.returncode == 0
    assert "API key" not in daemon.stderr.decode()


async def test_a_remote_server_without_a_key_starts_with_a_warning(tmp_path):
    # Never contacted: no prompt is sent.
    async with daemon_process("--model", "openai", "--openai-base-url", "https://models.example.invalid/v1",
                              "--openai-model", "m", state_dir=tmp_path, env=CLEAN) as daemon:
        assert daemon.url.startswith("http://127.0.0.1:")
    assert daemon.process.returncode == 0
    assert ("warning: no API key for the model server at models.example.invalid: requests go without "
            "Authorization") in daemon.stderr.decode()


async def test_a_remote_server_with_a_key_starts_without_a_warning(tmp_path):
    async with daemon_process("--model", "openai", "--openai-base-url", "https://models.example.invalid/v1",
                              "--openai-model", "m", state_dir=tmp_path,
                              env=CLEAN | {"OPENAI_API_KEY": "sk-remote-test-key"}) as daemon:
        assert daemon.url
    assert daemon.process.returncode == 0
    stderr = daemon.stderr.decode()
    assert "API key" not in stderr and "sk-remote-test-key" not in stderr


def test_a_negative_loop_stall_threshold_is_refused(tmp_path):
    done = run_cli(tmp_path, "--report-loop-stalls", "-1")
    assert done.returncode == 2
    assert "--report-loop-stalls must be a non-negative number of milliseconds" in done.stderr


def test_a_port_in_use_is_said_as_a_failure_to_serve_there(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        environ = {k: v for k, v in os.environ.items() if k not in SECRET_ENV} | CLEAN
        done = subprocess.run([sys.executable, "-m", "transport", "--port", str(port), "--state-dir",
                               str(tmp_path / "state")], env=environ, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert f"error: cannot serve on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "listening on" not in done.stdout
