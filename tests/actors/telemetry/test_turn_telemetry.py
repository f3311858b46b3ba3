"""Metrics and traces of one canonical guard turn and one cancelled turn, in process.

The metrics are read back through prometheus_client's own parser; the spans are collected by the SDK's
in-memory exporter: one trace per turn, its model calls, tool call, hooks and guard continuations as children.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from actors import telemetry
from tests.actors.session.guard.harness import (
    admit, collect, guard_session, guard_settings, hook_script, hooks_for, model_of, primary_calls, run_prompt,
    todo_write, wait_for,
)

USAGE = {"usage": {"prompt_tokens": 100, "completion_tokens": 10}}
PROMPT = "please do the confidential work"


def canonical_with_usage() -> list[Any]:
    """The canonical guard turn (a todo write, then three natural stops), each call reporting tokens."""
    return [[todo_write(2), USAGE], [{"text": "I will stop here."}, USAGE], [{"text": "Still stopping."}, USAGE],
            [{"text": "Stopping again."}, USAGE]]


def slow() -> dict[str, Any]:
    """A response committed at once, then silent for a long time: the turn to cancel."""
    return {"steps": [{"text": "thinking"}, {"sleep": 600}, {"text": "never"}]}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        telemetry.set_tracer_provider(None)
        telemetry.include_content(False)
        provider.shutdown()


def samples(exposition: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus exposition, parsed by prometheus_client: (name, labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(exposition.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def two_turns(tmp_path: Path, *, content: bool = False) -> tuple[Any, Any, list[Any]]:
    """One canonical guard turn (with a Stop hook that lets it stop), then one turn cancelled mid-stream."""
    telemetry.include_content(content)
    stop_hook = hook_script(tmp_path, "stop.sh", "cat > /dev/null")
    model = model_of(*canonical_with_usage(), slow())
    settings = guard_settings(hooks=hooks_for("Stop", stop_hook))
    with trio.fail_after(60):
        async with guard_session(model, settings, workspace=str(tmp_path)) as session:
            daemon_telemetry = session._session.runtime.telemetry
            canonical = await run_prompt(session, PROMPT)
            assert canonical.attempts == [1, 2, 2]
            admitted = await admit(session, "a turn to cancel")
            await wait_for(lambda: len(primary_calls(model)) == 5)
            await session.cancel()
            cancelled = await collect(session, admitted.last_event_id, admitted.prompt_id)
            exposition = daemon_telemetry.exposition()
    return exposition, daemon_telemetry, [canonical, cancelled]


async def test_metrics_after_a_canonical_guard_turn_and_a_cancelled_turn(tmp_path: Path):
    exposition, _, (canonical, cancelled) = await two_turns(tmp_path)
    assert canonical.stop_reason == "end_turn" and cancelled.stop_reason == "cancelled"
    found = samples(exposition)
    assert value(found, "trellis_turns_total", stop_reason="end_turn") == 1
    assert value(found, "trellis_turns_total", stop_reason="cancelled") == 1
    assert value(found, "trellis_guard_continuations_total") == 2
    assert value(found, "trellis_guard_exhaustions_total") == 1
    assert value(found, "trellis_prompts_total", outcome="admitted", reason="") == 2
    # Model calls: the todo write and its tool-result stop, the two guard continuations, the cancelled one.
    assert value(found, "trellis_model_calls_total", source="primary", outcome="ok") == 2
    assert value(found, "trellis_model_calls_total", source="guard", outcome="ok") == 2
    assert value(found, "trellis_model_calls_total", source="primary", outcome="cancelled") == 1
    assert value(found, "trellis_model_call_duration_seconds_count", source="primary") == 3
    assert value(found, "trellis_model_call_duration_seconds_count", source="guard") == 2
    assert value(found, "trellis_model_call_first_token_seconds_count", source="guard") == 2
    assert value(found, "trellis_model_call_duration_seconds_bucket", source="primary", le="+Inf") == 3
    assert value(found, "trellis_model_tokens_total", source="primary", direction="input") == 200
    assert value(found, "trellis_model_tokens_total", source="guard", direction="output") == 20
    assert value(found, "trellis_tool_calls_total", tool="todo_write", outcome="completed") == 1
    assert value(found, "trellis_hook_runs_total", event="Stop", outcome="ok") >= 3
    assert value(found, "trellis_sessions", state="idle") == 1
    assert value(found, "trellis_prompt_queue_depth") == 0
    assert value(found, "trellis_event_loop_stalls_total") == 0
    # Bounded labels: never a session or prompt id, never a prompt's words.
    text = exposition.decode()
    assert "session-" not in text and "prompt-" not in text and "confidential" not in text


async def test_one_trace_per_turn_with_model_tool_hook_and_guard_spans_as_children(tmp_path: Path, spans, caplog):
    with caplog.at_level(logging.INFO, logger="trellis.session"):
        await two_turns(tmp_path)
    finished = spans.get_finished_spans()
    turns = [s for s in finished if s.name == "invoke_agent trellis"]
    assert len(turns) == 2
    assert all(t.parent is None for t in turns)  # each turn is the root of its own trace
    assert turns[0].context.trace_id != turns[1].context.trace_id
    by_trace = {t.context.trace_id: [s for s in finished if s.context.trace_id == t.context.trace_id] for t in turns}
    canonical, cancelled = turns
    assert canonical.attributes["trellis.stop_reason"] == "end_turn"
    assert canonical.attributes["gen_ai.operation.name"] == "invoke_agent"

    def children(parent: Any, trace: list[Any]) -> list[str]:
        return sorted(s.name for s in trace if s.parent is not None and s.parent.span_id == parent.context.span_id)

    trace = by_trace[canonical.context.trace_id]
    direct = children(canonical, trace)
    assert direct.count("chat model") == 2  # the todo write, and the stop after its result
    assert direct.count("guard_continuation") == 2
    assert direct.count("execute_tool todo_write") == 1
    assert direct.count("hook Stop") == 3  # each natural stop asks the Stop hook
    for guard in (s for s in trace if s.name == "guard_continuation"):
        assert children(guard, trace) == ["chat model"]
        assert guard.attributes["trellis.guard.attempt"] in (1, 2)
    chats = [s for s in trace if s.name == "chat model"]
    assert len(chats) == 4
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 100
        assert chat.attributes["gen_ai.usage.output_tokens"] == 10
    tool = next(s for s in trace if s.name == "execute_tool todo_write")
    assert tool.attributes["gen_ai.tool.name"] == "todo_write"
    assert "gen_ai.tool.call.arguments" not in tool.attributes

    # The cancelled turn: its model call a child, marked cancelled, and so is the turn.
    trace = by_trace[cancelled.context.trace_id]
    assert children(cancelled, trace) == ["chat model"]
    assert cancelled.attributes.get("trellis.cancelled") is True
    assert next(s for s in trace if s.name == "chat model").attributes["trellis.outcome"] == "cancelled"

    # Each "turn ended" log line names its turn's trace and span.
    ended = [r for r in caplog.records if r.getMessage().startswith("turn ended")]
    assert [(r.trace_id, r.span_id) for r in ended] == [
        (format(t.context.trace_id, "032x"), format(t.context.span_id, "016x")) for t in turns]

    # Nothing said in any span: no prompt, no model text, no todo text.
    said = json.dumps([dict(s.attributes) for s in finished], default=str)
    for word in ("confidential", "Stopping again", "secret-task", "thinking"):
        assert word not in said


async def test_include_content_lets_spans_carry_the_prompt_and_tool_arguments(tmp_path: Path, spans):
    await two_turns(tmp_path, content=True)
    finished = spans.get_finished_spans()
    turn = next(s for s in finished if s.name == "invoke_agent trellis")
    assert turn.attributes["trellis.prompt"] == PROMPT
    tool = next(s for s in finished if s.name == "execute_tool todo_write")
    assert "secret-task" in tool.attributes["gen_ai.tool.call.arguments"]


async def test_with_tracing_off_no_span_is_made_and_metrics_still_count(tmp_path: Path):
    assert not telemetry.tracing_on()
    exposition, _, _ = await two_turns(tmp_path)
    assert value(samples(exposition), "trellis_turns_total", stop_reason="end_turn") == 1
