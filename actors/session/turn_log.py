"""The operator's lines of a turn: ``turn started`` and ``turn ended`` on the ``trellis.session`` logger.

Each line carries its values as fields too (``extra``), for ``--log-format
json``. Never the prompt's text, nor an error's message: a server's message
may echo what it was sent.
"""

from __future__ import annotations

import logging

import trio

from ..telemetry import turn_ids
from .usage import UsageLedger

log = logging.getLogger("trellis.session")


def turn_started(session_id: str, prompt_id: str, kind: str) -> float:
    """Log the start; returns the time the end's duration is counted from."""
    turn_ids(clear=True)  # the turn's span sets them (tracing on): its "turn ended" line carries them
    log.info("turn started session=%s prompt=%s kind=%s", session_id, prompt_id, kind,
             extra={"session": session_id, "prompt": prompt_id, "kind": kind})
    return trio.current_time()


def turn_ended(session_id: str, prompt_id: str, kind: str, stop: str | None, code: str | None, usage: UsageLedger,
               started: float) -> None:
    """``turn ended session=… prompt=… stop=end_turn calls=4 tokens_in=… tokens_out=… ms=…`` (``error=CODE``
    after ``stop=error``)."""
    if not log.isEnabledFor(logging.INFO):
        return
    total = usage.total
    ms = round((trio.current_time() - started) * 1000)
    fields = {"session": session_id, "prompt": prompt_id, "kind": kind, "stop": stop, "calls": total.calls,
              "tokens_in": total.input_tokens, "tokens_out": total.output_tokens, "ms": ms}
    if code is not None:
        fields["error"] = code
    traced = turn_ids()
    if traced is not None:
        fields["trace_id"], fields["span_id"] = traced
    log.info("turn ended session=%s prompt=%s stop=%s%s calls=%d tokens_in=%d tokens_out=%d ms=%d", session_id,
             prompt_id, stop, f" error={code}" if code else "", total.calls, total.input_tokens,
             total.output_tokens, ms, extra=fields)


__all__ = ["turn_ended", "turn_started"]
