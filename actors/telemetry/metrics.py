"""The daemon's metrics: one :class:`Telemetry` per daemon, its own ``CollectorRegistry`` (never the process's
default, so tests and several daemons in one process keep apart), and small named functions the code calls.

Counters that follow what a session publishes are fed by :meth:`Telemetry.observe`, an observer of each
session's event bus (turns by stop reason, tokens by source). What no event says is counted by a direct call:
model calls and their latency (:meth:`model_call`), tool calls, hook runs, guard continuations, refusals,
SSE evictions, sandbox spawns and the cluster's takeovers and fenced writes. What is a state rather than a
count (sessions by state, queued prompts, SSE subscribers, event-loop stalls, leases held) is read when
``/metrics`` is scraped, from the sources :meth:`Telemetry.watch` was given.

Labels are bounded: never a session or prompt id; a tool is its built-in name, or ``mcp__<server>`` for the
first :data:`MAX_MCP_SERVERS` servers seen, ``mcp`` for the rest, and ``other`` for any other tool (a client's,
or a name the model made up).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from opentelemetry.trace import INVALID_SPAN

MAX_MCP_SERVERS = 20
SOURCES = {"primary": "primary", "todo_stop_guard": "guard", "compaction": "compaction", "suggestion": "suggestion"}
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Process-wide counts of what has no daemon at hand (a sandboxed command's start): every daemon reports them.
PROCESS_COUNTS: dict[tuple[str, str], int] = {}


def count_process(name: str, label: str) -> None:
    """Count one ``name`` (``sandbox_spawns``) with ``label`` in the process's counts."""
    key = (name, label)
    PROCESS_COUNTS[key] = PROCESS_COUNTS.get(key, 0) + 1


def source_label(source: str) -> str:
    return SOURCES.get(source, "other")


class _Live(Collector):
    """What is read at each scrape: sessions by state, queue depth, subscribers, stalls, leases, process counts."""

    def __init__(self, telemetry: Telemetry) -> None:
        self._t = telemetry

    def describe(self) -> Iterable[Any]:
        return []  # read at scrape time; not described up front

    def collect(self) -> Iterable[Any]:
        t = self._t
        states = GaugeMetricFamily("trellis_sessions", "Live sessions by state.", labels=["state"])
        queued = GaugeMetricFamily("trellis_prompt_queue_depth", "Prompts waiting in sessions' FIFOs (all sessions).")
        subscribers = GaugeMetricFamily("trellis_sse_subscribers", "Event-stream subscribers (all sessions).")
        counts = {"idle": 0, "running": 0}
        depth = 0
        subs = 0
        for handle in t.sessions():
            work = handle.summary()
            counts[work["state"]] = counts.get(work["state"], 0) + 1
            depth += work["queuedCount"]
            subs += handle.subscriber_count
        for state, n in sorted(counts.items()):
            states.add_metric([state], n)
        queued.add_metric([], depth)
        subscribers.add_metric([], subs)
        yield states
        yield queued
        yield subscribers
        stalls = CounterMetricFamily("trellis_event_loop_stalls", "Task steps (or waits) that held the event loop "
                                     "over the --report-loop-stalls threshold (0 when not watched).")
        stalls.add_metric([], t.stall_watch.stalls if t.stall_watch is not None else 0)
        yield stalls
        thaws = CounterMetricFamily("trellis_gc_thaws", "Full garbage collections that walked every object, "
                                    "begun as sessions closed (the serve command's garbage-collection "
                                    "policy; 0 when embedded).")
        thaws.add_metric([], t.collector.thaws if t.collector is not None else 0)
        yield thaws
        spawns = CounterMetricFamily("trellis_sandbox_spawns", "Model-run commands, sandboxed hooks and stdio MCP servers started, by outcome "
                                     "(started, failed); the process's, whichever daemon runs them.",
                                     labels=["sandboxed", "outcome"])
        for (name, label), n in sorted(PROCESS_COUNTS.items()):
            if name == "sandbox_spawns":
                sandboxed, _, outcome = label.partition(":")
                spawns.add_metric([sandboxed, outcome], n)
        yield spawns
        if t.leases is not None:
            held = GaugeMetricFamily("trellis_cluster_leases_held", "Session leases this node holds (cluster mode).")
            held.add_metric([], t.leases())
            yield held
            fenced = CounterMetricFamily("trellis_cluster_fenced_writes_refused", "Writes refused because this "
                                         "node's lease of the session was gone (cluster mode).")
            fenced.add_metric([], PROCESS_COUNTS.get(("cluster_fenced_writes_refused", ""), 0))
            yield fenced


class ModelCall:
    """One model call, timed: ``first()`` at its first streamed item, ``end(outcome, usage)`` once."""

    __slots__ = ("_t", "source", "started", "first_at", "span")

    def __init__(self, telemetry: Telemetry, source: str, span: Any) -> None:
        self._t = telemetry
        self.source = source_label(source)
        self.started = time.perf_counter()
        self.first_at: float | None = None
        self.span = span

    def first(self) -> None:
        if self.first_at is None:
            self.first_at = time.perf_counter()

    def end(self, outcome: str, usage: Any = None, finish: str | None = None) -> None:
        t = self._t
        now = time.perf_counter()
        t.child(t.model_calls, self.source, outcome).inc()
        t.child(t.model_duration, self.source).observe(now - self.started)
        if self.first_at is not None:
            t.child(t.model_first_token, self.source).observe(self.first_at - self.started)
        span = self.span
        if span.is_recording():
            if usage is not None:
                span.set_attribute("gen_ai.usage.input_tokens", usage.prompt_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", usage.completion_tokens)
            if finish is not None:
                span.set_attribute("gen_ai.response.finish_reasons", (finish,))
            if self.first_at is not None:
                span.set_attribute("trellis.time_to_first_token_ms", round((self.first_at - self.started) * 1000, 3))
            span.set_attribute("trellis.outcome", outcome)


class Telemetry:
    """One daemon's registry and instruments (see the module's docstring)."""

    NONE: Telemetry

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.prompts = Counter("trellis_prompts", "Prompts offered to sessions' FIFOs, by outcome (admitted, "
                               "refused) and refusal reason.", ["outcome", "reason"], registry=r)
        self.turns = Counter("trellis_turns", "Turns ended, by stop reason (end_turn, cancelled, max_tokens, "
                             "error, ...).", ["stop_reason"], registry=r)
        self.model_calls = Counter("trellis_model_calls", "Committed model calls, by source (primary, guard, "
                                   "compaction, suggestion) and outcome (ok, error, cancelled).",
                                   ["source", "outcome"], registry=r)
        self.model_first_token = Histogram("trellis_model_call_first_token_seconds", "Time from a model call's "
                                           "send to its first streamed item.", ["source"], registry=r,
                                           buckets=LATENCY_BUCKETS)
        self.model_duration = Histogram("trellis_model_call_duration_seconds", "A model call's whole duration.",
                                        ["source"], registry=r, buckets=LATENCY_BUCKETS)
        self.tokens = Counter("trellis_model_tokens", "Tokens the model server reported, by source and direction "
                              "(input, output).", ["source", "direction"], registry=r)
        self.guard_continuations = Counter("trellis_guard_continuations", "Todo Stop Guard continuations sent.",
                                           registry=r)
        self.guard_exhaustions = Counter("trellis_guard_exhaustions", "Todo Stop Guard chains that ran out of "
                                         "attempts with todos unfinished.", registry=r)
        self.tool_calls = Counter("trellis_tool_calls", "Tool calls, by tool (built-in name, mcp__<server> or "
                                  "mcp, other) and outcome (completed, failed, refused).", ["tool", "outcome"], registry=r)
        self.hook_runs = Counter("trellis_hook_runs", "Hook events run, by event and outcome (ok, failed, "
                                 "blocked).", ["event", "outcome"], registry=r)
        self.sse_evictions = Counter("trellis_sse_evictions", "Event-stream subscribers evicted for falling "
                                     "behind, by reason.", ["reason"], registry=r)
        self.takeovers = Counter("trellis_cluster_takeovers", "Sessions this node took over from another "
                                 "(cluster mode).", registry=r)
        for stop in ("end_turn", "cancelled", "max_tokens", "error"):
            self.turns.labels(stop)  # shown at 0 before the first turn
        self.sessions: Callable[[], list[Any]] = list
        self.stall_watch: Any = None
        self.collector: Any = None
        self.leases: Callable[[], int] | None = None
        self._mcp_servers: set[str] = set()
        self._children: dict[tuple[Any, ...], Any] = {}  # labelled children, looked up once (labels() is slow)
        r.register(_Live(self))

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, kept: a dict lookup the next time rather than prometheus_client's checks
        and lock."""
        key = (metric, *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    # ------------------------------------------------------------- what is read at a scrape

    def watch(self, *, sessions: Callable[[], list[Any]] | None = None, stall_watch: Any = None,
              leases: Callable[[], int] | None = None, collector: Any = None) -> None:
        """Read these at each scrape: ``sessions`` (the live sessions' handles: ``summary()``, ``subscriber_count``),
        the event-loop ``stall_watch`` (:class:`actors.loop_stalls.StallWatch`), the cluster's ``leases`` held,
        the garbage-collection policy (``collector``: its ``thaws``)."""
        if sessions is not None:
            self.sessions = sessions
        if stall_watch is not None:
            self.stall_watch = stall_watch
        if leases is not None:
            self.leases = leases
        if collector is not None:
            self.collector = collector

    def exposition(self) -> bytes:
        """The Prometheus text format of everything (``GET /metrics``)."""
        return generate_latest(self.registry)

    # ------------------------------------------------------------- observed events

    def observe(self, event: Any) -> None:
        """A session's bus observer: turns by stop reason, tokens by source."""
        kind = event.type
        if kind == "session_update":
            meta = event.data["update"].get("_meta")
            if meta is not None and "usageSource" in meta:
                usage = meta.get("usage") or {}
                source = source_label(meta["usageSource"])
                self.child(self.tokens, source, "input").inc(usage.get("inputTokens") or 0)
                self.child(self.tokens, source, "output").inc(usage.get("outputTokens") or 0)
        elif kind == "turn_complete":
            self.child(self.turns, str(event.data.get("stopReason") or "end_turn")).inc()
        elif kind == "turn_error":
            self.child(self.turns, "error").inc()

    # ------------------------------------------------------------- direct calls

    def prompt_admitted(self) -> None:
        self.child(self.prompts, "admitted", "").inc()

    def prompt_refused(self, reason: str) -> None:
        self.prompts.labels("refused", reason).inc()

    def model_call(self, source: str, span: Any = INVALID_SPAN) -> ModelCall:
        return ModelCall(self, source, span)

    def tool_label(self, name: str, builtin: bool) -> str:
        if builtin:
            return name
        if not name.startswith("mcp__"):
            return "other"  # a client's tool, or a name the model made up: never the name itself
        server = name[5:].partition("__")[0]
        if server in self._mcp_servers:
            return f"mcp__{server}"
        if len(self._mcp_servers) < MAX_MCP_SERVERS:
            self._mcp_servers.add(server)
            return f"mcp__{server}"
        return "mcp"

    def tool_called(self, name: str, builtin: bool, outcome: str) -> None:
        self.child(self.tool_calls, self.tool_label(name, builtin), outcome).inc()

    def hook_ran(self, event: str, outcome: str) -> None:
        self.child(self.hook_runs, event, outcome).inc()

    def guard_continued(self) -> None:
        self.guard_continuations.inc()

    def guard_exhausted(self) -> None:
        self.guard_exhaustions.inc()

    def sse_evicted(self, reason: str) -> None:
        self.sse_evictions.labels(reason).inc()

    def took_over(self) -> None:
        self.takeovers.inc()


Telemetry.NONE = Telemetry()  # what a part built without a daemon's counts into (nobody reads it)

__all__ = ["CONTENT_TYPE", "MAX_MCP_SERVERS", "ModelCall", "PROCESS_COUNTS", "Telemetry", "count_process",
           "source_label"]
