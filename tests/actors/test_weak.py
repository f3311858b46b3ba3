"""actors.weak.weakly: a callback that calls its object's method while the object lives, and does not keep it."""

from __future__ import annotations

import gc

import trio

from actors.weak import weakly


class Owner:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def note(self, n: int) -> str:
        self.calls.append(n)
        return "noted"

    async def note_later(self, n: int) -> str:
        await trio.lowlevel.checkpoint()
        self.calls.append(n)
        return "noted later"


def test_a_weak_callback_calls_while_its_object_lives_and_answers_the_default_after():
    owner = Owner()
    callback = weakly(owner.note, default="gone")
    assert callback(1) == "noted" and owner.calls == [1]
    owner.callback = callback  # the owner holds its own callback: no cycle, so no collection is needed
    gc.disable()
    try:
        del owner
        assert callback(2) == "gone"
    finally:
        gc.enable()


async def test_an_async_method_gives_an_awaitable_callback_either_way():
    owner = Owner()
    callback = weakly(owner.note_later, default=False)
    assert await callback(3) == "noted later" and owner.calls == [3]
    del owner
    gc.collect()
    assert await callback(4) is False
