"""Real agent CLIs from npm, installed at test time once per test session (tests/e2e/test_real_agent_clis.py).

Where they go: a fresh directory per test session, ``.pytest_cache/d/agent-clis/session-*`` in the
repository (pytest's cache directory; ``/var/tmp`` when the checkout lies under ``/tmp``), removed when
the session ends. Not under ``/tmp``: the sandbox
gives every command a ``/tmp`` of its own, so a CLI installed there is not found inside it (``bwrap:
execvp ...: No such file or directory``). Not under ``$HOME`` either: the tests leave nothing in the
developer's home (and move ``HOME`` themselves), while the checkout is the tests' own place, already
ignored by git, visible read-only inside the sandbox, and gone with the checkout. npm's own download
cache (``~/.npm``) is used as npm always does, so a second session installs from it in seconds.

Versions are pinned to the ones these tests were written against (each CLI's way of offering MCP
tools to its model changes between releases: Claude Code 2.1.197 declares them up front, 2.1.332
behind ``ToolSearch``; qwen-code 0.15 behind ``tool_search``, 0.24 behind ``tool_search``/``tool_call``).
``TRELLIS_TEST_CLAUDE_CODE`` and ``TRELLIS_TEST_QWEN_CODE`` name other npm specs
(``@anthropic-ai/claude-code@latest``). The registry is probed first (``npm view``); a test that
needs it is skipped, saying why, when it cannot be reached.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLAUDE_CODE = os.environ.get("TRELLIS_TEST_CLAUDE_CODE", "@anthropic-ai/claude-code@2.1.332")
QWEN_CODE = os.environ.get("TRELLIS_TEST_QWEN_CODE", "@qwen-code/qwen-code@0.24.4")
PROBE_TIMEOUT = 60  # seconds for `npm view`
INSTALL_TIMEOUT = 600  # seconds for `npm install` (Claude Code's native binary is a download of ~70 MB)
STALE_SECONDS = 24 * 3600  # a session directory this old was left by a session that was killed


@dataclass(frozen=True)
class Installed:
    """An agent CLI installed for this test session."""

    package: str  # the npm package name
    version: str  # what npm installed
    bin_dir: Path  # node_modules/.bin: prepend it to PATH
    seconds: float  # how long `npm install` took


def package_name(spec: str) -> str:
    """``@scope/name@1.2`` -> ``@scope/name``."""
    at = spec.rfind("@")
    return spec[:at] if at > 0 else spec


def _why(text: str) -> str:
    """What an npm failure says first (its code and reason; the stack trace and log path after them left out)."""
    kept = [line.removeprefix("npm error").strip() for line in text.strip().splitlines()]
    kept = [line for line in kept if line and not line.startswith(("at ", "A complete log"))]
    return " | ".join(kept[:4]) or "no output"


def npm() -> str:
    found = shutil.which("npm")
    if found is None:
        pytest.skip("node's npm is not installed: the agent CLIs are installed from npm at test time")
    return found


def probe_registry(spec: str) -> None:
    """Skip the test, saying why, when npm's registry cannot be reached or does not have ``spec``."""
    argv = [npm(), "view", spec, "version"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.skip(f"the npm registry cannot be reached: `{' '.join(argv)}` took over {PROBE_TIMEOUT} s")
    if done.returncode != 0 or not done.stdout.strip():
        pytest.skip(f"the npm registry cannot be reached: `{' '.join(argv)}` exited {done.returncode}: "
                    f"{_why(done.stderr or done.stdout)}")


def install(spec: str, into: Path) -> Installed:
    """``npm install`` ``spec`` into ``into`` (its own prefix); the test fails if npm does (the registry answered)."""
    probe_registry(spec)
    into.mkdir(parents=True)
    argv = [npm(), "install", "--prefix", str(into), "--no-audit", "--no-fund", "--no-save",
            "--loglevel=error", spec]
    env = {**os.environ, "npm_config_update_notifier": "false"}
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT,
                              stdin=subprocess.DEVNULL, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(argv)}` took over {INSTALL_TIMEOUT} s")
    seconds = time.monotonic() - started
    if done.returncode != 0:
        pytest.fail(f"`{' '.join(argv)}` exited {done.returncode}: {_why(done.stderr or done.stdout)}")
    name = package_name(spec)
    manifest: Any = json.loads((into / "node_modules" / name / "package.json").read_text())
    installed = Installed(name, str(manifest["version"]), into / "node_modules" / ".bin", seconds)
    print(f"\ninstalled {name}@{installed.version} in {seconds:.1f} s")  # shown with -s
    return installed


def session_root(config: Any) -> Path:
    """``.pytest_cache/d/agent-clis`` of the repository (pytest's cache directory, when the plugin is on),
    or ``/var/tmp/trellis-test-agent-clis`` when the checkout itself lies under ``/tmp`` (a clone there,
    as CI may make one: the sandbox's own ``/tmp`` would hide it)."""
    cache = getattr(config, "cache", None)
    root = Path(cache.mkdir("agent-clis")) if cache is not None else ROOT / ".pytest_cache" / "d" / "agent-clis"
    if os.path.realpath(root).startswith("/tmp/"):
        root = Path("/var/tmp/trellis-test-agent-clis")
    root.mkdir(parents=True, exist_ok=True)
    return root


def session_dir(config: Any) -> Iterator[Path]:
    """A directory for this test session's installs, not under /tmp; removed when the session ends."""
    root = session_root(config)
    for old in root.glob("session-*"):  # left by a session that was killed
        try:
            if time.time() - old.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    here = Path(tempfile.mkdtemp(prefix="session-", dir=root))
    try:
        yield here
    finally:
        shutil.rmtree(here, ignore_errors=True)
