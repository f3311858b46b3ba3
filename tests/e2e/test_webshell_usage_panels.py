"""qwen's Web Shell (0.24.4) Context Usage and Token Usage panels: ``GET /session/:id/context-usage`` and
``GET /session/:id/stats`` in qwen serve's shapes, filled from the session's ``GET /session/:id/status``
(``context``, ``usage``). The real daemon on a loopback port with a scripted model.

What the shell reads (from its bundle): the Context Usage panel shows ``usage.totalTokens`` of
``usage.contextWindowSize`` (a size of 0 makes it show nothing), ``breakdown.{systemPrompt, builtinTools, mcpTools,
memoryFiles, skills, freeSpace, autocompactBuffer}`` and ``isEstimated``; the Token Usage panel lists each entry of
``models`` with ``api.totalRequests > 0`` by its ``tokens.{prompt, candidates, total, cached, thoughts}``, and the
Session Stats panel reads ``tools`` and ``files`` totals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import jsonschema
import trio
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from actors import load_script
from actors.wire import answers
from actors.wire.schema import REF_PREFIX, schemas_of
from tests.conftest import live_daemon
from tests.transport.test_webshell_routes import TOKEN, served, wait_turn

DEFS = schemas_of(answers.SessionContextUsage, answers.SessionStats)
REGISTRY = Registry().with_resource("urn:wire", DRAFT202012.create_resource({"components": {"schemas": DEFS}}))


def conforms(cls: type, body: dict[str, Any]) -> None:
    schema = {"$ref": "urn:wire#" + REF_PREFIX[1:] + cls.__name__}
    jsonschema.Draft202012Validator(schema, registry=REGISTRY).validate(body)


def prompt(text: str) -> dict[str, Any]:
    return {"prompt": [{"type": "text", "text": text}], "eventDetailMode": "summary",
            "_meta": {"qwen.submittedPrompt": text}}


def shell_create(cwd: Path) -> dict[str, Any]:
    return {"cwd": str(cwd), "sessionScope": "thread", "approvalMode": "default", "sourceType": "default"}


def shown_models(stats: dict[str, Any]) -> list[str]:
    """The models the Token Usage panel lists (else it says there is no data)."""
    return [name for name, m in stats["models"].items() if m["api"]["totalRequests"] > 0]


async def test_the_panels_read_the_sessions_usage_and_context_as_its_status_has_them(tmp_path):
    model = load_script([[{"text": "first"}, {"usage": {"prompt_tokens": 900, "completion_tokens": 40,
                                                        "cached_tokens": 300}}],
                         [{"text": "second"}, {"usage": {"prompt_tokens": 1000, "completion_tokens": 60}}]])
    model.context_window = 32_000  # as a configured model.contextWindow
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]

            # Before any model call: no usage yet, the overhead the first request will carry.
            r = await client.get(f"/session/{sid}/context-usage")
            assert r.status_code == 200, r.text
            body = r.json()
            conforms(answers.SessionContextUsage, body)
            status = (await client.get(f"/session/{sid}/status")).json()
            assert body["usage"]["totalTokens"] == 0 and body["usage"]["isEstimated"] is True
            assert body["usage"]["breakdown"]["systemPrompt"] == status["context"]["baseTokens"]
            r = await client.get(f"/session/{sid}/stats")
            assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
            conforms(answers.SessionStats, r.json())
            assert shown_models(r.json()) == []  # "no data yet"

            for text in ("one", "two"):
                admitted = (await client.post(f"/session/{sid}/prompt", json=prompt(text))).json()
                await wait_turn(client, sid, admitted["promptId"])
            status = (await client.get(f"/session/{sid}/status")).json()
            usage, context = status["usage"], status["context"]

            r = await client.get(f"/session/{sid}/stats")
            stats = r.json()
            conforms(answers.SessionStats, stats)
            assert stats["sessionId"] == sid and stats["workspaceCwd"] == status["workspaceCwd"]
            assert shown_models(stats) == [status["modelName"]]
            [entry] = stats["models"].values()
            assert entry["api"]["totalRequests"] == usage["calls"] == 2
            assert entry["tokens"] == {"prompt": usage["inputTokens"], "candidates": usage["outputTokens"],
                                       "total": usage["totalTokens"], "cached": usage["cachedReadTokens"],
                                       "thoughts": 0}
            assert entry["tokens"]["prompt"] == 1900 and entry["tokens"]["candidates"] == 100
            assert stats["tools"]["totalCalls"] == 0 and stats["files"]["totalLinesAdded"] == 0
            assert 0 <= stats["durationMs"] and stats["sessionStartTimeMs"] > 0

            r = await client.get(f"/session/{sid}/context-usage", params={"detail": "true"})
            body = r.json()
            conforms(answers.SessionContextUsage, body)
            figures = body["usage"]
            assert figures["modelName"] == status["modelName"] and figures["showDetails"] is True
            expected = context["reportedTokens"] if context["reportedTokens"] is not None \
                else context["estimatedTokens"]
            assert figures["totalTokens"] == expected > 0
            assert figures["isEstimated"] is (context["reportedTokens"] is None)
            assert figures["contextWindowSize"] == context["window"] == 32_000
            parts = figures["breakdown"]
            assert parts["systemPrompt"] + parts["messages"] == figures["totalTokens"]
            assert parts["freeSpace"] == 32_000 - figures["totalTokens"]
            assert f"/ {32_000:,} tokens" in body["formattedText"]


async def test_the_panels_want_a_live_session_and_the_token_and_answer_the_shells_origin(tmp_path):
    with trio.fail_after(30):
        async with live_daemon() as (_, client):
            for route in ("context-usage", "stats"):
                r = await client.get(f"/session/nope/{route}")
                assert r.status_code == 404 and r.json()["code"] == "session_not_found", r.text
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            async with httpx.AsyncClient(base_url=client.base_url, timeout=10) as anonymous:
                for route in ("context-usage", "stats"):
                    r = await anonymous.get(f"/session/{sid}/{route}")
                    assert r.status_code == 401 and r.json()["code"] == "unauthorized"
    # The shell is on another origin: allowed through the one access decision, as every route is.
    origin = "http://127.0.0.1:5173"
    with trio.fail_after(30):
        async with served(origin) as client:
            auth = {"Origin": origin, "Authorization": f"Bearer {TOKEN}"}
            sid = (await client.post("/session", json=shell_create(tmp_path), headers=auth)).json()["sessionId"]
            for route in ("context-usage", "stats"):
                r = await client.get(f"/session/{sid}/{route}", headers=auth)
                assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
                r = await client.get(f"/session/{sid}/{route}", headers={"Origin": "http://evil.example"})
                assert r.status_code == 403 and r.json()["code"] == "origin_not_allowed"


async def test_a_session_with_no_known_window_shows_its_size_without_one(tmp_path):
    model = load_script([[{"text": "hi"}, {"usage": {"prompt_tokens": 500, "completion_tokens": 5}}]])
    with trio.fail_after(30):
        async with live_daemon(model=model) as (_, client):
            sid = (await client.post("/session", json=shell_create(tmp_path))).json()["sessionId"]
            admitted = (await client.post(f"/session/{sid}/prompt", json=prompt("hello"))).json()
            await wait_turn(client, sid, admitted["promptId"])
            status = (await client.get(f"/session/{sid}/status")).json()
            body = (await client.get(f"/session/{sid}/context-usage")).json()
            assert status["context"]["window"] is None
            assert body["usage"]["contextWindowSize"] == 0 and body["usage"]["breakdown"]["freeSpace"] == 0
            assert body["usage"]["totalTokens"] > 0 and "window unknown" in body["formattedText"]
