"""``web_fetch``: one HTTP(S) GET, its text returned to the model. Off unless the settings turn it on.

Rules:

* Offered only when the setting ``tools.enableWebFetch`` is true (default
  false): otherwise the model is never told of it, and a call is an unknown
  tool (``actors.runtime.default_tools`` leaves it out).
* ``http`` and ``https`` URLs only, with a host; anything else (``file:``,
  ``ftp:``, a bare host) is refused before anything is sent, naming the scheme.
* It asks permission (ACP kind ``fetch``): ``default`` mode asks the client,
  ``auto-edit`` and ``yolo`` do not; in ``plan`` mode it asks too rather than
  being refused (fetching changes nothing here, and plans need documents).
* Bounds: the whole call — connecting, redirects (at most
  :data:`MAX_REDIRECTS`, http(s) only), reading — ends after ``timeout``
  seconds (default :data:`DEFAULT_TIMEOUT`); at most ``max_bytes`` of the
  body are read (default :data:`DEFAULT_MAX_BYTES`), the rest left unread and
  said so; the text returned is at most :data:`MAX_CHARS` characters.
* Text only: HTML is reduced to its text (scripts, styles and markup
  dropped, block elements on lines of their own); JSON, XML, JavaScript and
  other ``text/*`` come back as they are. Other types (images, PDFs,
  archives) and bodies with NUL bytes are refused, naming the type.
* A status of 400 or more still returns the text, and the call fails with
  ``HTTP <status>``.
* No proxy, ``.netrc`` or other environment settings are used
  (``trust_env=False``): the model's requests carry no credential of the user.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import trio

from ..session.tools import ToolContext, ToolResult
from . import client
from .common import BadArguments, done

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_BYTES = 2 * 1024 * 1024
MAX_CHARS = 100_000
MAX_REDIRECTS = 5
TEXT_TYPES = ("application/json", "application/xml", "application/javascript", "application/x-javascript",
              "application/xhtml+xml", "application/ld+json", "application/x-yaml", "application/yaml",
              "application/toml")


def check_url(raw: str) -> str:
    """``raw`` if it is an http(s) URL with a host, else :class:`BadArguments` naming what is wrong."""
    problem = client.check_url(raw)
    if problem is not None:
        raise BadArguments(problem)
    return raw


def is_text_type(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return (not media or media.startswith("text/") or media in TEXT_TYPES or media.endswith("+json")
            or media.endswith("+xml"))


class _Text(HTMLParser):
    """The text of an HTML page: what a reader sees, roughly, one block per line."""

    SKIP = {"script", "style", "noscript", "template", "svg", "head"}
    BLOCK = {"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header", "footer",
             "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "hr", "dt", "dd", "nav", "main", "title"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self.SKIP:
            self.skipping += 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self.SKIP and self.skipping:
            self.skipping -= 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self.skipping:
            self.parts.append(data)


def html_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(parser.parts).split("\n"))
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    title = parser.title.strip()
    return f"# {title}\n\n{body}" if title else body


class WebFetchTool:
    name = "web_fetch"
    kind = "fetch"
    builtin = True
    asks_permission = True
    description = (
        "Fetch an http:// or https:// URL with GET and return its text (HTML reduced to plain text). Asks the "
        "user's permission. The body is read up to a size cap and the call has a timeout; the result says what "
        "was left out."
    )
    parameters = {
        "type": "object",
        "properties": {"url": {"type": "string", "minLength": 1, "description": "an http:// or https:// URL"}},
        "required": ["url"],
        "additionalProperties": False,
    }

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes

    def locate(self, cwd: str, arguments: Any) -> None:
        return None  # a URL is no ACP location (those are file paths)

    async def execute(self, context: ToolContext, arguments: Any) -> ToolResult:
        raw = arguments["url"]
        try:
            url = check_url(raw)
        except BadArguments as exc:
            return ToolResult.failure(str(exc))
        assert context.services is not None, "web_fetch needs a session"
        denied = await context.services.authorize(context, title=f"web_fetch {raw}", kind="fetch", raw_input=arguments,
                                                  plan_refuses=False)
        if denied is not None:
            return ToolResult.failure(denied)
        try:
            with trio.fail_after(self.timeout):  # the whole call, redirects and a slow body included
                fetched = await client.get(url, timeout=self.timeout, max_bytes=self.max_bytes,
                                           max_redirects=MAX_REDIRECTS, is_text=is_text_type)
        except trio.TooSlowError:
            return ToolResult.failure(f"{raw} did not answer within {self.timeout:g} s")
        except client.NotText as exc:
            return ToolResult.failure(f"{exc}; web_fetch returns text only")
        except client.FetchFailed as exc:
            return ToolResult.failure(str(exc))
        return self._result(fetched)

    def _result(self, fetched: client.Fetched) -> ToolResult:
        body, final, status, content_type = fetched.body, fetched.url, fetched.status, fetched.content_type
        encoding, cut, length = fetched.encoding, fetched.cut, fetched.length
        if b"\0" in body[:8192]:
            return ToolResult.failure(f"{final} is binary data, not text; web_fetch returns text only")
        try:
            text = body.decode(encoding, errors="replace")
        except LookupError:  # an unknown charset name
            text = body.decode("utf-8", errors="replace")
        html = "html" in content_type.lower() or (not content_type and text.lstrip()[:15].lower().startswith(
            ("<!doctype html", "<html")))
        if html:
            text = html_text(text)
        notes = []
        if cut:
            total = f" of {int(length):,}" if length and length.isdigit() else ""
            notes.append(f"[the body was cut at {self.max_bytes:,} bytes{total}; the rest was not read]")
        if len(text) > MAX_CHARS:
            notes.append(f"[{len(text) - MAX_CHARS:,} characters of text not shown]")
            text = text[:MAX_CHARS]
        head = f"{final} — HTTP {status} {fetched.reason}".rstrip() + "\n\n"
        content = head + text + "".join("\n\n" + n for n in notes)
        error = f"HTTP {status}" if status >= 400 else None
        return done(content, display={"url": final, "status": status, "truncated": cut}, error=error)


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_TIMEOUT", "WebFetchTool", "check_url", "html_text"]
