"""``trellis open``: the daemon's browser UI, opened with its token.

    trellis open [--session ID] [--print]

The token travels in the URL's fragment (``/#token=...``): a browser never
sends a fragment to a server, so it reaches no access log or proxy, and the
page takes it out of the address bar at once and keeps it for the tab. The
browser is the one Python's :mod:`webbrowser` finds (``$BROWSER`` first).

``--print`` prints that URL instead of opening it (for a browser on another
machine, through an SSH tunnel) — it holds the token, so it is printed only
when asked for, never in the message of a failure.

Exit codes: 0 opened (or printed); 2 the daemon could not be reached,
refused the token or has no such session, or no browser could be started.
"""

from __future__ import annotations

import argparse
from typing import Any
import webbrowser
from urllib.parse import quote, urlencode

import httpx

from . import connect
from .prompt import add_common, say

EXIT_OK = 0
EXIT_FAILED = 2


def add_parser(sub: Any) -> None:  # what argparse's add_subparsers() returns (its class is private)
    parser = sub.add_parser("open", help="open the daemon's browser UI, with its token",
                            description="Open the daemon's UI (its / page) in a browser, the token in the URL's "
                                        "fragment so that no server or log sees it.")
    parser.add_argument("--session", metavar="ID", default=None, help="open this session")
    parser.add_argument("--print", action="store_true", dest="print_url",
                        help="print the URL (it holds the token) instead of opening a browser")
    add_common(parser)
    parser.set_defaults(run=run)


def page_url(target: connect.Target, session: str | None = None) -> str:
    """The UI's URL for ``target``: its token and the session to open in the fragment."""
    fragment = {k: v for k, v in (("token", target.token), ("session", session)) if v}
    return f"{target.url}/" + (f"#{urlencode(fragment, quote_via=quote)}" if fragment else "")


def check(target: connect.Target, session: str | None = None) -> str | None:
    """Why the daemon cannot be used with this token, or has no session ``session`` (None: it can)."""
    try:
        with httpx.Client(base_url=target.url, headers=target.headers, timeout=10,
                          trust_env=not connect.is_loopback(target.url)) as client:
            response = client.get("/capabilities")
            listed = client.get("/session") if session is not None and response.status_code == 200 else None
    except httpx.HTTPError as exc:
        return f"cannot reach the daemon at {target.url}: {exc or type(exc).__name__}"
    if response.status_code == 401:
        return (f"the daemon at {target.url} refused the token: pass --token, set $TRELLIS_TOKEN, or point "
                "--state-dir at the daemon's state directory (its token file)")
    if response.status_code != 200:
        return f"the daemon at {target.url} answered {response.status_code} to GET /capabilities"
    if listed is not None and listed.status_code == 200:  # a page saying "no live session" helps no one
        try:
            known = {s.get("sessionId") for s in listed.json().get("sessions") or [] if isinstance(s, dict)}
        except (ValueError, AttributeError):
            return None
        if session not in known:
            return f"the daemon at {target.url} has no session {session!r}, live or restorable (trellis sessions)"
    return None


def run(args: argparse.Namespace) -> int:
    target = connect.target(args)
    problem = check(target, args.session)
    if problem is not None:
        say(problem)
        return EXIT_FAILED
    url = page_url(target, args.session)
    if args.print_url:
        print(url)
        return EXIT_OK
    if not webbrowser.open(url):
        say(f"no browser could be started: open {target.url}/ and paste the token, or run trellis open --print")
        return EXIT_FAILED
    say(f"opened {target.url}/ in a browser")
    return EXIT_OK
