"""The Daemon Todo Stop Guard (spec 000): a pure state machine and its words."""

from .state import (
    DEFERRED,
    INACTIVE,
    MAX_ATTEMPTS,
    Continue,
    Decision,
    Deferred,
    Exhausted,
    Inactive,
    TodoStopGuard,
)
from .texts import continuation_prompt, continuation_update, exhaustion_update, is_continuation_prompt, is_guard_update

__all__ = [
    "DEFERRED", "INACTIVE", "MAX_ATTEMPTS", "Continue", "Decision", "Deferred", "Exhausted", "Inactive",
    "TodoStopGuard", "continuation_prompt", "continuation_update", "exhaustion_update", "is_continuation_prompt",
    "is_guard_update",
]
