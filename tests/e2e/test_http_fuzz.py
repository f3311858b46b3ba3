"""Hostile requests to every route of a real daemon: never a 5xx, always a JSON error, no hang, no harm.

One daemon process (tests/e2e/fuzz_world.py) serves the whole module; each
route gets :data:`EXAMPLES` cases drawn by Hypothesis with
``derandomize=True`` (the same cases every run; no shrinking, a failing case
is printed whole; tests/e2e/fuzz_requests.py says what they are), and every
string field of every route's bodies gets a NUL and other control characters,
one field at a time (:func:`tests.e2e.fuzz_requests.control_cases`), besides the
control characters the fuzz splices in. Each case is sent on a fresh raw socket
and must:

- be answered within :data:`REQUEST_SECONDS` (``trio.fail_after``): no hang;
- not be a 5xx, except a documented 503 (:data:`DOCUMENTED_503`);
- if refused (4xx), carry ``{"error", "code", "path"}`` JSON of a bounded
  size — except the protocol-defined answers: JSON-RPC errors on ``/acp``,
  ``/mcp`` and ``/signal/mcp/<token>``, the bare (empty) 404/405 of the signal
  routes and of ``GET /mcp``, and hypercorn's own empty 4xx (with
  ``Connection: close``) for bytes that are not HTTP/1.1 at all; the MCP
  echoes xfailed in tests/e2e/test_mcp_input_findings.py are exempt from the
  size bound only;
- leave the connection usable: a next request on it is answered, or, when
  the answer said ``Connection: close``, the daemon really closes it and a
  new connection is served;
- when refused, or a read, change nothing (:func:`tests.e2e.fuzz_world.snapshot`
  before and after); the witness session never changes at all. An accepted
  request that may have changed something is followed by
  :func:`tests.e2e.fuzz_world.settle`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.e2e.fuzz_requests import MAX_BODY, ROUTES, Case, Route, case, control_cases, string_places
from tests.e2e.fuzz_world import SETTLE_SECONDS, World, running_daemon, settle, snapshot
from tests.e2e.raw_http import Closed, RawConnection, RawResponse

EXAMPLES = 20  # per route: ~15 s on an idle machine, under a minute on a loaded one
REQUEST_SECONDS = 10
MAX_ERROR_BYTES = 4096  # no error answer echoes more than an excerpt of its input
DOCUMENTED_503 = {"too_many_connections", "shutting_down", "prompt_queue_full", "too_many_sessions",
                  "too_many_subscribers", "session_closing", "storage_unavailable"}
READS = {b"GET", b"HEAD", b"OPTIONS"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with running_daemon(tmp_path_factory.mktemp("fuzz")) as running:
        yield running


# ------------------------------------------------------------------ one exchange


def request_bytes(c: Case, world: World) -> bytes:
    headers = list(c.headers)
    names = {name.lower() for name, _ in headers}
    if b"host" not in names:
        headers.insert(0, (b"Host", world.url.split("//", 1)[1].encode()))
    payload = c.body
    if c.chunked:
        payload = b"%x\r\n" % len(c.body) + c.body + b"\r\n0\r\n\r\n"
    elif c.body and not c.truncated and b"content-length" not in names:
        headers.append((b"Content-Length", str(len(c.body)).encode()))
    head = c.method + b" " + c.target + b" HTTP/1.1\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in headers)
    return head + b"\r\n" + payload


async def exchange(conn: RawConnection, c: Case, world: World) -> RawResponse | None:
    """Send the case while reading its answer (a daemon may answer before reading a body); ``None`` if
    the daemon closed the connection without one."""
    async def send() -> None:
        try:
            await conn.send(request_bytes(c, world))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # it answered and closed before reading everything: the answer is what counts

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        try:
            return await conn.read_response(head_only=True, method=c.method.upper())
        except (Closed, trio.BrokenResourceError):
            return None
        finally:
            nursery.cancel_scope.cancel()


def is_rpc_error(body: Any) -> bool:
    error = body.get("error") if isinstance(body, dict) else None
    return (isinstance(body, dict) and body.get("jsonrpc") == "2.0" and isinstance(error, dict)
            and type(error.get("code")) is int and isinstance(error.get("message"), str))


def check_answer(c: Case, r: RawResponse | None) -> None:
    if r is None:
        assert c.framing, "the daemon closed the connection without an answer"
        return
    upgrade = b"upgrade" in {name.lower() for name, _ in c.headers}  # hypercorn takes WebSocket upgrades itself
    hypercorn_level = c.framing or upgrade
    if hypercorn_level and not r.body and r.headers.get("connection") == "close" and r.status in (400, 431, 501):
        return  # hypercorn's own refusal of bytes that are not HTTP/1.1 (501: a transfer coding it lacks)
    code = None
    if r.status >= 400 and r.body:
        try:
            parsed = orjson.loads(r.body)
        except orjson.JSONDecodeError:
            raise AssertionError(f"{r.status} with a body that is not JSON: {r.body[:300]!r}") from None
        code = parsed.get("code") if isinstance(parsed, dict) else None
    assert r.status < 500 or (r.status == 503 and code in DOCUMENTED_503), (r.status, r.body[:500])
    if r.status < 400:
        return
    if not r.body:
        bare = (c.kind == "signal" and r.status in (404, 405)) or (c.kind == "mcp" and r.status == 405)
        assert bare or c.method.upper() == b"HEAD", f"{r.status} with an empty body"
        return
    if c.kind in ("acp", "mcp", "signal") and is_rpc_error(parsed):
        assert len(r.body) <= MAX_ERROR_BYTES, f"a {len(r.body)}-byte error answer: {r.body[:300]!r}"
        return
    assert len(r.body) <= MAX_ERROR_BYTES, f"a {len(r.body)}-byte error answer: {r.body[:300]!r}"
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    assert isinstance(parsed, dict) and {"error", "code", "path"} <= set(parsed), parsed
    assert isinstance(parsed["error"], str) and parsed["error"] and isinstance(parsed["code"], str), parsed
    assert parsed["path"] is None or isinstance(parsed["path"], str), parsed


async def served_on(conn: RawConnection) -> None:
    r = await conn.request(b"GET", b"/health")
    assert r.status == 200, (r.status, r.body[:300])


async def check_connection(world: World, conn: RawConnection, c: Case, r: RawResponse | None) -> None:
    """The connection still answers, or it was really closed as announced and a new one is served."""
    closes = r is not None and "close" in r.headers.get("connection", "").lower()
    if closes and r.complete:  # an event stream with Connection: close closes when it ends, not now
        assert await conn.closed_by_server(), "Connection: close announced, yet the connection stays open"
    reusable = r is not None and not closes and r.complete and not (c.truncated or c.framing)
    if reusable and b"upgrade" not in {n.lower() for n, _ in c.headers}:
        await served_on(conn)
        return
    fresh = await RawConnection.open(world.url)  # the daemon still serves new connections
    try:
        await served_on(fresh)
    finally:
        await fresh.aclose()


async def run_case(world: World, c: Case) -> None:
    async with world.client() as client:
        with trio.fail_after(SETTLE_SECONDS):
            # The state after the previous case (nothing runs between cases once settled), else a fresh look.
            before = world.last if world.last is not None else await snapshot(world, client)
            world.last = None
        conn = await RawConnection.open(world.url)
        try:
            try:
                with trio.fail_after(REQUEST_SECONDS):
                    r = await exchange(conn, c, world)
                check_answer(c, r)
                with trio.fail_after(REQUEST_SECONDS):
                    await check_connection(world, conn, c, r)
            except trio.TooSlowError:
                raise AssertionError(f"no answer within {REQUEST_SECONDS} s: a hang") from None
        finally:
            await conn.aclose()
        with trio.fail_after(SETTLE_SECONDS):
            after = await snapshot(world, client)
    assert after[world.witness] == before[world.witness], "the witness session changed"
    refused = r is None or r.status >= 400 or (r.body[:1] == b"{" and is_rpc_error(orjson.loads(r.body)))
    if refused or c.method.upper() in READS:
        changed = {key for key in before if before[key] != after.get(key)}
        assert not changed, f"a refused request or a read changed {sorted(changed)}: {before} -> {after}"
        world.last = after
    else:
        await settle(world)


# ------------------------------------------------------------------ the tests


@pytest.mark.parametrize("route", ROUTES, ids=lambda route: route.name)
# No shrinking: a case costs network round trips (a hang, seconds), and the failing one is printed whole.
@settings(derandomize=True, database=None, max_examples=EXAMPLES, deadline=None, report_multiple_bugs=False,
          phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_requests_get_a_clean_answer_and_change_nothing(world: World, route: Route, data: Any) -> None:
    c = data.draw(case(route, world), label="case")
    try:
        trio.run(run_case, world, c)
    except AssertionError as exc:
        raise AssertionError(f"{c!r}: {exc}") from None  # the case in a readable, bounded form


# The routes whose bodies have string fields (the templates' shape does not depend on the world's values).
_SHAPE = World(url="http://shape", token="t", work=Path("/shape"))
STRING_ROUTES = [route for route in ROUTES
                 if any(template is not None and string_places(template) for template in route.bodies(_SHAPE))]


@pytest.mark.parametrize("route", STRING_ROUTES, ids=lambda route: route.name)
def test_control_characters_in_every_string_field_get_a_clean_answer(world: World, route: Route) -> None:
    """Each string field of each body the route takes, in turn: a NUL in its value, and another control
    character; the same checks as the fuzz above (no 5xx, a JSON error, nothing changed when refused)."""
    cases = control_cases(route, world)
    assert cases
    for c in cases:
        try:
            trio.run(run_case, world, c)
        except AssertionError as exc:
            raise AssertionError(f"{c!r}: {exc}") from None


def test_every_route_of_the_app_is_fuzzed(world: World) -> None:
    """The route table above covers every rule the app and its session route modules serve (a new route must be
    added to it)."""
    import re
    from pathlib import Path

    import transport.app

    modules = [Path(transport.app.__file__).with_name(name) for name in ("app.py", "permissions.py", "checkpoints.py")]
    source = "".join(module.read_text() for module in modules)
    rest = set(re.findall(r'@app\.(?:get|post|delete)\("([^"]+)"\)', source))
    fuzzed = {re.sub(r"\{(\w+)\}", "<x>", route.path.partition("?")[0]) for route in ROUTES}
    missing = {rule for rule in rest if re.sub(r"<\w+>", "<x>", rule) not in fuzzed}
    assert not missing, f"routes not fuzzed: {sorted(missing)}"
    assert {"/acp", "/mcp", "/signal/mcp/<x>"} <= fuzzed
    assert MAX_BODY == transport.app.MAX_BODY
