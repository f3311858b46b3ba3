"""The OpenAPI document (transport/openapi.py): valid OpenAPI 3.1, generated from the wire classes, and
naming every REST route — those docs/protocol.md lists and those the app registers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from openapi_spec_validator import validate

from actors import open_daemon
from actors.model import ScriptedModel
from actors.wire import answers, event_data
from transport.app import create_app
from transport.openapi import openapi_document

PROTOCOL = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
# Routes that are not part of the REST API: the browser UI's files, and the signal route without a token.
NOT_REST = ("/", "/ui/", "/signal/mcp")
PARAM_NAMES = {"session_id": "sessionId", "prompt_id": "promptId", "request_id": "requestId", "message_id": "messageId",
               "task_id": "taskId", "selector": "workspace"}


def test_the_document_is_valid_openapi_3_1():
    document = openapi_document()
    assert document["openapi"] == "3.1.0"
    validate(document)


def test_the_document_is_built_without_a_daemon_and_is_the_same_each_time():
    assert openapi_document() == openapi_document()


def test_the_open_operations_need_no_token_and_the_others_the_bearer_token():
    document = openapi_document()
    assert document["security"] == [{"bearer": []}]
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    open_ = {(m, p) for p, item in document["paths"].items() for m, op in item.items() if op.get("security") == []}
    signal = {(m, "/signal/mcp/{token}") for m in ("get", "post", "delete")}  # the run's token is in the path
    assert open_ == {("get", "/health"), ("get", "/openapi.json"), *signal}
    for path, item in document["paths"].items():
        for method, op in item.items():
            assert ("401" in op["responses"]) == ((method, path) not in open_ and path not in ("/acp", "/mcp")), \
                (method, path)


def _doc_routes() -> set[tuple[str, str]]:
    """(method, OpenAPI path) of every row of docs/protocol.md's Routes table."""
    text = PROTOCOL.read_text()
    assert "\n## Routes\n" in text, "docs/protocol.md has no '## Routes' section: point this test at the routes table"
    table = text.split("\n## Routes\n", 1)[1].split("\n## ", 1)[0]
    routes: set[tuple[str, str]] = set()
    for line in table.splitlines():
        cells = re.split(r"(?<!\\)\|", line)
        if len(cells) < 3 or not cells[1].strip().startswith("`"):
            continue
        first, *more = re.findall(r"`([^`]+)`", cells[1])  # `GET /brand`, `/daemon/status`, ...: one method
        methods, _, path = first.partition(" ")
        if methods == "any":
            methods = "GET|POST|DELETE"  # /signal/mcp/<token>: JSON-RPC, as /acp and /mcp
        for method in methods.replace("\\|", "|").split("|"):
            for one in (path, *more):
                routes.add((method.lower(), one.split(" ")[-1]))  # `GET /`, `GET /ui/<file>`: the path
    out = set()
    for method, path in routes:
        if path.startswith("/ui/") or path == "/":
            continue
        path = re.sub(r":(\w+)", r"{\1}", path.replace(":id", ":sessionId"))
        for one in _expand(path):
            out.add((method, one))
    return out


def _expand(path: str) -> list[str]:
    """``/workspace[s]/x`` is both ``/workspace/x`` and ``/workspaces/x``."""
    if "[s]" in path:
        return [path.replace("[s]", ""), path.replace("[s]", "s")]
    return [path]


def test_every_route_protocol_md_lists_is_in_the_document():
    document = openapi_document()
    listed = _doc_routes()
    assert ("post", "/session/{sessionId}/prompt") in listed and ("get", "/brand") in listed  # the parse works
    missing = sorted(f"{m.upper()} {p}" for m, p in listed if m not in document["paths"].get(p, {}))
    assert not missing, f"docs/protocol.md lists routes the OpenAPI document lacks: {missing}"


def _openapi_path(rule: str) -> str:
    return re.sub(r"<(?:\w+:)?(\w+)>", lambda m: "{" + PARAM_NAMES.get(m[1], m[1]) + "}", rule)


async def test_every_rest_route_the_app_registers_is_in_the_document(tmp_path: Path):
    document = openapi_document()
    async with open_daemon(model=ScriptedModel(), state_dir=tmp_path) as daemon:
        app = create_app(daemon, token="t")
        registered = set()
        for rule in app.url_map.iter_rules():
            path = _openapi_path(rule.rule)
            if rule.endpoint == "static" or path in ("/", "/ui/{name}", "/signal/mcp", "/signal/mcp/"):
                continue
            # The signal route takes every method so that a token is resolved before the method is looked at
            # (an unknown token is a 404 whatever the method); PUT and PATCH then answer 405.
            unserved = {"PUT", "PATCH"} if path == "/signal/mcp/{token}" else set()
            for method in rule.methods - {"HEAD", "OPTIONS"} - unserved:
                registered.add((method.lower(), path))
    missing = sorted(f"{m.upper()} {p}" for m, p in registered if m not in document["paths"].get(p, {}))
    assert not missing, f"routes the app serves that the document lacks (add them to transport/openapi.py): {missing}"
    extra = sorted(f"{m.upper()} {p}" for p, item in document["paths"].items() for m in item
                   if (m, p) not in registered)
    assert not extra, f"the OpenAPI document names routes the app does not serve: {extra}"


def test_every_error_code_the_transport_raises_is_in_the_error_schema():
    transport = Path(__file__).resolve().parents[2] / "transport"
    raised = set()
    for source in transport.rglob("*.py"):
        for match in re.finditer(r"HttpError\(\s*\d{3},[^\n]*?\"([a-z_]+)\"", source.read_text()):
            raised.add(match[1])
    codes = set(openapi_document()["components"]["schemas"]["ErrorBody"]["properties"]["code"]["enum"])
    assert raised and raised <= codes, sorted(raised - codes)
    assert set(answers.ERROR_CODES) | {answers.FRAMEWORK_CODE} == codes


def test_every_event_type_has_a_frame_schema_and_the_stream_names_them_all():
    document = openapi_document()
    stream = document["paths"]["/session/{sessionId}/events"]["get"]["responses"]["200"]
    assert set(stream["x-sse-events"]) == set(event_data.EVENT_DATA)
    frames = stream["content"]["text/event-stream"]["schema"]["oneOf"]
    assert len(frames) == len(event_data.EVENT_DATA)
    schemas = document["components"]["schemas"]
    for ref in (f["$ref"] for f in frames):
        assert ref.rsplit("/", 1)[1] in schemas


@pytest.mark.parametrize("name", ["PromptBody", "CreateSessionBody", "TextBlock"])
def test_request_bodies_are_closed_and_bounded_as_the_converter_is(name: str):
    schema = openapi_document()["components"]["schemas"][name]
    assert schema["additionalProperties"] is False
    if name == "TextBlock":
        assert schema["properties"]["text"]["maxLength"] == 1_000_000
        assert schema["properties"]["type"]["const"] == "text"
    if name == "CreateSessionBody":
        assert "_meta" in schema["properties"] and "meta" not in schema["properties"]
