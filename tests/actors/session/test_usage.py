"""Usage accounting (actors/session/usage.py): each model call published, summed per turn, per
turn record and per session, and attributed to what caused it — the Todo Stop Guard's extra calls
included (spec 000: "Normal usage metadata still accounts for the additional calls")."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from actors import CountingIds, Settings, open_daemon
from actors.storage import writer
from actors.storage.local import LocalStore
from tests.actors.session.guard.harness import (
    call,
    guard_session,
    guard_settings,
    model_of,
    run_prompt,
    says,
    text,
    todo_write,
    virtual_now,
)

YOLO = Settings(approval_mode="yolo")


def usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    """A scripted ``usage`` step (OpenAI's names; ``cached`` is prompt_tokens_details.cached_tokens)."""
    figures = {"prompt_tokens": prompt, "completion_tokens": completion}
    if cached is not None:
        figures["cached_tokens"] = cached
    return {"usage": figures}


def tally(calls: int, inputs: int = 0, outputs: int = 0, cached: int = 0) -> dict[str, int]:
    return {"calls": calls, "inputTokens": inputs, "outputTokens": outputs, "cachedReadTokens": cached,
            "totalTokens": inputs + outputs}


def summary(**by_source: dict[str, int]) -> dict[str, Any]:
    total = {k: sum(t[k] for t in by_source.values()) for k in tally(0)}
    return {**total, "bySource": by_source}


def published(events: list[Any]) -> list[tuple[dict[str, Any], str]]:
    """The per-call usage updates among ``events``: (``_meta.usage``, ``_meta.usageSource``)."""
    out = []
    for event in events:
        update = event.update
        meta = (update or {}).get("_meta") or {}
        if "usage" in meta:
            assert update["sessionUpdate"] == "agent_message_chunk" and update["content"] == {"type": "text",
                                                                                             "text": ""}
            assert isinstance(meta["durationMs"], int) and meta["durationMs"] >= 0
            out.append((meta["usage"], meta["usageSource"]))
    return out


async def test_each_call_is_published_and_summed_on_the_turn_its_record_and_the_session(autojump_clock):
    model = model_of(
        [text("Planning. "), call("todo_write", todos=[{"id": "1", "content": "x", "status": "completed"}]),
         usage(100, 20, cached=60)],
        [text("Done."), usage(130, 10)],
        [text("Again."), usage(7, 3, cached=0)],
    )
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            first = await run_prompt(session)
            record = await session.turn(first.prompt_id)
            after_first = (await session.status())["usage"]
            second = await run_prompt(session, "once more")
            status = (await session.status())["usage"]
    # Each call, as qwen-code's session emits it: ACP Usage names; cachedReadTokens only when reported.
    assert published(first.events) == [
        ({"inputTokens": 100, "outputTokens": 20, "totalTokens": 120, "cachedReadTokens": 60}, "primary"),
        ({"inputTokens": 130, "outputTokens": 10, "totalTokens": 140}, "primary"),
    ]
    expected = summary(primary=tally(2, 230, 30, cached=60))
    assert first.end.type == "turn_complete" and first.end.data["usage"] == expected
    assert record["usage"] == expected
    assert after_first == expected
    assert second.end.data["usage"] == summary(primary=tally(1, 7, 3))
    assert status == summary(primary=tally(3, 237, 33, cached=60))  # cumulative


async def test_a_model_that_reports_no_usage_leaves_turns_as_they_were_but_its_calls_count(autojump_clock):
    model = model_of(
        [call("todo_write", todos=[{"id": "1", "content": "x", "status": "completed"}])], says("done"))
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            run = await run_prompt(session)
            record = await session.turn(run.prompt_id)
            status = await session.status()
    assert published(run.events) == []
    assert "usage" not in run.end.data and "usage" not in record
    assert status["usage"] == summary(primary=tally(2))


async def test_guard_continuations_are_counted_and_attributed_to_the_guard(autojump_clock):
    model = model_of([todo_write(2), usage(10, 2)], [text("stopping"), usage(20, 3)],
                     [text("g1"), usage(30, 4, cached=25)], [text("g2"), usage(40, 5)], says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            record = await session.turn(run.prompt_id)
            status = (await session.status())["usage"]
    assert run.attempts == [1, 2, 2]  # two continuations, then exhaustion
    assert [source for _, source in published(run.events)] == ["primary", "primary", "todo_stop_guard",
                                                                "todo_stop_guard"]
    expected = summary(primary=tally(2, 30, 5), todo_stop_guard=tally(2, 70, 9, cached=25))
    assert run.end.data["usage"] == expected
    assert record["usage"] == expected
    assert status == expected
    # Each guard call's figures follow the guard's own attempt message, which carries none.
    kinds = [("guard" if (e.update or {}).get("_meta", {}).get("source") == "todo_stop_guard" else
              "usage" if "usage" in (e.update or {}).get("_meta", {}) else None) for e in run.events]
    kinds = [k for k in kinds if k]
    assert kinds == ["usage", "usage", "guard", "usage", "guard", "usage", "guard"]


async def test_the_guards_tool_closure_follow_up_is_a_guard_call(autojump_clock):
    # The first guard stream completes every todo through a tool call; the remaining attempt sends
    # the tool result: guard-attributable too (spec 000).
    model = model_of([todo_write(2), usage(10, 1)], [text("stopping"), usage(10, 1)],
                     [todo_write(0, completed=2), usage(10, 1)], [text("all done"), usage(10, 1)], says("never"))
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
    assert run.attempts == [1, 2]
    assert run.end.data["usage"]["bySource"] == {"primary": tally(2, 20, 2), "todo_stop_guard": tally(2, 20, 2)}


async def test_a_failed_guard_stream_is_a_call_without_tokens(autojump_clock):
    model = model_of([todo_write(2), usage(10, 2)], [text("stopping"), usage(20, 3)],
                     [text("partial"), {"fail": {"code": "server_error"}}])
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
            record = await session.turn(run.prompt_id)
    assert run.errored and run.end.data["code"] == "server_error"
    expected = summary(primary=tally(2, 30, 5), todo_stop_guard=tally(1))
    assert run.end.data["usage"] == expected
    assert record["usage"] == expected and record["state"] == "error"


async def test_a_refused_request_is_no_call(autojump_clock):
    model = model_of([text("hi"), usage(5, 1)], {"refuse": {"code": "rate_limited"}})
    with trio.fail_after(60):
        async with guard_session(model, YOLO) as session:
            await run_prompt(session)
            refused = await run_prompt(session)
            status = (await session.status())["usage"]
    assert refused.errored and "usage" not in refused.end.data
    assert status == summary(primary=tally(1, 5, 1))


async def test_a_compaction_call_counts_on_its_turn_as_compaction(autojump_clock):
    # Enough history that the first guard send needs compaction (as in test_pre_send). The primary
    # calls report no prompt tokens: a server's count calibrates the estimate, and a count of 10 for
    # this history would (rightly) say that no compaction is needed.
    model = model_of(
        [todo_write(2), usage(0, 1)], [call("shell_output", task_id="a"), usage(0, 1)],
        [call("shell_output", task_id="b"), usage(0, 1)], [text("z" * 3000), usage(0, 1)],
        [text("summary"), usage(500, 50)],
        [text("g1"), usage(0, 1)], [text("g2"), usage(0, 1)], says("never"), context_window=1200)
    with trio.fail_after(60):
        async with guard_session(model) as session:
            run = await run_prompt(session)
    assert [c.purpose for c in model.calls][:6] == ["primary"] * 4 + ["compaction", "primary"]
    assert "compaction" in [s for _, s in published(run.events)]
    assert run.end.data["usage"]["bySource"] == {
        "primary": tally(4, 0, 4), "compaction": tally(1, 500, 50), "todo_stop_guard": tally(2, 0, 2)}


async def test_a_suggestion_call_counts_on_the_turn_record_and_the_session_after_turn_complete(autojump_clock):
    model = model_of([text("done"), usage(10, 2)], [text("try this\nor that"), usage(30, 6)])
    settings = Settings(approval_mode="yolo", followup_suggestions=True)
    with trio.fail_after(60):
        async with guard_session(model, settings) as session:
            admitted = await session.prompt("work")
            events = []
            async with session.subscribe(last_event_id=admitted.last_event_id) as sub:
                async for event in sub:
                    events.append(event)
                    if event.type == "followup_suggestion":
                        break
            record = await session.turn(admitted.prompt_id)
            status = (await session.status())["usage"]
    end = next(e for e in events if e.type == "turn_complete")
    assert end.data["usage"] == summary(primary=tally(1, 10, 2))  # the suggestion came after it
    assert [(s, e.prompt_id) for e in events for _, s in published([e])] == [
        ("primary", admitted.prompt_id), ("suggestion", admitted.prompt_id)]
    expected = summary(primary=tally(1, 10, 2), suggestion=tally(1, 30, 6))
    assert record["usage"] == expected and status == expected


async def test_an_automatic_turn_carries_its_usage_and_counts_for_the_session(autojump_clock):
    model = model_of([call("schedule_wakeup", delay=90, note="check"), usage(4, 1)], [text("set"), usage(5, 1)],
                     [text("checked"), usage(6, 1)])
    with trio.fail_after(300):
        async with guard_session(model, YOLO) as session:
            await run_prompt(session)
            events = []
            async with session.subscribe(last_event_id=session.last_event_id) as sub:
                async for event in sub:
                    events.append(event)
                    if event.type == "turn_complete" and (event.prompt_id or "").startswith("auto"):
                        break
            status = (await session.status())["usage"]
    assert events[-1].data["usage"] == summary(primary=tally(1, 6, 1))
    assert status == summary(primary=tally(3, 15, 3))


@pytest.mark.parametrize("compact_every", [None, 3], ids=["journal", "compacted-journal"])
async def test_turn_records_and_the_session_total_survive_a_restart(autojump_clock, tmp_path, monkeypatch,
                                                                    compact_every):
    if compact_every is not None:  # the journal is rewritten from the FIFO's snapshot every few records
        monkeypatch.setattr(writer, "COMPACT_AFTER", compact_every)
    model = model_of([todo_write(2), usage(10, 2)], [text("stopping"), usage(20, 3)],
                     [text("g1"), usage(30, 4, cached=25)], [text("g2"), usage(40, 5)],
                     [text("second"), usage(1, 1)])
    with trio.fail_after(60):
        async with guard_session(model, state_dir=tmp_path) as session:
            first = await run_prompt(session)
            second = await run_prompt(session, "next")
            records = [await session.turn(r.prompt_id) for r in (first, second)]
            status = (await session.status())["usage"]
            session_id = session.session_id
    assert records[0]["usage"]["bySource"]["todo_stop_guard"] == tally(2, 70, 9, cached=25)
    ops = [r["op"] for r in LocalStore(tmp_path).journal_read(session_id)]
    assert ("session_usage" in ops) == (compact_every is not None)
    with trio.fail_after(60):
        async with open_daemon(guard_settings(), model=model_of(), ids=CountingIds(), now=virtual_now,
                               state_dir=tmp_path) as daemon:
            restored = await daemon.load_session(session_id)
            assert [await restored.turn(r.prompt_id) for r in (first, second)] == records
            assert (await restored.status())["usage"] == status
