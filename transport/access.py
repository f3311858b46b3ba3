"""Who may ask what: the one access decision for every HTTP request, a pure function.

:func:`decide` takes a request's method, path and headers and returns what
the daemon does with it, before any route runs. The quart app's
``before_request`` hook (:mod:`transport.app`) is its only caller on the
request path, so a check added here holds for every route::

    Host not one the daemon answers to     -> Refused 421 misdirected_host   (DNS rebinding)
    Origin sent and not allowed            -> Refused 403 origin_not_allowed
    Origin allowed, method OPTIONS         -> Preflight                      (CORS, sent without credentials)
    open path (/health, /openapi.json, UI) -> Allowed                       (they hold no data)
    a subagent's signal path               -> Allowed                        (its URL carries the run's token)
    bearer token missing or wrong          -> Refused 401 unauthorized
    otherwise                              -> Allowed

An allowed browser ``Origin`` is echoed in ``Access-Control-Allow-Origin``
(``cors_origin``), on a refusal of its token too, so the page can read why.
The rows are checked top to bottom; the first that matches decides. Nothing
here does I/O or keeps state beyond what :class:`transport.hosts.HostPolicy`
learns when the port is bound.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import attrs

from .hosts import HostPolicy
from .ui import is_ui_path

CORS_REQUEST_HEADERS = ("Authorization, Content-Type, Last-Event-ID, X-Qwen-Client-Id, X-Qwen-Event-Epoch, "
                        "Acp-Connection-Id, Acp-Session-Id, Mcp-Session-Id, Mcp-Protocol-Version")
CORS_EXPOSED_HEADERS = "X-Qwen-Event-Epoch, Acp-Connection-Id, Mcp-Session-Id"
PREFLIGHT_HEADERS = (("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE, OPTIONS"),  # PATCH: metadata
                     ("Access-Control-Allow-Headers", CORS_REQUEST_HEADERS),
                     ("Access-Control-Max-Age", "600"))

Header = Callable[[str], "str | None"]  # a request's first value of a header, by name (case-insensitive)


@attrs.frozen
class AccessPolicy:
    """What :func:`decide` checks against: the bearer token (``None``: served open), the ``Host`` names
    (``None``: not checked, a bare test app) and the browser origins allowed besides the daemon's own."""

    token: bytes | None
    hosts: HostPolicy | None = None
    allowed_origins: tuple[str, ...] = ()

    def origin_allowed(self, origin: str) -> bool:
        return origin in self.allowed_origins or (self.hosts is not None and self.hosts.allows_origin(origin))


@attrs.frozen
class Allowed:
    cors_origin: str | None = None  # an allowed browser Origin, to echo


@attrs.frozen
class Preflight:
    cors_origin: str


@attrs.frozen
class Refused:
    status: int
    message: str
    code: str
    path: str
    headers: tuple[tuple[str, str], ...] = ()
    cors_origin: str | None = None  # an allowed Origin whose request was refused for its token: still echoed


Decision = Allowed | Preflight | Refused


def bearer_matches(authorization: str, expected: bytes | None) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <expected>`` (compared in constant time);
    always, when ``expected`` is ``None`` (an app served open)."""
    if expected is None:
        return True
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and secrets.compare_digest(given.strip().encode(), expected)


def is_signal_path(path: str) -> bool:
    """A subagent's signal route: its URL carries the run's own token, and the daemon's bearer token must
    never be handed to a subagent."""
    return path == "/signal/mcp" or path.startswith("/signal/mcp/")


OPEN_PATHS = frozenset({"/health", "/openapi.json"})  # the API's description holds no data either


def is_open_path(method: str, path: str) -> bool:
    """Served without a token: the health check, the OpenAPI document, and the UI's files (they hold no
    data; the page asks for the token itself)."""
    return path in OPEN_PATHS or (method in ("GET", "HEAD") and is_ui_path(path))


def decide(policy: AccessPolicy, method: str, path: str, header: Header) -> Decision:
    """What to do with a request (see the module's table)."""
    hosts = policy.hosts
    if hosts is not None:
        host = header("Host")
        if not hosts.allows(host):
            return Refused(421, f"host {host or ''!r} is not this daemon: use its bound address or localhost "
                                "with its port, or allow the name with --allow-host", "misdirected_host",
                           "header.Host")
    origin = header("Origin")
    if origin:
        if not policy.origin_allowed(origin):
            return Refused(403, f"origin {origin!r} is not allowed", "origin_not_allowed", "header.Origin")
        if method == "OPTIONS":
            return Preflight(origin)
    if (policy.token is not None and not is_open_path(method, path) and not is_signal_path(path)
            and not bearer_matches(header("Authorization") or "", policy.token)):
        return Refused(401, "missing or wrong bearer token: send Authorization: Bearer <token> (a daemon "
                            "started without --token writes it to <state-dir>/token)", "unauthorized",
                       "header.Authorization", (("WWW-Authenticate", "Bearer"),), origin or None)
    return Allowed(origin or None)
