"""The pure part of checkpoints: manifests, their differences, a restore's plan, changes outside the session."""

from __future__ import annotations

from actors.checkpoints.manifest import (
    DIR, FILE, LINK, Entry, Manifest, changed_outside, changes, plan_restore, text_hash,
)


def f(sha: str, mode: int = 0o644) -> Entry:
    return Entry(FILE, sha=sha, size=1, mode=mode, stat=(1, 2, 3, 4))


D = Entry(DIR, mode=0o755)


def test_entries_compare_content_not_stat():
    assert f("a").same(Entry(FILE, sha="a", size=1, mode=0o644, stat=(9, 9, 9, 9)))
    assert not f("a").same(f("a", 0o755))
    assert not f("a").same(Entry(LINK, target="a"))
    assert Entry(LINK, target="x").same(Entry(LINK, target="x"))
    assert D.same(Entry(DIR, mode=0o700))


def test_manifests_round_trip_through_bytes():
    m = Manifest({"a": f("1"), "d": D, "d/l": Entry(LINK, target="../a")}, {"big": "over the cap"},
                 frozenset({"x.log"}), False)
    again = Manifest.from_bytes(m.to_bytes())
    assert again == m and again.entries["a"].stat == (1, 2, 3, 4)
    assert m.id() == again.id()


def test_changes_name_added_deleted_and_modified_and_not_what_is_not_covered():
    before = Manifest({"a": f("1"), "b": f("2"), "big": f("3")})
    after = Manifest({"a": f("9"), "c": f("3"), "new": D}, {"big": "over the cap"})
    assert [(c.path, c.change, c.kind) for c in changes(before, after)] == [
        ("a", "modified", FILE), ("b", "deleted", FILE), ("c", "added", FILE), ("new", "added", DIR)]


def test_the_plan_orders_deletions_deepest_first_and_makes_directories_before_files():
    current = Manifest({"n": D, "n/m": D, "n/m/x": f("1"), "a": f("2")})
    target = Manifest({"a": f("3"), "k": D, "k/j": D, "k/j/y": f("4")})
    plan = plan_restore(current, target)
    assert plan.deletes == ("n/m/x",)
    assert plan.rmdirs == ("n/m", "n")
    assert plan.mkdirs == ("k", "k/j")
    assert plan.writes == ("a", "k/j/y")


def test_a_kind_change_deletes_then_writes():
    current = Manifest({"p": D, "p/x": f("1"), "q": Entry(LINK, target="/etc")})
    target = Manifest({"p": f("2"), "q": D})
    plan = plan_restore(current, target)
    assert plan.deletes == ("p/x", "q") and plan.rmdirs == ("p",)
    assert plan.mkdirs == ("q",) and plan.writes == ("p",)


def test_skipped_and_ignored_paths_are_left_alone_on_either_side():
    current = Manifest({"big": f("1"), "out": D, "out/a": f("2")}, {"grown": "over the cap"},
                       frozenset({"x.log"}))
    target = Manifest({"grown": f("3"), "x.log": f("4")}, {"big": "over the cap"}, frozenset({"out"}))
    plan = plan_restore(current, target)
    assert plan.touched == []
    assert set(plan.skipped) == {"big", "grown", "out", "out/a", "x.log"}


def test_an_incomplete_target_deletes_nothing_it_lacks():
    plan = plan_restore(Manifest({"a": f("1"), "b": f("2")}), Manifest({"a": f("3")}, complete=False))
    assert plan.writes == ("a",) and plan.deletes == () and "b" in plan.skipped


def test_changed_outside_is_what_differs_from_the_reference_among_the_touched_paths():
    reference = Manifest({"a": f("1"), "b": f("2")})
    now = Manifest({"a": f("1"), "b": f("9"), "c": f("5")})
    assert changed_outside(reference, now, ["a", "b", "c", "gone"]) == ["b", "c"]


def test_text_hash_is_stable():
    assert text_hash("hello") == text_hash("hello") != text_hash("hello ")
