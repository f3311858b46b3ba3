"""``trellis``: one command for the daemon, its clients and the replays.

    trellis serve [flags]        the daemon (what ``python -m transport`` runs)
    trellis acp [flags]          the ACP agent on stdio, for editors
    trellis replay [args]        the deterministic scenario replays
    trellis prompt TEXT          send one prompt, stream the answer, exit by its stop reason
    trellis attach               an interactive terminal client of a session
    trellis sessions             the daemon's sessions, live and restorable
    trellis status ID            one session's status
    trellis cancel ID            cancel the session's running turn
    trellis open                 the daemon's browser UI, opened with its token
    trellis token rotate         a new token for the daemon (taken at its next start)

``serve``, ``acp`` and ``replay`` hand their arguments to the programs they
name (their own ``--help``); the client subcommands are modules of this
package, each with ``add_parser(subparsers)`` and ``run(args) -> int``, and
only the one asked for is imported.
Every subcommand takes ``--version``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from . import __version__

DELEGATED = {
    "serve": "the daemon: REST + SSE, ACP at /acp, MCP (trellis serve --help for its flags)",
    "acp": "the ACP agent on stdio, for editors (trellis acp --help)",
    "replay": "replay concurrency scenarios deterministically (trellis replay --help)",
}
CLIENTS = {  # subcommand -> the module that implements it, and its summary for `trellis --help`
    "prompt": ("trellis.prompt", "send one prompt, stream the answer, exit by its stop reason"),
    "attach": ("trellis.attach", "an interactive terminal client of a session"),
    "sessions": ("trellis.tables", "the daemon's sessions, live and restorable"),
    "status": ("trellis.tables", "one session's status"),
    "cancel": ("trellis.tables", "cancel the session's running turn"),
    "delete": ("trellis.tables", "delete sessions for good"),
    "open": ("trellis.open", "open the daemon's browser UI, with its token"),
    "token": ("trellis.token", "the daemon's bearer token: rotate it"),
}
VERSION = f"trellis {__version__}"


def build_parser(command: str | None = None, *, every_command: bool = False) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported (``attach`` pulls in prompt_toolkit and rich, which a
    ``trellis prompt`` in a script should not pay for): the others are listed by their summaries.
    ``every_command`` imports them all, for the docs' CLI reference (docs/_hooks/reference.py)."""
    parser = argparse.ArgumentParser(prog="trellis", description="Trellis: LLM agent sessions behind a daemon.",
                                     allow_abbrev=False)
    parser.add_argument("--version", action="version", version=VERSION)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, summary in DELEGATED.items():
        sub.add_parser(name, help=summary, add_help=False)
    wanted = CLIENTS if every_command else [command] if command in CLIENTS else []
    for module in dict.fromkeys(CLIENTS[name][0] for name in wanted):  # trellis.tables adds four subcommands
        importlib.import_module(module).add_parser(sub)
    for name, (_, summary) in CLIENTS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=summary)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        command, rest = argv[0], argv[1:]
        if "--version" in rest:
            print(VERSION)
            return 0
        return _delegate(command, rest)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        code = int(args.run(args) or 0)
        sys.stdout.flush()
    except BaseException as exc:
        if not _pipe_closed(exc):
            raise
        # The reader of stdout went away (`trellis sessions | head`): stop quietly, as Unix tools do. Later
        # writes (the interpreter's last flush) go nowhere rather than raise again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        return 0
    return code


def _pipe_closed(exc: BaseException) -> bool:
    """Whether ``exc`` is a closed stdout (a BrokenPipeError, alone or in an exception group of them)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_pipe_closed(inner) for inner in exc.exceptions)
    return isinstance(exc, BrokenPipeError)


def _delegate(command: str, rest: list[str]) -> int:
    if command == "replay":
        from actors.replay.cli import main as replay

        return replay(rest, prog="trellis replay")
    from transport.process_image import SecretsError, make_undumpable, reexec_without_secrets

    argv = rest if command == "serve" else ["acp", *rest]
    if command == "serve" and not any(a == "--demo" or a.startswith("--demo=") for a in rest):
        # The quick start's demo: every feature in one answer (`python -m transport` keeps the todo demo).
        argv = ["--demo", "showcase", *argv]
    try:
        reexec_without_secrets(argv)  # becomes `python -m transport ...` if a secret is in argv or environ
    except SecretsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    make_undumpable()
    from transport.cli import main as daemon

    return daemon(argv, prog=f"trellis {command}")


__all__ = ["main"]
