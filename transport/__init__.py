"""The daemon's transports: REST + SSE over HTTP (and, later, ACP and MCP).

``python -m transport`` runs the daemon; :func:`serve` embeds its HTTP surface
in any Trio nursery.
"""

from .app import create_app
from .server import InsecureBind, serve

__all__ = ["InsecureBind", "create_app", "serve"]
