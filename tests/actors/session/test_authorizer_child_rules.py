"""What a child session the ``agent`` tool starts takes from its parent's authorizer (``Authorizer.for_child``),
and what ``auto-edit`` runs unasked (``Authorizer.explain``)."""

from __future__ import annotations

import os

import pytest
import trio

from actors.events import EventBus
from actors.ids import CountingIds
from actors.permission_rules import RuleLists, RuleSet, decide
from actors.session.authorizer import Authorizer


def authorizer(session: RuleLists = RuleLists(), settings: RuleSet | None = None, mode: str = "default") -> Authorizer:
    return Authorizer("s", EventBus(), CountingIds(), mode=mode, grace_seconds=1, nursery=lambda: None,
                      rules=settings, session_rules=session)


def test_the_sessions_own_rules_pass_to_the_child_with_cwd_paths_anchored_at_the_parents_cwd(tmp_path):
    parent = str(tmp_path)
    own = RuleLists(allow=("Bash(npm test:*)", "Edit(src/**)"), ask=("Bash(git push:*)",),
                    deny=("Bash(rm:*)", "Read(./secret/**)", "Read(*.env)"))
    child = authorizer(own).for_child(parent, parent)
    assert child.allow == ("Bash(npm test:*)", f"Edit(/{parent}/src/**)")
    assert child.ask == ("Bash(git push:*)",)
    assert child.deny == ("Bash(rm:*)", f"Read(/{parent}/secret/**)", f"Read(/{parent}/**/*.env)")
    # In a child elsewhere they mean what they meant in the parent.
    rules = RuleSet.of(child)
    elsewhere = str(tmp_path / "sub")
    assert decide(rules, "read_file", {"path": "../secret/key"}, elsewhere).effect == "deny"
    assert decide(rules, "read_file", {"path": "../deep/.env"}, elsewhere).effect == "deny"
    assert decide(rules, "write_file", {"path": "../src/a.py"}, elsewhere).effect == "allow"
    assert decide(rules, "write_file", {"path": "src/a.py"}, elsewhere).effect is None


def test_the_settings_cwd_rules_pass_only_to_a_child_in_another_cwd(tmp_path):
    settings = RuleSet.of(RuleLists(deny=("Read(./secret/**)", "Read(//etc/shadow)", "Edit(/docs/**)")),
                          base=str(tmp_path / "conf"))
    parent = str(tmp_path)
    assert authorizer(settings=settings).for_child(parent, parent) == RuleLists()  # the child has them as they are
    child = authorizer(settings=settings).for_child(parent, str(tmp_path / "sub"))
    assert child.deny == (f"Read(/{parent}/secret/**)",)  # the others do not start from the cwd


def test_a_symlinked_cwd_anchors_deny_rules_at_both_paths(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    child = authorizer(RuleLists(deny=("Read(./secret/**)",), allow=("Read(./pub/**)",))).for_child(str(link), str(real))
    assert child.deny == (f"Read(/{link}/secret/**)", f"Read(/{real}/secret/**)")
    assert child.allow == (f"Read(/{link}/pub/**)",)  # as the parent reads it: no wider


def test_always_answers_pass_to_the_child_as_the_rules_they_became_and_nothing_for_a_kind():
    """An "always" answer is a rule of the session's own (answer_rules): the child takes exactly that rule. No
    answer is held for a kind of call any more (an opaque command's answer once became Bash and agent)."""
    parent = authorizer()
    parent._remember(("Bash(for f in a; do echo $f; done)",), "allow")
    parent._remember(("Bash(git --no-pager log)",), "deny")
    assert parent.always_denied == frozenset()
    child = parent.for_child("/w", "/w")
    assert child == RuleLists(allow=("Bash(for f in a; do echo $f; done)",), deny=("Bash(git --no-pager log)",))
    rules = RuleSet.of(child)
    assert decide(rules, "shell", {"command": "for f in a; do echo $f; done"}, "/w").effect == "allow"
    assert decide(rules, "shell", {"command": "touch x"}, "/w").effect is None
    assert decide(rules, "agent", {"name": "a", "brief": "b"}, "/w").effect is None


@pytest.mark.parametrize(("tool", "kind", "arguments", "outcome"), [
    ("write_file", "edit", {"path": "a", "content": ""}, "allow"),
    ("edit", "edit", {"path": "a", "old_string": "x", "new_string": "y"}, "allow"),
    ("web_fetch", "fetch", {"url": "https://example.com"}, "allow"),
    ("shell", "execute", {"command": "ls"}, "ask"),
    ("monitor", "execute", {"command": "ls"}, "ask"),
    ("agent", "other", {"name": "a", "brief": "b"}, "ask"),
    ("mcp__srv__tool", "other", {}, "ask"),
])
def test_auto_edit_runs_edits_and_fetches_unasked_and_asks_for_the_rest(tool, kind, arguments, outcome):
    assert authorizer(mode="auto-edit").explain(tool, arguments, "/w", asks=kind)["outcome"] == outcome
    assert authorizer(mode="yolo").explain(tool, arguments, "/w", asks=kind)["outcome"] == "allow"
    assert authorizer(mode="default").explain(tool, arguments, "/w", asks=kind)["outcome"] == "ask"


async def test_auto_edit_asks_the_client_before_a_command_and_not_before_an_edit():
    from actors.session.tools import ToolContext

    auth = authorizer(mode="auto-edit")
    context = ToolContext("s", "/w", "p1", "c1", None, None, None, "shell")
    assert await auth.authorize(context, title="edit", kind="edit", raw_input={}) is None
    async with trio.open_nursery() as nursery:
        answers: list = []

        async def ask() -> None:
            answers.append(await auth.authorize(context, title="ls", kind="execute", raw_input={"command": "ls"}))

        nursery.start_soon(ask)
        with trio.fail_after(5):
            while not auth.broker.pending_ids:
                await trio.sleep(0)
        (request_id,) = auth.broker.pending_ids
        auth.broker.vote(request_id, "selected", "cancel")
    assert answers == ["the user denied this call"]
