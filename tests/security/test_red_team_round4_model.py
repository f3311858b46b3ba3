"""Red team, fourth round: what a hostile model server can make of the daemon (/tmp/w/redteam4/REPORT.md).

- 7: an HTTP error's body was read whole to quote it: 2 GiB of a 500's body cost the daemon 8 GiB, and an
  endless one would have been an out-of-memory kill of every session. Now at most ``MAX_ERROR_BODY`` bytes
  are read; the turn ends with the server's error, and the session goes on.
- 1: a token count past 64 bits (``1.2e29``, ``1e300``, a huge ``cached_tokens``) crashed the session (the
  journal and the event encoder cannot write it) and its prompt never got a terminal event; a negative one
  failed the turn with ``internal error`` (the metrics counter refused it inside the event bus). Now a count
  that is not a non-negative number under ``MAX_REPORTED_TOKENS`` is taken as none.

Each test runs the real daemon (``python -m transport`` on loopback port 0, provider ``openai``) against a
model server in this process.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from actors.model.openai import MAX_ERROR_BODY, MAX_REPORTED_TOKENS
from tests.canned_site import read_request
from tests.security.test_red_team_round3_model import daemon_on, rss, sse, turn
from transport.fake_openai import FakeOpenAI

ERROR_BODY_SENT = 256 * 2**20  # what the endless error body comes to before the server gives up


async def error_then_answer(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """The first chat request gets HTTP 500 with a chunked body that goes on (until the client leaves, or
    :data:`ERROR_BODY_SENT`); every later one a short answer."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    requests = 0

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal requests
        if (request := await read_request(stream)) is None:
            return
        head, body = request
        requests += 1
        try:
            if requests > 1:
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close"
                                      b"\r\n\r\n" + sse({"role": "assistant", "content": "still here"}, "stop")
                                      + b"data: [DONE]\n\n")
                return
            await stream.send_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
                                  b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            chunk = b"upstream exploded " + b"E" * (2**20 - 18)
            piece = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
            for _ in range(ERROR_BODY_SENT // len(chunk)):
                await stream.send_all(piece)
            await stream.send_all(b"0\r\n\r\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()

    async with trio.open_nursery() as nursery:
        task_status.started(f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/v1")
        await trio.serve_listeners(handle, listeners, handler_nursery=nursery)


async def test_an_endless_error_body_is_read_only_to_its_bound_and_the_session_goes_on(nursery, tmp_path):
    url = await nursery.start(error_then_answer)
    with trio.fail_after(90):
        async with daemon_on(url, tmp_path) as (daemon, client):
            before = rss(daemon.pid)
            sid = (await client.post("/session", json={})).json()["sessionId"]
            first = await turn(client, sid, "hi", timeout=60)
            grown = rss(daemon.pid) - before
            second = await turn(client, sid, "are you there?")
            transcript = (await client.get(f"/session/{sid}/transcript")).text
    assert first["state"] == "error" and "HTTP 500" in first["error"] and "upstream exploded" in first["error"]
    assert second["state"] == "completed" and "still here" in transcript
    # The old daemon held the whole body, twice over (the parts, then their join): over 512 MiB here.
    assert grown < 32 * 2**20 + 16 * MAX_ERROR_BODY, grown


def usage_then_answer(usage: Any) -> list[list[dict[str, Any]]]:
    """A first response ending with a hostile usage chunk (sent raw: the fake's own encoder takes 64 bits at
    most), then a normal one."""
    chunk = {"id": "x", "object": "chat.completion.chunk", "model": "m", "choices": [], "usage": usage}
    return [[{"text": "counted"}, {"finish": "stop"}, {"raw": "data: " + json.dumps(chunk) + "\n\n"}],
            [{"text": "second turn ok"}]]


BAD_USAGE = {
    "past 64 bits": {"prompt_tokens": 123456789012345678901234567890, "completion_tokens": 5},
    "a huge float": {"prompt_tokens": 1e300, "completion_tokens": 5},
    "a huge cached count": {"prompt_tokens": 5, "completion_tokens": 5,
                            "prompt_tokens_details": {"cached_tokens": 1e25}},
    "negative": {"prompt_tokens": -5, "completion_tokens": 5},
    "at the bound": {"prompt_tokens": MAX_REPORTED_TOKENS, "completion_tokens": 5},
    "not an object": [1, 2],
}


@pytest.mark.parametrize("name", list(BAD_USAGE))
async def test_token_counts_no_journal_could_hold_are_taken_as_none_and_every_turn_ends(nursery, tmp_path, name):
    fake = FakeOpenAI(usage_then_answer(BAD_USAGE[name]))
    url = await nursery.start(fake.serve)
    with trio.fail_after(30):
        async with daemon_on(url, tmp_path) as (_, client):
            sid = (await client.post("/session", json={})).json()["sessionId"]
            first = await turn(client, sid, "count")
            second = await turn(client, sid, "again")
            status = (await client.get(f"/session/{sid}/status")).json()
    assert first["state"] == "completed", first
    assert second["state"] == "completed", second
    assert 0 <= status["usage"]["totalTokens"] < 2 * MAX_REPORTED_TOKENS, status["usage"]
