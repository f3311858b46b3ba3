"""A session's context window (actors/session/context.py) with the scripted model, under virtual time:
answers cut short, input that cannot fit, messages cut to fit, overflow answers retried once."""

from __future__ import annotations

import random
from typing import Any

import trio

from actors import Settings
from actors.model.estimate import text_tokens
from tests.actors.session.guard.harness import call, guard_session, model_of, primary_calls, run_prompt, says, text

YOLO = Settings(approval_mode="yolo")
LOREM = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore "
         "et dolore magna aliqua. ")


def prose(tokens: int, head: str = "HEAD-MARK", tail: str = "TAIL-MARK") -> str:
    """About ``tokens`` estimated tokens of prose between two markers."""
    body = LOREM * (tokens // text_tokens(LOREM) + 1)
    return f"{head} {body} {tail}"


def random_hex(chars: int) -> str:
    rng = random.Random(3)
    return "".join(rng.choice("0123456789abcdef") for _ in range(chars))


def notices(run: Any) -> list[str]:
    return [e.update["content"]["text"] for e in run.events if e.update
            and (e.update.get("_meta") or {}).get("source") == "daemon"]


async def base_tokens(session: Any) -> int:
    """What every request needs before any conversation: the system prompt and the tool schemas."""
    return (await session.status())["context"]["baseTokens"]


def overflow(limit: int, prompt: int) -> dict[str, Any]:
    """A scripted server refusal in OpenAI's words."""
    return {"refuse": {"code": "context_overflow", "message": (
        f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
        f"{prompt} tokens. Please reduce the length of the messages.")}}


# ----------------------------------------------------------------- answers cut short


async def test_a_length_finish_ends_the_turn_max_tokens_and_says_the_context_filled(autojump_clock):
    model = model_of([text("Once upon a time"), {"usage": {"prompt_tokens": 1000, "completion_tokens": 3000}},
                      {"finish": "length"}], says("continued"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            run = await run_prompt(session, "tell a long story")
            later = await run_prompt(session, "go on")
            status = await session.status()
    assert run.stop_reason == "max_tokens"
    limit = run.end.data["tokenLimit"]
    assert (limit["cause"], limit["answerCut"], limit["finishReason"]) == ("context_window", True, "length")
    assert "cut off" in limit["message"] and notices(run) == [limit["message"]]
    # No answer limit was set, so the context filled: its size is the prompt and the answer.
    assert (status["context"]["window"], status["context"]["windowSource"], limit["limit"]) == (4000, "server", 4000)
    # The cut answer stays in the conversation, so the user can ask for the rest.
    assert later.stop_reason == "end_turn"
    assert [m.content for m in primary_calls(model)[1].messages[-2:]] == ["Once upon a time", "go on"]


async def test_a_length_finish_at_the_answer_limit_says_so_and_runs_none_of_its_calls(autojump_clock):
    todo = call("todo_write", todos=[{"id": "1", "content": "x", "status": "in_progress"}])
    model = model_of([text("Planning"), todo, {"usage": {"prompt_tokens": 900, "completion_tokens": 300}},
                      {"finish": "length"}], says("next"))
    model.max_tokens = 300  # as the openai provider's model.maxTokens
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            run = await run_prompt(session, "plan")
            await run_prompt(session, "again")
    assert run.stop_reason == "max_tokens"
    assert run.end.data["tokenLimit"] == {
        "cause": "max_tokens", "answerCut": True, "finishReason": "length", "limit": 300,
        "message": "The answer was cut off at the answer limit of 300 tokens (model.maxTokens)."}
    assert not [e for e in run.events if e.update and e.update["sessionUpdate"] == "plan"]  # not run
    sent = primary_calls(model)[1].messages
    assert [(m.role, m.content, m.tool_calls) for m in sent[-2:]] == [("assistant", "Planning", ()),
                                                                     ("user", "again", ())]


async def test_a_cut_far_inside_a_configured_window_is_the_servers_answer_limit_not_a_smaller_window(
        autojump_clock):
    # A server with an answer limit of its own (LM Studio, a gateway, llama-server -n) cuts at 256 tokens.
    model = model_of([text("An essay"), {"usage": {"prompt_tokens": 3500, "completion_tokens": 256}},
                      {"finish": "length"}], says("short"), says("long"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            model.context_window = 32768
            run = await run_prompt(session, "write a long essay")
            status = await session.status()
            short = await run_prompt(session, "and now a short question")
            long = await run_prompt(session, prose(4000))  # more than the 3,756 tokens the cut answer held
    assert run.stop_reason == "max_tokens"
    assert run.end.data["tokenLimit"] == {
        "cause": "max_tokens", "answerCut": True, "finishReason": "length", "limit": 256,
        "message": "The server cut the answer off at 256 tokens, inside the context window of 32,768 tokens: an "
                   "answer limit of its own. model.maxTokens asks for longer answers, where the server allows them."}
    assert (status["context"]["window"], status["context"]["windowSource"]) == (32768, "configured")
    assert (short.stop_reason, long.stop_reason) == ("end_turn", "end_turn")
    assert "TAIL-MARK" in primary_calls(model)[-1].messages[-1].content  # sent whole: nothing compacted or cut


async def test_a_cut_near_a_configured_window_says_the_context_filled_and_keeps_the_window(autojump_clock):
    model = model_of(says("hello"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            await run_prompt(session, "hi")
            window = await base_tokens(session) + 3000
            model.context_window = window
            model.extend([[text("Once"), {"usage": {"prompt_tokens": window - 500, "completion_tokens": 400}},
                           {"finish": "length"}]])
            run = await run_prompt(session, "tell a long story")
            status = await session.status()
    limit = run.end.data["tokenLimit"]
    assert (limit["cause"], limit["limit"]) == ("context_window", window)
    assert limit["message"] == (f"The answer was cut off: the model's context window of {window:,} tokens filled "
                                f"up (about {window - 100:,} tokens).")
    assert (status["context"]["window"], status["context"]["windowSource"]) == (window, "configured")


async def test_without_a_window_a_cut_below_what_an_earlier_call_held_learns_nothing(autojump_clock):
    model = model_of([text("a long answer"), {"usage": {"prompt_tokens": 5000, "completion_tokens": 800}}],
                     [text("cut"), {"usage": {"prompt_tokens": 3500, "completion_tokens": 256}}, {"finish": "length"}],
                     says("ok"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            await run_prompt(session, "first")
            run = await run_prompt(session, "second")
            status = await session.status()
    # 5,800 tokens evidently fit once, so a cut at 3,756 is not the context's end.
    assert run.end.data["tokenLimit"] == {
        "cause": "max_tokens", "answerCut": True, "finishReason": "length", "limit": 256,
        "message": "The server cut the answer off at 256 tokens: an answer limit of its own. model.maxTokens asks "
                   "for longer answers, where the server allows them."}
    assert (status["context"]["window"], status["context"]["windowSource"]) == (None, None)


# ----------------------------------------------------------------- input that cannot fit


async def test_an_input_that_cannot_fit_even_alone_is_refused_and_not_kept(autojump_clock):
    model = model_of(says("ok"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            window = await base_tokens(session) + 1000
            model.context_window = window
            refused = await run_prompt(session, random_hex(12_000))
            later = await run_prompt(session, "Say ok")
            status = await session.status()
    assert refused.errored and refused.end.data["code"] == "context_overflow"
    message = refused.end.data["message"]
    assert f"context window of {window:,} tokens" in message and "not kept" in message
    assert later.stop_reason == "end_turn"
    [sent] = primary_calls(model)  # nothing was sent for the refused input ...
    assert [m.content for m in sent.messages if m.role == "user"] == ["Say ok"]  # ... and nothing kept
    assert status["historyLength"] == 2


async def test_tool_schemas_count_a_request_that_messages_alone_would_let_through(autojump_clock):
    model = model_of(says("ok"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            base = await base_tokens(session)
            model.context_window = base - 100  # room for the messages, not for the tools on top
            refused = await run_prompt(session, "Say hi")
    assert refused.errored and refused.end.data["code"] == "context_overflow"
    assert model.calls == []


# ----------------------------------------------------------------- messages cut to fit


async def test_a_single_oversized_message_is_cut_to_its_head_and_tail(autojump_clock):
    big = prose(2400)
    second = prose(1500, "SECOND-HEAD", "SECOND-TAIL")
    model = model_of(says("ok"), says("done"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            window = await base_tokens(session) + 3000
            model.context_window = window
            first = await run_prompt(session, big)  # fits alone
            run = await run_prompt(session, second)  # with it, the request would not
    assert first.stop_reason == run.stop_reason == "end_turn"
    sent = primary_calls(model)[1]
    assert sent.estimated_tokens <= window
    users = [m.content for m in sent.messages if m.role == "user"]
    assert users[-1] == second  # the newest input is never cut
    cut = users[0]
    assert cut.startswith("HEAD-MARK") and cut.endswith("TAIL-MARK") and len(cut) < len(big) / 2
    assert "characters cut here to fit the context window" in cut


async def test_compaction_summarises_older_history_first(autojump_clock):
    model = model_of(*[says(f"answer {i}") for i in range(4)], says("summary of it all"), says("done"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            # Four prompts of 300 stay under the compaction threshold; the fifth (800) crosses it.
            model.context_window = int((await base_tokens(session) + 1650) / 0.8)
            for i in range(4):
                await run_prompt(session, prose(300, f"P{i}", f"T{i}"))
            run = await run_prompt(session, prose(800))
    assert run.stop_reason == "end_turn"
    assert [c.purpose for c in model.calls] == ["primary"] * 4 + ["compaction", "primary"]
    assert primary_calls(model)[-1].messages[1].content.startswith("[Summary of the earlier conversation]")


# ----------------------------------------------------------------- overflow answers


async def test_a_server_overflow_is_learnt_compacted_and_retried_once(autojump_clock):
    model = model_of(says("ok"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            limit = await base_tokens(session) + 1500
            model.extend([overflow(limit, limit + 1), says("done")])
            await run_prompt(session, prose(2000))
            run = await run_prompt(session, "next")
            status = await session.status()
    assert run.stop_reason == "end_turn"
    calls = primary_calls(model)
    assert len(calls) == 3 and calls[1].messages[1:] != calls[2].messages[1:]
    assert "characters cut here" in calls[2].messages[1].content
    assert (status["context"]["window"], status["context"]["windowSource"]) == (limit, "server")


async def test_a_second_overflow_refuses_the_input_and_the_next_request_lacks_it(autojump_clock):
    model = model_of(says("ok"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            limit = await base_tokens(session) + 1500
            model.extend([overflow(limit, limit + 1)] * 2 + [says("after")])
            await run_prompt(session, prose(2000))
            refused = await run_prompt(session, "the refused one")
            later = await run_prompt(session, "Say ok")
    assert refused.errored and refused.end.data["code"] == "context_overflow"
    assert f"{limit:,} tokens" in refused.end.data["message"]
    assert later.stop_reason == "end_turn"
    last = primary_calls(model)[-1]
    assert "the refused one" not in [m.content for m in last.messages]


async def test_an_empty_stream_after_a_near_full_request_is_an_overflow(autojump_clock):
    # llama-cpp-python's server: 200, then nothing, when the request is longer than its context.
    model = model_of(says("ok"), {"empty": True}, says("done"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            await run_prompt(session, prose(3000))
            run = await run_prompt(session, "next")
    assert run.stop_reason == "end_turn"
    calls = primary_calls(model)
    assert len(calls) == 3 and "characters cut here" in calls[2].messages[1].content
    # The control: far from full, an empty stream is a broken one, reported as it was, and not retried.
    model = model_of({"empty": True}, says("done"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            model.context_window = 100_000
            run = await run_prompt(session, "hi")
    assert run.errored and run.end.data["code"] == "malformed_stream"
    assert len(model.calls) == 1


# ----------------------------------------------------------------- calibration


async def test_the_servers_prompt_count_calibrates_the_next_estimate_and_shows_in_status(autojump_clock):
    model = model_of([text("first answer"), {"usage": {"prompt_tokens": 1234, "completion_tokens": 5}}],
                     says("second answer"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            before = (await session.status())["context"]
            await run_prompt(session, "first")
            after_first = (await session.status())["context"]
            await run_prompt(session, "second")
            after_second = (await session.status())["context"]
    assert before["estimatedTokens"] is None and before["calibration"] is None
    assert after_first["reportedTokens"] == 1234
    assert after_first["calibration"] == round(1234 / after_first["estimatedTokens"], 3)
    # The second request extends the counted one: the server's count plus the two new messages.
    from actors.model.base import ChatMessage
    from actors.model.estimate import messages_tokens
    added = messages_tokens([ChatMessage("assistant", "first answer"), ChatMessage("user", "second")])
    assert after_second["estimatedTokens"] == 1234 + added == primary_calls(model)[1].estimated_tokens
    assert after_second["reportedTokens"] is None  # that call reported nothing
