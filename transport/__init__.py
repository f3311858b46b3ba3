"""The daemon's transports: REST + SSE over HTTP (and, later, ACP and MCP).

``python -m transport`` runs the daemon; :func:`serve` embeds its HTTP surface
in any Trio nursery. :mod:`.auth` mints and reads the bearer token file.
"""

from . import auth
from .app import create_app
from .server import InsecureBind, serve

__all__ = ["InsecureBind", "auth", "create_app", "serve"]
