"""The daemon's transports: REST + SSE over HTTP (and, later, ACP and MCP).

``python -m transport`` runs the daemon; :func:`serve` embeds its HTTP surface
in any Trio nursery. :mod:`.auth` mints and reads the bearer token file.

The facade is imported on first use (PEP 562): ``python -m transport`` re-executes
itself when its environment holds a secret, and importing the whole HTTP stack
before that (about 0.6 s) would be paid twice for nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import auth
    from .app import create_app
    from .server import InsecureBind, serve

__all__ = ["InsecureBind", "auth", "create_app", "serve"]

_FACADE = {"auth": (".auth", None), "create_app": (".app", "create_app"),
           "InsecureBind": (".server", "InsecureBind"), "serve": (".server", "serve")}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _FACADE[name]
    except KeyError:
        raise AttributeError(f"module 'transport' has no attribute {name!r}") from None
    found = importlib.import_module(module, __name__)
    value = globals()[name] = found if attribute is None else getattr(found, attribute)  # asked once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
