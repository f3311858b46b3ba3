"""What a scenario can name: the timeline's actions and the invariants, each registered with its fields.

:func:`register_action` and :func:`register_invariant` are the replay's extension points; the modules
that define actions (:mod:`.actions`, :mod:`.cursors`, :mod:`.discovered`) and invariants
(:mod:`.invariants`, :mod:`.spec_invariants`) register theirs on import, and a scenario is checked
against these tables when it is loaded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs

from . import fields as F
from .world import World

ActionFn = Callable[[World, dict[str, Any]], Awaitable[Any]]
Check = Callable[..., Iterable[str]]


def _summary(fn: Callable[..., Any]) -> str:
    return ((fn.__doc__ or "").strip().splitlines() or [""])[0]


@attrs.frozen
class ActionSpec:
    name: str
    run: ActionFn
    fields: dict[str, F.Field]
    doc: str = ""


ACTIONS: dict[str, ActionSpec] = {}


def register_action(name: str, **fields: F.Field) -> Callable[[ActionFn], ActionFn]:
    """Register ``fn`` as the timeline action ``name`` with the given fields (a decorator)."""
    def decorate(fn: ActionFn) -> ActionFn:
        ACTIONS[name] = ActionSpec(name, fn, fields, _summary(fn))
        return fn
    return decorate


@attrs.frozen
class InvariantSpec:
    name: str
    check: Check
    params: dict[str, F.Field]
    doc: str = ""


INVARIANTS: dict[str, InvariantSpec] = {}


def register_invariant(name: str, **params: F.Field) -> Callable[[Check], Check]:
    """Register ``fn(trace, **params) -> violations`` as the invariant ``name`` (a decorator)."""
    def decorate(fn: Check) -> Check:
        INVARIANTS[name] = InvariantSpec(name, fn, params, _summary(fn))
        return fn
    return decorate
