"""The HTTP client behind ``web_fetch``: one bounded GET, and nothing of httpx or httpcore outside this module.

:func:`check_url` says whether a string is an http(s) URL with a host; :func:`get` performs the request:

- where it connects: each host is resolved once and every address checked (:func:`address_kind`); the
  connection goes to an address that passed, the very one checked (no second lookup for a DNS answer to
  change). Global addresses pass; loopback and private ones only with ``private_addresses``; link-local ones
  (the cloud metadata service), the other cloud metadata addresses, unspecified and multicast ones never;
- redirects are followed by hand, at most ``max_redirects``, each only when ``follows(from, to)`` says so:
  otherwise the redirect itself is the answer, its target in :attr:`Fetched.location`. ``follows`` refuses one
  by raising :class:`FetchFailed`;
- no proxy, ``.netrc``, credentials of the URL or other settings of the environment;
- the body read up to ``max_bytes``; ``gzip`` and ``deflate`` (stacked too) decoded by
  :class:`actors.content_coding.Decoder`, no read to more than the room left under the cap: a body that
  decompresses past it is cut there (:attr:`Fetched.decompressed_past_cap`). Other codings are refused (only
  those two are asked for).

It answers a :class:`Fetched`, or raises :class:`FetchTimeout`, :class:`FetchFailed` (:class:`AddressRefused`
for an address it will not connect to), or :class:`NotText` when the content type is not one ``is_text``
accepts (the body is then never read).
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

import attrs
import httpcore
import httpx
import trio

from ..content_coding import CODINGS, Decoder, DecodingFailed
from ..permission_rules import canonical_host, url_host

USER_AGENT = "trellis-web-fetch"
REDIRECTS = frozenset({301, 302, 303, 307, 308})
PRIVATE_SETTING = "tools.webFetchAllowPrivateAddresses"
LIFTED = frozenset({"loopback", "private"})  # the kinds of address the setting lets web_fetch connect to
# Cloud metadata services outside link-local: AWS's over IPv6 (a unique-local address) and Alibaba's (in the
# shared 100.64/10): never fetched, whatever the setting.
METADATA = frozenset({ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200", "192.0.0.192")})
# IANA's special-purpose registries, written out: the interpreter's is_global changed with its patch releases
# (CVE-2024-4032), and what web_fetch may reach must not depend on which one runs the daemon.
SPECIAL = tuple(ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",
    "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24", "192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24",
    "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4", "255.255.255.255/32",
    "::/128", "::1/128", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "2620:4f:8000::/48",
    "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_CHARSET = re.compile(r";\s*charset\s*=\s*[\"']?([A-Za-z0-9_.:+-]{1,40})", re.IGNORECASE)


class FetchFailed(Exception):
    """The request failed (connection, protocol, too many redirects); the message says how."""


class FetchTimeout(FetchFailed):
    """The server did not answer in time."""


class AddressRefused(FetchFailed):
    """The host resolves only to addresses web_fetch does not connect to."""


class NotText(FetchFailed):
    def __init__(self, url: str, content_type: str) -> None:
        super().__init__(f"{url} is {content_type.split(';')[0]}, not text")
        self.url = url
        self.content_type = content_type


@attrs.frozen
class Fetched:
    url: str  # after the redirects followed
    status: int
    reason: str
    content_type: str
    encoding: str
    body: bytes
    cut: bool  # the body went on past max_bytes and was not read further
    length: str | None  # the Content-Length header, as sent
    decompressed_past_cap: bool = False  # cut while decoding: the body decompresses to more than max_bytes
    location: str | None = None  # a redirect not followed: the absolute URL it points to


def check_url(raw: str) -> str | None:
    """Why ``raw`` is not an http(s) URL with a host (``None``: it is one)."""
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError) as exc:
        return f"{raw!r} is not a URL: {exc}"
    if url.scheme not in ("http", "https"):
        scheme = f"the {url.scheme!r} scheme" if url.scheme else "no scheme"
        return f"web_fetch fetches http:// and https:// URLs only; {raw!r} has {scheme}"
    if not url.host:
        return f"{raw!r} has no host"
    try:
        fetched = canonical_host(url.raw_host.decode("ascii"))
    except UnicodeError:
        fetched = None
    if fetched is None or fetched != url_host(raw):
        # Permission rules judge the host url_host reads; the request would go where httpx reads it.
        return (f"{raw!r} does not read as the same host to every URL parser (blanks, control characters or "
                "backslashes in its host?): write it plainly")
    return None


def address_kind(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """What ``ip`` is when it is not a global unicast address web_fetch may connect to: ``loopback``,
    ``private`` (RFC 1918, unique-local, shared, reserved...), ``link-local``, ``metadata``, ``unspecified`` or
    ``multicast``; ``None`` for a global one. An IPv6 address that carries an IPv4 one (mapped, 6to4, NAT64) is
    judged by that address, where the packets go."""
    if isinstance(ip, ipaddress.IPv6Address):
        carried = ip.ipv4_mapped or ip.sixtofour
        if carried is None and ip in _NAT64:
            carried = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if carried is not None:
            return address_kind(carried)
    if ip in METADATA:
        return "metadata"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if (not ip.is_global or ip.is_reserved or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)
            or any(ip in network for network in SPECIAL if network.version == ip.version)):
        return "private"
    return None


def refusal(host: str, ip: ipaddress.IPv4Address | ipaddress.IPv6Address, kind: str) -> str:
    """Why web_fetch does not connect to ``ip``, which ``host`` resolved to."""
    shown = str(ip) if host.strip("[]").lower() == str(ip) else f"{host} ({ip})"
    if kind in LIFTED:
        return (f"{shown} is a {kind} address: web_fetch connects to loopback and private addresses only when "
                f"the setting {PRIVATE_SETTING} is true")
    what = {"link-local": "a link-local address (where cloud metadata services answer)",
            "metadata": "a cloud metadata service's address", "unspecified": "an unspecified address",
            "multicast": "a multicast address"}[kind]
    return f"{shown} is {what}, which web_fetch never fetches"


class _CheckedNetwork(httpcore.AsyncNetworkBackend):
    """httpcore's Trio backend, connecting only to addresses :func:`address_kind` lets through: the host is
    resolved here, once, and the connection made to an address checked (a numeric one: no second lookup)."""

    def __init__(self, private_addresses: bool) -> None:
        self._private = private_addresses
        self._inner = httpcore.TrioBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        try:
            with trio.fail_after(math.inf if timeout is None else timeout):
                found = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except trio.TooSlowError:
            raise httpcore.ConnectTimeout(f"cannot resolve {host} in {timeout:g} s") from None
        except OSError as exc:  # socket.gaierror: no such name
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc.strerror or exc}") from None
        allowed: list[str] = []
        refused: tuple[Any, str] | None = None
        for *_, sockaddr in found:
            ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
            kind = address_kind(ip)
            if kind is None or (self._private and kind in LIFTED):
                allowed.append(str(sockaddr[0]))
            elif refused is None:
                refused = (ip, kind)
        if not allowed:
            if refused is None:
                raise httpcore.ConnectError(f"cannot resolve {host}: no address")
            raise AddressRefused(refusal(host, *refused))
        failure: Exception | None = None
        for address in dict.fromkeys(allowed):
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise FetchFailed("web_fetch does not connect to Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


_SSL: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every fetch (certifi's roots, no SSL_CERT_FILE: the environment is not read)."""
    global _SSL
    if _SSL is None:
        _SSL = httpx.create_ssl_context(trust_env=False)
    return _SSL


def _header(headers: list[tuple[bytes, bytes]], name: bytes, *, every: bool = False) -> str | None:
    """The first value of the header ``name`` (lower case), or with ``every`` all of them joined by commas."""
    values = [v.decode("latin-1") for k, v in headers if k.lower() == name]
    if not values:
        return None
    return ", ".join(values) if every else values[0]


def _next_url(url: str, current: httpx.URL, location: str) -> httpx.URL:
    try:
        target = current.join(location)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise FetchFailed(f"cannot fetch {url}: it redirects to {location!r}, which is not a URL: {exc}") from None
    if target.scheme not in ("http", "https") or not target.host:
        raise FetchFailed(f"cannot fetch {url}: it redirects to {location}, not an http(s) URL with a host")
    return target


def _codings(url: httpx.URL, content_encoding: str | None) -> list[str]:
    codings = [c for c in (c.strip().lower() for c in (content_encoding or "").split(",")) if c and c != "identity"]
    unknown = [c for c in codings if c not in CODINGS]
    if unknown:
        raise FetchFailed(f"{url} is sent with Content-Encoding {', '.join(unknown)}, which web_fetch does not "
                          f"decode (it asks for {' or '.join(CODINGS)})")
    return codings


async def get(url: str, *, timeout: float, max_bytes: int, max_redirects: int, is_text: Callable[[str], bool],
              private_addresses: bool, follows: Callable[[str, str], bool]) -> Fetched:
    """One GET of ``url``, and the redirects ``follows`` accepts (see the module docstring)."""
    current = httpx.URL(url)
    hops = 0
    extensions = {"timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}}
    try:
        async with httpcore.AsyncConnectionPool(ssl_context=_ssl_context(), retries=0, http1=True, http2=False,
                                                network_backend=_CheckedNetwork(private_addresses)) as pool:
            while True:
                target = httpcore.URL(scheme=current.raw_scheme, host=current.raw_host, port=current.port,
                                      target=current.raw_path)
                headers = [(b"Host", current.netloc), (b"Accept", b"*/*"),
                           (b"Accept-Encoding", ", ".join(CODINGS).encode()), (b"User-Agent", USER_AGENT.encode())]
                async with pool.stream(b"GET", target, headers=headers, extensions=extensions) as response:
                    status = response.status
                    reason = response.extensions.get("reason_phrase", b"").decode("ascii", "replace")
                    content_type = _header(response.headers, b"content-type") or ""
                    length = _header(response.headers, b"content-length")
                    location = _header(response.headers, b"location") if status in REDIRECTS else None
                    if location is not None:
                        hop = _next_url(url, current, location)
                        hops += 1
                        if hops > max_redirects:
                            raise FetchFailed(f"{url} redirected more than {max_redirects} times")
                        if follows(str(current), str(hop)):
                            current = hop
                            continue
                        return Fetched(str(current), status, reason, content_type, "utf-8", b"", False, length,
                                       location=str(hop))
                    if not is_text(content_type):
                        raise NotText(str(current), content_type)
                    codings = _codings(current, _header(response.headers, b"content-encoding", every=True))
                    body, cut = await _read(response.aiter_stream(), Decoder(codings) if codings else None,
                                            max_bytes)
                    charset = _CHARSET.search(content_type)
                    return Fetched(str(current), status, reason, content_type,
                                   charset.group(1) if charset else "utf-8", body, cut, length,
                                   decompressed_past_cap=cut and bool(codings))
    except AddressRefused as exc:
        raise AddressRefused(f"cannot fetch {url}: {exc}") from None
    except FetchFailed:
        raise
    except httpcore.TimeoutException:
        raise FetchTimeout(f"{url} did not answer within {timeout:g} s") from None
    except DecodingFailed as exc:
        raise FetchFailed(f"cannot fetch {url}: its body does not decode: {exc}") from None
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol, httpcore.ProxyError,
            ssl.SSLError) as exc:
        raise FetchFailed(f"cannot fetch {url}: {exc or type(exc).__name__}") from None


async def _read(stream: Any, decoder: Decoder | None, max_bytes: int) -> tuple[bytes, bool]:
    """The body, decoded, up to ``max_bytes``; and whether it went on past them. The decoder gives at most the
    room left (and a byte, to tell a body that ends at the cap from one that goes on) per read."""
    body = bytearray()
    async for raw in stream:
        chunk = raw if decoder is None else decoder.decode_upto(raw, False, max_bytes - len(body) + 1)
        room = max_bytes - len(body)
        body += chunk[:room]
        if len(chunk) > room or (decoder is not None and decoder.over):
            return bytes(body), True
    if decoder is not None:
        chunk = decoder.decode_upto(b"", True, max_bytes - len(body) + 1)
        room = max_bytes - len(body)
        body += chunk[:room]
        if len(chunk) > room or decoder.over:
            return bytes(body), True
    return bytes(body), False
