"""shared_prefix: the same answer as comparing item by item, without comparing what a build record vouches for."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.model.base import ChatMessage
from actors.model.prefix import KEPT, note_build, shared_prefix, vouched


class Item:
    """A message stand-in whose comparisons are counted (``memo`` as ChatMessage has it)."""

    compared = 0

    def __init__(self, text: str) -> None:
        self.text = text
        self.memo: dict = {}

    def __eq__(self, other: object) -> bool:
        Item.compared += 1
        return isinstance(other, Item) and other.text == self.text

    __hash__ = None  # type: ignore[assignment]


def brute(old: tuple, new: tuple) -> int:
    n = 0
    while n < min(len(old), len(new)) and (old[n] is new[n] or old[n] == new[n]):
        n += 1
    return n


def test_what_two_builds_of_one_source_share_is_not_compared_again():
    system = Item("system")
    source = [Item(f"m{i}") for i in range(50)]
    old = (system, *source)
    note_build(old, source, 0, 1, len(source))
    source.append(Item("answer"))
    new = (system, *source, Item("pending"))
    note_build(new, source, 0, 1, len(source))
    assert vouched(old, new) == 51
    assert shared_prefix(old, new) == 51
    # Taken as given, not looked at: equal copies under the same record (which a History never makes)
    # would each cost a comparison if they were compared.
    copies = (system, *(Item(m.text) for m in source), Item("pending"))
    note_build(copies, source, 0, 1, len(source))
    Item.compared = 0
    assert shared_prefix(old, copies) == 51
    assert Item.compared == 0
    unvouched = (system, *(Item(m.text) for m in source))
    Item.compared = 0
    assert shared_prefix(old, unvouched) == 51
    assert Item.compared == 50


def test_items_after_the_vouched_ones_are_still_compared():
    system = Item("system")
    source = [Item("a"), Item("b")]
    old = (system, *source, Item("pending"))  # the pending message went into the source as an equal copy
    note_build(old, source, 0, 1, 2)
    source += [Item("pending"), Item("answer")]
    new = (system, *source)
    note_build(new, source, 0, 1, 4)
    Item.compared = 0
    assert shared_prefix(old, new) == 4
    assert Item.compared == 1  # the pending copy, and only it
    assert brute(old, new) == 4


def test_nothing_is_vouched_across_a_rewrite_another_source_or_another_first_message():
    system = Item("system")
    source = [Item(str(i)) for i in range(20)]
    old = (system, *source)
    note_build(old, source, 0, 1, 20)
    rewritten = (system, *source)
    note_build(rewritten, source, 1, 1, 20)  # the source was rewritten in between
    assert vouched(old, rewritten) == 0
    other = list(source)
    elsewhere = (system, *other)
    note_build(elsewhere, other, 0, 1, 20)
    assert vouched(old, elsewhere) == 0
    unrecorded = (system, *source)
    assert vouched(old, unrecorded) == 0
    another_system = (Item("system"), *source)
    note_build(another_system, source, 0, 1, 20)
    assert vouched(old, another_system) == 0
    Item.compared = 0
    assert shared_prefix(old, rewritten) == 21
    assert Item.compared == 0  # not vouched, but the same objects: compared by identity, no __eq__ call
    assert shared_prefix(old, another_system) == 21 and Item.compared == 1


def test_a_build_record_is_kept_for_the_last_few_builds_only():
    system = Item("system")
    source = [Item("a")]
    builds = []
    for _ in range(KEPT + 1):
        built = (system, *source)
        note_build(built, source, 0, 1, len(source))
        builds.append(built)
        source.append(Item("more"))
    assert vouched(builds[0], builds[-1]) == 0  # forgotten: compared as before
    assert vouched(builds[1], builds[-1]) == 3
    assert shared_prefix(builds[0], builds[-1]) == 2


@settings(max_examples=300, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 8), st.lists(st.sampled_from("abc"), max_size=4), st.booleans()),
                min_size=1, max_size=10))
def test_any_history_of_appends_and_rewrites_gives_the_brute_force_answer(steps):
    system = Item("system")
    source: list[Item] = []
    version = 0
    built: list[tuple] = []
    for keep, added, rewrite in steps:
        if rewrite:  # a cut in place, and the new version it must come with (History.rewrites)
            del source[keep:]
            version += 1
        source += [Item(t) for t in added]
        pending = (Item("p"),) if keep % 2 else ()
        request = (system, *source, *pending)
        note_build(request, source, version, 1, len(source))
        built.append(request)
    for old in built:
        for new in built:
            assert shared_prefix(old, new) == brute(old, new)


def test_without_records_leading_messages_are_compared_identity_first_then_by_value():
    a, b, c, d = (ChatMessage("user", t) for t in "abcd")
    assert shared_prefix((a, b, c), (a, b, c, d)) == 3
    assert shared_prefix((a, b, c), (a, b, d)) == 2
    assert shared_prefix((a, b), (c,)) == 0
    assert shared_prefix((), (a,)) == 0
    assert shared_prefix((a, b, c), (a, ChatMessage("user", "b"), c)) == 3  # equal by value counts
