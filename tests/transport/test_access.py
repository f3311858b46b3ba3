"""The one access decision (transport/access.py): its table, row by row, and that nothing else decides."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from transport.access import AccessPolicy, Allowed, Preflight, Refused, decide
from transport.hosts import HostPolicy

TOKEN = b"s3cret"
PORT = 4170
HOST = f"127.0.0.1:{PORT}"
TRANSPORT = Path(__file__).resolve().parents[2] / "transport"


def policy(*, token: bytes | None = TOKEN, origins: tuple[str, ...] = ()) -> AccessPolicy:
    hosts = HostPolicy(names=("127.0.0.1",))
    hosts.bind([f"http://127.0.0.1:{PORT}"])
    return AccessPolicy(token, hosts, origins)


def ask(p: AccessPolicy, method: str, path: str, **headers: str) -> object:
    given = {name.lower().replace("_", "-"): value for name, value in headers.items()}
    return decide(p, method, path, lambda name: given.get(name.lower()))


def test_a_host_that_is_not_the_daemon_is_refused_before_anything_else():
    # Even with a good token, an allowed origin and an open path: DNS rebinding reaches nothing.
    for path in ("/health", "/openapi.json", "/session", "/signal/mcp/abc"):
        decision = ask(policy(origins=("http://evil.example",)), "GET", path, host="evil.example:4170",
                       origin="http://evil.example", authorization="Bearer s3cret")
        assert decision == Refused(421, decision.message, "misdirected_host", "header.Host")
        assert "evil.example:4170" in decision.message
    assert ask(policy(), "GET", "/health").code == "misdirected_host"  # no Host at all


def test_an_origin_not_allowed_is_refused_and_an_allowed_one_is_echoed():
    refused = ask(policy(), "POST", "/session", host=HOST, origin="http://evil.example",
                  authorization="Bearer s3cret")
    assert isinstance(refused, Refused) and (refused.status, refused.code) == (403, "origin_not_allowed")
    own = f"http://{HOST}"  # same-origin with the daemon
    assert ask(policy(), "POST", "/session", host=HOST, origin=own, authorization="Bearer s3cret") == Allowed(own)
    listed = "https://app.example"
    assert ask(policy(origins=(listed,)), "GET", "/session", host=HOST, origin=listed,
               authorization="Bearer s3cret") == Allowed(listed)


def test_a_preflight_of_an_allowed_origin_needs_no_token():
    assert ask(policy(), "OPTIONS", "/session", host=HOST, origin=f"http://{HOST}") == Preflight(f"http://{HOST}")
    # Without an Origin an OPTIONS request is an ordinary request: it needs the token.
    assert ask(policy(), "OPTIONS", "/session", host=HOST).code == "unauthorized"


@pytest.mark.parametrize("method, path", [("GET", "/health"), ("GET", "/openapi.json"), ("GET", "/"), ("HEAD", "/"),
                                          ("POST", "/signal/mcp/some-run-token"), ("POST", "/signal/mcp")])
def test_open_and_signal_paths_need_no_bearer_token(method: str, path: str):
    assert ask(policy(), method, path, host=HOST) == Allowed()


@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Bearer wrong", "Basic czNjcmV0", "s3cret",
                                           "Bearer s3cret2", "Bearer  s3cre"])
def test_a_missing_or_wrong_token_is_refused_with_a_bearer_challenge(authorization: str | None):
    headers = {"host": HOST} | ({} if authorization is None else {"authorization": authorization})
    decision = ask(policy(), "POST", "/session/s-1/prompt", **headers)
    assert isinstance(decision, Refused)
    assert (decision.status, decision.code, decision.path) == (401, "unauthorized", "header.Authorization")
    assert decision.headers == (("WWW-Authenticate", "Bearer"),)


def test_the_right_token_is_allowed_in_any_scheme_case_and_an_open_app_needs_none():
    for authorization in ("Bearer s3cret", "bearer s3cret", "BEARER  s3cret "):
        assert ask(policy(), "POST", "/session/s-1/prompt", host=HOST, authorization=authorization) == Allowed()
    assert ask(policy(token=None), "POST", "/session/s-1/prompt", host=HOST) == Allowed()
    # A UI path is open for reading only.
    assert ask(policy(), "POST", "/", host=HOST).code == "unauthorized"


def test_a_refused_token_from_an_allowed_origin_is_still_echoed_so_the_page_can_read_why():
    decision = ask(policy(), "GET", "/session", host=HOST, origin=f"http://{HOST}")
    assert isinstance(decision, Refused) and decision.status == 401 and decision.cors_origin == f"http://{HOST}"


def test_without_a_host_policy_hosts_are_not_checked():
    bare = AccessPolicy(TOKEN)
    assert ask(bare, "GET", "/session", authorization="Bearer s3cret") == Allowed()
    assert ask(bare, "GET", "/session", origin="http://x.example").code == "origin_not_allowed"


def _calls(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_no_module_of_the_http_edge_decides_access_but_access_py():
    # The checks of Host, Origin and token are called from transport/access.py alone: a second decision
    # (a fast path's own checks) would skip whatever is added to the first.
    deciding = {"bearer_matches", "allows", "allows_origin", "origin_allowed", "compare_digest"}
    offenders = {}
    for path in TRANSPORT.rglob("*.py"):
        if path.name in ("access.py", "hosts.py") or path.name.startswith("fake_"):
            continue
        found = _calls(ast.parse(path.read_text())) & deciding
        if found:
            offenders[str(path.relative_to(TRANSPORT))] = sorted(found)
    assert not offenders, offenders
    callers = [p.relative_to(TRANSPORT) for p in TRANSPORT.rglob("*.py") if "decide" in _calls(ast.parse(p.read_text()))]
    assert [str(p) for p in callers] == ["app.py"]


def test_the_open_paths_are_those_the_table_names_and_no_others():
    from transport import access

    assert access.OPEN_PATHS == {"/health", "/openapi.json"}
    table_row = next(line for line in access.__doc__.splitlines() if line.strip().startswith("open path"))
    assert all(path in table_row for path in access.OPEN_PATHS), table_row
    # Only the exact paths: a neighbour of one is not open.
    for path in ("/openapi.json/x", "/openapi.jsonx", "/health/x"):
        assert ask(policy(), "GET", path, host=HOST).code == "unauthorized"
