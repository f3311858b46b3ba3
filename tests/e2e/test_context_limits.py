"""Context limits end to end: the real daemon on the ``openai`` provider against the loopback fake,
which answers in each server's words (answers cut short, overflow answers, llama-cpp-python's
200-then-nothing)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio

from actors.model.base import ChatMessage
from actors.model.estimate import messages_tokens, text_tokens
from actors.model.openai import OpenAIConfig, OpenAIModel
from tests.conftest import live_daemon
from tests.e2e.sse_client import collect
from tests.e2e.test_openai_daemon import prompt, wait_turn
from transport.fake_openai import OVERFLOW_STYLES, FakeOpenAI

LOREM = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
         "et dolore magna aliqua. ")


def prose(tokens: int) -> str:
    return "HEAD-MARK " + LOREM * (tokens // text_tokens(LOREM) + 1) + " TAIL-MARK"


def random_hex(chars: int) -> str:
    rng = random.Random(11)
    return "".join(rng.choice("0123456789abcdef") for _ in range(chars))


async def run(client: Any, sid: str, text: str) -> dict[str, Any]:
    """Send a prompt; its turn record once it ended."""
    pid = (await client.post(f"/session/{sid}/prompt", json=prompt(text))).json()["promptId"]
    return await wait_turn(client, sid, pid)


async def terminal(client: Any, sid: str) -> list[dict[str, Any]]:
    events = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
    return [f for f in events if f["type"] in ("turn_complete", "turn_error")]


async def context(client: Any, sid: str) -> dict[str, Any]:
    return (await client.get(f"/session/{sid}/status")).json()["context"]


def user_texts(request: Any) -> list[str]:
    return [m["content"] for m in request.body["messages"] if m["role"] == "user"]


async def test_a_length_finish_ends_max_tokens_and_the_client_is_told(nursery):
    fake = FakeOpenAI([[{"text": "Chapter one. It was a dark"},
                        {"usage": {"prompt_tokens": 1300, "completion_tokens": 300}}, {"finish": "length"}]])
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url, max_tokens=300))
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            record = await run(client, sid, "write a novel")
            events = await collect(client, sid, headers={"Last-Event-ID": "0"}, until="replay_complete")
    assert record["stopReason"] == "max_tokens"
    [end] = [f for f in events if f["type"] == "turn_complete"]
    limit = end["data"]["tokenLimit"]
    assert limit == {"cause": "max_tokens", "answerCut": True, "finishReason": "length", "limit": 300,
                     "message": "The answer was cut off at the answer limit of 300 tokens (model.maxTokens)."}
    notices = [f["data"]["update"]["content"]["text"] for f in events if f["type"] == "session_update"
               and (f["data"]["update"].get("_meta") or {}).get("source") == "daemon"]
    assert notices == [limit["message"]]


@pytest.mark.parametrize("style", sorted(OVERFLOW_STYLES))
async def test_each_servers_overflow_answer_is_compacted_and_retried(nursery, style):
    # No contextWindow configured: the window is what the server's answer shows.
    fake = FakeOpenAI([[{"text": "ok"}]])
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url))
    with trio.fail_after(30):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            limit = (await context(client, sid))["baseTokens"] + 1500
            assert (await run(client, sid, prose(3000)))["stopReason"] == "end_turn"
            fake.add({"overflow": style, "limit": limit, "prompt": limit + 1}, [{"text": "done"}])
            record = await run(client, sid, "next")
            status = await context(client, sid)
    assert (record["state"], record["stopReason"]) == ("completed", "end_turn")
    assert len(fake.requests) == 3
    refused, retried = fake.requests[1], fake.requests[2]
    assert user_texts(refused)[0] == prose(3000)
    first = user_texts(retried)[0]
    assert first.startswith("HEAD-MARK") and first.endswith("TAIL-MARK") and "characters cut here" in first
    assert user_texts(retried)[-1] == "next"
    assert status["windowSource"] == "server"
    assert status["estimatedTokens"] <= status["window"]  # the retry was fitted to what the server showed
    if style not in ("llama-server-old", "llama-cpp-python"):  # those give no numbers: the window is a guess
        assert status["window"] == limit


async def test_an_input_too_big_for_the_configured_window_is_refused_unsent_and_not_kept(nursery):
    fake = FakeOpenAI([[{"text": "ok"}]])
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url, context_window=4096))
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            refused = await run(client, sid, random_hex(12_000))  # 11,787 real tokens; chars/4 said 3,000
            assert fake.requests == []
            later = await run(client, sid, "Say ok")
            ends = await terminal(client, sid)
    assert refused["state"] == "error" and later["stopReason"] == "end_turn"
    assert ends[0]["type"] == "turn_error" and ends[0]["data"]["code"] == "context_overflow"
    assert "context window of 4,096 tokens (model.contextWindow)" in ends[0]["data"]["message"]
    [sent] = fake.requests
    assert user_texts(sent) == ["Say ok"]


async def test_an_input_the_server_refuses_even_alone_is_not_in_the_next_request(nursery):
    fake = FakeOpenAI([{"overflow": "llama-server", "limit": 4096, "prompt": 11_787}, [{"text": "ok"}]])
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url))  # no window configured: the server's answer names it
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            refused = await run(client, sid, random_hex(12_000))
            later = await run(client, sid, "Say ok")
            ends = await terminal(client, sid)
    assert refused["state"] == "error" and later["stopReason"] == "end_turn"
    assert ends[0]["data"]["code"] == "context_overflow"
    assert "4,096 tokens (as the server showed it)" in ends[0]["data"]["message"]
    assert len(fake.requests) == 2  # the server's count showed it could never fit: no retry
    assert user_texts(fake.requests[1]) == ["Say ok"]


async def test_the_estimate_counts_the_tool_schemas_and_system_prompt(nursery):
    fake = FakeOpenAI([[{"text": "hi"}]])
    url = await nursery.start(fake.serve)
    # Room for the messages, not for the tool schemas and the system prompt every request carries.
    model = OpenAIModel(OpenAIConfig(base_url=url, context_window=1200))
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            base = (await context(client, sid))["baseTokens"]
            refused = await run(client, sid, "Say hi")
    assert base > 1200 and refused["state"] == "error"
    assert fake.requests == []


async def test_the_servers_prompt_count_calibrates_the_estimate_and_status_shows_it(nursery):
    fake = FakeOpenAI([[{"text": "first answer"}, {"usage": {"prompt_tokens": 1234, "completion_tokens": 3}}],
                       [{"text": "second answer"}, {"usage": {"prompt_tokens": 1250, "completion_tokens": 3}}]])
    url = await nursery.start(fake.serve)
    model = OpenAIModel(OpenAIConfig(base_url=url))
    with trio.fail_after(20):
        async with live_daemon(model=model) as (daemon, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            await run(client, sid, "first")
            first = await context(client, sid)
            await run(client, sid, "second")
            second = await context(client, sid)
    assert first["reportedTokens"] == 1234
    assert first["calibration"] == round(1234 / first["estimatedTokens"], 3)
    # The second request extends the first: the server's count of it plus the two new messages.
    added = messages_tokens([ChatMessage("assistant", "first answer"), ChatMessage("user", "second")])
    assert second["estimatedTokens"] == 1234 + added
    assert (second["reportedTokens"], second["calibration"] < 1) == (1250, True)
