"""Token estimates of whole requests (actors/model/estimate.py) and their calibration."""

from __future__ import annotations

import json
import random

from actors.model.base import ChatMessage, ChatRequest, ToolCall, ToolSpec
from actors.model.estimate import Calibration, estimate_request, messages_tokens, text_tokens, tools_tokens
from actors.runtime import default_tools

LOREM = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
         "et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut "
         "aliquip ex ea commodo consequat. Duis aute irure dolor in reprehenderit in voluptate velit esse cillum "
         "dolore eu fugiat nulla pariatur. Excepteur sint occaecat cupidatat non proident, sunt in culpa qui "
         "officia deserunt mollit anim id est laborum. ")


def random_hex(chars: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("0123456789abcdef") for _ in range(chars))


def test_hex_is_counted_at_least_as_a_real_tokenizer_counts_it() -> None:
    # Measured on Qwen2.5's tokenizer: 12,000 random hex characters were 11,787 tokens
    # (chars/4 said 3,000, which let the request through to overflow the server).
    assert text_tokens(random_hex(12_000)) >= 11_787


def test_prose_is_estimated_near_the_truth() -> None:
    text = (LOREM * 20)[:4600]  # 739 real Qwen tokens
    assert 739 <= text_tokens(text) <= 1.3 * 739


def test_code_and_punctuation_cost_more_than_prose_of_the_same_length() -> None:
    code = 'def f(x):\n    return {"a": [x[0], x[1]], "b": (x or None)}\n' * 40
    prose = (LOREM * 10)[: len(code)]
    assert text_tokens(code) > 1.3 * text_tokens(prose)


def test_the_whole_request_counts_system_prompt_tool_schemas_and_tool_results() -> None:
    user = ChatMessage("user", "Say hi")
    bare = estimate_request(ChatRequest((user,)))
    specs = default_tools().specs()
    # The built-in schemas were about 1,200 real tokens of a one-line prompt's 1,230.
    assert tools_tokens(specs) >= 1_200
    with_tools = estimate_request(ChatRequest((user,), specs))
    assert with_tools == bare + tools_tokens(specs)
    system = ChatMessage("system", "You are an agent. " * 100)
    assert estimate_request(ChatRequest((system, user), specs)) == with_tools + messages_tokens([system])
    call = ToolCall("c1", "shell", {"command": "cat big.log"})
    result = ChatMessage("tool", random_hex(2000), tool_call_id="c1", name="shell")
    turn = (user, ChatMessage("assistant", "", (call,)), result)
    assert estimate_request(ChatRequest(turn, specs)) >= with_tools + 2000


def test_calibration_adds_the_new_messages_to_the_servers_count() -> None:
    specs = (ToolSpec("t", "a tool", {"type": "object"}),)
    first = ChatRequest((ChatMessage("system", "sys"), ChatMessage("user", LOREM * 4)), specs)
    calibration = Calibration()
    assert calibration.estimate(first) == estimate_request(first)  # nothing counted yet
    calibration.observe(first, 400)
    assert calibration.ratio == 400 / estimate_request(first)
    # The next request extends the counted one (the system message rendered afresh, equal).
    new = (ChatMessage("assistant", "ok"), ChatMessage("user", random_hex(300)))
    second = ChatRequest((ChatMessage("system", "sys"), first.messages[1], *new), specs)
    assert calibration.estimate(second) == 400 + messages_tokens(new)


def test_calibration_never_lowers_an_estimate_it_cannot_match_and_raises_one_it_undercounts() -> None:
    prose = ChatRequest((ChatMessage("user", LOREM * 4),))
    other = ChatRequest((ChatMessage("user", random_hex(500)),))
    calibration = Calibration()
    calibration.observe(prose, estimate_request(prose) // 2)  # we overestimated prose
    assert calibration.estimate(other) == estimate_request(other)  # the next one may be hex: not lowered
    calibration.observe(prose, estimate_request(prose) * 2)  # a tokenizer we undercount
    assert calibration.estimate(other) == round(estimate_request(other) * 2)
    calibration.reset()
    assert calibration.estimate(other) == estimate_request(other) and calibration.ratio is None


def test_tool_call_arguments_count_as_their_json() -> None:
    args = {"content": random_hex(1000)}
    message = ChatMessage("assistant", "", (ToolCall("c", "write", args),))
    assert messages_tokens([message]) >= text_tokens(json.dumps(args))


def test_a_growing_conversation_is_estimated_by_what_it_added_and_the_sum_is_the_whole():
    from actors.model.base import ChatMessage, ChatRequest
    from actors.model.estimate import Calibration, estimate_request

    calibration = Calibration()
    messages: list[ChatMessage] = [ChatMessage("system", "be brief")]
    for n in range(30):
        messages.append(ChatMessage("user" if n % 2 else "assistant", f"message {n} " + "x" * n))
        request = ChatRequest(tuple(messages))
        assert calibration.estimate(request) == estimate_request(request)  # never counted: the raw estimate
    cut = ChatRequest(tuple(messages[:5] + messages[6:]))  # a rewritten history: estimated whole again
    assert calibration.estimate(cut) == estimate_request(cut)
    # Each message was estimated once and its count kept on it.
    assert all("tokens" in m.memo for m in messages)
