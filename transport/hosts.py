"""Which ``Host`` headers and browser ``Origin``s the daemon answers (DNS-rebinding protection).

A :class:`HostPolicy` is built by :func:`transport.serve` before the port is
bound and learns the bound address(es) once hypercorn has them
(:meth:`HostPolicy.bind`), so ``--port 0`` works. The rules:

* A ``Host`` is accepted when its port is the bound port and its name is the
  bound address, the ``--hostname`` given, or ``localhost``; or when it matches
  an ``--allow-host HOST[:PORT]`` entry (an entry without a port means the
  bound port). A ``Host`` without a port means port 80, so it is refused
  unless the daemon is bound on 80 (or an entry names port 80).
* On a wildcard bind (``0.0.0.0`` / ``::``) the daemon cannot cheaply know every
  address of the machine, so any IP literal is accepted as the name (with the
  bound port), besides ``localhost`` and the ``--allow-host`` entries. A DNS
  name never is unless allowed: that is what DNS rebinding needs.
* A browser ``Origin`` is same-origin when its scheme is ``http``, its host and
  port pass the rules above (no port means 80). Anything else must be listed
  with ``--allow-origin``.
* Until the address is known (a request racing the bind), everything is
  refused: the guard fails closed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

DEFAULT_PORT = 80  # what a Host or an http Origin without a port means
JUDGED_KEPT = 64  # Host headers whose verdict is remembered


def _name(host: str) -> str:
    """A host name compared as the daemon compares them: lower case, IP literals normalised."""
    host = host.strip().lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def parse_authority(authority: str) -> tuple[str, int | None]:
    """``host[:port]`` (``[v6]:port`` too; a bare IPv6 literal has no port) → ``(name, port or None)``.

    Raises :class:`ValueError` for anything else.
    """
    text = authority.strip()
    if not text or any(c in text for c in "/?#@ \t"):
        raise ValueError(f"not a host[:port]: {authority!r}")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"not a host[:port]: {authority!r}")
        host, rest = text[1:end], text[end + 1:]
        if not _is_ip(host) or (rest and not rest.startswith(":")):
            raise ValueError(f"not a host[:port]: {authority!r}")
        port_text = rest[1:]
    elif text.count(":") > 1:
        if not _is_ip(text):
            raise ValueError(f"not a host[:port]: {authority!r}")
        host, port_text = text, ""
    else:
        host, _, port_text = text.partition(":")
    if not host:
        raise ValueError(f"not a host[:port]: {authority!r}")
    port: int | None = None
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) <= 65535:
            raise ValueError(f"bad port in {authority!r}")
        port = int(port_text)
    return _name(host), port


class HostPolicy:
    """The ``Host`` names and ports one served app accepts (see the module's docstring)."""

    def __init__(self, allowed_hosts: Iterable[str] = (), names: Iterable[str] = ()) -> None:
        self.allowed: list[tuple[str, int | None]] = [parse_authority(h) for h in allowed_hosts]
        self.names: set[str] = {"localhost"} | {_name(n) for n in names if n}
        self.port: int | None = None  # None: not bound yet, everything refused
        self.wildcard = False
        self._judged: dict[str, bool] = {}  # Host header -> allows() (checked twice a request); cleared by bind

    def bind(self, binds: Iterable[str]) -> None:
        """Learn the bound addresses, as hypercorn reports them (``http://127.0.0.1:4170``)."""
        self._judged.clear()
        for bind in binds:
            parts = urlsplit(bind)
            host = _name(parts.hostname or "")
            if _is_ip(host) and ipaddress.ip_address(host).is_unspecified:
                self.wildcard = True
            elif host:
                self.names.add(host)
            if parts.port is not None:
                self.port = parts.port

    def allows(self, authority: str | None) -> bool:
        """Whether a ``Host`` header (``host[:port]``) names this daemon."""
        if self.port is None or not authority:
            return False
        judged = self._judged.get(authority)
        if judged is None:
            if len(self._judged) >= JUDGED_KEPT:  # a client sending many names cannot grow it
                self._judged.clear()
            judged = self._judged[authority] = self._allows(authority)
        return judged

    def _allows(self, authority: str) -> bool:
        try:
            name, port = parse_authority(authority)
        except ValueError:
            return False
        port = DEFAULT_PORT if port is None else port
        for allowed_name, allowed_port in self.allowed:
            if name == allowed_name and port == (self.port if allowed_port is None else allowed_port):
                return True
        if port != self.port:
            return False
        return name in self.names or (self.wildcard and _is_ip(name))

    def allows_origin(self, origin: str) -> bool:
        """Whether a browser ``Origin`` is the daemon's own (``http``, an accepted host, same port)."""
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme != "http" or parts.path or parts.query or parts.fragment or parts.username:
            return False
        return self.allows(parts.netloc)
