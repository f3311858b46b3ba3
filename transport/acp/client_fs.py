"""The file tools over an ACP client's filesystem: ``fs/read_text_file`` and ``fs/write_text_file``.

A client that advertises ``clientCapabilities.fs.readTextFile`` (and/or
``writeTextFile``) gets :class:`ClientFiles` lent to each session it binds:
``read_file``, ``write_file`` and ``edit`` then read the editor's buffers
(unsaved edits win over the disk) and write through the editor, which may show
or save the change as it likes. A direction the client does not offer stays on
the daemon's own files.

The tools check paths (under the cwd, refused paths) before they get here, so
only checked absolute paths are ever sent. The rules of
:class:`~actors.tools.access.FileAccess` hold: the text is checked for size
and NUL bytes as a local file's would be, and every failure is an ``OSError``
(a missing file :class:`FileNotFoundError`) the tools turn into a tool error.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import Any

import trio

from actors.tools.access import LOCAL, SNIFF_BYTES, FileAccess, NotText, TooLarge

from .jsonrpc import ConnectionClosed, Peer, RpcError

log = logging.getLogger("trellis.acp")

CALL_TIMEOUT = 30.0  # seconds an editor may take to answer one fs request
RESOURCE_NOT_FOUND = -32002  # ACP's error code for a missing resource
# How editors say "no such file" when they do not use RESOURCE_NOT_FOUND.
_MISSING_WORDS = ("not found", "no such file", "does not exist", "enoent", "cannot find", "not exist")


def offers_fs(capabilities: dict[str, Any]) -> tuple[bool, bool]:
    """``(readTextFile, writeTextFile)`` from a client's ``clientCapabilities``; only ``true`` counts."""
    fs = capabilities.get("fs")
    if not isinstance(fs, dict):
        return False, False
    return fs.get("readTextFile") is True, fs.get("writeTextFile") is True


class ClientFiles:
    """A :class:`~actors.tools.access.FileAccess` over one client's ``fs/*`` methods, for one session."""

    def __init__(self, peer: Peer, session_id: str, *, read: bool, write: bool,
                 fallback: FileAccess = LOCAL, timeout: float = CALL_TIMEOUT) -> None:
        self._peer = peer
        self._session_id = session_id
        self.reads = read
        self.writes = write
        self._fallback = fallback
        self._timeout = timeout

    async def read_text(self, path: str, *, max_bytes: int | None = None) -> str:
        if not self.reads:
            return await self._fallback.read_text(path, max_bytes=max_bytes)
        # The whole file: the tool picks its lines itself (and edits need all of it).
        answer = await self._call("fs/read_text_file", {"sessionId": self._session_id, "path": path}, path)
        content = answer.get("content") if isinstance(answer, dict) else None
        if not isinstance(content, str):
            raise OSError(errno.EIO, "the editor answered fs/read_text_file without a text content", path)
        if max_bytes is not None:
            size = len(content.encode("utf-8", "surrogatepass"))
            if size > max_bytes:
                raise TooLarge(size, max_bytes)
        if "\0" in content[:SNIFF_BYTES]:
            raise NotText("it is a binary file (it has NUL bytes)")
        return content

    async def write_text(self, path: str, text: str) -> None:
        if not self.writes:
            await self._fallback.write_text(path, text)
            return
        await self._call("fs/write_text_file", {"sessionId": self._session_id, "path": path, "content": text}, path)

    async def _call(self, method: str, params: dict[str, Any], path: str) -> Any:
        call = await self._peer.call(method, params, session_id=self._session_id)
        try:
            return await call.wait(self._timeout)
        except trio.TooSlowError:
            raise OSError(errno.ETIMEDOUT, f"the editor did not answer {method} within {self._timeout:g} s",
                          path) from None
        except ConnectionClosed:
            raise OSError(errno.EIO, "the editor's connection closed before it answered", path) from None
        except RpcError as exc:
            raise _as_os_error(exc, method, path) from None
        finally:
            self._peer.forget(call)  # a late answer changes nothing; the slot is freed


def _as_os_error(exc: RpcError, method: str, path: str) -> OSError:
    """The client's error as the ``OSError`` a local file access would raise, as near as it can tell."""
    message = exc.message or f"error {exc.code}"
    said = f"{message} {exc.data}".lower() if exc.data is not None else message.lower()
    # Editors differ in how they report a missing file; when the disk agrees the file is not there,
    # it is missing (write_file then creates it instead of failing).
    if exc.code == RESOURCE_NOT_FOUND or any(w in said for w in _MISSING_WORDS) or (
            method == "fs/read_text_file" and not os.path.lexists(path)):
        return FileNotFoundError(errno.ENOENT, f"the editor says: {message}", path)
    log.info("%s of %s failed in the client: %s", method, path, message)
    return OSError(errno.EIO, f"the editor answered {method} with an error: {message}", path)


__all__ = ["CALL_TIMEOUT", "ClientFiles", "offers_fs"]
