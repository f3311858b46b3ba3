"""The daemon's bearer token file: ``<state-dir>/token``.

Authentication is on by default, loopback included: any local user or process
could otherwise drive the daemon (and the commands its sessions run). Unless a
token is given (``--token`` / ``$TRELLIS_TOKEN``, or ``serve(token=...)``), the
daemon uses the one persisted here, minting it at its first start, readable by
its owner only, so that local clients can pick it up:

    token = read_token_file(".trellis")
    httpx.get(url, headers={"Authorization": f"Bearer {token}"})

The token stays the same across restarts (a browser tab or an ``attach``
reconnects with the one it has); ``trellis token rotate`` mints a new one
(:func:`mint_token_file`), which a running daemon takes at its next start. A
token file that the group or others may read, or another user owns, is refused
(:func:`persisted_token`): it was not written by a daemon. The token itself is
never printed; the daemon names the file instead.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from actors.storage import StorageError, replace_private

TOKEN_FILE = "token"


class TokenFileError(RuntimeError):
    """The token file could not be written or read; the message names the path."""


def new_token() -> str:
    """A fresh bearer token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def token_path(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / TOKEN_FILE


def write_token_file(state_dir: str | os.PathLike[str], token: str) -> Path:
    """Write ``token`` to ``<state_dir>/token`` (mode 0600, dir 0700) and return the path.

    The file is created under a temporary name with ``O_CREAT | O_EXCL`` and mode
    0600, then renamed over the old one: it is never readable by anyone else, not
    even for an instant, and a reader sees either the old token or the new one.
    """
    directory = Path(state_dir)
    path = token_path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o700)  # the directory also holds transcripts: owner only
        replace_private(path, token.encode())
    except StorageError as exc:  # its message names the path already
        raise TokenFileError(f"token file: {exc}") from None
    except OSError as exc:
        raise TokenFileError(f"cannot write the token file {path}: {exc.strerror or exc}") from None
    return path


def mint_token_file(state_dir: str | os.PathLike[str]) -> tuple[str, Path]:
    """Mint a fresh token and write it to ``<state_dir>/token``; returns ``(token, path)``."""
    token = new_token()
    return token, write_token_file(state_dir, token)


def persisted_token(state_dir: str | os.PathLike[str]) -> str | None:
    """The token a daemon on ``state_dir`` keeps across restarts, or ``None`` when there is none yet (no file,
    or an empty one). ``TokenFileError`` for a file the daemon must not trust: not a regular file of this
    user's, or readable by the group or others (its message says how to fix it)."""
    path = token_path(state_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror or exc} (a symlink is refused)"
                             ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise TokenFileError(f"refusing the token file {path}: not a regular file owned by this user; "
                                 "remove it, or run `trellis token rotate` to write a new one")
        if info.st_mode & 0o077:
            raise TokenFileError(f"refusing the token file {path}: its mode {stat.S_IMODE(info.st_mode):04o} lets "
                                 "the group or others read it, so the token may be known; run `trellis token "
                                 "rotate` to write a new one (mode 0600)")
        with os.fdopen(fd, "rb", closefd=False) as f:
            token = f.read().decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    return token or None


def read_token_file(state_dir: str | os.PathLike[str]) -> str:
    """The token a daemon on ``state_dir`` uses (for clients)."""
    path = token_path(state_dir)
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    if not token:
        raise TokenFileError(f"the token file {path} is empty")
    return token
