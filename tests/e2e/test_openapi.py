"""The OpenAPI document against the real daemon: every operation driven by schemathesis, every answer checked.

A ``python -m transport`` subprocess (scripted model, loopback port 0) answers requests schemathesis
generates from ``GET /openapi.json``: each answer's status must be documented, its content type and
headers as documented, its body valid against the generated schema, and nothing may be a server
error the document does not name. The seed is fixed (hypothesis ``derandomize``) and the examples
few, so the run is the same each time and short.

Session routes are pointed at one live session (``SID``, started again before each request if a
generated ``DELETE`` closed it), so their success answers are checked, not only their 404s. The
event stream never ends on a live session, so schemathesis does not drive it; a plain test reads its
first frames and checks each against its event type's schema. The JSON-RPC transports' streams
(``GET /acp``, ``GET /mcp``) are left out for the same reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from tests.sync_daemon import Daemon, text, wait_turn
from transport.openapi import openapi_document

SID = "openapi-fuzz"
STREAMS = {("GET", "/session/{sessionId}/events"), ("GET", "/acp"), ("GET", "/mcp")}  # never end on their own
EXAMPLES = 8  # per operation and mode: about 700 requests in all
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
NEGATIVE_CHECKS = [negative_data_rejection, ignored_auth]  # invalid input is refused, the token is not ignored


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("openapi"))
    d.start([[{"text": f"answer {i}"}] for i in range(200)])
    try:
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="module")
def client(daemon: Daemon) -> Iterator[httpx.Client]:
    with daemon.client() as c:
        assert c.post("/session", json={"sessionId": SID}).status_code == 200
        yield c


@pytest.fixture(scope="module")
def api(daemon: Daemon) -> schemathesis.BaseSchema:
    served = httpx.get(f"{daemon.url}/openapi.json", trust_env=False, timeout=10)  # no token: an open path
    assert served.status_code == 200, served.text
    token = (daemon.state / "token").read_text().strip()
    # The token through the document's own security scheme, on every case: invalid input goes into the
    # parameters and bodies (the ignored_auth check asks without the token and with a wrong one).
    config = schemathesis.Config.from_dict({"base-url": daemon.url,
                                            "auth": {"openapi": {"bearer": {"bearer": token}}},
                                            "generation": {"with-security-parameters": False}})
    return schemathesis.openapi.from_dict(served.json(), config=config)


def test_the_fuzzed_daemon_works_in_no_repository(client: httpx.Client):
    """The fuzzed requests include the Web Shell's git actions (checkout, commit), which act on the workspace:
    it must not be the directory the tests run in, this project's repository (a fuzzed commit once landed there)."""
    assert client.get("/workspace/git/branches").json()["available"] is False


def _breakable(operation: dict[str, Any]) -> bool:
    """Whether an operation has input that can be made invalid: a body, a query parameter, or a parameter
    the schema constrains (the session id is fixed, the token is always sent)."""
    constrained = {"pattern", "enum", "minimum", "maximum"}
    return "requestBody" in operation or any(
        p["in"] == "query" or (p["name"] != "sessionId" and constrained & set(p["schema"]))
        for p in operation.get("parameters", ()))


def _operations() -> list[tuple[str, str, GenerationMode]]:
    """Every operation but the streams, with valid input, and with invalid input where it has some to break."""
    out = []
    for path, item in openapi_document()["paths"].items():
        for method, operation in item.items():
            if (method.upper(), path) in STREAMS:
                continue
            out.append((method.upper(), path, GenerationMode.POSITIVE))
            if _breakable(operation):
                out.append((method.upper(), path, GenerationMode.NEGATIVE))
    return out


OPERATIONS = _operations()


@pytest.mark.parametrize("method, path, mode", OPERATIONS, ids=[f"{m} {p} {g.value}" for m, p, g in OPERATIONS])
def test_every_answer_conforms_to_the_document(method: str, path: str, mode: GenerationMode,
                                               api: schemathesis.BaseSchema, daemon: Daemon, client: httpx.Client):
    operation = api[path][method]
    on_session = "{sessionId}" in path
    fixed = {"sessionId": SID} if on_session else {}
    if "{workspace}" in path and mode is GenerationMode.POSITIVE:  # a workspace there is, not only 404s
        fixed["workspace"] = client.get("/capabilities").json()["workspaces"][0]["id"]
    checks = CHECKS + (NEGATIVE_CHECKS if mode is GenerationMode.NEGATIVE else [])

    @given(case=operation.as_strategy(mode, path_parameters=fixed or None))
    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    def answers_conform(case: schemathesis.Case) -> None:
        if on_session:  # a generated DELETE may have closed it: attach to it again (or restore it)
            attached = client.post("/session", json={"sessionId": SID})
            assert attached.status_code == 200, attached.text
            if mode is GenerationMode.POSITIVE and "X-Qwen-Client-Id" in (case.headers or {}):
                case.headers["X-Qwen-Client-Id"] = attached.json()["clientId"]  # one it handed out: valid
        case.call_and_validate(checks=checks, timeout=30)

    answers_conform()


# --------------------------------------------------------------------------- the event stream


def _registry(document: dict[str, Any]) -> Registry:
    """The document as a JSON Schema resource, so ``urn:openapi#/components/...`` references resolve."""
    return Registry().with_resource("urn:openapi", DRAFT202012.create_resource(document))


def _rebased(schema_: dict[str, Any]) -> dict[str, Any]:
    """``schema_`` with its ``#/components/...`` references pointed into the registered document."""
    return json.loads(json.dumps(schema_).replace('"#/components/', '"urn:openapi#/components/'))


def _frames(response: httpx.Response) -> Iterator[tuple[str | None, dict[str, Any]]]:
    """Each SSE frame's ``event:`` field and its ``data:`` line, parsed."""
    event, data = None, None
    for line in response.iter_lines():
        if line == "":
            if data is not None:
                yield event, json.loads(data)
            event, data = None, None
        elif line.startswith("event: "):
            event = line[len("event: "):]
        elif line.startswith("data: "):
            data = line[len("data: "):]


def test_event_frames_conform_to_their_event_types(client: httpx.Client):
    document = openapi_document()
    registry = _registry(document)
    stream = document["paths"]["/session/{sessionId}/events"]["get"]["responses"]["200"]
    frame_check = jsonschema.Draft202012Validator(_rebased(stream["content"]["text/event-stream"]["schema"]),
                                                  registry=registry)
    by_type = stream["x-sse-events"]
    sid = client.post("/session", json={}).json()["sessionId"]
    prompt_id = client.post(f"/session/{sid}/prompt", json=text("hello")).json()["promptId"]
    wait_turn(client, sid, prompt_id)
    client.post(f"/session/{sid}/title", json={"title": "checked frames"})
    client.post(f"/session/{sid}/approval-mode", json={"mode": "plan"})
    seen: dict[str, int] = {}
    with client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-qwen-event-epoch"]  # the header the document names
        for event, frame in _frames(response):
            assert event == frame["type"] and event in by_type, (event, frame)
            frame_check.validate(frame)
            jsonschema.Draft202012Validator(_rebased(by_type[event]), registry=registry).validate(frame["data"])
            seen[event] = seen.get(event, 0) + 1
            if event == "replay_complete":  # the replay is checked: now live events, to the stream's end
                client.post(f"/session/{sid}/prompt", json=text("again"))
            elif event == "turn_complete" and "replay_complete" in seen:  # the live turn ended: close
                assert client.delete(f"/session/{sid}").status_code == 204
    # The replayed turn, the title's and mode's updates, the marker, a live turn and the terminal frame.
    assert {"session_update", "turn_complete", "replay_complete", "session_closed"} <= set(seen), seen
    assert seen["session_update"] >= 3 and seen["turn_complete"] == 2, seen


def test_the_document_is_served_without_a_token_and_is_the_generated_one(daemon: Daemon):
    answer = httpx.get(f"{daemon.url}/openapi.json", trust_env=False, timeout=10)
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    assert answer.json() == json.loads(json.dumps(openapi_document()))
