"""Files a run owns: its private MCP config file and the report file its stops are appended to.

The MCP config file has the form command-line agents read with ``--mcp-config``
(:func:`mcp_config`): one server entry that both families of agent CLIs read,
``type: "http"`` with ``url`` for Claude Code (and the ``mcp`` client), and
``httpUrl`` for qwen-code (gemini-cli's format), which reads a bare ``url`` as
the old SSE transport and fails to connect. Each ignores the other's key
(Claude Code 2.1.197 and 2.1.332, qwen-code 0.15.10 and 0.24.4:
tests/e2e/test_real_agent_clis.py). It is created atomically (written to a
private temporary file, flushed, then renamed into place) with mode 0600, one
per run and never shared: a shared path was a race between two starts, and the
loser would read the winner's identity.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import tempfile
from pathlib import Path
from typing import Any

SERVER_NAME = "trellis"


def make_private_dir(path: Path | None) -> tuple[Path, bool]:
    """The directory config files go into (mode 0700); ``(path, created_temporary)``."""
    if path is None:
        # Under /tmp whatever $TMPDIR says: the sandbox gives each command a /tmp of its own,
        # so no command sees another run's config file (its signal URL) there.
        return Path(tempfile.mkdtemp(prefix="trellis-subagents-", dir="/tmp")), True
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path, False


def mcp_config(url: str) -> dict[str, Any]:
    """The config a run's subagent reads: ``url`` with ``type: "http"`` (Claude Code), ``httpUrl`` (qwen, gemini)."""
    return {"mcpServers": {SERVER_NAME: {"type": "http", "url": url, "httpUrl": url}}}


def write_mcp_config(directory: Path, name: str, url: str) -> Path:
    """Write :func:`mcp_config` of ``url`` atomically, mode 0600."""
    body = json.dumps(mcp_config(url), indent=2).encode() + b"\n"
    # The final name carries fresh randomness too, so two runs of one name never share a path.
    final = directory / f"{name}.{secrets.token_hex(8)}.mcp.json"
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")  # O_EXCL, mode 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.link(tmp, final)  # fails rather than replace an existing file
    finally:
        os.unlink(tmp)
    return final


def read_signal_url(config_path: str | Path) -> str:
    """The signal URL from an MCP config file (what a subagent does with ``--mcp-config``)."""
    data: Any = json.loads(Path(config_path).read_text())
    try:
        url = data["mcpServers"][SERVER_NAME]["url"]
    except (KeyError, TypeError):
        raise ValueError(f"{config_path}: no mcpServers.{SERVER_NAME}.url") from None
    if not isinstance(url, str):
        raise ValueError(f"{config_path}: mcpServers.{SERVER_NAME}.url is not a string")
    return url


def remove_quietly(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def append_report(path: Path, text: str, *, confine: str | Path | None = None) -> None:
    """Append ``text`` to a report file and make it durable before returning.

    The seed daemon lost report lines to a file dropped without a flush; here
    every append is flushed and fsynced, and the file is closed on every path.
    With ``confine`` (a path a subagent named), the file must still lie under
    that directory at each append and its last component must not be a
    symlink: a swap after the check at ``goal_reached`` is refused too.
    """
    if confine is not None:
        opened = os.fdopen(open_beneath(confine, path, create=True), "a", encoding="utf-8")
    else:
        opened = open(path, "a", encoding="utf-8")
    with opened as out:
        out.write(text if text.endswith("\n") else text + "\n")
        out.flush()
        os.fsync(out.fileno())


def within(path: str | Path, directory: str | Path) -> bool:
    """Whether ``path``, symlinks resolved, lies under ``directory`` (symlinks resolved too)."""
    real, base = os.path.realpath(path), os.path.realpath(directory)
    return real == base or real.startswith(base.rstrip("/") + "/")


def open_beneath(directory: str | Path, path: str | Path, *, create: bool = False) -> int:
    """Open ``path`` for appending (created when ``create``), walking down from ``directory`` without
    following any symlink, and never a file with other hard links.

    Each component is opened relative to the one before with ``O_NOFOLLOW``,
    so swapping a directory on the way for a symlink (a race against the
    check at ``goal_reached``) fails instead of leading out of ``directory``.
    Returns the file descriptor of a regular file; ``OSError`` otherwise.
    """
    base = os.path.realpath(directory)
    relative = os.path.relpath(os.path.abspath(path), base)
    parts = Path(relative).parts
    if not parts or relative.startswith("..") or any(p in ("..", ".") for p in parts):
        raise OSError(f"{path} lies outside {base}")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            step = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = step
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        out = os.open(parts[-1], flags, 0o644, dir_fd=fd)
    finally:
        os.close(fd)
    info = os.fstat(out)
    if not stat.S_ISREG(info.st_mode):
        os.close(out)
        raise OSError(f"{path} is not a regular file")
    if info.st_nlink > 1:  # a hard link made since the check: the same file is also somewhere else
        os.close(out)
        raise OSError(f"{path} has other hard links; nothing was appended")
    return out


def check_named_report(path: Path, cwd: str | Path) -> str | None:
    """Why a report path the subagent named cannot be used, or ``None``.

    The daemon appends only to a regular file that already exists (the subagent
    says it wrote there) and that lies, symlinks resolved, under the run's cwd:
    on a subagent's word it never creates a file, nor writes outside the
    directory it works in (``~/.bashrc`` through ``../``, an absolute path or a
    symlink).
    """
    if not within(path, cwd):
        return f"{path} lies outside the run's working directory {os.path.realpath(cwd)}"
    real = Path(os.path.realpath(path))
    try:
        info = real.lstat()
    except OSError:
        return f"{path} does not exist"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    return None
