"""``trellis``: the command people and operators run (the daemon, its clients, the replays)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trellis")
except PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0.1.0"

__all__ = ["__version__"]
