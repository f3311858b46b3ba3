"""The instruments one by one: labels stay bounded, registries stay apart, what no event says is counted where
it happens, trace ids reach the JSON log, and a traceparent goes across and comes back the same trace."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from actors import CountingIds, Limits, Settings, open_daemon, telemetry, wire
from actors.events import EventBus
from actors.loop_stalls import StallWatch
from actors.session.publisher import Publisher
from actors.telemetry import Telemetry, tracing
from actors.telemetry.metrics import MAX_MCP_SERVERS, PROCESS_COUNTS, count_process
from tests.actors.session.guard.harness import body, model_of, says
from transport.logs import JsonFormatter


def found(t: Telemetry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(t.exposition().decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(t: Telemetry, name: str, **labels: str) -> float:
    return found(t).get((name, tuple(sorted(labels.items()))), 0.0)


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
        provider.shutdown()


def test_each_daemon_has_a_registry_of_its_own():
    a, b = Telemetry(), Telemetry()
    a.turns.labels("end_turn").inc()
    assert value(a, "trellis_turns_total", stop_reason="end_turn") == 1
    assert value(b, "trellis_turns_total", stop_reason="end_turn") == 0
    assert value(b, "trellis_turns_total", stop_reason="cancelled") == 0  # present at 0 from the start


def test_tool_labels_are_bounded_mcp_servers_capped():
    t = Telemetry()
    t.tool_called("read_file", True, "completed")
    t.tool_called("mcp__docs__search", False, "failed")
    for n in range(MAX_MCP_SERVERS + 5):
        t.tool_called(f"mcp__server{n}__tool{n}", False, "completed")
    t.tool_called("some_discovered_tool", False, "completed")
    tools = {labels[1][1] for (name, labels) in found(t) if name == "trellis_tool_calls_total"}
    assert "read_file" in tools and "mcp__docs" in tools and "mcp" in tools and "other" in tools
    assert "some_discovered_tool" not in tools
    assert not any("tool" in label.split("__")[-1] for label in tools if label.startswith("mcp__"))
    assert len(tools) == MAX_MCP_SERVERS + 3  # the built-in one, the capped servers, "mcp", "other"


def test_bus_events_feed_turns_and_tokens_and_an_eviction_is_counted():
    t = Telemetry()
    bus = EventBus(100)
    publisher = Publisher("s1", bus, t)
    slow = bus.subscribe(max_queued=2)
    publisher.update(wire.usage_update(wire.call_usage(7, 3, 10, None), "compaction", 5))
    publisher.event("turn_complete", wire.turn_complete("s1", "p1", "max_tokens"))
    publisher.event("turn_error", wire.turn_error("s1", "p2", "boom", "model_error"))
    assert slow.evicted
    assert value(t, "trellis_model_tokens_total", source="compaction", direction="input") == 7
    assert value(t, "trellis_model_tokens_total", source="compaction", direction="output") == 3
    assert value(t, "trellis_turns_total", stop_reason="max_tokens") == 1
    assert value(t, "trellis_turns_total", stop_reason="error") == 1
    assert value(t, "trellis_sse_evictions_total", reason="queue_overflow") == 1


def test_process_counts_stalls_and_leases_are_read_at_a_scrape():
    t = Telemetry()
    before = value(t, "trellis_sandbox_spawns_total", sandboxed="no", outcome="failed")
    count_process("sandbox_spawns", "no:failed")
    assert value(t, "trellis_sandbox_spawns_total", sandboxed="no", outcome="failed") == before + 1
    watch = StallWatch(5.0, armed=False)
    watch.stalls = 3
    t.watch(stall_watch=watch, leases=lambda: 4)
    assert value(t, "trellis_event_loop_stalls_total") == 3
    assert value(t, "trellis_cluster_leases_held") == 4
    assert value(t, "trellis_cluster_fenced_writes_refused_total") == PROCESS_COUNTS.get(
        ("cluster_fenced_writes_refused", ""), 0)
    t.took_over()
    assert value(t, "trellis_cluster_takeovers_total") == 1


async def test_a_prompt_refused_for_a_full_queue_is_counted_by_reason():
    model = model_of(*[{"steps": [{"sleep": 60}, {"text": "slow"}]}], says("x"), says("y"))
    settings = Settings(approval_mode="yolo", limits=Limits(max_pending_prompts=1))
    with trio.fail_after(30):
        async with open_daemon(settings, model=model, ids=CountingIds()) as daemon:
            session, _ = await daemon.create_session()
            t = daemon.runtime.telemetry
            outcomes = [await session.prompt(body(f"p{n}")) for n in range(3)]
            assert any(not hasattr(o, "prompt_id") for o in outcomes)
            refused = value(t, "trellis_prompts_total", outcome="refused", reason="prompt_queue_full")
            admitted = value(t, "trellis_prompts_total", outcome="admitted", reason="")
            assert refused >= 1 and admitted + refused == 3
            assert value(t, "trellis_sessions", state="running") == 1
            await session.cancel()


def test_spans_are_off_by_default_and_cost_no_context():
    assert not telemetry.tracing_on()
    with telemetry.span("anything") as s:
        assert not s.is_recording()
        assert telemetry.current_ids() is None
    assert telemetry.inject({}) == {}


async def test_child_tasks_inherit_the_span_and_json_log_lines_carry_its_ids(spans):
    record: dict[str, Any] = {}

    async def child() -> None:
        with telemetry.span("child"):
            line = logging.LogRecord("trellis.session", logging.INFO, __file__, 0, "in the child", (), None)
            record["line"] = JsonFormatter().format(line)

    with telemetry.span("parent", root=True) as parent:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert finished["child"].parent.span_id == parent.get_span_context().span_id
    line = orjson.loads(record["line"])
    assert line["trace_id"] == format(parent.get_span_context().trace_id, "032x")
    assert line["span_id"] == format(finished["child"].context.span_id, "016x")


def test_a_traceparent_goes_across_and_the_owner_continues_the_trace(spans):
    with telemetry.span("forward", root=True) as sender:
        headers = telemetry.inject({})
    assert headers["traceparent"].split("-")[1] == format(sender.get_span_context().trace_id, "032x")
    with telemetry.continued(telemetry.extract(headers), "forwarded POST"):
        with telemetry.span("inner"):
            pass
    finished = {s.name: s for s in spans.get_finished_spans()}
    assert finished["forwarded POST"].parent.span_id == sender.get_span_context().span_id
    assert finished["inner"].context.trace_id == sender.get_span_context().trace_id


def test_the_standard_variables_decide_whether_traces_are_wanted():
    assert not tracing.wanted({})
    assert tracing.wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing.wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing.wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not tracing.wanted({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"})
    assert tracing.configure_from_environment({}) is None


def test_configured_from_the_environment_with_the_sdk():
    try:
        said = tracing.configure_from_environment({"OTEL_TRACES_EXPORTER": "console"})
        assert said is not None and telemetry.tracing_on()
    finally:
        telemetry.set_tracer_provider(None)


async def test_a_shell_call_after_a_permission_wait_counts_a_spawn_and_traces_the_wait(spans, tmp_path):
    model = model_of([{"tool_call": {"id": "call_1", "name": "shell", "arguments": {"command": "echo hi"}}}],
                     says("done"))
    before = PROCESS_COUNTS.get(("sandbox_spawns", "yes:started"), 0) + PROCESS_COUNTS.get(
        ("sandbox_spawns", "no:started"), 0)
    with trio.fail_after(60):
        async with open_daemon(Settings(), model=model, ids=CountingIds(), workspace=str(tmp_path)) as daemon:
            session, _ = await daemon.create_session()
            admitted = await session.prompt(body("run it"))
            async with session.subscribe(last_event_id=admitted.last_event_id) as sub:
                async for event in sub:
                    if event.type == "permission_request":
                        assert await session.vote(event.data["requestId"], "selected", "proceed_once")
                    if event.type in ("turn_complete", "turn_error") and event.prompt_id == admitted.prompt_id:
                        break
            assert event.type == "turn_complete"
            t = daemon.runtime.telemetry
    after = PROCESS_COUNTS.get(("sandbox_spawns", "yes:started"), 0) + PROCESS_COUNTS.get(
        ("sandbox_spawns", "no:started"), 0)
    assert after == before + 1
    assert value(t, "trellis_tool_calls_total", tool="shell", outcome="completed") == 1
    finished = spans.get_finished_spans()
    tool = next(s for s in finished if s.name == "execute_tool shell")
    wait = next(s for s in finished if s.name == "permission_wait shell")
    assert "echo hi" not in str([dict(s.attributes) for s in finished]) + str([s.name for s in finished])
    assert wait.parent.span_id == tool.context.span_id
    assert wait.attributes["trellis.permission.outcome"] == "allowed"
    turn = next(s for s in finished if s.name == "invoke_agent trellis")
    assert tool.parent.span_id == turn.context.span_id


async def test_a_stdio_mcp_servers_start_and_failure_are_sandbox_spawns(tmp_path):
    import sys

    from actors.mcp_client.stdio import StdioProcess
    from actors.process import NO_SANDBOX

    def counted(outcome: str) -> int:
        return PROCESS_COUNTS.get(("sandbox_spawns", f"no:{outcome}"), 0)

    started, failed = counted("started"), counted("failed")
    process = StdioProcess([sys.executable, "-c", "pass"], str(tmp_path), {}, sandbox=NO_SANDBOX,
                           session_cwd=str(tmp_path))
    process.start()
    with trio.fail_after(10):
        await process.wait()
    assert counted("started") == started + 1
    missing = StdioProcess([str(tmp_path / "no-such-server")], str(tmp_path), {}, sandbox=NO_SANDBOX,
                           session_cwd=str(tmp_path))
    try:
        missing.start()
    except OSError:
        pass
    assert counted("failed") == failed + 1
