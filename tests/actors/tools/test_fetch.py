"""web_fetch (actors/tools/fetch.py) against a loopback HTTP server started here; off unless enabled."""

from __future__ import annotations

import json
from typing import Any


from actors.runtime import default_tools
from actors.settings import Settings
from actors.settings_file import load_settings
from actors.tools import WebFetchTool
from tests.actors.tools.harness import Services, call, runtime
from tests.canned_site import Site

PAGE = b"""<!doctype html><html><head><title>The Page</title><style>body{color:red}</style>
<script>var secret = "not text";</script></head>
<body><h1>Heading</h1><p>First &amp; only paragraph.</p><ul><li>one</li><li>two</li></ul></body></html>"""


class Server(Site):
    """The site these tests fetch from, on 127.0.0.1."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1", {
            "/text": ("200 OK", {"Content-Type": "text/plain; charset=utf-8"}, "plain text — ü\n".encode()),
            "/html": ("200 OK", {"Content-Type": "text/html; charset=utf-8"}, PAGE),
            "/json": ("200 OK", {"Content-Type": "application/json"}, b'{"a": 1}'),
            "/big": ("200 OK", {"Content-Type": "text/plain"}, b"z" * 3000),
            "/png": ("200 OK", {"Content-Type": "image/png"}, b"\x89PNG\x00\x00"),
            "/missing": ("404 Not Found", {"Content-Type": "text/plain"}, b"no such page"),
            "/moved": ("302 Found", {"Location": "/text"}, b""),
            "/to-file": ("302 Found", {"Location": "file:///etc/passwd"}, b""),
            "/idna": ("200 OK", {"Content-Type": "text/plain; charset=idna"}, b"read as utf-8\n"),
        })


def loopback_services(**kw: Any) -> Services:
    """A session's services whose settings let web_fetch reach the loopback server these tests start."""
    return Services(runtime=runtime(web_fetch_private_addresses=True), **kw)


async def fetch(nursery, path: str, tool: WebFetchTool | None = None, services: Services | None = None):
    server = Server()
    base = await server.start(nursery)
    services = services or loopback_services()
    result = await call(tool or WebFetchTool(), ".", {"url": base + path}, services)
    return result, server, services


async def test_text_comes_back_after_asking_with_kind_fetch(nursery):
    result, server, services = await fetch(nursery, "/text")
    assert result.error is None
    assert result.content == f"http://127.0.0.1:{server.port}/text — HTTP 200 OK\n\nplain text — ü\n"
    [asked] = services.asked
    assert asked["kind"] == "fetch" and asked["title"] == f"web_fetch http://127.0.0.1:{server.port}/text"
    assert asked["planRefuses"] is False  # plan mode asks rather than refuses


async def test_a_charset_no_text_is_written_in_is_read_as_utf_8(nursery):
    """``idna`` is a codec, but not for bodies: it raised UnicodeError and ended the whole turn."""
    result, _, _ = await fetch(nursery, "/idna")
    assert result.error is None and result.content.endswith("\n\nread as utf-8\n")


async def test_html_is_reduced_to_its_text(nursery):
    result, _, _ = await fetch(nursery, "/html")
    body = result.content.split("\n\n", 1)[1]
    assert body.startswith("# The Page\n\nHeading\n")
    assert "First & only paragraph." in body and "one\n" in body and "two" in body
    assert "secret" not in body and "color:red" not in body and "<" not in body


async def test_json_comes_back_as_it_is_and_redirects_are_followed(nursery):
    result, _, _ = await fetch(nursery, "/json")
    assert result.content.endswith('\n\n{"a": 1}')
    result, server, _ = await fetch(nursery, "/moved")
    assert result.content.startswith(f"http://127.0.0.1:{server.port}/text — HTTP 200 OK")
    assert server.seen == ["/moved", "/text"]


async def test_the_body_is_capped_and_the_result_says_so(nursery):
    result, _, _ = await fetch(nursery, "/big", WebFetchTool(max_bytes=1000))
    body = result.content.split("\n\n")[1]
    assert body == "z" * 1000
    assert result.content.endswith("[the body was cut at 1,000 bytes of 3,000; the rest was not read]")
    assert result.display["truncated"] is True


async def test_a_server_that_stalls_is_given_up_on_at_the_timeout(nursery):
    result, _, _ = await fetch(nursery, "/stall", WebFetchTool(timeout=0.3))
    assert result.error is not None and result.error.endswith("/stall did not answer within 0.3 s")


async def test_non_text_types_and_error_statuses(nursery):
    result, _, _ = await fetch(nursery, "/png")
    assert result.error.endswith("/png is image/png, not text; web_fetch returns text only")
    result, _, _ = await fetch(nursery, "/missing")
    assert result.error == "HTTP 404" and result.content.endswith("\n\nno such page")
    result, _, _ = await fetch(nursery, "/to-file")
    assert result.error is not None and result.error.startswith("cannot fetch")


async def test_only_http_and_https_urls_are_fetched_and_nothing_is_asked_for_others(tmp_path):
    services = Services()
    for url, why in (("file:///etc/passwd", "has the 'file' scheme"), ("ftp://example.com/x", "has the 'ftp' scheme"),
                     ("example.com/page", "has no scheme"), ("http:///nohost", "has no host")):
        result = await call(WebFetchTool, tmp_path, {"url": url}, services)
        assert result.error is not None and why in result.error, (url, result.error)
    assert "http:// and https:// URLs only" in (await call(WebFetchTool, tmp_path, {"url": "file:///x"})).error
    assert services.asked == []


async def test_a_denied_fetch_sends_nothing(nursery):
    result, server, _ = await fetch(nursery, "/text", services=loopback_services(deny="the user denied this call"))
    assert result.error == "the user denied this call" and server.seen == []


def test_web_fetch_is_off_by_default_and_offered_only_when_the_setting_enables_it(tmp_path):
    assert "web_fetch" not in default_tools() and "web_fetch" not in default_tools(Settings())
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"tools": {"enableWebFetch": True}}))
    enabled = load_settings(path)
    assert enabled.web_fetch is True
    assert "web_fetch" in default_tools(enabled)
    assert "web_fetch" in [spec.name for spec in default_tools(enabled).specs()]
    path.write_text("{}")
    assert load_settings(path).web_fetch is False
