"""Hypothesis strategies for hostile HTTP requests to every route of the daemon.

A :class:`Case` is the exact bytes of one request: a method (mostly the
route's own), a path with its parameters filled from the ids the fuzzer was
given or from hostile segments, a query string, headers (the bearer token
mostly right) and a body — the route's own template, the template with one
member replaced by a hostile value (wrong types, huge numbers, deep nesting,
unicode, oversize strings), extra or missing members, other JSON, or bytes
that are no JSON at all. A few cases are HTTP hypercorn itself refuses
(``framing``) and a few declare a body over the 10 MB limit but send only its
start (``truncated``): those are answered without the body being read.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import strategies as st

from tests.e2e.fuzz_world import MCP_VERSION, TARGET, World

MAX_BODY = 10 * 1024 * 1024  # transport.app.MAX_BODY
HUGE = "h" * 1_000_000
# Tokens spliced into the JSON text after encoding (json.dumps cannot write them).
HUGE_INT, NAN, INF, DEEP = "__fuzz_huge_int__", "__fuzz_nan__", "__fuzz_inf__", "__fuzz_deep__"
SPLICE = {HUGE_INT: b"9" * 5000, NAN: b"NaN", INF: b"1e400", DEEP: b"[" * 2000 + b"]" * 2000}


def nested(depth: int, kind: str) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


DEEP_DICT, DEEP_LIST = nested(300, "dict"), nested(300, "list")  # deeper than orjson writes (254), not reads (1024)
HOSTILE: list[Any] = [
    None, True, False, 0, -1, 1.5, 2**31, 2**63, -(2**63) - 1, 2**64, 1e308, HUGE_INT, NAN, INF,
    "", " ", "\x00", "é🎉\u202e\u200b", "\ud800", "../../../etc/passwd", "/", "/nonexistent/dir", "x" * 300,
    "x" * 5000, HUGE, [], {}, [1, "a", None], {"type": "text"}, list(range(10_000)),
    DEEP_LIST, DEEP_DICT, DEEP,
]

# Control characters (C0, DEL, C1) and their kin, spliced into string fields: a NUL reaches os.path and
# subprocess calls (which refuse it with ValueError), the rest logs, journals, headers and shells.
CONTROL: list[str] = [
    "\x00", "\x01", "\x07", "\x08", "\t", "\n", "\x0b", "\x0c", "\r", "\r\n", "\x1b", "\x1b[2J", "\x1f", "\x7f",
    "\x80", "\x85", "\x9b", "\x9f", "\u2028", "\u2029", "\ufeff", "\u200b", "\x00" * 3, "a\x00b", "\x00\n\x1b\x7f",
]

RAW_BODIES: list[bytes] = [
    b"{", b"}", b"[1,]", b"{'a': 1}", b"\xff\xfe{\x00}\x00", b"\xef\xbb\xbf{}", b"null", b"[]", b"\"x\"", b"1",
    b"NaN", b"1e400", b"9" * 5000, b"[" * 100_000, b"{\"a\":" * 2000, b"\"\\ud800\"", b"\x00", b"{\"a\":1}{}",
    b"a=1&b=2", b"--zz\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--zz--\r\n",
    "{\"prompt\": \"é\"}".encode("utf-16"), b" " * 70_000,
]

# Percent-encoded: a raw byte over 0x7f in a request target is no HTTP/1.1 (see FRAMING).
SEGMENTS = [b"nope", b"..", b"%2e%2e", b"a%2Fb", b"%00", b"%ff", b"%C3%A9", b"%D9%A1%D9%A6", b"s" * 5000, b"-", b"a.b",
            b"session-" + b"9" * 40, b"%20", b"~", b"(", b"'", b"%25", b"*"]

QUERY_VALUES = [b"7" * 5000, b"%C2%B2", b"%D9%A1%D9%A6", b"-1", b"16", b"2048", b"2049", b"0x10", b"", b"1e3", b"%2016",
                b"%ff", b"%zz", b"%00", b"a" * 3000, b"1.5", b"0" * 100 + b"16", b"+16", b"9" * 17, b"%E2%80%AE"]
QUERY_KEYS = [b"maxQueued", b"lastEventId", b"epoch", b"maxQueued", b"x", b"", b"%ff", b"a" * 200]

METHODS = [b"GET", b"POST", b"PUT", b"PATCH", b"DELETE", b"HEAD", b"OPTIONS", b"TRACE", b"FOO", b"get", b"M" * 50]


@attrs.frozen(repr=False)
class Case:
    route: str
    kind: str  # rest, acp, mcp, signal
    method: bytes
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    chunked: bool = False
    framing: bool = False  # hypercorn may refuse it as HTTP before the app sees it
    truncated: bool = False  # declares MAX_BODY+ bytes and sends only the first 64 KiB

    def __repr__(self) -> str:
        def cut(data: bytes) -> str:
            return repr(data[:200]) + (f"…({len(data)} bytes)" if len(data) > 200 else "")
        headers = ", ".join(f"{n.decode('latin-1')}: {cut(v)}" for n, v in self.headers)
        return (f"Case({self.route}: {self.method.decode('latin-1')} {cut(self.target)} [{headers}] "
                f"body={cut(self.body)}"
                f"{' chunked' if self.chunked else ''}{' framing' if self.framing else ''}"
                f"{' truncated' if self.truncated else ''})")


Bodies = Callable[[World], list[Any]]


@attrs.frozen
class Route:
    name: str
    method: str
    path: str  # {sid}, {pid}, {rid}, {token}, {effect}, {turn}, {uid} are filled per case
    kind: str = "rest"
    bodies: Bodies = lambda w: [None]


def _rpc(method: str, params: Any = None, id: Any = 1) -> dict[str, Any]:
    out: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        out["id"] = id
    if params is not None:
        out["params"] = params
    return out


def _prompt(text: str = "hi") -> list[Any]:
    return [{"type": "text", "text": text}]


def _acp_bodies(w: World) -> list[Any]:
    return [_rpc("initialize", {"protocolVersion": 1, "clientCapabilities": {}}),
            _rpc("session/new", {"cwd": str(w.work), "mcpServers": []}),
            _rpc("session/load", {"sessionId": TARGET, "cwd": str(w.work), "mcpServers": []}),
            _rpc("session/prompt", {"sessionId": TARGET, "prompt": _prompt()}),
            _rpc("session/cancel", {"sessionId": TARGET}, id=None),
            _rpc("session/set_mode", {"sessionId": TARGET, "modeId": "default"}),
            _rpc("session/close", {"sessionId": TARGET}),
            _rpc("authenticate", {"methodId": "x"}), _rpc("no/such/method", {}),
            {"jsonrpc": "2.0", "id": 7, "result": {"outcome": {"outcome": "cancelled"}}}]


def _mcp_bodies(w: World) -> list[Any]:
    def call(name: str, arguments: Any) -> dict[str, Any]:
        return _rpc("tools/call", {"name": name, "arguments": arguments})
    return [_rpc("initialize", {"protocolVersion": MCP_VERSION, "capabilities": {},
                                "clientInfo": {"name": "f", "version": "1"}}),
            _rpc("ping"), _rpc("tools/list", {}), _rpc("notifications/initialized", id=None),
            call("start", {"name": "fuzz-run", "brief": "b", "goal": "g", "max_turns": 2, "cwd": str(w.work)}),
            call("status", {"name": "fuzz-run"}), call("stop", {"name": "fuzz-run"}), call("list", {}),
            call("await_resume", {"name": "fuzz-run", "timeout_s": 0}), _rpc("resources/list", {})]


def _signal_bodies(w: World) -> list[Any]:
    return [_rpc("initialize", {"protocolVersion": MCP_VERSION, "capabilities": {},
                                "clientInfo": {"name": "f", "version": "1"}}),
            _rpc("tools/list", {}), _rpc("ping"),
            _rpc("tools/call", {"name": "goal_reached", "arguments": {"summary": "s"}}),
            _rpc("tools/call", {"name": "need_help", "arguments": {"question": "q"}}),
            _rpc("tools/call", {"name": "start", "arguments": {"name": "x", "brief": "y"}})]


VOTE = [{"outcome": {"outcome": "selected", "optionId": "proceed_once"}}, {"outcome": {"outcome": "cancelled"}}]

ROUTES = [
    Route("health", "GET", "/health"),
    Route("capabilities", "GET", "/capabilities"),
    Route("list_sessions", "GET", "/session"),
    Route("create_session", "POST", "/session",
          bodies=lambda w: [{}, {"cwd": str(w.work)}, {"sessionId": "fuzz-new"}, {"sessionId": TARGET, "_meta": {}}]),
    Route("status", "GET", "/session/{sid}/status"),
    Route("close_session", "DELETE", "/session/{sid}"),
    Route("delete_sessions", "POST", "/sessions/delete",
          bodies=lambda w: [{"sessionIds": [TARGET]}, {"sessionIds": ["fuzz-gone", "../x", TARGET]}]),
    Route("prompt", "POST", "/session/{sid}/prompt", bodies=lambda w: [
        {"prompt": _prompt()}, {"prompt": _prompt(), "_meta": {"retry": True}},
        {"prompt": [{"type": "resource_link", "uri": "file:///x", "name": "x", "size": 3}]},
        {"prompt": [{"type": "resource", "resource": {"uri": "file:///x", "text": "t", "_meta": {}}}]},
        {"prompt": [{"type": "image", "data": "AAAA", "mimeType": "image/png"}]}]),
    Route("pending_prompts", "GET", "/session/{sid}/pending-prompts"),
    Route("remove_pending_prompt", "DELETE", "/session/{sid}/pending-prompts/{pid}"),
    Route("mid_turn_message", "POST", "/session/{sid}/mid-turn-message",
          bodies=lambda w: [{"message": "m"}, {"message": "m", "messageId": "mid-1"}]),
    Route("mid_turn_messages", "GET", "/session/{sid}/mid-turn-messages"),
    Route("remove_mid_turn_message", "DELETE", "/session/{sid}/mid-turn-messages/{uid}"),
    Route("cancel", "POST", "/session/{sid}/cancel"),
    Route("session_permission", "POST", "/session/{sid}/permission/{rid}", bodies=lambda w: VOTE),
    Route("permission", "POST", "/permission/{rid}", bodies=lambda w: VOTE),
    Route("rewind", "POST", "/session/{sid}/rewind", bodies=lambda w: [{"turn": 0}, {"turn": 3}]),
    Route("fork", "POST", "/session/{sid}/fork", bodies=lambda w: [{}, {"sessionId": "fuzz-fork"}]),
    Route("cwd", "POST", "/session/{sid}/cwd", bodies=lambda w: [{"cwd": str(w.work)}, {"cwd": "."}]),
    Route("model", "POST", "/session/{sid}/model", bodies=lambda w: [{"model": "m"}]),
    Route("title", "POST", "/session/{sid}/title",
          bodies=lambda w: [{"title": "fuzzed"}, {"title": ""}, {"title": None}]),
    Route("approval_mode", "POST", "/session/{sid}/approval-mode",
          bodies=lambda w: [{"mode": "default"}, {"mode": "plan"}]),
    Route("turn", "GET", "/session/{sid}/turns/{pid}"),
    Route("load", "POST", "/session/{sid}/load", bodies=lambda w: [{}, {"cwd": str(w.work)}]),
    Route("resume", "POST", "/session/{sid}/resume", bodies=lambda w: [{}, {"cwd": str(w.work)}]),
    Route("transcript", "GET", "/session/{sid}/transcript"),
    Route("openapi", "GET", "/openapi.json"),
    Route("permission_rules", "GET", "/session/{sid}/permissions"),
    Route("add_permission_rule", "POST", "/session/{sid}/permissions",
          bodies=lambda w: [{"effect": "allow", "rule": "Bash(echo:*)"}, {"effect": "deny", "rule": "Read(*.env)"}]),
    Route("remove_permission_rule", "DELETE", "/session/{sid}/permissions/{effect}?rule=Bash(echo:*)"),
    Route("explain_permission", "GET", "/session/{sid}/permissions/explain?tool=shell&input=%7B%7D"),
    Route("checkpoints", "GET", "/session/{sid}/checkpoints"),
    Route("checkpoint_diff", "GET", "/session/{sid}/checkpoints/{turn}/diff"),
    Route("checkpoint_undo", "POST", "/session/{sid}/checkpoints/undo/{uid}", bodies=lambda w: [{}, {"force": True}]),
    Route("events", "GET", "/session/{sid}/events"),
    Route("acp_post", "POST", "/acp", "acp", _acp_bodies),
    Route("acp_get", "GET", "/acp", "acp"),
    Route("acp_delete", "DELETE", "/acp", "acp"),
    Route("mcp_post", "POST", "/mcp", "mcp", _mcp_bodies),
    Route("mcp_get", "GET", "/mcp", "mcp"),
    Route("mcp_delete", "DELETE", "/mcp", "mcp"),
    Route("signal_post", "POST", "/signal/mcp/{token}", "signal", _signal_bodies),
    Route("signal_get", "GET", "/signal/mcp/{token}", "signal"),
    Route("signal_delete", "DELETE", "/signal/mcp/{token}", "signal"),
]


# ------------------------------------------------------------------ bodies


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a (small) JSON value, the root included."""
    out = [here]
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, here + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out += _paths(item, here + (index,))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return copy


def _remove(value: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(value))
    parent = copy
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return copy


def string_places(value: Any) -> list[tuple[Any, ...]]:
    """Every place in a (small) JSON value that holds a string: the string fields of a body."""
    out = []
    for path in _paths(value):
        item = value
        for step in path:
            item = item[step]
        if isinstance(item, str):
            out.append(path)
    return out


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def spliced(original: str, control: str, how: str) -> str:
    """``original`` with ``control`` put in: before, in the middle, after it, instead of it, or between
    each of its characters."""
    middle = len(original) // 2
    return {"prefix": control + original, "middle": original[:middle] + control + original[middle:],
            "suffix": original + control, "replace": control,
            "every": control.join(original) if original else control}[how]


SPLICES = ["prefix", "middle", "suffix", "replace", "every"]


def encode(value: Any, raw_unicode: bool = False) -> bytes:
    text = json.dumps(value, ensure_ascii=not raw_unicode)
    data = text.encode("utf-8", "surrogatepass")  # a lone surrogate stays: invalid UTF-8, as a hostile client sends
    for token, spliced in SPLICE.items():
        data = data.replace(json.dumps(token).encode(), spliced)
    return data


small_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


@st.composite
def body(draw: Any, templates: list[Any]) -> tuple[bytes, bool]:
    """A body and whether it is the oversize one (sent truncated)."""
    kind = draw(st.sampled_from(["empty", "template", "mutated", "mutated", "mutated", "extra", "missing",
                                 "nest", "json", "raw", "oversize", "control", "control"]))
    template = draw(st.sampled_from(templates))
    if kind == "control":  # control characters in one string field of the template, or in all of them
        places = string_places(template)
        if not places:
            kind = "mutated"
        else:
            value = template
            chosen = places if draw(st.integers(0, 4)) == 0 else [draw(st.sampled_from(places))]
            for place in chosen:
                value = _replace(value, place, spliced(_at(value, place), draw(st.sampled_from(CONTROL)),
                                                       draw(st.sampled_from(SPLICES))))
            return encode(value, raw_unicode=draw(st.booleans())), False
    if kind == "empty" or (template is None and kind in ("template", "mutated", "extra", "missing")):
        return b"", False
    if kind == "oversize":
        return b"{\"a\": \"" + b"x" * (64 * 1024), True
    if kind == "raw":
        return draw(st.sampled_from(RAW_BODIES)), False
    if kind == "json":
        return encode(draw(small_json)), False
    value = template
    if kind == "mutated":
        places = _paths(template)
        value = _replace(template, draw(st.sampled_from(places)), draw(st.sampled_from(HOSTILE)))
    elif kind == "nest" and isinstance(template, dict):  # deep free-form JSON where objects go (_meta first)
        place = draw(st.sampled_from([("_meta",)] * 2 + [("params", "_meta")] + _paths(template)[1:]))
        deep = draw(st.sampled_from([DEEP_DICT, DEEP_DICT, DEEP_LIST, nested(40, "dict")]))
        value = _replace(template, place, deep) if len(place) == 1 or isinstance(template.get(place[0]), dict) \
            else {**template, "_meta": deep}
    elif kind == "extra" and isinstance(template, dict):
        value = {**template, draw(st.sampled_from(["bogus", "_meta", "", "x" * 3000, "id"])): draw(
            st.sampled_from(HOSTILE))}
    elif kind == "missing":
        value = _remove(template, draw(st.sampled_from(_paths(template))))
    return encode(value, raw_unicode=draw(st.booleans())), False


# ------------------------------------------------------------------ the request line and headers


def good_target(route: Route, world: World) -> bytes:
    """The route's path with the ids the fuzzer was given, so that the rest of the case reaches the handler."""
    fill = {"{sid}": TARGET, "{pid}": world.prompt_id, "{rid}": "perm-1", "{token}": world.signal_token,
            "{effect}": "allow", "{turn}": "0", "{uid}": "ck-none"}
    path = route.path
    for placeholder, value in fill.items():
        path = path.replace(placeholder, value)
    return path.encode()


@st.composite
def target(draw: Any, route: Route, world: World, hostile: bool = True) -> bytes:
    if not hostile:
        return good_target(route, world)
    fill = {
        "{sid}": draw(st.sampled_from([TARGET.encode()] * len(SEGMENTS) + SEGMENTS)),
        "{pid}": draw(st.sampled_from([world.prompt_id.encode(), b"current"] * 4 + SEGMENTS)),
        "{rid}": draw(st.sampled_from([b"perm-1"] * 4 + SEGMENTS)),
        "{token}": draw(st.sampled_from([world.signal_token.encode()] * len(SEGMENTS) + SEGMENTS + [b""])),
        "{effect}": draw(st.sampled_from([b"allow", b"deny"] * 4 + SEGMENTS)),
        "{turn}": draw(st.sampled_from([b"0", b"1"] * 4 + SEGMENTS)),
        "{uid}": draw(st.sampled_from([b"ck-none"] * 4 + SEGMENTS)),
    }
    path = route.path.encode()
    for placeholder, value in fill.items():
        path = path.replace(placeholder.encode(), value)
    path += draw(st.sampled_from([b""] * 12 + [b"/", b"/extra", b"//", b"/%2e%2e/%2e%2e/health"]))
    pairs = draw(st.lists(st.tuples(st.sampled_from(QUERY_KEYS), st.sampled_from(QUERY_VALUES)), max_size=3))
    if pairs and draw(st.booleans()):
        path += b"?" + b"&".join(k + b"=" + v for k, v in pairs)
    return path


def _session_headers(route: Route, world: World) -> list[list[tuple[bytes, bytes]]]:
    """The ids a JSON-RPC route needs, mostly right (each list is one choice)."""
    if route.kind == "acp":
        good = [(b"Acp-Connection-Id", world.acp.encode())]
        return [good] * 6 + [[], [(b"Acp-Connection-Id", b"nope")], good + [(b"Acp-Session-Id", TARGET.encode())],
                             good + [(b"Acp-Session-Id", b"x" * 5000)], [(b"Acp-Connection-Id", b"x" * 8000)]]
    if route.kind in ("mcp", "signal"):
        session = world.mcp if route.kind == "mcp" else world.signal_mcp
        good = [(b"Mcp-Session-Id", session.encode())]
        return [good] * 6 + [[], [(b"Mcp-Session-Id", b"nope")], good + [(b"MCP-Protocol-Version", b"1999-01-01")],
                             good + [(b"MCP-Protocol-Version", MCP_VERSION.encode())]]
    return [[]]


EXTRA_HEADERS: list[tuple[bytes, bytes]] = [
    (b"Content-Type", b"application/json"), (b"Content-Type", b"text/plain"),
    (b"Content-Type", b"application/x-www-form-urlencoded"), (b"Content-Type", b"multipart/form-data; boundary=zz"),
    (b"Content-Type", b"application/json; charset=utf-16"), (b"Content-Type", b"\xff\xfe"),
    (b"Last-Event-ID", b"7" * 5000), (b"Last-Event-ID", b"-1"), (b"Last-Event-ID", b"\xc2\xb2"),
    (b"X-Qwen-Client-Id", b"nope"), (b"X-Qwen-Event-Epoch", b"x" * 3000), (b"Origin", b"http://evil.example"),
    (b"Origin", b"null"), (b"Expect", b"100-continue"), (b"Connection", b"close"), (b"Accept", b"\x01\xff"),
    (b"Content-Encoding", b"gzip"), (b"Range", b"bytes=0-1"), (b"Cookie", b"a=" + b"b" * 4000),
    (b"Host", b"evil.example"), (b"X-Obs-Text", b"\x80\xfe\xff"), (b"X-Long", b"l" * 8000),
    (b"Accept-Encoding", b"br, gzip, *;q=0"),
]
WEBSOCKET = [(b"Connection", b"Upgrade"), (b"Upgrade", b"websocket"), (b"Sec-WebSocket-Version", b"13"),
             (b"Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ==")]


def good_headers(route: Route, world: World) -> list[tuple[bytes, bytes]]:
    """The right token, a JSON body, and the ids a JSON-RPC route needs."""
    return [(b"Authorization", b"Bearer " + world.token.encode()), (b"Content-Type", b"application/json")] \
        + _session_headers(route, world)[0]


@st.composite
def headers(draw: Any, route: Route, world: World, hostile: bool = True) -> list[tuple[bytes, bytes]]:
    good = (b"Authorization", b"Bearer " + world.token.encode())
    if not hostile:
        return good_headers(route, world)
    auth = draw(st.sampled_from([[good]] * 8 + [[], [(b"Authorization", b"Bearer wrong")],
                                                [(b"Authorization", b"Basic " + world.token.encode())],
                                                [(b"Authorization", b"Bearer " + b"t" * 5000)],
                                                [(b"Authorization", b"bearer  " + world.token.encode())]]))
    out = auth + draw(st.sampled_from(_session_headers(route, world)))
    out += draw(st.lists(st.sampled_from(EXTRA_HEADERS), max_size=3, unique_by=lambda h: h[0]))
    if draw(st.integers(0, 30)) == 0:
        out += WEBSOCKET
    if draw(st.integers(0, 40)) == 0:
        out += [(b"X-Many-%d" % i, b"v") for i in range(100)]
    return out


# ------------------------------------------------------------------ framing hypercorn refuses

FRAMING: list[tuple[Any, ...]] = [  # (method, target, headers[, a body that completes the message])
    (b"GET", b"/health with space", []), (b"GET", b"/\xff\xfe", []), (b"GET", b"/session/\xc3\xa9/status", []),
    (b"GET", b"/session/fuzz-target/events?maxQueued=" + "١٦".encode(), []), (b"GET", b"/" + b"p" * 20_000, []),
    (b"GET", b"*", []), (b"GET", b"http://evil.example/health", []), (b"GET", b"health", []),
    (b"POST", b"/session", [(b"Content-Length", b"-1")]), (b"POST", b"/session", [(b"Content-Length", b"abc")]),
    (b"POST", b"/session", [(b"Content-Length", b"2"), (b"Content-Length", b"3")]),
    (b"POST", b"/session", [(b"Content-Length", b"2"), (b"Transfer-Encoding", b"chunked")], b"2\r\n{}\r\n0\r\n\r\n"),
    (b"GET", b"/health", [(b"Host", b"a"), (b"Host", b"b")]),
    (b"GET", b"/health", [(b"Bad Header", b"x")]), (b"GET", b"/health", [(b"X-Nul", b"a\x00b")]),
    (b"GET", b"/health", [(b"X-Big", b"b" * 20_000)]), (b"GET", b"/health", [(b"", b"empty name")]),
    (b"POST", b"/session", [(b"Transfer-Encoding", b"gzip")]), (b"CONNECT", b"127.0.0.1:1", []),
]


@st.composite
def case(draw: Any, route: Route, world: World) -> Case:
    """One hostile case. Most change one part of a good request (so that the rest reaches the code that
    parses that part); some change everything at once; a few are not HTTP at all."""
    focus = draw(st.sampled_from(["body"] * 4 + ["method", "target", "headers", "all", "all", "framing"]))
    if focus == "framing":
        method, path, extra, *data = draw(st.sampled_from(FRAMING))
        auth = [(b"Authorization", b"Bearer " + world.token.encode())]
        return Case(route.name, route.kind, method, path, tuple(auth + extra), data[0] if data else b"",
                    framing=True)
    if focus in ("method", "all"):
        method = draw(st.sampled_from([route.method.encode()] * len(METHODS) + METHODS))
    else:
        method = route.method.encode()
    if focus in ("body", "all"):
        data, truncated = draw(body(route.bodies(world)))
    else:
        template = draw(st.sampled_from(route.bodies(world)))
        data, truncated = (b"" if template is None else encode(template)), False
    chunked = bool(data) and not truncated and draw(st.integers(0, 8)) == 0
    hdrs = draw(headers(route, world, hostile=focus in ("headers", "all")))
    if truncated:
        hdrs.append((b"Content-Length", str(MAX_BODY + 1).encode()))
    elif chunked:
        hdrs.append((b"Transfer-Encoding", b"chunked"))
    path = draw(target(route, world, hostile=focus in ("target", "all")))
    return Case(route.name, route.kind, method, path, tuple(hdrs), data, chunked=chunked, truncated=truncated)


def control_cases(route: Route, world: World) -> list[Case]:
    """Every string field of every body template of ``route``, one at a time: a NUL in the middle of its
    value, and another control character (taken in turn from :data:`CONTROL`) put in another way; the
    rest of the request is the route's good one."""
    out = []
    turn = 0
    for template in route.bodies(world):
        if template is None:
            continue
        for place in string_places(template):
            original = _at(template, place)
            for control, how in (("\x00", "middle"), (CONTROL[1 + turn % (len(CONTROL) - 1)],
                                                        SPLICES[turn % len(SPLICES)])):
                data = encode(_replace(template, place, spliced(original, control, how)), raw_unicode=turn % 2 == 1)
                out.append(Case(route.name, route.kind, route.method.encode(), good_target(route, world),
                                tuple(good_headers(route, world)), data))
                turn += 1
    return out
