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
* Where it goes: the permission rules compare the URL's canonical host
  (``127.1`` is ``127.0.0.1``: :func:`actors.permission_rules.url_host`).
  The daemon connects only to the addresses it resolved the host to and
  checked: global ones, loopback and private ones only when the setting
  ``tools.webFetchAllowPrivateAddresses`` is true, link-local ones (the cloud
  metadata service), unspecified and multicast ones never
  (:mod:`.client`). It runs in the daemon: ``sandbox.network`` does not
  apply to it.
* Redirects (at most :data:`MAX_REDIRECTS`, http(s) only) are followed on
  the host the call was decided for, each hop's URL checked against the
  deny rules first; a redirect to another host is not followed: the result
  names its target, and fetching that is a call of the model's own, which the
  rules, the mode and the user decide as any (so no host is fetched that the
  user was not asked about, in a mode that asks).
* Bounds: the whole call — connecting, redirects, reading — ends after
  ``timeout`` seconds (default :data:`DEFAULT_TIMEOUT`); at most ``max_bytes``
  of the body are read, decompressed (default :data:`DEFAULT_MAX_BYTES`), the
  rest left unread and said so; the text returned is at most
  :data:`MAX_CHARS` characters.
* Text only: HTML is reduced to its text (scripts, styles and markup
  dropped, block elements on lines of their own) by a linear scan of at most
  :data:`MAX_HTML_CHARS` characters, in a worker thread; JSON, XML,
  JavaScript and other ``text/*`` come back as they are. Other types (images,
  PDFs, archives) and bodies with NUL bytes are refused, naming the type.
* A status of 400 or more still returns the text, and the call fails with
  ``HTTP <status>``.
* No proxy, ``.netrc``, credentials written in the URL or other settings
  of the environment are used: the model's requests carry no credential of
  the user.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape
from typing import Any

import trio

from ..permission_rules import url_host
from ..session.tools import ToolContext, ToolResult
from . import client
from .access import tool_threads
from .common import BadArguments, done

DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_BYTES = 2 * 1024 * 1024
MAX_CHARS = 100_000
MAX_HTML_CHARS = DEFAULT_MAX_BYTES  # HTML past this is not reduced to text
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


# HTML to text, in one pass that never looks at a character more than a few times: HTMLParser rescans the rest of
# the page for each "<" it cannot close (quadratic: a 120 KB page of "<a" held the daemon 18 s).
SKIP = frozenset({"template", "svg", "math"})  # elements whose content is markup nobody reads as text
FOREIGN = frozenset({"svg", "math"})  # of them, those a "/>" closes (foreign content, as browsers read it)
RAW = frozenset({"script", "style", "noscript", "xmp", "iframe", "noembed", "noframes"})  # content is not HTML
RCDATA = frozenset({"title", "textarea"})  # content is text, without tags
BLOCK = frozenset({"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header", "footer",
                   "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "hr", "dt", "dd", "nav", "main",
                   "textarea"})
# What a "<" may start: a start or end tag (its name, as HTML reads it), a comment, or "<!", "<?", "</" up to a ">".
_TOKEN = re.compile(r"<(?:(/)?([A-Za-z][^\t\n\r\f />\x00]*)|(!--)|[!?/])")
_TAG_STOP = re.compile(r""">|=[ \t\n\r\f]*["']""")  # a tag's end, or a quoted value (which may hold ">")
_CLOSE = {name: re.compile(rf"</{name}[\t\n\r\f />]", re.IGNORECASE) for name in RAW | RCDATA}
_BLANKS = re.compile(r"[^\S\n]+")  # white space but line ends
_EMPTY_LINES = re.compile(r"\n{3,}")
_LONG_CHARREF = re.compile(r"&#(?=[xX]?[0-9a-fA-F]{9})")  # no character: html.unescape would read it whole


def _tag_end(html: str, pos: int) -> int:
    """Where the tag whose name ends at ``pos`` ends (past its ``>``); -1 if it never does: the rest of the page
    is inside it, as a browser reads it."""
    while True:
        stop = _TAG_STOP.search(html, pos)
        if stop is None:
            return -1
        if stop.group() == ">":
            return stop.end()
        close = html.find(stop.group()[-1], stop.end())
        if close < 0:
            return -1
        pos = close + 1


def _text(raw: str) -> str:
    if "&" not in raw:
        return raw
    return unescape(_LONG_CHARREF.sub("&amp;#", raw))


def html_text(html: str) -> str:
    """The text of an HTML page: what a reader sees, roughly, one block per line; in time linear in its size."""
    html = html[:MAX_HTML_CHARS]
    parts: list[str] = []
    title: list[str] = []
    skipping = 0
    in_head = False
    pos, size = 0, len(html)

    def data(raw: str) -> None:
        if raw and not skipping and not in_head:
            parts.append(_text(raw))

    def block(name: str) -> None:
        if name in BLOCK and not skipping and not in_head:
            parts.append("\n")

    while pos < size:
        token = _TOKEN.search(html, pos)  # a "<" that starts nothing stays in the text
        if token is None:
            data(html[pos:])
            break
        data(html[pos:token.start()])
        slash, name, comment = token.groups()
        if name is None:  # a comment, a declaration, a processing instruction, a bogus end tag: to its end
            end = html.find("-->", token.start() + 2) if comment else html.find(">", token.end())
            if end < 0:
                break
            pos = end + (3 if comment else 1)  # "<!-->" is a whole (empty) comment
            continue
        end = _tag_end(html, token.end())
        if end < 0:
            break  # a tag that never ends: the rest of the page is inside it
        tag, pos = name.lower(), end
        if slash:
            if tag == "head":
                in_head = False
            elif tag in SKIP and skipping:
                skipping -= 1
            block(tag)
            continue
        if tag == "head":
            in_head = True
        elif tag == "body":
            in_head = False  # a head left open ends here
        elif tag in SKIP and not (tag in FOREIGN and html[end - 2:end] == "/>"):
            skipping += 1  # a self-closed <svg/> or <math/> (foreign content) holds nothing to skip
        block(tag)
        if tag in RAW or tag in RCDATA:  # its content up to its end tag is no markup
            close = _CLOSE[tag].search(html, pos)
            inner = html[pos:close.start() if close is not None else size]
            if tag == "title":
                title.append(_text(inner))
            elif tag == "textarea":
                data(inner)
            if close is None:
                break
            pos = close.start()
    # Each line's blanks collapsed and trimmed, at most one empty line in a row: three passes over the whole.
    text = _BLANKS.sub(" ", "".join(parts)).replace(" \n", "\n").replace("\n ", "\n")
    body = _EMPTY_LINES.sub("\n\n", text).strip()
    heading = re.sub(r"\s+", " ", "".join(title)).strip()
    return f"# {heading}\n\n{body}" if heading else body


def redirect_policy(context: ToolContext, url: str) -> Callable[[str, str], bool]:
    """Whether ``web_fetch`` follows a redirect by itself: a hop a deny rule refuses is refused
    (:class:`client.FetchFailed`), one on the host the call was decided for is followed, one to another host
    is not: the result names it, and fetching it is a call of its own, decided and asked for as any."""
    host = url_host(url)
    refused_by_rule = getattr(context.services, "refused_by_rule", None)

    def follows(current: str, target: str) -> bool:
        problem = client.check_url(target)  # the host the rules judge is the host it would go to
        if problem is not None:
            raise client.FetchFailed(f"{current} redirects to {target}: {problem}")
        refused = refused_by_rule("web_fetch", {"url": target}, context.cwd) if refused_by_rule else None
        if refused is not None:
            raise client.FetchFailed(f"{current} redirects to {target}: {refused}")
        return url_host(target) == host

    return follows


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
        settings = getattr(getattr(context.services, "runtime", None), "settings", None)
        private = bool(getattr(settings, "web_fetch_private_addresses", False))
        try:
            with trio.fail_after(self.timeout):  # the whole call, redirects and a slow body included
                fetched = await client.get(url, timeout=self.timeout, max_bytes=self.max_bytes,
                                           max_redirects=MAX_REDIRECTS, is_text=is_text_type,
                                           private_addresses=private, follows=redirect_policy(context, url))
        except trio.TooSlowError:
            return ToolResult.failure(f"{raw} did not answer within {self.timeout:g} s")
        except client.NotText as exc:
            return ToolResult.failure(f"{exc}; web_fetch returns text only")
        except client.FetchFailed as exc:
            return ToolResult.failure(str(exc))
        return await self._result(fetched)

    async def _result(self, fetched: client.Fetched) -> ToolResult:
        body, final, status, content_type = fetched.body, fetched.url, fetched.status, fetched.content_type
        encoding, cut, length = fetched.encoding, fetched.cut, fetched.length
        head = f"{final} — HTTP {status} {fetched.reason}".rstrip() + "\n\n"
        if fetched.location is not None:
            return done(head + f"[{final} redirects to {fetched.location}, on another host: web_fetch follows "
                        "redirects on the same host only. To fetch it, call web_fetch with that URL; it is "
                        "decided (and asked for) as any fetch.]",
                        display={"url": final, "status": status, "truncated": False, "location": fetched.location})
        if b"\0" in body[:8192]:
            return ToolResult.failure(f"{final} is binary data, not text; web_fetch returns text only")
        try:
            text = body.decode(encoding, errors="replace")
        except (LookupError, UnicodeError):  # an unknown charset name, or a codec not for text (idna)
            text = body.decode("utf-8", errors="replace")
        html = "html" in content_type.lower() or (not content_type and text.lstrip()[:15].lower().startswith(
            ("<!doctype html", "<html")))
        notes = []
        if html:
            if len(text) > MAX_HTML_CHARS:
                notes.append(f"[the HTML past {MAX_HTML_CHARS:,} characters was not reduced to text]")
            # Off the event loop: linear, but a page at the cap is still a noticeable while of pure Python.
            text = await trio.to_thread.run_sync(html_text, text, abandon_on_cancel=True, limiter=tool_threads())
        if cut and fetched.decompressed_past_cap:
            notes.insert(0, f"[the body decompresses to more than {self.max_bytes:,} bytes; the rest was not read]")
        elif cut:
            total = f" of {int(length):,}" if length and length.isdigit() else ""
            notes.insert(0, f"[the body was cut at {self.max_bytes:,} bytes{total}; the rest was not read]")
        if len(text) > MAX_CHARS:
            notes.append(f"[{len(text) - MAX_CHARS:,} characters of text not shown]")
            text = text[:MAX_CHARS]
        content = head + text + "".join("\n\n" + n for n in notes)
        error = f"HTTP {status}" if status >= 400 else None
        return done(content, display={"url": final, "status": status, "truncated": cut}, error=error)


__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_TIMEOUT", "MAX_HTML_CHARS", "WebFetchTool", "check_url", "html_text",
           "redirect_policy"]
