"""A session's history counts its rewrites, so each request is known to extend the last without a pass over it."""

from __future__ import annotations

import trio

from actors import CountingIds, Settings, load_script, open_daemon
from actors.model.base import ChatMessage
from actors.model.prefix import shared_prefix, vouched
from actors.session.history import History

LIMIT = 30


def test_every_change_but_an_append_counts_as_a_rewrite():
    a, b, c = (ChatMessage("user", t) for t in "abc")
    history = History([a])
    history.append(b)
    history.extend([c])
    history += [a]
    assert history.rewrites == 0 and list(history) == [a, b, c, a]
    changes = [lambda h: h.__setitem__(0, c), lambda h: h.__delitem__(0), lambda h: h.insert(0, a),
               lambda h: h.pop(), lambda h: h.remove(b), lambda h: h.sort(key=lambda m: m.content),
               lambda h: h.reverse(), lambda h: h.__imul__(1), lambda h: h.clear()]
    for i, change in enumerate(changes, 1):
        change(history)
        assert history.rewrites == i, change


async def run_prompt(handle, text: str) -> None:
    admitted = await handle.prompt(text)
    async with handle.subscribe(last_event_id=admitted.last_event_id) as events:
        async for event in events:
            if event.type in ("turn_complete", "turn_error") and event.prompt_id == admitted.prompt_id:
                return


async def test_each_request_is_vouched_to_extend_the_last_until_the_history_is_rewritten(tmp_path):
    model = load_script({"responses": [[{"text": "one"}], [{"text": "two"}], [{"text": "three"}]], "then": "demo"})
    with trio.fail_after(LIMIT):
        async with open_daemon(Settings(), model=model, ids=CountingIds(), state_dir=tmp_path / "state",
                               workspace=str(tmp_path)) as daemon:
            handle, _ = await daemon.create_session(str(tmp_path))
            await run_prompt(handle, "first")
            await run_prompt(handle, "second")
            await run_prompt(handle, "/clear")
            await run_prompt(handle, "third")
            # Read while the session lives: its end lets go of the build records (they make a cycle).
            first, second, third = (call.messages for call in model.calls[:3])
            assert [m.role for m in first] == ["system", "user"]
            assert [m.role for m in second] == ["system", "user", "assistant", "user"]
            # The whole first request is vouched for: its system message and the history it was built from.
            assert vouched(first, second) == 2 and shared_prefix(first, second) == 2
            # The cleared history is a new one: nothing vouched, and only the system message is shared.
            assert vouched(second, third) == 0 and shared_prefix(second, third) == 1
    assert vouched(first, second) == 0  # the session ended: its records went with it
    assert shared_prefix(first, second) == 2  # the same answer, compared item by item
