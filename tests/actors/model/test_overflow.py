"""Context overflow in each server's words, read by the openai provider from the loopback fake."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors.model.base import ChatMessage, ChatRequest, ContextWindowExceeded, ModelError, ToolSpec
from actors.model.overflow import ContextOverflow, EmptyResponse
from tests.actors.model.test_openai import HELLO, LIMIT, collect, running


async def failure(*responses: Any, **config: Any) -> ModelError:
    with trio.fail_after(LIMIT):
        async with running(*responses, **config) as (_, model):
            with pytest.raises(ModelError) as info:
                await collect(model)
    return info.value


@pytest.mark.parametrize(("style", "limit", "prompt"), [
    ("openai", 4096, 4138),
    ("vllm", 4096, 4138),
    ("vllm-0.6", 4096, 4138),
    ("vllm-0.4", 4096, 4138),
    ("llama-server", 4096, 4138),
    ("llama-server-old", None, None),  # "the request exceeds the available context size": no numbers
])
async def test_each_servers_overflow_answer_is_a_context_overflow(style, limit, prompt) -> None:
    exc = await failure({"overflow": style, "limit": 4096, "prompt": 4138, "completion": 100})
    assert isinstance(exc, ContextOverflow)
    assert (exc.code, exc.committed, exc.limit, exc.prompt_tokens) == ("context_overflow", False, limit, prompt)
    assert "HTTP 400" in exc.message


async def test_a_200_that_ends_before_any_chunk_is_an_empty_response() -> None:
    # llama-cpp-python's server fails inside its generator: headers, then a clean end.
    exc = await failure({"overflow": "llama-cpp-python"})
    assert isinstance(exc, EmptyResponse)
    assert (exc.code, exc.committed) == ("malformed_stream", True)


async def test_other_client_errors_stay_what_they_were() -> None:
    exc = await failure({"status": 400, "body": {"error": {"message": "tools[0].function.name is invalid"}}})
    assert not isinstance(exc, ContextOverflow) and exc.code == "http_400"
    # Overflow words on a status that is no client error are not an overflow either.
    exc = await failure({"status": 500, "body": {"error": {"message": "maximum context length is 8 tokens"}}})
    assert exc.code == "server_error"


async def test_an_overflow_error_as_the_first_chunk_is_one_but_not_after_content() -> None:
    error = ('data: {"error": {"message": "request (5000 tokens) exceeds the available context size '
             '(4096 tokens)", "type": "exceed_context_size_error"}}\n\n')
    exc = await failure([{"raw": error}])
    assert isinstance(exc, ContextOverflow)
    assert (exc.committed, exc.limit, exc.prompt_tokens) == (True, 4096, 5000)
    exc = await failure([{"text": "Once upon"}, {"raw": error}])
    assert not isinstance(exc, ContextOverflow) and exc.code == "server_error"


async def test_the_pre_send_check_uses_the_callers_estimate_and_counts_the_tools() -> None:
    with trio.fail_after(LIMIT):
        async with running([{"text": "a"}], context_window=100) as (fake, model):
            # The caller's calibrated estimate is what counts (here: it says the request is small).
            assert await collect(model, ChatRequest(HELLO.messages, estimated_tokens=90))
            with pytest.raises(ContextWindowExceeded):
                await collect(model, ChatRequest(HELLO.messages, estimated_tokens=101))
            # Without one, the provider's own estimate: a one-word prompt with a big tool schema.
            tool = ToolSpec("shell", "runs a command " * 50, {"type": "object", "properties": {}})
            with pytest.raises(ContextWindowExceeded):
                await collect(model, ChatRequest((ChatMessage("user", "hi"),), (tool,)))
    assert len(fake.requests) == 1
