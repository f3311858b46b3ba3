"""A session's context window: what a request needs, compaction, and overflow that never bricks it.

**The window** is the configured one (``model.contextWindow``) or, smaller or
alone, the one the server showed: the context size an overflow answer named,
or — from an overflow answer without numbers — three quarters of the request it
refused. With no window configured, an answer cut short (``finish_reason:
"length"`` before any answer limit) shows one too: its prompt plus answer — but
never less than the most any earlier call of the session held (prompt plus
answer as the server counted them), since that evidently fit. A configured
window is never replaced by such a guess: a cut far inside it is the server's
own answer limit (LM Studio's, a gateway's, ``llama-server -n``), which says
nothing of the context.
A request *needs* its calibrated estimate (:mod:`actors.model.estimate`: the
system prompt, the tool schemas, every message) plus the answer budget
(``model.maxTokens``).

**Before each send** (:meth:`ContextKeeper.fit`): past :data:`COMPACT_AT` of
the window, older history is summarised by a model call (the last
:data:`KEEP_AFTER_COMPACTION` messages stay); if the request still does not fit
the window, the conversation's longest messages are cut in the middle until it
needs at most :data:`COMPACT_AT` of it (:mod:`.shorten`). The newest input — the
user messages the model has not answered yet, and the send's own parts — is
never cut: when it cannot fit even alone (with the system prompt, the tools and
the answer budget), the turn ends with ``turn_error`` code ``context_overflow``
naming the window, and that input is taken out of the conversation, so later
requests do not carry it.

**On an overflow answer** (:mod:`actors.model.overflow`: OpenAI, vLLM,
llama-server, the provider's own pre-send check, or a stream that ended before
any chunk after a request needing :data:`NEAR_FULL` of the window — of
:data:`UNKNOWN_WINDOW` when none is known — as llama-cpp-python answers), the
window is learnt, the conversation is fitted to it as above, and the send goes
out once more; a second overflow is a ``context_overflow`` refusal. A
continuation that is never compacted (a Todo Stop Guard stream, or a Stop
hook's after its first block) is not retried: the turn ends ``max_tokens``.

A ``finish_reason: "length"`` answer ends the turn ``max_tokens`` too, its
``tokenLimit`` cause ``context_window`` when the context evidently filled (the
prompt and answer reach :data:`NEAR_FULL` of the window, or the window was
learnt from them), else ``max_tokens``: the server's own answer limit, which
``model.maxTokens`` overrides where the server allows it. Each
``max_tokens`` end carries a ``tokenLimit`` object on ``turn_complete``
(:func:`actors.wire.token_limit`) and says the same in a notice to the client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .. import wire
from ..model import ChatMessage, ChatRequest, ContextWindowExceeded, ModelError, Usage, configured_model
from ..model.estimate import Calibration, text_tokens
from ..model.overflow import ContextOverflow, EmptyResponse
from .outcomes import Send, TokenLimit
from .shorten import NOTE_ORIGIN, fit_messages
from .conversation import Conversation
from .system_prompt import SystemPrompt
from .usage import UsageLedger, UsageMeter, read_text

if TYPE_CHECKING:
    from ..guard import TodoStopGuard
    from .tools import ToolRegistry
    from .turn_state import TurnState

log = logging.getLogger("trellis.session")

COMPACT_AT = 0.8  # compact once a request would need this share of the window; cut messages down to it
KEEP_AFTER_COMPACTION = 6  # recent messages kept verbatim by a summary
NEAR_FULL = 0.7  # an empty 200 stream after a request needing this share of the window is an overflow
UNKNOWN_WINDOW = 2048  # the window that share is of when none is known (llama-cpp-python's default n_ctx)
SHRINK = 0.75  # an overflow answer without numbers: the window is taken as this share of the request,
GUESS_ROOM = 256  # ... but never below its system prompt, tools and unanswered input plus this much
SUMMARY_INSTRUCTION = "Summarise this conversation for your own later use."
CUT_REASONS = frozenset({"length", "max_tokens", "model_length"})  # finish reasons of an answer cut short


def pending_messages(send: Send) -> list[ChatMessage]:
    """The user messages a send adds to the conversation once its stream exists."""
    return [ChatMessage("user", text, origin=origin) for origin, text in send.parts]


def keep_unsent(conversation: Conversation, pending: list[ChatMessage]) -> None:
    """An unsent continuation keeps its user input, minus the guard's text."""
    for message in pending:
        if message.origin != "guard":
            conversation.append(message)


def _fresh_count(messages: Sequence[ChatMessage]) -> int:
    """How many of the last messages are input the model has not answered (never cut)."""
    n = 0
    while n < len(messages) and messages[-1 - n].role == "user" and messages[-1 - n].origin != NOTE_ORIGIN:
        n += 1
    return n


def fixed_part(request: ChatRequest) -> ChatRequest:
    """What of ``request`` no compaction shortens: its system messages and its unanswered input."""
    messages = request.messages
    start = len(messages) - _fresh_count(messages)
    kept = (*(m for m in messages[:start] if m.role == "system"), *messages[start:])
    return attrs.evolve(request, messages=kept, estimated_tokens=None)


class ContextKeeper:
    """One session's requests to its model: which model, the window, estimates and their calibration,
    compaction, overflow."""

    def __init__(self, session_id: str, conversation: Conversation, provider: Any, *, model_name: str | None,
                 system_prompt: SystemPrompt, tools: ToolRegistry, usage: UsageMeter, guard: TodoStopGuard) -> None:
        self.session_id = session_id
        self.conversation = conversation
        self.provider = provider
        self.model_name = model_name  # None: the provider's own
        self.system_prompt = system_prompt
        self.tools = tools
        self.usage = usage
        self.guard = guard
        self.calibration = Calibration()
        self.learned: int | None = None  # the window the server showed
        self.held = 0  # the most one call's prompt plus answer came to, as the server counted: that much fit

    def primary_request(self, messages: Iterable[ChatMessage], pending: Iterable[ChatMessage] = ()
                        ) -> ChatRequest:
        """The primary-model request for ``messages`` then ``pending`` as it goes out: the system prompt first,
        the tools offered (one tuple built: a long history is not copied twice)."""
        # The system prompt is rendered for each request, never kept in the history (nor the transcript).
        return ChatRequest(self.system_prompt.before(messages, pending), self.tools.specs(), model=self.model_name)

    # ------------------------------------------------------------- the window and what a request needs

    def release(self) -> None:
        """The session has ended: the records its requests left on their first message go (they refer to that
        message through the requests' tuples, so they would otherwise wait for the cyclic collector)."""
        self.system_prompt.release()
        self.conversation.release()

    @property
    def configured(self) -> int | None:
        return getattr(self.provider, "context_window", None)

    def window(self) -> int | None:
        configured, learned = self.configured, self.learned
        if configured is None or learned is None:
            return configured if learned is None else learned
        return min(configured, learned)

    def window_source(self) -> str | None:
        if self.learned is not None and (self.configured is None or self.learned < self.configured):
            return "server"
        return "configured" if self.configured is not None else None

    def answer_budget(self, request: ChatRequest) -> int:
        return request.max_tokens or getattr(self.provider, "max_tokens", None) or 0

    def needed(self, request: ChatRequest) -> int:
        """The calibrated prompt estimate plus the answer budget."""
        return self.calibration.estimate(request) + self.answer_budget(request)

    def stamp(self, request: ChatRequest) -> ChatRequest:
        """``request`` carrying its calibrated estimate, which a provider's pre-send check then uses."""
        return attrs.evolve(request, estimated_tokens=self.calibration.estimate(request))

    def _learn_window(self, window: int) -> None:
        current = self.window()
        if window > 0 and (current is None or window < current):
            self.learned = window

    @property
    def model_in_use(self) -> str:
        """The name of the model the next call goes to: the session's ``/model`` override, else the one the
        provider is configured with (an OpenAI-compatible server's ``model``), else the provider's own name."""
        return self.model_name or configured_model(self.provider)

    def use_model(self, name: str) -> None:
        """Another model from the next call on: what was learnt of the last one no longer holds."""
        self.model_name = name
        self.calibration.reset()
        self.learned = None
        self.held = 0

    # ------------------------------------------------------------- each call

    def sent(self, request: ChatRequest) -> None:
        self.calibration.sent(request.estimated_tokens if request.estimated_tokens is not None
                              else self.calibration.estimate(request))

    def observe(self, request: ChatRequest, usage: Usage | None) -> None:
        """A primary call's usage: the server's count of the prompt calibrates the estimate."""
        if usage is not None and usage.prompt_tokens > 0:
            self.calibration.observe(request, usage.prompt_tokens)
            self.held = max(self.held, usage.prompt_tokens + usage.completion_tokens)

    def answer_cut(self, request: ChatRequest, usage: Usage | None, text: str, reason: str) -> dict[str, Any]:
        """The ``tokenLimit`` of an answer that ended with ``finish_reason`` ``reason``."""
        budget = self.answer_budget(request)
        if budget and (usage is None or usage.completion_tokens >= budget):
            return wire.token_limit("max_tokens", answer_cut=True, finish_reason=reason, limit=budget, message=(
                f"The answer was cut off at the answer limit of {budget:,} tokens (model.maxTokens)."))
        # No answer limit of ours reached: the context filled up, or the server has an answer limit of its own.
        if usage is not None and usage.prompt_tokens:
            size, answer = usage.prompt_tokens + usage.completion_tokens, usage.completion_tokens
        else:
            answer = text_tokens(text)
            size = self.calibration.estimate(request) + answer
        if self.configured is None and size >= self.held:
            # Nothing configured: prompt plus answer is the best guess at the context there is.
            self._learn_window(size)
            return wire.token_limit("context_window", answer_cut=True, finish_reason=reason, limit=self.window(),
                                    message=f"The answer was cut off: the model's context (about {size:,} tokens) "
                                            "filled up.")
        window = self.window()
        if window is not None and size >= NEAR_FULL * window:
            return wire.token_limit("context_window", answer_cut=True, finish_reason=reason, limit=window,
                                    message=f"The answer was cut off: the model's context window of {window:,} "
                                            f"tokens filled up (about {size:,} tokens).")
        # Far inside the window, or below what an earlier call held: not the context.
        counted = usage is not None and usage.completion_tokens > 0
        room = f", inside the context window of {window:,} tokens" if window is not None else ""
        return wire.token_limit("max_tokens", answer_cut=True, finish_reason=reason,
                                limit=answer if counted else None, message=(
                                    f"The server cut the answer off at {'' if counted else 'about '}{answer:,} "
                                    f"tokens{room}: an answer limit of its own. model.maxTokens asks for longer "
                                    "answers, where the server allows them."))

    # ------------------------------------------------------------- overflow

    def take_overflow(self, exc: ContextWindowExceeded | ModelError, request: ChatRequest) -> ContextOverflow | None:
        """``exc`` as a context overflow, if it is one — and what it shows of the window, learnt."""
        needed = self.needed(request)
        if isinstance(exc, ContextWindowExceeded):  # the provider's own check: nothing was sent
            overflow = ContextOverflow(str(exc), committed=False, limit=exc.window)
        elif isinstance(exc, ContextOverflow):
            overflow = exc
        elif isinstance(exc, ModelError) and exc.code == "context_overflow":
            overflow = ContextOverflow(exc.message, committed=exc.committed)
        elif isinstance(exc, EmptyResponse) and needed >= NEAR_FULL * (self.window() or UNKNOWN_WINDOW):
            overflow = ContextOverflow(f"{exc.message} after a request of about {needed:,} tokens, as "
                                       "llama-cpp-python's server answers a context overflow", committed=True)
        else:
            return None
        if overflow.prompt_tokens:
            self.calibration.observe(request, overflow.prompt_tokens)
        elif overflow.limit and needed <= overflow.limit and not isinstance(exc, ContextWindowExceeded):
            # We thought it fit: the prompt is at least what the window leaves the answer.
            self.calibration.observe(request, overflow.limit - self.answer_budget(request) + 1)
        if overflow.limit:
            self._learn_window(overflow.limit)
        else:
            # A guess, never so small that the session's own prompt, tools and this input could not fit.
            self._learn_window(max(int(SHRINK * needed), self.needed(fixed_part(request)) + GUESS_ROOM))
        return overflow

    def take_back(self, count: int) -> None:
        """Take the last ``count`` messages (a send's input, added at its commit) out of the conversation."""
        if count:
            self.conversation.replace(self.conversation.history[:-count])

    def not_sent(self, turn: TurnState, send: Send) -> TokenLimit:
        """A continuation that did not fit: it ends the turn ``max_tokens`` (never compacted, never kept)."""
        keep_unsent(self.conversation, pending_messages(send))
        window = self.window()
        what = "The Todo Stop Guard's continuation" if send.guard is not None else "The Stop hook's continuation"
        return TokenLimit(wire.token_limit("context_window", answer_cut=False, limit=window, message=(
            f"{what} did not fit the model's context window{f' of {window:,} tokens' if window else ''}, "
            "so it was not sent.")))

    def refuse(self, needed: int | None, reason: str | None = None) -> ContextOverflow:
        """The refusal of the unanswered input: it leaves the conversation, and the error names the window."""
        fresh = _fresh_count(self.conversation.history)
        self.take_back(fresh)
        self.guard.pause_for_trusted_retry()  # as every turn_error does
        window = self.window()
        source = {"configured": " (model.contextWindow)", "server": " (as the server showed it)"}.get(
            self.window_source() or "", "")
        limit = f"the model's context window of {window:,} tokens{source}" if window else "the model's context"
        if reason is not None:
            head = f"The request did not fit {limit}, even with the conversation compacted ({reason})."
        elif fresh:
            head = (f"This input needs about {needed:,} tokens with the system prompt and the tool definitions, "
                    f"more than {limit}.")
        else:
            head = (f"The system prompt and the tool definitions alone need about {needed:,} tokens, more than "
                    f"{limit}.")
        tail = " The input was not kept: send a shorter one." if fresh else ""
        return ContextOverflow(head + tail, committed=False, limit=window)

    async def recover(self, turn: TurnState, send: Send, overflow: ContextOverflow) -> Send:
        """After an overflow answer: fit the conversation to the window it showed, for one more try."""
        if send.guard is not None or turn.hook_blocks > 1:
            raise self.not_sent(turn, send)
        before = list(self.conversation.history)
        await self.fit(turn, send, forced=True)  # raises the refusal of input that cannot fit
        if self.conversation.history == before:  # nothing could be compacted: the same request would fail again
            raise self.refuse(None, overflow.message)
        return send

    # ------------------------------------------------------------- fitting

    async def fit(self, turn: TurnState, send: Send, *, forced: bool = False) -> Send | None:
        """Compact, then cut, so the next request fits (see the module doc); ``None`` drops the send.

        ``forced`` (after an overflow answer) always compacts and cuts down to
        :data:`COMPACT_AT`. Raises the ``context_overflow`` refusal for input that cannot fit.
        """
        window = self.window()
        if window is None or (not forced and self.needed(self.request(send)) <= window * COMPACT_AT):
            return send
        late_attempt = send.guard is not None and send.guard.attempt > 1
        if not forced and (late_attempt or turn.hook_blocks > 1):
            return send  # later continuations are not compacted; one that does not fit ends the turn when sent
        if not await self.summarise(turn.prompt_id, turn.usage, window) and send.guard is not None:
            self.guard.suspend()  # a failed compaction before a guard send drops the guard's part
            rest = send.without_guard()
            if not rest.hook:
                return None
            send = rest
        if self.needed(self.request(send)) > window * (COMPACT_AT if forced else 1):
            self.cut(send, window)
        return send

    def request(self, send: Send) -> ChatRequest:
        return self.primary_request(self.conversation.history, pending_messages(send))

    def cut(self, send: Send, window: int) -> None:
        """Cut the conversation's messages (not its unanswered input) so the request needs COMPACT_AT of ``window``."""
        history = self.conversation.history
        fresh = len(history) - _fresh_count(history)
        older, unanswered = history[:fresh], history[fresh:]
        fixed = self.needed(fixed_part(self.request(send)))
        if fixed > window:
            raise self.refuse(fixed)
        room = int(window * COMPACT_AT) - fixed
        if room < 0:
            room = window - fixed  # the input leaves the conversation less than the usual share
        scale = max(1.0, self.calibration.ratio or 1.0)
        self.conversation.replace([*fit_messages(older, int(room / scale)), *unanswered])

    async def summarise(self, prompt_id: str, usage: UsageLedger | None, window: int | None = None) -> bool:
        """Summarise older history with a model call (counted for ``prompt_id``); ``False`` when that fails."""
        history = self.conversation.history
        keep = KEEP_AFTER_COMPACTION
        # Never split an assistant message from its tool results.
        while keep < len(history) and history[-keep].role == "tool":
            keep += 1
        older, recent = history[:-keep], history[-keep:]
        if not older:
            return False
        instruction = ChatMessage("system", SUMMARY_INSTRUCTION)
        request = ChatRequest((instruction, *older), purpose="compaction", model=self.model_name)
        if window is not None and self.needed(request) > window * COMPACT_AT:
            # The summary's own request must fit too: its messages are cut for it (history keeps them whole).
            room = int(window * COMPACT_AT) - self.needed(attrs.evolve(request, messages=(instruction,)))
            scale = max(1.0, self.calibration.ratio or 1.0)
            request = attrs.evolve(request, messages=(instruction, *fit_messages(older, max(0, int(room / scale)))))
        try:
            summary = await read_text(self.usage, self.provider, self.stamp(request), prompt_id, usage)
        except Exception as exc:  # any failure is a compaction failure; the caller decides what it means
            log.info("compaction failed in session %s: %s", self.session_id, exc)
            return False
        self.conversation.replace([ChatMessage("user", f"[Summary of the earlier conversation]\n{summary}",
                                               origin=NOTE_ORIGIN), *recent])
        return True

    # ------------------------------------------------------------- status

    def status(self) -> dict[str, Any]:
        """``status.context``: the window, the estimate of the last request and how it was calibrated."""
        calibration = self.calibration
        ratio = calibration.ratio
        return wire.context_status(
            window=self.window(), source=self.window_source(),
            base_tokens=self.calibration.estimate(self.primary_request(())),
            estimated=calibration.last_estimate, reported=calibration.last_reported,
            calibration=round(ratio, 3) if ratio is not None else None)


__all__ = ["COMPACT_AT", "CUT_REASONS", "KEEP_AFTER_COMPACTION", "ContextKeeper", "keep_unsent", "pending_messages"]
