"""Which daemon a client subcommand talks to, and with which token.

- the URL: ``--url``, else ``$TRELLIS_URL``, else ``http://127.0.0.1:4170``
  (the daemon's default address);
- the token: ``--token``, else ``$TRELLIS_TOKEN``, else the file the daemon
  minted it into, ``<state-dir>/token``, the state directory being
  ``--state-dir``, else ``$TRELLIS_STATE_DIR``, else ``./.trellis`` (the
  daemon's default); no token at all is allowed (a daemon run with
  ``--no-auth``), and the daemon's 401 then says what to send.

A token given on the command line shows in the process list: the help says
to prefer the environment or the file.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping
from urllib.parse import urlsplit

import attrs

DEFAULT_URL = "http://127.0.0.1:4170"
DEFAULT_STATE_DIR = ".trellis"


@attrs.frozen
class Target:
    """A daemon's base URL and the bearer token to send it (``None``: send none)."""

    url: str
    token: str | None = attrs.field(default=None, repr=False)  # never printed

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--token`` and ``--state-dir`` on a client subcommand."""
    group = parser.add_argument_group("daemon")
    group.add_argument("--url", default=None, help=f"the daemon (default: $TRELLIS_URL, else {DEFAULT_URL})")
    group.add_argument("--token", default=None,
                       help="its bearer token (default: $TRELLIS_TOKEN, else STATE_DIR/token; prefer those: a "
                            "flag shows in the process list)")
    group.add_argument("--state-dir", default=None, metavar="DIR",
                       help=f"the daemon's state directory, for its token file (default: $TRELLIS_STATE_DIR, "
                            f"else ./{DEFAULT_STATE_DIR})")


def target(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Target:
    """The daemon ``args`` name, by the rules of the module doc."""
    env = os.environ if environ is None else environ
    url = (args.url or env.get("TRELLIS_URL") or DEFAULT_URL).rstrip("/")
    token = args.token or env.get("TRELLIS_TOKEN") or None
    if token is None:
        state_dir = args.state_dir or env.get("TRELLIS_STATE_DIR") or DEFAULT_STATE_DIR
        try:
            with open(os.path.join(state_dir, "token"), encoding="utf-8") as f:
                token = f.read().strip() or None
        except OSError:
            token = None
    return Target(url, token)


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (``localhost`` or a loopback address): proxies never apply."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


__all__ = ["DEFAULT_URL", "Target", "add_arguments", "is_loopback", "target"]
