"""Usage accounting: what each model call cost, summed per turn, per turn record and per session.

A *call* is a model stream that was committed (the provider returned it) —
the unit the Todo Stop Guard counts too — whether or not its server then
reported tokens; a refused request is no call. Its tokens are what the server
reported (OpenAI's ``usage`` chunk: prompt, completion, total, and
``prompt_tokens_details.cached_tokens``), none when it reported nothing. Each
call has one *source* (:data:`~actors.wire.USAGE_SOURCES`):

- ``primary``: a primary-model stream sponsored by user input, an automatic
  item, an external Stop hook, or the tool results of such a stream;
- ``todo_stop_guard``: a guard-attributable stream (spec 000: a continuation,
  the tool-result follow-up of one, or one the guard shares with a Stop hook),
  so the guard's extra calls are counted apart ("normal usage metadata still
  accounts for the additional calls");
- ``compaction`` and ``suggestion``: the requests of those purposes.

Where the figures go: a call that reported usage is published at once as
:func:`~actors.wire.usage_update` (qwen-code's shape) on its turn's events;
the work item's calls are summed on its ``turn_complete``/``turn_error``; the
FIFO adds each call to the prompt's turn record, to the session's cumulative
ledger (``status.usage``) and to the journal, so both survive a restart. A
follow-up suggestion runs after ``turn_complete``: only the record and the
session count it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from .. import wire
from ..model.base import ChatRequest, TextDelta, Usage
from ..telemetry import Telemetry, span


def _count(value: Any) -> int:
    """A count read back from a journal (a bad one reads as 0: the journal may be from another version)."""
    return value if type(value) is int and value >= 0 else 0


@attrs.define
class Tally:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_read_tokens: int = 0
    total_tokens: int = 0

    def add_call(self, usage: Usage | None) -> None:
        self.calls += 1
        if usage is not None:
            self.input_tokens += usage.prompt_tokens
            self.output_tokens += usage.completion_tokens
            self.cached_read_tokens += usage.cached_tokens or 0
            self.total_tokens += total_of(usage)

    def add(self, other: Tally) -> None:
        self.calls += other.calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_read_tokens += other.cached_read_tokens
        self.total_tokens += other.total_tokens

    def to_wire(self) -> dict[str, Any]:
        return wire.usage_tally(self.calls, self.input_tokens, self.output_tokens, self.cached_read_tokens,
                                self.total_tokens)

    @classmethod
    def from_wire(cls, raw: Any) -> Tally:
        raw = raw if isinstance(raw, dict) else {}
        return cls(*(_count(raw.get(k)) for k in ("calls", "inputTokens", "outputTokens", "cachedReadTokens",
                                                   "totalTokens")))


def total_of(usage: Usage) -> int:
    """The call's total; a server (or script) that gave none means prompt plus completion."""
    return usage.total_tokens or usage.prompt_tokens + usage.completion_tokens


@attrs.define
class UsageLedger:
    """Calls and tokens, in all and by source."""

    total: Tally = attrs.Factory(Tally)
    by_source: dict[str, Tally] = attrs.Factory(dict)

    def record(self, source: str, usage: Usage | None) -> None:
        self.total.add_call(usage)
        self.by_source.setdefault(source, Tally()).add_call(usage)

    def add(self, other: UsageLedger) -> None:
        self.total.add(other.total)
        for source, tally in other.by_source.items():
            self.by_source.setdefault(source, Tally()).add(tally)

    @property
    def has_tokens(self) -> bool:
        t = self.total
        return bool(t.input_tokens or t.output_tokens or t.total_tokens)

    def to_wire(self) -> dict[str, Any]:
        return wire.usage_summary(self.total.to_wire(), {s: t.to_wire() for s, t in self.by_source.items()})

    def summary(self) -> dict[str, Any] | None:
        """What a turn shows: the wire form once a call reported tokens, else ``None`` (a model that
        reports no usage — the scripted demo, some local servers — leaves turn events as they were)."""
        return self.to_wire() if self.has_tokens else None

    @classmethod
    def of_call(cls, source: str, usage: Usage | None) -> UsageLedger:
        ledger = cls()
        ledger.record(source, usage)
        return ledger

    @classmethod
    def from_wire(cls, raw: Any) -> UsageLedger:
        raw = raw if isinstance(raw, dict) else {}
        by_source = raw.get("bySource")
        by_source = by_source if isinstance(by_source, dict) else {}
        return cls(Tally.from_wire(raw), {str(s): Tally.from_wire(t) for s, t in by_source.items()})


class UsageBooks(Protocol):
    """Where a session's calls are booked: its prompt FIFO (:class:`~actors.session.fifo.PromptFifo`)."""

    @property
    def usage(self) -> UsageLedger: ...  # the session's cumulative ledger

    def record_usage(self, prompt_id: str, source: str, usage: Usage | None) -> None: ...


class UsageMeter:
    """A session's side of the accounting: each call, as it ends, goes to its turn and the FIFO.

    The FIFO is called directly rather than told: a call ends on every exit path
    of a stream, cancellation included, where a message could not be awaited,
    and the FIFO's transitions are synchronous (as :meth:`~actors.session.fifo.PromptFifo.settle_on_close`).
    """

    def __init__(self, fifo: UsageBooks, publish: Callable[[dict[str, Any], str | None], None],
                 clock_ms: Callable[[], int], telemetry: Telemetry | None = None) -> None:
        self._fifo = fifo
        self._publish = publish
        self.clock_ms = clock_ms
        self.telemetry = telemetry or Telemetry.NONE  # model calls, timed (actors.telemetry)

    def record(self, prompt_id: str, source: str, usage: Usage | None, started_ms: int,
               turn: UsageLedger | None = None) -> None:
        """One committed call ended (normally, failed, or cancelled)."""
        if turn is not None:
            turn.record(source, usage)
        self._fifo.record_usage(prompt_id, source, usage)
        if usage is not None:
            figures = wire.call_usage(usage.prompt_tokens, usage.completion_tokens, total_of(usage),
                                      usage.cached_tokens)
            self._publish(wire.usage_update(figures, source, max(0, self.clock_ms() - started_ms)), prompt_id)

    def summary(self) -> dict[str, Any]:
        """The session's calls since it began, across restarts (``status.usage``)."""
        return self._fifo.usage.to_wire()


async def read_text(meter: UsageMeter, provider: Any, request: ChatRequest, prompt_id: str,
                    turn: UsageLedger | None = None) -> str:
    """The text of a compaction or suggestion call, the call counted under its purpose."""
    started = meter.clock_ms()
    usage: Usage | None = None
    parts: list[str] = []
    committed = False
    with span(f"chat {request.model or 'model'}") as s:  # a child of the turn's span, as its primary calls
        if s.is_recording():
            s.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": request.model or "",
                              "trellis.model_call.source": request.purpose})
        call = meter.telemetry.model_call(request.purpose, s)
        outcome = "cancelled"
        try:
            async with provider.stream(request) as stream:
                committed = True
                async for item in stream:
                    call.first()
                    kind = type(item)
                    if kind is TextDelta:
                        parts.append(item.text)
                    elif kind is Usage:
                        usage = item
            outcome = "ok"
        except Exception:
            outcome = "error"
            raise
        finally:
            if committed:
                meter.record(prompt_id, request.purpose, usage, started, turn)
                call.end(outcome, usage)
    return "".join(parts)
