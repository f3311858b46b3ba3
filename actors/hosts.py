"""Which host names this machine: one rule for the daemon's binds, its model server settings and its clients."""

from __future__ import annotations

import ipaddress


def is_loopback_host(host: str) -> bool:
    """``localhost``, or a loopback address (IPv6 with or without its brackets). Any other name is not one,
    whatever it resolves to: a resolver can be told anything."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


__all__ = ["is_loopback_host"]
