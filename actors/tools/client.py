"""The HTTP client behind ``web_fetch``: one bounded GET, and nothing of httpx outside this module.

:func:`check_url` says whether a string is an http(s) URL with a host;
:func:`get` performs the request — redirects followed (at most ``max_redirects``),
no proxy, ``.netrc`` or other environment settings (``trust_env=False``), the
decoded body read up to ``max_bytes`` — and answers a :class:`Fetched`, or raises
:class:`FetchTimeout`, :class:`FetchFailed`, or :class:`NotText` when the
content type is not one ``is_text`` accepts (the body is then never read).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import httpx

USER_AGENT = "trellis-web-fetch"


class FetchFailed(Exception):
    """The request failed (connection, protocol, too many redirects); the message says how."""


class FetchTimeout(FetchFailed):
    """The server did not answer in time."""


class NotText(FetchFailed):
    def __init__(self, url: str, content_type: str) -> None:
        super().__init__(f"{url} is {content_type.split(';')[0]}, not text")
        self.url = url
        self.content_type = content_type


@attrs.frozen
class Fetched:
    url: str  # after redirects
    status: int
    reason: str
    content_type: str
    encoding: str
    body: bytes
    cut: bool  # the body went on past max_bytes and was not read further
    length: str | None  # the Content-Length header, as sent


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
    return None


async def get(url: str, *, timeout: float, max_bytes: int, max_redirects: int,
              is_text: Callable[[str], bool]) -> Fetched:
    """One GET of ``url`` (see the module docstring)."""
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=True,
                                     max_redirects=max_redirects, trust_env=False,
                                     headers={"User-Agent": USER_AGENT}) as client:
            async with client.stream("GET", url) as response:
                content_type = response.headers.get("content-type", "")
                if not is_text(content_type):
                    raise NotText(str(response.url), content_type)
                body = bytearray()
                cut = False
                async for chunk in response.aiter_bytes():  # decoded (gzip...): the cap bounds what we hold
                    room = max_bytes - len(body)
                    body += chunk[:room]
                    if len(chunk) > room:
                        cut = True
                        break
                return Fetched(str(response.url), response.status_code, response.reason_phrase, content_type,
                               response.charset_encoding or "utf-8", bytes(body), cut,
                               response.headers.get("content-length"))
    except httpx.TimeoutException:
        raise FetchTimeout(f"{url} did not answer within {timeout:g} s") from None
    except httpx.TooManyRedirects:
        raise FetchFailed(f"{url} redirected more than {max_redirects} times") from None
    except httpx.HTTPError as exc:
        raise FetchFailed(f"cannot fetch {url}: {exc or type(exc).__name__}") from None
