"""Callbacks that do not keep their object alive.

A session's parts call back into the session (wake its work loop, save its record, read its cwd). Given the
session's bound methods or closures over it, every part would refer back to the session that refers to it,
and a closed session would be cyclic garbage, freed only when a collection walks it (``transport.gc_policy``
freezes what lives long, so that would wait for a thaw). :func:`weakly` makes such a callback refer to its
object weakly: the session is freed by reference counting once nothing else holds it, and a part that calls
back after that gets ``default``.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from typing import Any


class _Weakly:
    """A bound method's function and a weak reference to its object (the one reference CPython keeps for an
    object, shared by every such callback of it): one small object a callback."""

    __slots__ = ("_object", "_function", "_default")

    def __init__(self, method: Any, default: Any) -> None:
        self._object = weakref.ref(method.__self__)
        self._function = method.__func__
        self._default = default

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        target = self._object()
        return self._function(target, *args, **kwargs) if target is not None else self._default


class _WeaklyAsync(_Weakly):
    __slots__ = ()

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        target = self._object()
        return await self._function(target, *args, **kwargs) if target is not None else self._default


def weakly(method: Callable[..., Any], default: Any = None) -> Callable[..., Any]:
    """``method`` (a bound method) called while its object lives; ``default`` once it is gone (an async
    method's call then returns an awaitable of ``default``)."""
    kind = _WeaklyAsync if inspect.iscoroutinefunction(method) else _Weakly
    return kind(method, default)


__all__ = ["weakly"]
