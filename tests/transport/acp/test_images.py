"""Image prompt blocks reach the openai provider's request as image_url parts, or are refused clearly."""

from __future__ import annotations

import base64
from contextlib import asynccontextmanager

import trio

from actors import CountingIds, open_daemon
from actors.model.openai import OpenAIConfig, OpenAIModel
from tests.conftest import live_daemon
from tests.transport.acp.harness import Client, new_session
from transport.acp import AcpConnection
from transport.fake_openai import FakeOpenAI

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
PROMPT = [{"type": "text", "text": "what is this?"}, {"type": "image", "mimeType": "image/png", "data": PNG}]


@asynccontextmanager
async def openai_acp(supports_images: bool):
    fake = FakeOpenAI([[{"text": "a picture"}]])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key="k", model="fake", supports_images=supports_images))
        async with open_daemon(model=model, ids=CountingIds()) as daemon:
            client = Client()
            client.conn = AcpConnection(daemon, nursery, client.deliver)
            init = await client.result("initialize", {"protocolVersion": 1})
            yield fake, client, init
            await client.conn.close()
        nursery.cancel_scope.cancel()


async def test_an_image_prompt_reaches_the_openai_request_as_an_image_url_part(tmp_path) -> None:
    async with openai_acp(True) as (fake, client, init):
        assert init["agentCapabilities"]["promptCapabilities"]["image"] is True
        sid = await new_session(client, str(tmp_path))
        done = await client.result("session/prompt", {"sessionId": sid, "prompt": PROMPT})
        assert done["stopReason"] == "end_turn"
        [request] = fake.requests
        user = [m for m in request.body["messages"] if m["role"] == "user"][-1]
        assert user["content"] == [{"type": "text", "text": "what is this?\n[image]"},
                                   {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]


async def test_an_image_prompt_is_refused_when_the_model_takes_no_images(tmp_path) -> None:
    async with openai_acp(False) as (fake, client, init):
        assert init["agentCapabilities"]["promptCapabilities"]["image"] is False
        sid = await new_session(client, str(tmp_path))
        refused = await client.request("session/prompt", {"sessionId": sid, "prompt": PROMPT})
        assert refused["error"]["code"] == -32602
        assert "does not accept images" in refused["error"]["message"]
        assert refused["error"]["data"] == {"path": "$.prompt[1]", "code": "images_not_supported"}
        assert fake.requests == []  # nothing was queued or sent


async def test_rest_refuses_images_too_and_a_bad_image_with_400(tmp_path) -> None:
    fake = FakeOpenAI([])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(fake.serve)
        model = OpenAIModel(OpenAIConfig(base_url=url, api_key="k", model="fake"))
        async with live_daemon(model=model) as (daemon, http):
            sid = (await http.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            r = await http.post(f"/session/{sid}/prompt", json={"prompt": PROMPT})
            assert r.status_code == 400 and r.json()["code"] == "images_not_supported"
        async with live_daemon() as (daemon, http):  # the scripted model takes images: a bad one is still refused
            sid = (await http.post("/session", json={"cwd": str(tmp_path)})).json()["sessionId"]
            bad = [{"type": "image", "mimeType": "image/png", "data": "%%%"}]
            r = await http.post(f"/session/{sid}/prompt", json={"prompt": bad})
            assert r.status_code == 400 and r.json()["code"] == "invalid_image"
            assert "base64" in r.json()["error"] and r.json()["path"] == "$.prompt[0].data"
        nursery.cancel_scope.cancel()
