"""The sandbox policy: settings, refusals, and what a real bubblewrap sandbox lets a command see and do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from actors.process import Sandbox, SandboxRefusal, SandboxUnavailable, resolve_sandbox
from actors.process import sandbox as sandbox_module

HAVE_BWRAP = shutil.which("bwrap") is not None and sandbox_module.probe(shutil.which("bwrap") or "") is None
needs_bwrap = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not usable on this machine")


def test_off_wraps_nothing():
    sandbox = resolve_sandbox("off")
    assert not sandbox.active and sandbox.kind == "off" and "setting" in sandbox.reason
    assert sandbox.wrap(["/bin/sh", "-c", "true"], "/") == ["/bin/sh", "-c", "true"]


def test_an_unknown_setting_is_refused_by_name():
    with pytest.raises(ValueError, match="sandbox must be one of .* got 'maybe'"):
        resolve_sandbox("maybe")


def test_without_bwrap_auto_falls_back_and_bwrap_refuses(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    fallback = resolve_sandbox("auto")
    assert fallback.kind == "off" and "bwrap is not installed" in fallback.reason
    with pytest.raises(SandboxUnavailable, match="required but unavailable: bwrap is not installed"):
        resolve_sandbox("bwrap")


def test_a_broken_bwrap_is_reported_with_its_error(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    sandbox_module.probe.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="No permissions to creating new namespace"):
            resolve_sandbox("bwrap")
    finally:
        sandbox_module.probe.cache_clear()


def test_a_cwd_inside_a_hidden_path_is_refused(tmp_path):
    (tmp_path / "state" / "inner").mkdir(parents=True)
    sandbox = Sandbox("bwrap", executable="/usr/bin/bwrap", hidden=(str(tmp_path / "state"),))
    with pytest.raises(SandboxRefusal, match="lies inside .*state"):
        sandbox.wrap(["true"], str(tmp_path / "state" / "inner"))
    assert isinstance(SandboxRefusal("x"), OSError)  # shells report it as a start failure


# ------------------------------------------------------------------ a real sandbox


def run(sandbox: Sandbox, script: str, cwd: Path, expose: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(sandbox.wrap(["/bin/sh", "-c", script], str(cwd), expose=expose), cwd=cwd,
                          capture_output=True, text=True, timeout=30)


@pytest.fixture
def layout(tmp_path):
    work, state, elsewhere = tmp_path / "work", tmp_path / "work" / ".trellis", tmp_path / "elsewhere"
    for d in (work, state / "subagents", elsewhere):
        d.mkdir(parents=True)
    (state / "token").write_text("the-daemon-token")
    (state / "subagents" / "mine.mcp.json").write_text('{"mine": true}')
    (state / "subagents" / "sibling.mcp.json").write_text('{"sibling": true}')
    settings = tmp_path / "settings.json"
    settings.write_text('{"model": {"apiKey": "the-api-key"}}')
    sandbox = resolve_sandbox("bwrap", [state, settings])
    return sandbox, work, state, elsewhere, settings


@needs_bwrap
def test_no_daemon_process_is_visible(layout):
    sandbox, work, *_ = layout
    result = run(sandbox, "cat /proc/[0-9]*/comm", work)
    assert result.returncode == 0
    # the sandbox's own reaper, the shell and cat: nothing of the process that started it
    assert set(result.stdout.split()) <= {"bwrap", "sh", "cat"} and "bwrap" in result.stdout.split()


@needs_bwrap
def test_hidden_paths_are_gone_and_only_the_exposed_config_is_readable(layout):
    sandbox, work, state, _, settings = layout
    mine = state / "subagents" / "mine.mcp.json"
    result = run(sandbox, f"cat {state}/token; ls -A {state}/subagents; cat {mine}; "
                          f"cat {state}/subagents/sibling.mcp.json; cat {settings}", work, expose=(str(mine),))
    out = result.stdout + result.stderr
    assert "the-daemon-token" not in out and "sibling" not in out.replace("sibling.mcp.json", "")
    assert "the-api-key" not in out
    assert '{"mine": true}' in result.stdout
    assert "sibling.mcp.json" not in result.stdout  # the directory shows only what was exposed


@needs_bwrap
def test_writes_land_only_in_the_cwd_and_a_private_tmp(layout, tmp_path):
    sandbox, work, _, elsewhere, _ = layout
    marker = f"trellis-sandbox-{os.getpid()}"
    result = run(sandbox, f"echo a > in-cwd; echo b > /tmp/{marker}; echo c > {elsewhere}/x; "
                          f"echo d > $HOME/{marker} 2>/dev/null; cat /tmp/{marker}", work)
    assert (work / "in-cwd").read_text() == "a\n"
    assert result.stdout == "b\n"  # its /tmp works ...
    assert not Path(f"/tmp/{marker}").exists()  # ... and is its own
    assert not (elsewhere / "x").exists() and not Path(os.path.expanduser(f"~/{marker}")).exists()
    assert "Read-only file system" in result.stderr


@needs_bwrap
def test_exit_status_and_output_are_the_commands(layout):
    sandbox, work, *_ = layout
    result = run(sandbox, "echo out; echo err >&2; exit 7", work)
    assert (result.returncode, result.stdout, result.stderr) == (7, "out\n", "err\n")


@needs_bwrap
def test_sockets_under_run_and_the_variables_naming_them_are_out_of_reach(layout):
    import socket

    sandbox, work, *_ = layout
    directory = Path(f"/run/trellis-test-{os.getpid()}")
    directory.mkdir(exist_ok=True)
    path = directory / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        server.listen(1)
        probe = (f"python3 -c \"import socket,os; s=socket.socket(socket.AF_UNIX); "
                 f"print('env', os.environ.get('SSH_AUTH_SOCK')); s.connect('{path}'); print('connected')\"")
        env = sandbox.environment({**os.environ, "SSH_AUTH_SOCK": str(path)})
        result = subprocess.run(sandbox.wrap(["/bin/sh", "-c", probe], str(work)), cwd=work, env=env,
                                capture_output=True, text=True, timeout=30)
        assert "env None" in result.stdout and "connected" not in result.stdout
        assert "No such file" in result.stderr
    finally:
        server.close()
        path.unlink(missing_ok=True)
        directory.rmdir()


@needs_bwrap
def test_credential_files_in_the_home_are_hidden(monkeypatch):
    import tempfile

    # Not under /tmp, which the sandbox replaces with its own: a home is on the real filesystem.
    root = Path(tempfile.mkdtemp(dir="/var/tmp"))
    home = root / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    (home / ".bashrc").write_text("export OPENAI_API_KEY=sk-from-bashrc\n")
    (home / "notes.txt").write_text("just notes")
    work = home / "project"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    sandbox = resolve_sandbox("bwrap")
    result = run(sandbox, f"cat {home}/.ssh/id_ed25519 {home}/.bashrc {home}/notes.txt", work)
    assert "PRIVATE KEY" not in result.stdout and "sk-from-bashrc" not in result.stdout
    try:
        assert "just notes" in result.stdout  # the rest of the home stays readable
    finally:
        shutil.rmtree(root)


@needs_bwrap
def test_the_daemons_own_python_under_tmp_stays_visible_read_only(tmp_path, monkeypatch):
    prefix = tmp_path / "venv"
    (prefix / "bin").mkdir(parents=True)
    tool = prefix / "bin" / "tool"
    tool.write_text("#!/bin/sh\necho from-the-venv\n")
    tool.chmod(0o755)
    (tmp_path / "elsewhere-in-tmp").write_text("private")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(sys, "prefix", str(prefix))
    sandbox_module.interpreter_paths_under_tmp.cache_clear()
    try:
        sandbox = resolve_sandbox("bwrap")
        result = run(sandbox, f"{tool}; cat {tmp_path}/elsewhere-in-tmp; echo x > {prefix}/written", work)
    finally:
        sandbox_module.interpreter_paths_under_tmp.cache_clear()
    assert "from-the-venv" in result.stdout
    assert "private" not in result.stdout  # the rest of the host's /tmp stays out of sight
    assert not (prefix / "written").exists()
