"""The serve command's garbage-collection policy (transport.gc_policy): a full collection's survivors are
frozen, and thawed for one full collection once as many sessions have closed as are open. What it relies on
is checked on a served daemon: what is alive in the middle of a turn, a subscription or a session does not
become cyclic garbage when they end (freezing it would otherwise keep it until a thaw)."""

from __future__ import annotations

import gc
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families
import pytest
import trio

from actors import Settings
from actors.model.base import ChatRequest, TextDelta, ToolCall
from tests.conftest import daemon_process
from tests.e2e.raw_http import RawConnection
from tests.transport.served import served_app
from transport.gc_policy import (MIDDLE_THRESHOLD, OLD_THRESHOLD, THAW_AFTER_CLOSED, YOUNG_THRESHOLD,
                                 FreezeSurvivors, thaw_due)


@pytest.mark.parametrize(("closed", "open_", "due"), [
    (0, 0, False), (THAW_AFTER_CLOSED - 1, 0, False), (THAW_AFTER_CLOSED, 0, True),
    (THAW_AFTER_CLOSED, 1000, False), (999, 1000, False), (1000, 1000, True), (5000, 1000, True),
])
def test_a_thaw_is_due_once_as_many_sessions_closed_as_are_open_and_at_least_the_minimum(closed, open_, due):
    assert thaw_due(closed, open_) is due


class Cycle:
    def __init__(self) -> None:
        self.me = self


def frozen(objects: list[Any]) -> int:
    """How many of ``objects`` are frozen: a frozen object is in no generation that ``gc.get_objects`` lists
    (counting by ``gc.get_freeze_count`` is not exact: a frozen object freed by its reference count leaves)."""
    ids = {id(o) for o in objects}
    return len(ids) - sum(id(o) in ids for o in gc.get_objects())


@contextmanager
def installed(policy: FreezeSurvivors) -> Iterator[FreezeSurvivors]:
    before = gc.get_threshold()
    gc.collect()
    policy.install()
    try:
        yield policy
    finally:
        policy.uninstall()
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_thaw_due_begins_after_a_middle_collection_and_a_full_one_ends_it():
    counts = {"open": 0, "closed": 0}
    with installed(FreezeSurvivors(lambda: counts["open"], lambda: counts["closed"], minimum=2)) as policy:
        kept = [Cycle() for _ in range(10)]
        gc.collect(1)
        assert not policy.thawing and gc.get_freeze_count() > 0  # a middle collection freezes nothing
        counts["closed"] = 2
        gc.collect(1)  # full collections come seldom: the thaw does not wait for one
        assert policy.thawing and policy.thaws == 1 and gc.get_freeze_count() == 0
        gc.collect(1)
        assert policy.thawing and gc.get_freeze_count() == 0  # still thawed until a full collection
        gc.collect()
        assert not policy.thawing and policy.thaws == 1 and gc.get_freeze_count() > 0
        del kept


def test_survivors_of_a_full_collection_are_frozen_and_a_thaw_walks_them_once():
    counts = {"open": 1, "closed": 0}
    with installed(FreezeSurvivors(lambda: counts["open"], lambda: counts["closed"], minimum=2)) as policy:
        assert gc.get_threshold() == (YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
        assert gc.get_freeze_count() > 0  # what start-up made
        kept = [Cycle() for _ in range(100)]
        assert frozen(kept) == 0
        gc.collect()
        assert frozen(kept) == 100  # survivors frozen
        del kept[50:]  # 50 frozen cycles become garbage: a full collection no longer sees them
        assert gc.collect() == 0
        counts["closed"] = 1  # fewer than the minimum (2)
        gc.collect()
        assert not policy.thawing and policy.thaws == 0
        counts["closed"] = 2
        assert gc.collect() == 0  # this collection's end begins the thaw...
        assert policy.thawing and policy.thaws == 1 and gc.get_freeze_count() == 0
        assert gc.collect() >= 50  # ...the next walks everything, frees the cycles, and freezes again
        assert not policy.thawing and gc.get_freeze_count() > 0
        gc.collect()
        assert policy.thaws == 1  # the next thaw needs as many sessions closed again


class HeldModel:
    """Streams one chunk, waits for the test to let it go on, then another (a turn held in its middle)."""

    name = "held"

    def __init__(self) -> None:
        self.streaming = trio.Event()
        self.go_on = trio.Event()

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[Any]]:
        async def play() -> AsyncIterator[Any]:
            yield TextDelta("one ")
            self.streaming.set()
            await self.go_on.wait()
            yield TextDelta("two")

        yield play()


async def read_until(conn: RawConnection, marker: bytes) -> None:
    seen = b""
    while marker not in seen:
        data = await conn.stream.receive_some(65536)
        assert data, f"the stream ended before {marker!r}"
        seen = seen[-len(marker):] + data


def garbage_among_frozen() -> Counter[str]:
    """Collect what is garbage without the frozen objects, then thaw them and count, by type, the cyclic
    garbage that only they held (what a frozen daemon would keep until its next thaw)."""
    gc.collect()
    gc.unfreeze()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return found


async def run_held_turn(served: Any, model: HeldModel, *, delete: bool,
                        frozen_mid_turn: Callable[[str], None], cancel: bool = False) -> None:
    """A session with a subscriber and a turn, ``frozen_mid_turn(session_id)`` called while the turn streams;
    then the turn ends (``cancel``: is cancelled), the subscriber goes and (``delete``) the session is closed."""
    auth = [(b"Authorization", b"Bearer " + served.token.encode()), (b"Content-Type", b"application/json")]
    control = await RawConnection.open(served.url)
    created = await control.request(b"POST", b"/session", auth, b"{}")
    assert created.status == 200, created.body
    sid = created.json()["sessionId"]  # type: ignore[index]
    events = await RawConnection.open(served.url)
    head = await events.request(b"GET", f"/session/{sid}/events".encode(), auth, head_only=True)
    assert head.status == 200
    prompt = orjson.dumps({"prompt": [{"type": "text", "text": "hello"}]})
    assert (await control.request(b"POST", f"/session/{sid}/prompt".encode(), auth, prompt)).status == 202
    with trio.fail_after(10):
        await model.streaming.wait()
    frozen_mid_turn(sid)
    if cancel:
        assert (await control.request(b"POST", f"/session/{sid}/cancel".encode(), auth)).status in (200, 202, 204)
    else:
        model.go_on.set()
    with trio.fail_after(10):
        await read_until(events, b"turn_complete")  # stopReason "cancelled" when cancelled
    await events.aclose()
    if delete:
        assert (await control.request(b"DELETE", f"/session/{sid}".encode(), auth)).status in (200, 204)
    await control.aclose()
    with trio.fail_after(10):
        while served.daemon.session_count if delete else False:
            await trio.sleep(0.01)
    for _ in range(20):  # the daemon's side of both connections ends
        await trio.sleep(0.01)


@pytest.fixture
def own_collection() -> Iterator[None]:
    """Collections only where the test asks (a young one mid-test would free what it means to count)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


@pytest.mark.parametrize("cancel", [False, True], ids=["finished", "cancelled"])
async def test_a_turn_and_its_subscription_leave_no_cyclic_garbage_among_what_was_frozen(own_collection, cancel):
    """Frozen mid-turn, as a full collection under the policy would leave them, the turn's objects (finished,
    or cancelled: its Cancelled and traceback) and both HTTP connections' (hypercorn's server and protocol
    refer to each other until the connection ends) are freed by reference counting once they end."""
    model = HeldModel()

    def freeze(session_id: str) -> None:
        gc.collect()
        gc.freeze()

    async with served_app(model=model) as served:
        try:
            await run_held_turn(served, model, delete=False, frozen_mid_turn=freeze, cancel=cancel)
        finally:
            found = garbage_among_frozen()
    assert not found, f"cyclic garbage left by a turn and a subscription: {found.most_common(20)}"


class ShellThenText:
    """Asks for one shell command, then answers in text."""

    name = "shell-then-text"

    def __init__(self, command: str) -> None:
        self.command = command
        self.calls = 0

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[AsyncIterator[Any]]:
        self.calls += 1
        first = self.calls == 1

        async def play() -> AsyncIterator[Any]:
            if first:
                yield ToolCall("call_1", "shell", {"command": self.command})
            else:
                yield TextDelta("done")

        yield play()


async def test_a_shell_command_frozen_while_it_runs_leaves_no_cyclic_garbage(own_collection, tmp_path):
    """The sandboxed process, its pipes and the tool call's objects, alive at a freeze, are freed by
    reference counting once the command and its turn end."""
    started, go_on = tmp_path / "started", tmp_path / "go-on"
    model = ShellThenText(f"touch {started}; while [ ! -e {go_on} ]; do sleep 0.02; done; echo finished")
    auth = [(b"Authorization", b""), (b"Content-Type", b"application/json")]
    async with served_app(model=model, settings=Settings(approval_mode="yolo")) as served:
        auth[0] = (b"Authorization", b"Bearer " + served.token.encode())
        control = await RawConnection.open(served.url)
        body = orjson.dumps({"cwd": str(tmp_path)})
        sid = (await control.request(b"POST", b"/session", auth, body)).json()["sessionId"]  # type: ignore[index]
        events = await RawConnection.open(served.url)
        assert (await events.request(b"GET", f"/session/{sid}/events".encode(), auth, head_only=True)).status == 200
        prompt = orjson.dumps({"prompt": [{"type": "text", "text": "run it"}]})
        assert (await control.request(b"POST", f"/session/{sid}/prompt".encode(), auth, prompt)).status == 202
        try:
            with trio.fail_after(20):
                while not started.exists():
                    await trio.sleep(0.01)
            gc.collect()
            gc.freeze()  # the command running
            go_on.touch()
            with trio.fail_after(20):
                await read_until(events, b"turn_complete")
            await events.aclose()
            await control.aclose()
            for _ in range(20):
                await trio.sleep(0.01)
        finally:
            found = garbage_among_frozen()
    assert model.calls == 2
    assert not found, f"cyclic garbage left by a shell command: {found.most_common(20)}"


async def test_a_closed_session_frozen_mid_turn_is_freed_by_reference_counting(own_collection):
    """Its parts call back into it weakly (actors.weak), and its requests' records on their first message are
    let go when it ends: nothing of a closed session waits for a thaw."""
    model = HeldModel()
    held: list[weakref.ref[Any]] = []
    async with served_app(model=model) as served:

        def freeze(session_id: str) -> None:
            held.append(weakref.ref(served.daemon.get(session_id)))
            gc.collect()
            gc.freeze()

        try:
            await run_held_turn(served, model, delete=True, frozen_mid_turn=freeze)
            assert served.daemon.sessions_closed == 1
            assert held[0]() is None, "the closed session is still referred to"
        finally:
            found = garbage_among_frozen()
    assert not found, f"cyclic garbage left by a closed session: {found.most_common(20)}"


async def test_the_served_daemon_freezes_and_thaws_once_sessions_close(tmp_path):
    """``trellis serve`` installs the policy: with sessions created and deleted, a thaw comes once the minimum
    number has closed, and ``GET /metrics`` counts it."""

    def thaws(text: str) -> float:
        return next(s.value for f in text_string_to_metric_families(text) for s in f.samples
                    if s.name == "trellis_gc_thaws_total")

    with trio.fail_after(120):
        async with daemon_process("--model", "scripted", state_dir=tmp_path) as daemon:
            async with daemon.client(daemon.token()) as client:
                assert thaws((await client.get("/metrics")).text) == 0
                closed = 0
                while thaws((await client.get("/metrics")).text) == 0:
                    sid = (await client.post("/session", json={})).json()["sessionId"]
                    assert (await client.delete(f"/session/{sid}")).status_code in (200, 204)
                    closed += 1
                assert closed >= THAW_AFTER_CLOSED
