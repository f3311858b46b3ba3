"""Observability: Prometheus metrics (:mod:`.metrics`, one registry per daemon) and OpenTelemetry traces
(:mod:`.tracing`, off unless configured). See docs/how-to/operations.md."""

from .metrics import CONTENT_TYPE, ModelCall, Telemetry, count_process, source_label
from .tracing import (
    configure_from_environment, continued, current_ids, extract, include_content, inject, set_tracer_provider, span,
    tracing_on, turn_ids,
)

__all__ = ["CONTENT_TYPE", "ModelCall", "Telemetry", "configure_from_environment", "continued", "count_process",
           "current_ids", "extract", "include_content", "inject", "set_tracer_provider", "source_label", "span",
           "tracing_on", "turn_ids"]
