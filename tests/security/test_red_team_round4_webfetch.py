"""Red team, fourth round: ``web_fetch`` (on with ``tools.enableWebFetch``) against hostile pages and a hostile model.

Each daemon test drives the real daemon (``python -m transport`` against the loopback fake OpenAI server,
:func:`tests.e2e.isolation_harness.hostile_daemon`) with a scripted model fetching pages that loopback servers
started here serve, and checks from the host what the calls achieved.

* Decompression bomb: a 5 KB page sent with ``Content-Encoding: gzip, gzip`` made the daemon allocate 6 GiB and
  froze its event loop for 17 s: ``actors/tools/client.py`` read through httpx's decoder, which inflates each
  read whole, and cut to the 2 MiB cap only after. The body is now decoded by the bounded decoder the model path
  uses (:mod:`actors.content_coding`): no read decodes to more than the room left under the cap, and reading
  stops there, the result saying the body decompresses past the limit.
* Quadratic HTML: the page's text was made by ``html.parser.HTMLParser`` on the event loop, which is quadratic on
  ``<a<a<a…`` (100 KB: 12 s; the cap's 2 MiB: over an hour), every session, ``/health`` and SIGTERM waiting. The
  conversion is now a linear scan of a bounded input, run in a worker thread.
* SSRF: deny rules and approvals judged the URL's spelling, not where the GET went. With
  ``WebFetch(domain:127.0.0.1)`` denied, ``http://127.1/``, ``http://2130706433/`` and a 302 to 127.0.0.1 all
  reached loopback, and ``sandbox.network: "off"`` does not cover ``web_fetch`` (it runs in the daemon). Rules
  now compare the canonical host (numeric IPv4 spellings, IPv6 forms, a trailing dot, case, IDNA); a redirect is
  followed by hand, on the same host only and after the rules are asked about its URL, and one to another host
  is handed back to the model (calling ``web_fetch`` on it is asked and checked as any fetch); and the daemon
  connects only to the addresses it checked: loopback and private ones only when
  ``tools.webFetchAllowPrivateAddresses`` allows them; link-local (the metadata address), unspecified and
  multicast never.

Each test fails on the code before the fix (the bomb grew the daemon by 1 GiB; the hostile pages did not convert
within 90 s; /health went unanswered; the secret service was read under other spellings and through redirects).
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
import trio

from actors.permission_rules import RuleLists, RuleSet, answer_rules, decide, parse_rule
from actors.settings_file import SCHEMA_PATH, load_settings
from actors.tools.client import check_url
from tests.canned_site import Site
from tests.e2e.isolation_harness import Running, hostile_daemon
from tests.e2e.sse_client import frames

ROOT = Path(__file__).resolve().parents[2]
DONE = [{"text": "done"}]
CAP = 2 * 1024 * 1024  # web_fetch's default max_bytes
PRIVATE_OK = {"tools": {"enableWebFetch": True, "webFetchAllowPrivateAddresses": True}}


def call(tool: str, n: int, /, **arguments: Any) -> list[dict[str, Any]]:
    return [{"tool_call": {"id": f"call_{n}", "name": tool, "arguments": arguments}}]


def fetches(*urls: str) -> list[Any]:
    """A model response per URL, each one web_fetch call, then done."""
    return [call("web_fetch", i, url=url) for i, url in enumerate(urls)] + [DONE]


def peak_memory(pid: int) -> int:
    """The process's peak resident set (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def results_of(d: Running) -> list[str]:
    """What the model was told each tool call returned, in order (from the last model request, which holds them
    all; ``Running.tool_results`` drops repeats)."""
    return [m["content"] for m in d.fake.requests[-1].body["messages"] if m.get("role") == "tool"]


async def run_turn(d: Running, sid: str, timeout: float = 60) -> dict[str, Any]:
    record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=timeout)
    assert record["state"] == "completed", record
    return record


# ----------------------------------------------------------------- A. the decompression bomb

BOMB = 512 * 1024 * 1024  # what the body decompresses to


@functools.cache
def double_gzip(size: int) -> bytes:
    """``size`` bytes of ``a``, gzipped twice: under a kilobyte on the wire."""
    inner = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    chunk = b"a" * 2**24
    return gzip.compress(b"".join([inner.compress(chunk) for _ in range(size // len(chunk))] + [inner.flush()]), 9)


async def test_a_doubly_gzipped_bomb_is_decoded_only_up_to_the_cap_and_the_daemon_does_not_grow(tmp_path):
    bomb = double_gzip(BOMB)
    assert len(bomb) < 4096
    site = Site("127.0.0.1", {"/page.txt": ("200 OK", {"Content-Type": "text/plain",
                                                        "Content-Encoding": "gzip, gzip"}, bomb)})
    async with trio.open_nursery() as nursery:
        base = await site.start(nursery)
        async with hostile_daemon(tmp_path, fetches(base + "/page.txt"), settings=PRIVATE_OK) as d:
            sid = await d.open_session()
            before = peak_memory(d.proc.pid)
            await run_turn(d, sid)
            grown = peak_memory(d.proc.pid) - before
            [result] = results_of(d)
        nursery.cancel_scope.cancel()
    # Before: each read was inflated whole (both layers) before the cap applied: the daemon grew by the bomb's size.
    assert grown < 128 * 1024 * 1024, f"the daemon's peak memory grew by {grown / 2**20:,.0f} MiB"
    assert result.startswith(f"{base}/page.txt — HTTP 200 OK\n\n" + "a" * 1000), result[:200]
    assert f"\n\n[the body decompresses to more than {CAP:,} bytes; the rest was not read]" in result, result[-300:]


async def test_the_web_fetch_client_holds_no_more_than_the_cap_of_a_bomb_at_any_time(nursery):
    import tracemalloc

    from actors.tools import client

    site = Site("127.0.0.1", {"/bomb": ("200 OK", {"Content-Type": "text/plain", "Content-Encoding": "gzip, gzip"},
                                        double_gzip(BOMB))})
    base = await site.start(nursery)
    tracemalloc.start()
    try:
        with trio.fail_after(60):
            fetched = await client.get(base + "/bomb", timeout=30, max_bytes=CAP, max_redirects=5,
                                       is_text=lambda _: True, private_addresses=True, follows=lambda _a, _b: True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert fetched.cut and fetched.decompressed_past_cap and fetched.body == b"a" * CAP
    assert peak < 32 * 1024 * 1024, f"{peak / 2**20:,.0f} MiB held at once"


# ----------------------------------------------------------------- B. quadratic HTML

# Pages HTMLParser takes quadratic time on (each ~1 MB), and the text each must come to.
HOSTILE_PAGES = {
    "unclosed start tags": ("<html><body><p>x</p>" + "<a" * 500_000, "x"),
    "unclosed end tags": ("<p>x</p>" + "</" * 500_000, "x"),
    "processing instructions": ("<p>x</p>" + "<?" * 500_000, "x"),
    "declarations": ("<p>x</p>" + "<!" * 500_000, "x"),
    "comment openers": ("<p>x</p>" + "<!--" * 250_000, "x"),
    "an unclosed quote": ("<p>x</p><a href='" + "<a " * 330_000, "x"),
    "a long tag name": ("<p>x</p><" + "a" * 1_000_000, "x"),
    "an unclosed script": ("<p>x</p><script>" + "<" * 1_000_000, "x"),
    "many equals signs": ("<p>x</p><a " + "= " * 500_000, "x"),
    "bare ampersands": ("&" * 1_000_000, "&" * 1_000_000),
}


async def test_hostile_html_converts_in_linear_time(tmp_path):
    # In a child process: a quadratic conversion cannot be interrupted in this one (it never yields).
    script = tmp_path / "convert.py"
    script.write_text(
        "import json, sys\n"
        "sys.path.insert(0, sys.argv[2])  # this tree's actors, whatever is installed\n"
        "from actors.tools.fetch import html_text\n"
        "pages = json.load(open(sys.argv[1]))\n"
        "json.dump({name: html_text(page) for name, (page, _) in pages.items()}, sys.stdout)\n")
    pages = tmp_path / "pages.json"
    pages.write_text(json.dumps(HOSTILE_PAGES))
    with trio.fail_after(90):  # linear: a few seconds for all ten; HTMLParser: hours for the first
        done = await trio.run_process([sys.executable, str(script), str(pages), str(ROOT)], cwd=ROOT,
                                      capture_stdout=True)
    texts = json.loads(done.stdout)
    for name, (_, text) in HOSTILE_PAGES.items():
        assert texts[name] == text, name


def test_the_text_of_html_is_what_a_reader_sees():
    from actors.tools.fetch import html_text

    page = ("<!DOCTYPE html><html><head><title>T &amp; t</title><meta charset=utf-8>"
            "<style>p > a { color: red }</style><script>if (a < b && c > d) { x = '</p>' }</script></head>"
            "<body><!-- a comment <p>hidden</p> --><h1 class=\"x\">Head&#x27;s</h1>"
            "<p title='a > b'>One &lt;two&gt;<br/>three</p><p data-x=\"'\">four</p>"
            "<ul><li>five<li>six</ul><svg><text>drawn</text></svg><noscript>no</noscript>"
            "<p>a < b and c<d</p><P>UPPER</P></body></html>")
    assert html_text(page) == "# T & t\n\nHead's\n\nOne <two>\nthree\n\nfour\n\nfive\nsix\n\na < b and c\nUPPER"
    # A head left open does not swallow the body.
    assert html_text("<html><head><title>x</title><body><p>body text") == "# x\n\nbody text"
    # A self-closed <svg/> (an icon) holds nothing: the page goes on after it; an unclosed one hides the rest.
    assert html_text('<p>a</p><svg viewBox="0 0 1 1"/><p>after the icon</p>') == "a\n\nafter the icon"
    assert html_text("<p>a</p><math/><p>b</p><svg><text>drawn</text></svg><p>c</p>") == "a\n\nb\n\nc"


async def test_a_hostile_html_page_does_not_hold_the_daemons_event_loop(tmp_path):
    page = b"<html><body><p>before</p>" + b"<a" * 500_000  # 1 MB; HTMLParser: over an hour, on the loop
    site = Site("127.0.0.1", {"/index.html": ("200 OK", {"Content-Type": "text/html"}, page)})
    async with trio.open_nursery() as nursery:
        base = await site.start(nursery)
        async with hostile_daemon(tmp_path, fetches(base + "/index.html"), settings=PRIVATE_OK) as d:
            sid = await d.open_session()
            prompt = await d.prompt(sid, "go")
            record: dict[str, Any] = {}
            answered = 0

            async def wait_turn() -> None:
                record.update(await d.wait_turn(sid, prompt, timeout=120))

            async with trio.open_nursery() as watch:
                watch.start_soon(wait_turn)
                while not record:  # the loop answers /health all along
                    with trio.fail_after(10):
                        assert (await d.client.get("/health")).status_code == 200
                    answered += 1
                    await trio.sleep(0.02)
            [result] = results_of(d)
        nursery.cancel_scope.cancel()
    assert record["state"] == "completed" and answered >= 1, record
    assert result == f"{base}/index.html — HTTP 200 OK\n\nbefore", result[:300]


# ----------------------------------------------------------------- C. where a fetch may go


DENIED = RuleLists(deny=("WebFetch(domain:127.0.0.1)", "WebFetch(domain:localhost)",
                          "WebFetch(domain:169.254.169.254)"))


def test_a_deny_rule_matches_every_spelling_of_its_host():
    rules = RuleSet.of(DENIED)
    for url in ("http://127.1/", "http://2130706433/", "http://0x7f000001/", "http://0x7f.0.0.1/",
                "http://017700000001/", "http://127.0.0.1./", "HTTP://127.0.0.1:8080/x", "http://[::ffff:127.0.0.1]/",
                "http://[::ffff:7f00:1]/", "http://user@127.1/", "http://LOCALHOST./",
                "http://0xa9fea9fe/latest/meta-data/", "http://2852039166/", "http://169.254.43518/"):
        assert decide(rules, "web_fetch", {"url": url}, "/w").effect == "deny", url
    # Dotted forms with leading zeros (0177.0.0.1) are no URL to web_fetch's parser: never fetched at all.
    assert check_url("http://0177.0.0.1/") is not None and check_url("http://127.000.000.001/") is not None


def test_an_ipv6_host_can_be_named_in_a_rule_and_matches_its_every_form():
    rules = RuleSet.of(RuleLists(deny=("WebFetch(domain:[::1])", "WebFetch(domain:fd00:ec2::254)")))
    for url in ("http://[::1]/", "http://[0:0:0:0:0:0:0:1]:9/", "http://[0::1]/", "http://[fd00:ec2:0::254]/",
                "http://[FD00:EC2::254]/latest/"):
        assert decide(rules, "web_fetch", {"url": url}, "/w").effect == "deny", url
    assert parse_rule("WebFetch(domain:[0:0::1])").spec == "[::1]"
    assert answer_rules("web_fetch", {"url": "http://[0::1]/"}, "fetch") == ("WebFetch(domain:[::1])",)


def test_rules_and_answers_are_about_the_canonical_host():
    rules = RuleSet.of(RuleLists(allow=("WebFetch(domain:example.com)", "WebFetch(domain:bücher.de)"),
                                 deny=("WebFetch(domain:2130706433)",)))
    for url, effect in [("http://EXAMPLE.COM./a", "allow"), ("http://example\u3002com/", "allow"),
                        ("http://example.com.evil.net/", None), ("http://xn--bcher-kva.de/", "allow"),
                        ("http://B\u00dcCHER.de/", "allow"), ("http://127.0.0.1/", "deny"), ("http://127.1/", "deny")]:
        assert decide(rules, "web_fetch", {"url": url}, "/w").effect == effect, url
    assert answer_rules("web_fetch", {"url": "http://0x7f.1:8/"}, "fetch") == ("WebFetch(domain:127.0.0.1)",)
    assert parse_rule("WebFetch(domain:0x7f.1)").spec == "127.0.0.1"


def test_the_private_address_setting_is_read_checked_and_in_the_schema(tmp_path):
    path = tmp_path / "settings.json"
    assert load_settings(_write(path, {})).web_fetch_private_addresses is False
    assert load_settings(_write(path, {"tools": {"webFetchAllowPrivateAddresses": True}})) \
        .web_fetch_private_addresses is True
    assert load_settings(_write(path, {"tools.webFetchAllowPrivateAddresses": True})).web_fetch_private_addresses
    with pytest.raises(Exception, match='tools.webFetchAllowPrivateAddresses: must be true or false, got "yes"'):
        load_settings(_write(path, {"tools": {"webFetchAllowPrivateAddresses": "yes"}}))
    schema = json.loads(SCHEMA_PATH.read_text())
    assert schema["$defs"]["Tools"]["properties"]["webFetchAllowPrivateAddresses"]["default"] is False
    assert "tools.webFetchAllowPrivateAddresses" in schema["properties"]


def _write(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document))
    return path


SECRET = "IMDS-ROLE-CREDENTIALS-" + os.urandom(6).hex()


async def test_deny_rules_hold_for_every_spelling_and_for_redirects_with_private_addresses_allowed(tmp_path):
    secret = Site("127.0.0.1", {"/latest/meta-data/": ("200 OK", {"Content-Type": "text/plain"}, SECRET.encode())})
    public = Site("127.0.0.3", {"/page": ("200 OK", {"Content-Type": "text/plain"}, b"an allowed page")})
    redirector = Site("127.0.0.2")
    async with trio.open_nursery() as nursery:
        for site in (secret, public, redirector):
            await site.start(nursery)
        port = secret.base.rsplit(":", 1)[1]
        for path, target in (("/to-loopback", f"http://127.0.0.1:{port}/latest/meta-data/"),
                             ("/to-alias", f"http://127.1:{port}/latest/meta-data/"),
                             ("/to-mapped", f"http://[::ffff:127.0.0.1]:{port}/latest/meta-data/")):
            redirector.routes[path] = ("302 Found", {"Location": target}, b"")
        urls = [f"http://{host}:{port}/latest/meta-data/" for host in (
            "127.0.0.1", "127.1", "2130706433", "0x7f000001", "017700000001", "127.0.0.1.", "[::ffff:127.0.0.1]",
            "localhost", "LocalHost.")]
        urls += [redirector.base + p for p in ("/to-loopback", "/to-alias", "/to-mapped")]
        urls.append(public.base + "/page")
        settings = {**PRIVATE_OK, "sandbox": {"mode": "auto", "network": "off"},
                    "permissions": {"deny": ["WebFetch(domain:127.0.0.1)", "WebFetch(domain:localhost)",
                                             "WebFetch(domain:169.254.169.254)"]}}
        async with hostile_daemon(tmp_path, fetches(*urls), settings=settings) as d:
            sid = await d.open_session()
            await run_turn(d, sid)
            results = results_of(d)
        nursery.cancel_scope.cancel()
    assert secret.seen == [], secret.seen  # nothing reached the denied service, under any name
    assert not any(SECRET in r for r in results)
    for url, result in zip(urls[:9], results):
        assert "refused without asking: deny rule WebFetch(domain:" in result, (url, result)
    for result in results[9:12]:
        assert result.startswith("Error: ") and "refused without asking: deny rule WebFetch(domain:127.0.0.1)" \
            in result, result
    assert results[12].endswith("\n\nan allowed page"), results[12]


async def test_loopback_private_link_local_and_unspecified_addresses_are_refused_by_default(tmp_path):
    secret = Site("127.0.0.1", {"/": ("200 OK", {"Content-Type": "text/plain"}, SECRET.encode())})
    async with trio.open_nursery() as nursery:
        await secret.start(nursery)
        port = secret.base.rsplit(":", 1)[1]
        urls = [f"http://{host}:{port}/" for host in ("127.0.0.1", "localhost", "127.1", "0.0.0.0", "[::1]",
                                                      "[::ffff:127.0.0.1]", "10.0.0.1", "192.168.1.1")]
        urls += ["http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/", "http://224.0.0.1/"]
        settings = {"tools": {"enableWebFetch": True}, "sandbox": {"mode": "auto", "network": "off"}}
        async with hostile_daemon(tmp_path, fetches(*urls), settings=settings) as d:
            sid = await d.open_session()
            await run_turn(d, sid)
            results = results_of(d)
        nursery.cancel_scope.cancel()
    assert secret.seen == [] and not any(SECRET in r for r in results), results
    kinds = ["loopback", "loopback", "loopback", "unspecified", "loopback", "loopback", "private", "private",
             "link-local", "link-local", "multicast"]
    for url, kind, result in zip(urls, kinds, results):
        assert result.startswith("Error: ") and f"{kind} address" in result, (url, result)
        if kind in ("loopback", "private"):
            assert "tools.webFetchAllowPrivateAddresses" in result, (url, result)
        else:
            assert "which web_fetch never fetches" in result, (url, result)


async def test_a_redirect_is_followed_on_its_host_only_and_another_host_is_asked_for_anew(tmp_path):
    first, second = Site("127.0.0.2"), Site("127.0.0.3", {"/page": ("200 OK", {"Content-Type": "text/plain"},
                                                                     b"the second host")})
    async with trio.open_nursery() as nursery:
        await first.start(nursery)
        await second.start(nursery)
        first.routes.update({
            "/elsewhere": ("302 Found", {"Location": second.base + "/page"}, b""),
            "/moved": ("301 Moved Permanently", {"Location": "/here"}, b""),
            "/here": ("200 OK", {"Content-Type": "text/plain"}, b"the same host"),
            "/loop": ("302 Found", {"Location": "/loop"}, b""),
        })
        script = [call("web_fetch", 0, url=first.base + "/elsewhere"), call("web_fetch", 1, url=second.base + "/page"),
                  call("web_fetch", 2, url=first.base + "/moved"), call("web_fetch", 3, url=first.base + "/loop"), DONE]
        async with hostile_daemon(tmp_path, script, settings=PRIVATE_OK) as d:
            r = await d.client.post("/session", json={"approvalMode": "default"})
            sid = r.json()["sessionId"]
            asked: list[str] = []

            async def answer() -> None:  # allow every fetch, noting what the user was asked about
                async with d.client.stream("GET", f"/session/{sid}/events", timeout=None,
                                           headers={"Last-Event-ID": "0"}) as events:
                    async for frame in frames(events):
                        if frame["type"] == "permission_request":
                            data = frame["data"]
                            asked.append(data["toolCall"]["title"])
                            vote = {"outcome": {"outcome": "selected", "optionId": "proceed_once"}}
                            await d.client.post(f"/session/{sid}/permission/{data['requestId']}", json=vote)

            async with trio.open_nursery() as voter:
                voter.start_soon(answer)
                await run_turn(d, sid)
                voter.cancel_scope.cancel()
            results = results_of(d)
        nursery.cancel_scope.cancel()
    # The redirect to the second host was not followed: the model was told, and its own call was asked for.
    assert asked == [f"web_fetch {first.base}/elsewhere", f"web_fetch {second.base}/page",
                     f"web_fetch {first.base}/moved", f"web_fetch {first.base}/loop"]
    assert second.seen == ["/page"]  # once: the model's own, approved call
    assert f"redirects to {second.base}/page, on another host" in results[0], results[0]
    assert "call web_fetch with that URL" in results[0] and not results[0].startswith("Error"), results[0]
    assert results[1].endswith("\n\nthe second host"), results[1]
    assert results[2].startswith(f"{first.base}/here — HTTP 200 OK") and results[2].endswith("the same host")
    assert results[3] == f"Error: {first.base}/loop redirected more than 5 times", results[3]


ADDRESS_KINDS = {  # IANA's special-purpose registries, whatever the interpreter's own tables say
    "8.8.8.8": None, "1.1.1.1": None, "2001:4860:4860::8888": None,
    "127.0.0.1": "loopback", "::1": "loopback", "10.1.2.3": "private", "172.16.0.1": "private",
    "192.168.1.1": "private", "100.64.0.1": "private", "192.0.0.8": "private", "198.18.0.1": "private",
    "192.0.2.1": "private", "2001:db8::1": "private", "fd12::1": "private", "240.0.0.1": "private",
    "169.254.169.254": "link-local", "fe80::1": "link-local", "192.0.0.192": "metadata",
    "100.100.100.200": "metadata", "fd00:ec2::254": "metadata", "::ffff:192.0.0.192": "metadata",
    "0.0.0.0": "unspecified", "224.0.0.1": "multicast",
}


@pytest.mark.parametrize("address", list(ADDRESS_KINDS))
def test_what_web_fetch_may_connect_to_is_a_fixed_table(address):
    """Python 3.11.7 takes 192.0.0.192 (Oracle Cloud's metadata service) and 192.0.0.8 for global addresses."""
    import ipaddress

    from actors.tools.client import address_kind

    assert address_kind(ipaddress.ip_address(address)) == ADDRESS_KINDS[address]


def test_a_url_the_rules_and_the_client_would_read_as_two_hosts_is_never_fetched():
    """Permission rules read a URL's host with the standard library, the fetch with httpx: where the two part
    ways (a blank in the host: ``a b.com`` against ``a%20b.com``) the URL is refused, before anyone is asked,
    so no rule judges one host while another is fetched; where they agree it is the same canonical host."""
    from actors.permission_rules import url_host
    from actors.tools.client import check_url

    assert "does not read as the same host to every URL parser" in check_url("http://a b.com/")
    for url, host in {"http://127.1/": "127.0.0.1", "http://user:pw@Example.COM./x": "example.com",
                      "http://a.com:@b.com/": "b.com", "http://bücher.de/": "xn--bcher-kva.de",
                      "http://[::ffff:127.0.0.1]/": "127.0.0.1", "http://0x7f000001/": "127.0.0.1"}.items():
        assert check_url(url) is None and url_host(url) == host, url
