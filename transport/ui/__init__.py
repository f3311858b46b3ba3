"""The browser UI at ``/``: plain files shipped in the package, served without a token.

The files (``static/``) hold no data: the page asks for the token, takes it
from the URL fragment once (``/#token=...``, which a browser never sends to a
server, so it reaches no access log) and keeps it in the tab's
``sessionStorage``; every API call then sends it as ``Authorization: Bearer``.
``trellis open`` opens the page with the fragment set.

The answers carry a strict Content-Security-Policy: scripts and styles from
the daemon only, no inline script, no frames, connections back to the daemon
only — what the page shows of a session (model text, command output) is put
in the DOM as text, and could not run even if it were not. The model's answers
are markdown, parsed in a worker (``md-worker.js``, from the daemon too) within
a time budget: a parse can take minutes over text a model chooses, and on the
page's thread it would freeze the page, its permission requests included.
"""

from __future__ import annotations

from importlib.resources import files

from quart import Response
from quart_trio import QuartTrio

from ..errors import HttpError

STATIC = files(__package__) / "static"
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".png": "image/png"}
HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; worker-src 'self'; style-src 'self'; "
                                "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
                                "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # a new version of the daemon serves new files at the same names
}
UI_PREFIX = "/ui/"
VENDOR = "vendor/"  # the one folder below static/: third-party libraries, as published (static/vendor/README.md)


def is_ui_path(path: str) -> bool:
    """The paths that serve the UI's files, and so need no token."""
    return path == "/" or path.startswith(UI_PREFIX)


def _file(name: str) -> Response:
    suffix = name[name.rfind("."):] if "." in name else ""
    base = name[len(VENDOR):] if name.startswith(VENDOR) else name
    resource = STATIC / name
    if "/" in base or base.startswith(".") or suffix not in TYPES or not resource.is_file():
        raise HttpError(404, f"no UI file {name[:80]!r}", "not_found", "url.path")
    return Response(resource.read_bytes(), content_type=TYPES[suffix], headers=HEADERS)


def register(app: QuartTrio) -> None:
    """Serve ``/`` (the page) and ``/ui/<file>`` (its scripts and styles)."""

    @app.get("/")
    async def index() -> Response:
        return _file("index.html")

    @app.get("/ui/<path:name>")
    async def asset(name: str) -> Response:
        return _file(name)


__all__ = ["is_ui_path", "register"]
