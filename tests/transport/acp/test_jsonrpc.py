"""Bad JSON-RPC gets the proper error codes, changes nothing, and the agent keeps serving."""

from __future__ import annotations

import json

import pytest
import trio

from transport.acp import jsonrpc
from transport.acp.jsonrpc import Invalid, Peer, Request, Response, RpcError, read

from tests.transport.acp.harness import acp_client, new_session, text


@pytest.mark.parametrize("raw, code, reply_id", [
    (b"{not json", -32700, None),
    (b"", -32700, None),
    (b"[]", -32600, None),
    (b'[{"jsonrpc":"2.0","id":1,"method":"initialize"}]', -32600, None),
    (b"42", -32600, None),
    (b'{"id":7,"method":"initialize"}', -32600, 7),
    (b'{"jsonrpc":"1.0","id":"a","method":"initialize"}', -32600, "a"),
    (b'{"jsonrpc":"2.0","id":true,"method":"initialize"}', -32600, None),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"initialize"}', -32600, None),
    (b'{"jsonrpc":"2.0","id":3,"method":12}', -32600, 3),
    (b'{"jsonrpc":"2.0","id":3,"method":"x","params":"str"}', -32600, 3),
    (b'{"jsonrpc":"2.0","method":"x","params":5}', -32600, None),
    (b'{"jsonrpc":"2.0"}', -32600, None),
    (b'{"jsonrpc":"2.0","id":4}', -32600, None),
    (b'{"jsonrpc":"2.0","id":4,"result":1,"error":{"code":1,"message":"x"}}', -32600, None),
    (b'{"jsonrpc":"2.0","id":4,"error":"bad"}', -32600, None),
])
def test_read_refuses_what_is_not_json_rpc(raw: bytes, code: int, reply_id: object) -> None:
    refused = read(raw)
    assert isinstance(refused, Invalid)
    assert refused.error.code == code
    assert refused.id == reply_id


def test_read_reads_requests_notifications_and_responses() -> None:
    assert read(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}') == Request("m", {"a": 1}, 1)
    assert read(b'{"jsonrpc":"2.0","method":"m"}').is_notification
    assert read(b'{"jsonrpc":"2.0","id":"x","result":null}') == Response("x", None)
    assert read(b'{"jsonrpc":"2.0","id":2,"error":{"code":-1,"message":"m"}}').error == {"code": -1, "message": "m"}
    # The client could not read a request of ours: an error with a null id is a response, never answered.
    assert read(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}') == \
        Response(None, error={"code": -32700, "message": "m"})
    # An empty method name is a string, as JSON-RPC asks: read, then answered -32601 by dispatch.
    assert read(b'{"jsonrpc":"2.0","id":3,"method":""}') == Request("", None, 3)


async def test_every_kind_of_bad_input_is_answered_and_the_agent_keeps_serving(tmp_path) -> None:
    async with acp_client([{"text": "fine"}]) as (daemon, client):
        await client.send_raw("{oops")
        await client.send_raw("[1, 2]")
        await client.send_raw('{"jsonrpc":"2.0","id":9,"method":"no/such/method"}')
        await client.send_raw('{"jsonrpc":"2.0","method":"no/such/notification"}')
        await client.send_raw('{"jsonrpc":"2.0","id":10,"method":""}')
        errors = [m for m in client.sent if "error" in m]
        assert [(m["id"], m["error"]["code"]) for m in errors] == [(None, -32700), (None, -32600), (9, -32601),
                                                                   (10, -32601)]

        bad_new = await client.request("session/new", {"mcpServers": []})
        assert bad_new["error"]["code"] == -32602 and "$.cwd" in bad_new["error"]["message"]
        relative = await client.request("session/new", {"cwd": "relative/dir"})
        assert relative["error"]["code"] == -32602 and relative["error"]["data"] == {"path": "$.cwd"}
        assert daemon.session_count == 0  # nothing changed

        sid = await new_session(client, str(tmp_path))
        unknown = await client.request("session/prompt", {"sessionId": "other", "prompt": text("hi")})
        assert unknown["error"]["code"] == -32602 and unknown["error"]["data"] == {"path": "$.sessionId"}
        bad_block = await client.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text"}]})
        assert bad_block["error"]["code"] == -32602
        assert bad_block["error"]["data"] == {"path": "$.prompt[0].text"}
        assert "required field missing" in bad_block["error"]["message"]
        empty = await client.request("session/prompt", {"sessionId": sid, "prompt": []})
        assert empty["error"]["data"] == {"path": "$.prompt"}
        bad_meta = await client.request("session/prompt", {"sessionId": sid, "prompt": text("x"), "_meta": 3})
        assert bad_meta["error"]["data"] == {"path": "$._meta"}
        bad_mode = await client.request("session/set_mode", {"sessionId": sid, "modeId": "reckless"})
        assert bad_mode["error"]["code"] == -32602 and bad_mode["error"]["data"] == {"path": "$.modeId"}
        array_params = await client.request("session/prompt", [sid])
        assert array_params["error"]["code"] == -32602
        assert (await daemon.get(sid).pending_prompts()) == []  # none of it was admitted

        # After all that, a good prompt runs normally.
        answer = await client.request("session/prompt", {"sessionId": sid, "prompt": text("hi")})
        assert answer["result"]["stopReason"] == "end_turn"
        assert [u["content"]["text"] for u in client.updates()] == ["hi", "fine"]


async def test_methods_before_initialize_are_refused() -> None:
    async with acp_client() as (daemon, client):
        client.conn.initialized = False
        refused = await client.request("session/new", {"cwd": "/"})
        assert refused["error"]["code"] == -32600 and "initialize" in refused["error"]["message"]
        bad_init = await client.request("initialize", {"protocolVersion": "1"})
        assert bad_init["error"]["data"] == {"path": "$.protocolVersion"}
        # A version we do not know is answered with ours (ACP's negotiation).
        assert (await client.result("initialize", {"protocolVersion": 99}))["protocolVersion"] == 1


async def test_a_failing_handler_is_an_internal_error_and_the_peer_goes_on() -> None:
    sent: list[dict] = []

    async def send(message, session_id, event_id):
        sent.append(message)

    async def boom(request: Request):
        raise KeyError("kaput")

    async def fine(request: Request):
        return {"ok": True}

    async with trio.open_nursery() as nursery:
        peer = Peer(send, nursery)
        peer.method("boom", boom, inline=True)
        peer.method("fine", fine)
        await peer.receive(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "boom"}))
        await peer.receive(json.dumps({"jsonrpc": "2.0", "method": "boom"}))  # a notification: no answer
        await peer.receive(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "fine"}))
    assert sent[0]["error"]["code"] == jsonrpc.INTERNAL_ERROR
    assert sent[1:] == [{"jsonrpc": "2.0", "id": 2, "result": {"ok": True}}]


async def test_calls_to_the_client_get_their_answers_errors_and_deadlines() -> None:
    sent: list[dict] = []

    async def send(message, session_id, event_id):
        sent.append(message)

    async with trio.open_nursery() as nursery:
        peer = Peer(send, nursery)
        first = await peer.call("client/method", {"a": 1})
        second = await peer.call("client/method", {})
        third = await peer.call("client/method", {})
        await peer.receive(json.dumps({"jsonrpc": "2.0", "id": first.id, "result": {"fine": 1}}))
        await peer.receive(json.dumps({"jsonrpc": "2.0", "id": second.id,
                                       "error": {"code": -32601, "message": "nope"}}))
        assert await first.wait(1) == {"fine": 1}
        with pytest.raises(RpcError) as caught:
            await second.wait(1)
        assert caught.value.code == -32601
        with pytest.raises(trio.TooSlowError):
            await third.wait(0.01)
        peer.close()
        with pytest.raises(jsonrpc.ConnectionClosed):
            await third.wait(1)
        # A late or unknown answer is ignored.
        await peer.receive(json.dumps({"jsonrpc": "2.0", "id": "unknown", "result": 1}))
    assert sent[0] == {"jsonrpc": "2.0", "id": first.id, "method": "client/method", "params": {"a": 1}}
