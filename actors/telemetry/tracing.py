"""Traces through the OpenTelemetry API: a span per turn, children per model call, tool, hook, permission wait
and guard continuation.

Tracing is off unless a tracer provider is set: by :func:`configure_from_environment` (the ``otel`` extra's
SDK and OTLP exporter, when ``OTEL_TRACES_EXPORTER`` or ``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT`` asks for
them) or by :func:`set_tracer_provider` (tests, an embedding program). Off, :func:`span` hands out one
shared non-recording span and touches no context: a turn pays a flag test per span. On, spans are made
current through OpenTelemetry's context, a ``contextvars`` variable, which Trio copies into each task at
spawn: a span opened in a turn is the parent of the spans of the tasks the turn starts.

Callers build attributes only when ``span.is_recording()``; none carries a prompt, model text, a tool's
arguments or a secret unless :func:`include_content` says so (the ``telemetry.includeContent`` setting).
"""

from __future__ import annotations

import logging
import os
from contextvars import ContextVar
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("trellis.telemetry")

TRACER_NAME = "trellis"
_PROPAGATOR = TraceContextTextMapPropagator()  # W3C traceparent, whatever OTEL_PROPAGATORS says
_ROOT = otel_context.Context()  # a turn starts a trace of its own


class _State:
    on = False  # a tracer provider was set: spans are made
    tracer: trace.Tracer = trace.NoOpTracer()
    include_content = False


STATE = _State()


def set_tracer_provider(provider: Any | None) -> None:
    """Trace through ``provider`` (an SDK ``TracerProvider``); ``None``: tracing off again."""
    if provider is None:
        STATE.on, STATE.tracer = False, trace.NoOpTracer()
    else:
        STATE.on, STATE.tracer = True, provider.get_tracer(TRACER_NAME)


def include_content(on: bool | None = None) -> bool:
    """Whether spans may carry prompts, model text and tool arguments (``telemetry.includeContent``); sets it
    when ``on`` is given."""
    if on is not None:
        STATE.include_content = bool(on)
    return STATE.include_content


def tracing_on() -> bool:
    return STATE.on


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """The standard variables ask for traces: ``OTEL_TRACES_EXPORTER`` other than ``none``, or an OTLP endpoint
    (with no exporter named); ``OTEL_SDK_DISABLED=true`` wins."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure_from_environment(environ: Mapping[str, str] | None = None) -> str | None:
    """Set up the SDK from the ``OTEL_*`` variables when they ask for traces; returns what was set up (a
    sentence for the start-up line) or ``None``. Raises ``RuntimeError`` when asked for without the ``otel``
    extra installed."""
    env = os.environ if environ is None else environ
    if not wanted(env):
        return None
    try:
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:
        raise RuntimeError("OTEL_* variables ask for traces but the OpenTelemetry SDK is not installed: "
                           "pip install 'trellis[otel]'") from exc
    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "trellis"}).merge(
        OTELResourceDetector().detect())
    provider = TracerProvider(resource=resource)
    names = [n.strip().lower() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",") if n.strip()]
    for name in names:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                        or "http/protobuf")
            if protocol != "http/protobuf":
                raise RuntimeError(f"OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}: only http/protobuf is supported")
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError as exc:
                raise RuntimeError("OTEL_TRACES_EXPORTER=otlp needs the OTLP exporter: "
                                   "pip install 'trellis[otel]'") from exc
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # reads OTEL_EXPORTER_OTLP_*
        elif name != "none":
            raise RuntimeError(f"OTEL_TRACES_EXPORTER {name!r}: one of otlp, console, none")
    set_tracer_provider(provider)
    return f"traces exported ({', '.join(names)})"


class _Off:
    """What :func:`span` hands out with tracing off: the shared non-recording span, nothing else done."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return INVALID_SPAN

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        return None


_OFF = _Off()


def span(name: str, attributes: Mapping[str, Any] | None = None, *, root: bool = False,
         kind: SpanKind = SpanKind.INTERNAL) -> _Span | _Off:
    """``with span(name, attributes) as s:`` — a child of the current span, made current; the shared
    non-recording span when tracing is off (no context touched, no object made). An exception ends it with an
    error status (a cancellation with ``trellis.cancelled`` instead). ``root=True`` starts a trace of its own."""
    if not STATE.on:
        return _OFF
    return _Span(name, attributes, root, kind)


class _Span:
    __slots__ = ("_name", "_attributes", "_root", "_kind", "_span", "_token")

    def __init__(self, name: str, attributes: Mapping[str, Any] | None, root: bool, kind: SpanKind) -> None:
        self._name = name
        self._attributes = attributes
        self._root = root
        self._kind = kind
        self._span: Span = INVALID_SPAN
        self._token: Any = None

    def __enter__(self) -> Span:
        s = STATE.tracer.start_span(self._name, _ROOT if self._root else None, self._kind, self._attributes)
        self._span = s
        self._token = otel_context.attach(trace.set_span_in_context(s))
        return s

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        s = self._span
        try:
            if exc is not None:
                name = type(exc).__name__
                if name == "Cancelled" or _only_cancelled(exc):
                    s.set_attribute("trellis.cancelled", True)
                else:
                    s.set_status(Status(StatusCode.ERROR, name))
                    s.set_attribute("error.type", getattr(exc, "code", None) or name)
            s.end()
        finally:
            otel_context.detach(self._token)


def _only_cancelled(exc: BaseException) -> bool:
    inner = getattr(exc, "exceptions", None)
    return bool(inner) and all(type(e).__name__ == "Cancelled" or _only_cancelled(e) for e in inner)


# The trace and span ids of the turn that last ran in this task (set by the turn, read by its "turn ended" line,
# which is written after the turn's span ended).
TURN_IDS: ContextVar[tuple[str, str] | None] = ContextVar("trellis_turn_ids", default=None)


def turn_ids(ids: tuple[str, str] | None = None, *, clear: bool = False) -> tuple[str, str] | None:
    """The running turn's trace and span ids for its log lines: set them (``ids``), clear them, or read them."""
    if not STATE.on:
        return None
    if clear:
        TURN_IDS.set(None)
        return None
    if ids is not None:
        TURN_IDS.set(ids)
        return ids
    return TURN_IDS.get()


def current_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids (32 and 16 hex digits), or ``None`` outside a recorded span."""
    if not STATE.on:
        return None
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


def inject(headers: dict[str, str]) -> dict[str, str]:
    """Add the current span's W3C ``traceparent`` (and ``tracestate``) to ``headers``; returns them."""
    if STATE.on:
        _PROPAGATOR.inject(headers)
    return headers


def extract(headers: Mapping[str, str]) -> Any:
    """The context a request's ``traceparent`` continues (``None`` when it has none or tracing is off)."""
    if not STATE.on:
        return None
    value = headers.get("traceparent")
    if not value:
        return None
    carrier = {"traceparent": value}
    state = headers.get("tracestate")
    if state:
        carrier["tracestate"] = state
    return _PROPAGATOR.extract(carrier)


class continued:
    """``with continued(context, name, attributes):`` — a server span continuing a forwarded request's trace
    (``context`` from :func:`extract`); nothing when ``context`` is ``None``."""

    __slots__ = ("_context", "_name", "_attributes", "_span", "_token")

    def __init__(self, context: Any, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        self._context = context
        self._name = name
        self._attributes = attributes
        self._span: Span = INVALID_SPAN
        self._token: Any = None

    def __enter__(self) -> Span:
        if self._context is None or not STATE.on:
            return INVALID_SPAN
        s = STATE.tracer.start_span(self._name, self._context, SpanKind.SERVER, self._attributes)
        self._span = s
        self._token = otel_context.attach(trace.set_span_in_context(s, self._context))
        return s

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self._span is INVALID_SPAN:
            return
        try:
            self._span.end()
        finally:
            otel_context.detach(self._token)


def link_current() -> Any:
    """The current span's context, to continue later in another task (``None`` when there is none)."""
    if not STATE.on:
        return None
    ctx = trace.get_current_span().get_span_context()
    return ctx if ctx.is_valid else None


__all__ = ["STATE", "configure_from_environment", "continued", "current_ids", "extract", "include_content",
           "inject", "link_current", "set_tracer_provider", "span", "tracing_on", "turn_ids", "wanted"]
