"""Red team, seventh round: a root daemon's commands read every root-only file no list named.

A daemon run as root runs its commands as uid 0 with no capability; uid 0 owns every root-owned file, so a file
of mode 0600 or 0640 (``/var/cache/debconf/passwords.dat``, ``/var/log/btmp``, systemd's ``/var/lib/private``,
a service's key under ``/etc``) was readable by its owner bit alone. ``SYSTEM_SECRETS`` named a few dozen;
on this CI machine a scan found the debconf passwords and the apt terminal log it did not name. Now the
system directories are scanned by mode (``actors/process/root_only.py``) and what only root may read is hidden
from commands and refused to the file tools, except what the session must reach (its cwd, its home).

Against the real daemon (a subprocess, as root) and a real bwrap; the files are made under ``/var/tmp``, one of
the scanned roots, before the daemon starts.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest
import trio

from tests.e2e.isolation_harness import hostile_daemon, needs_bwrap, shell

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the finding is about a daemon run as root (CI runs as root)")

MARK = secrets.token_hex(8)


def read_file(path: str) -> dict:
    return {"tool_call": {"name": "read_file", "arguments": {"path": path}}}


@pytest.fixture
def system(tmp_path) -> Path:
    """``/var/tmp/trellis-rt7-*`` (anyone may enter): root-only files beside a public one, and a private
    directory holding the session's cwd (``private/work``) with other things of root's beside it."""
    base = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="trellis-rt7-"))
    try:
        if os.stat(base).st_dev != os.stat("/var").st_dev:
            pytest.skip("/var/tmp is a file system of its own here: the scan does not cross into it")
        base.chmod(0o755)
        for name, mode in (("secret.conf", 0o600), ("group-secret.conf", 0o640), ("public.conf", 0o644)):
            (base / name).write_text(f"{name}={MARK}\n")
            (base / name).chmod(mode)
        vault = base / "vault"
        vault.mkdir(mode=0o700)
        (vault / "open-inside").write_text(f"vault={MARK}\n")
        (vault / "open-inside").chmod(0o644)  # readable itself: the directory is what keeps it root's
        private = base / "private"
        private.mkdir(mode=0o700)
        (private / "keys").write_text(f"keys={MARK}\n")
        (private / "keys").chmod(0o644)
        (private / "work").mkdir()
        (private / "work" / "project.env").write_text(f"project={MARK}\n")
        (private / "work" / "project.env").chmod(0o600)  # the project's own: the session works with it
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@needs_root
@needs_bwrap
def test_a_root_daemons_commands_and_file_tools_see_no_root_only_file_but_the_projects(system):
    private = system / "private"
    commands = [f"cat {system}/secret.conf {system}/group-secret.conf {system}/vault/open-inside "
                f"{private}/keys; echo END", f"cat {system}/public.conf project.env; echo END"]
    reads = [f"{system}/secret.conf", f"{system}/vault/open-inside", f"{private}/keys", "project.env"]
    responses = [*([shell(c)] for c in commands), *([read_file(p)] for p in reads), [{"text": "done"}]]
    settings = {"sandbox": "bwrap", "tools": {"allowPathsOutsideCwd": True}}

    async def run() -> list[str]:
        async with hostile_daemon(private, responses, settings=settings) as d:
            with trio.fail_after(60):
                sid = await d.open_session()
                record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=60)
            assert record["state"] == "completed", record
            return d.tool_results()

    results = trio.run(run)
    assert len(results) == len(commands) + len(reads), results
    hidden, shown, *tools = results
    assert "END" in hidden and MARK not in hidden, hidden
    assert f"public.conf={MARK}" in shown and f"project={MARK}" in shown, shown  # the same command reads these
    for path, said in zip(reads[:3], tools[:3]):
        assert MARK not in said, said
        assert f"{path} is a credential (in the home, or a file only root may read)" in said, said
    assert f"project={MARK}" in tools[3], tools[3]
    assert json.dumps(results).count(MARK) == 3  # the public file, the project's (read twice), nothing else
