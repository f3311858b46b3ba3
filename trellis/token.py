"""``trellis token rotate``: a new bearer token for the daemon of a state directory.

    trellis token rotate [--state-dir DIR]

The daemon keeps its token across restarts in ``<state-dir>/token`` (mode 0600);
this writes a new one there (atomically, never readable by others) and prints the
file's path, never the token. A running daemon goes on accepting the old token
until it restarts, and takes the new one then: rotate, then restart the daemon.
The state directory is ``--state-dir``, else ``$TRELLIS_STATE_DIR``, else the
first of ``./.trellis`` and the per-user one (:func:`trellis.connect.user_state_dir`)
that has a token file, else ``./.trellis`` (``trellis serve``'s default).

Exit codes: 0 written; 2 the file could not be written.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from . import connect

EXIT_OK = 0
EXIT_FAILED = 2


def add_parser(sub: Any) -> None:  # what argparse's add_subparsers() returns (its class is private)
    from .cli import VERSION  # lazily: trellis.cli imports this module while it builds its parser

    parser = sub.add_parser("token", help="the daemon's bearer token: rotate it",
                            description="Manage the bearer token a daemon keeps in its state directory.")
    parser.add_argument("--version", action="version", version=VERSION)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    rotate = actions.add_parser(
        "rotate", help="write a new token (the daemon takes it at its next start)",
        description="Write a new token to STATE_DIR/token and print the file's path. A running daemon keeps "
                    "accepting the old token until it restarts: restart it to use the new one.")
    rotate.add_argument("--state-dir", default=None, metavar="DIR",
                        help=f"the daemon's state directory (default: $TRELLIS_STATE_DIR, else the nearest "
                             f"{connect.DEFAULT_STATE_DIR} here or above, or the per-user one, whichever has a "
                             f"token)")
    rotate.set_defaults(run=run)


def state_dir(args: argparse.Namespace, environ: Any = None) -> str:
    """The directory whose token is rotated (the module doc)."""
    dirs = connect.state_dirs(args, environ)
    return next((d for d in dirs if os.path.isfile(os.path.join(d, connect.TOKEN_FILE))), dirs[0])


def run(args: argparse.Namespace) -> int:
    from transport.auth import TokenFileError, mint_token_file  # the daemon's own writer: mode 0600, atomic

    directory = state_dir(args)
    try:
        _, path = mint_token_file(directory)
    except TokenFileError as exc:
        print(f"trellis: {exc}", file=sys.stderr)
        return EXIT_FAILED
    running = connect.read_daemon_file(directory)
    print(f"wrote a new token to {path}")
    if running is not None:
        print(f"the daemon running on {running.url} (pid {running.pid}) accepts the old token until it restarts",
              file=sys.stderr)
    return EXIT_OK


__all__ = ["add_parser", "run", "state_dir"]
