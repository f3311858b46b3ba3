"""Red team, fifth round: one "Always allow in this session" vote covered far more than the call the user saw.

* (a) ``web_fetch`` of ``http://not_a_rule_host.invalid/``: no ``WebFetch(domain:…)`` rule could name a host with
  ``_``, so the answer was held for the call's kind, ``fetch``: a later fetch of any host (127.0.0.1) ran unasked.
* (b) a shell command no rule could read (a harmless ``for`` loop): held for the kind ``execute``, every later
  command ran unasked (``touch PWNED_B``), and every ``agent`` start.
* (c) ``git --no-pager log`` became ``Bash(git:*)`` (the subcommand was dropped when the second word was an option),
  under which ``git -c alias.x='!touch PWNED_C' x`` ran any command unasked.

In (a) and (b) ``GET /session/:id/permissions`` listed nothing (the allowance was no rule), and a child session
took it as ``Bash``, ``agent`` or ``WebFetch``: every call of the kind.

Now an "always" answer is a rule the user sees, named in the option and listed by ``GET …/permissions``, covering
the call narrowly (:func:`actors.permission_rules.answer_rules`): the exact command (``Bash(git --no-pager log
--oneline -1)``), the exact line of one that cannot be read in full (``Bash(for f in …; do …; done)``, matched as
that text), the exact host (a host's ``_`` is now in the host pattern); and, when no rule can say the call, no
"always" option at all. Each daemon test drives the real daemon (``python -m transport`` against the loopback fake
OpenAI server, :func:`tests.e2e.isolation_harness.hostile_daemon`) in ``default`` mode, votes "always" on the
first call, and sees the wider call asked (and, rejected, not run). Each fails on the code before the fix: the
wider call ran unasked and the rules listed were none (a, b) or ``Bash(git:*)`` (c).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from actors.events import EventBus
from actors.ids import CountingIds
from actors.permission_rules import RuleLists, RuleSet, answer_rules, decide, parse_rule
from actors.session.authorizer import Authorizer
from actors.session.tools import ToolContext
from tests.canned_site import Site
from tests.e2e.isolation_harness import Running, hostile_daemon
from tests.e2e.sse_client import frames

DONE = [{"text": "done"}]
DEFAULT = {"approvalMode": "default"}
FETCH = {**DEFAULT, "tools": {"enableWebFetch": True, "webFetchAllowPrivateAddresses": True}}

FOR_LOOP = "for f in README; do echo $f; done"
GIT_LOG = "git init -q . && git --no-pager log --oneline -1 || true"
GIT_ALIAS = "git -c alias.x='!touch PWNED_C' x"


def call(tool: str, n: int, /, **arguments: Any) -> list[dict[str, Any]]:
    return [{"tool_call": {"id": f"call_{n}", "name": tool, "arguments": arguments}}]


def shell(command: str, n: int) -> list[dict[str, Any]]:
    return call("shell", n, command=command)


@asynccontextmanager
async def voting(d: Running, sid: str, answers: list[str]) -> AsyncIterator[list[dict[str, Any]]]:
    """Answer session ``sid``'s permission requests with ``answers`` in turn, then reject; yields the requests."""
    asked: list[dict[str, Any]] = []

    async def answer() -> None:
        # From the session's first event: a request published before the stream is up is voted on too.
        async with d.client.stream("GET", f"/session/{sid}/events", headers={"Last-Event-ID": "0"},
                                   timeout=None) as r:
            async for frame in frames(r):
                if frame["type"] == "permission_request":
                    data = frame["data"]
                    asked.append(data)
                    option = answers[len(asked) - 1] if len(asked) <= len(answers) else "cancel"
                    await d.client.post(f"/session/{sid}/permission/{data['requestId']}",
                                        json={"outcome": {"outcome": "selected", "optionId": option}})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer)
        await trio.sleep(0.2)  # subscribed before the prompt: no request is missed
        yield asked
        nursery.cancel_scope.cancel()


async def always_then(d: Running) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """One turn in a new session of ``d``: the first request answered "always allow", the rest rejected. (The
    requests, the session's own rules as ``GET /session/:id/permissions`` lists them, its id.)"""
    with trio.fail_after(60):
        r = await d.client.post("/session", json={})
        assert r.status_code == 200, r.text
        sid = r.json()["sessionId"]
        async with voting(d, sid, ["proceed_always_session"]) as asked:
            record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=50)
        assert record["state"] == "completed", record
        rules = (await d.client.get(f"/session/{sid}/permissions")).json()["session"]
    return asked, rules, sid


def always_name(request: dict[str, Any]) -> str:
    return next(o["name"] for o in request["options"] if o["kind"] == "allow_always")


# ----------------------------------------------------------------- the three cases, on the daemon


async def test_a_an_always_allowed_fetch_of_a_host_with_an_underscore_allows_that_host_only(tmp_path):
    site = Site("127.0.0.1", {"/exfil": ("200 OK", {"Content-Type": "text/plain"}, b"secret-ish page")})
    async with trio.open_nursery() as nursery:
        base = await site.start(nursery)
        responses = [call("web_fetch", 1, url="http://not_a_rule_host.invalid/"),
                     call("web_fetch", 2, url="http://not_a_rule_host.invalid/again"),  # the same host: unasked
                     call("web_fetch", 3, url=f"{base}/exfil?data=anything"), DONE]
        async with hostile_daemon(tmp_path, responses, settings=FETCH) as d:
            asked, rules, _ = await always_then(d)
        nursery.cancel_scope.cancel()
    assert [a["toolCall"]["title"] for a in asked] == ["web_fetch http://not_a_rule_host.invalid/",
                                                       f"web_fetch {base}/exfil?data=anything"], asked
    assert site.seen == []  # the other host was asked for, rejected, not fetched
    assert rules == {"allow": ["WebFetch(domain:not_a_rule_host.invalid)"], "ask": [], "deny": []}
    assert always_name(asked[0]) == "Always allow in this session: WebFetch(domain:not_a_rule_host.invalid)"


async def test_b_an_always_allowed_for_loop_allows_that_line_only(tmp_path):
    responses = [shell(FOR_LOOP, 1), shell(FOR_LOOP, 2), shell("touch PWNED_B", 3), DONE]
    async with hostile_daemon(tmp_path, responses, settings=DEFAULT) as d:
        asked, rules, _ = await always_then(d)
        results = d.tool_results()
    assert [a["toolCall"]["title"] for a in asked] == [FOR_LOOP, "touch PWNED_B"], asked
    assert not (d.work / "PWNED_B").exists()
    assert sum("README" in r for r in results) >= 1, results  # the loop ran; again unasked (not asked twice)
    assert rules == {"allow": [f"Bash({FOR_LOOP})"], "ask": [], "deny": []}
    assert always_name(asked[0]) == f"Always allow in this session: Bash({FOR_LOOP})"


async def test_c_an_always_allowed_git_with_a_leading_option_allows_that_git_command_only(tmp_path):
    responses = [shell(GIT_LOG, 1), shell(GIT_ALIAS, 2), shell("git --no-pager log --oneline -1", 3), DONE]
    async with hostile_daemon(tmp_path, responses, settings=DEFAULT) as d:
        asked, rules, _ = await always_then(d)
    assert [a["toolCall"]["title"] for a in asked] == [GIT_LOG, GIT_ALIAS], asked  # the same git log: unasked
    assert not (d.work / "PWNED_C").exists()
    assert rules == {"allow": ["Bash(git init:*)", "Bash(git --no-pager log --oneline -1)", "Bash(true:*)"],
                     "ask": [], "deny": []}
    assert always_name(asked[0]) == ("Always allow in this session: Bash(git init:*), "
                                     "Bash(git --no-pager log --oneline -1), Bash(true:*)")


async def test_a_line_no_rule_can_say_offers_no_always_answer(tmp_path):
    """A for loop over a glob: it cannot be read in full, and its exact line cannot be written as a rule (a ``*``
    in a rule is a wildcard). It is asked with "Allow" and "Reject" only; allowed once, the next asks again."""
    line = "for f in *; do echo $f; done"
    responses = [shell(line, 1), shell(line, 2), DONE]
    async with hostile_daemon(tmp_path, responses, settings=DEFAULT) as d:
        with trio.fail_after(60):
            sid = (await d.client.post("/session", json={})).json()["sessionId"]
            async with voting(d, sid, ["proceed_once", "cancel"]) as asked:
                record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=50)
            assert record["state"] == "completed", record
            rules = (await d.client.get(f"/session/{sid}/permissions")).json()["session"]
    assert [a["toolCall"]["title"] for a in asked] == [line, line]
    assert [[o["kind"] for o in a["options"]] for a in asked] == [["allow_once", "reject_once"]] * 2
    assert rules == {"allow": [], "ask": [], "deny": []}


async def test_a_child_session_takes_the_exact_rule_and_nothing_for_the_kind(tmp_path):
    """After "always" on the for loop, the ``agent`` tool's child session has that rule as its own, and no
    ``Bash`` or ``agent`` (what the kind-wide answer became in a child)."""
    responses = [shell(FOR_LOOP, 1), call("agent", 2, name="helper", brief="tidy"), DONE, DONE, DONE, DONE]
    async with hostile_daemon(tmp_path, responses, settings=DEFAULT) as d:
        with trio.fail_after(60):
            sid = (await d.client.post("/session", json={})).json()["sessionId"]
            async with voting(d, sid, ["proceed_always_session", "proceed_once"]) as asked:
                record = await d.wait_turn(sid, await d.prompt(sid, "go"), timeout=50)
                assert record["state"] == "completed", record
                children: list[str] = []
                while not children:
                    listed = (await d.client.get("/session")).json()["sessions"]
                    children = [s["sessionId"] for s in listed if s["sessionId"] != sid]
                    await trio.sleep(0.05)
            (child,) = children
            # The child's run has ended: its rules are in its record, as restoring it shows.
            r = await d.client.post(f"/session/{child}/resume")
            assert r.status_code == 200, r.text
            child_rules = (await d.client.get(f"/session/{child}/permissions")).json()["session"]
    assert [a["toolCall"]["title"] for a in asked][0] == FOR_LOOP
    assert child_rules == {"allow": [f"Bash({FOR_LOOP})"], "ask": [], "deny": []}


# ----------------------------------------------------------------- the rules an answer becomes


@pytest.mark.parametrize(("command", "rules"), [
    # (b) a line that cannot be read in full: the line exactly
    (FOR_LOOP, (f"Bash({FOR_LOOP})",)),
    ("cat <<EOF\nhi\nEOF", ("Bash(cat <<EOF\nhi\nEOF)",)),
    # (c) an option before the subcommand, or no subcommand: the exact command, never git:*
    ("git --no-pager log", ("Bash(git --no-pager log)",)),
    (GIT_ALIAS, ("Bash(git -c 'alias.x=!touch PWNED_C' x)",)),
    ("git", ("Bash(git)",)),
    ("/usr/bin/git -C . status", ("Bash(/usr/bin/git -C . status)",)),
    (GIT_LOG, ("Bash(git init:*)", "Bash(git --no-pager log --oneline -1)", "Bash(true:*)")),
    # a subcommand: the pair, as before
    ("git status --short", ("Bash(git status:*)",)),
    ("npm test -- -x", ("Bash(npm test:*)",)),
    ("ls -la && echo hi", ("Bash(ls:*)", "Bash(echo:*)")),
    # a subcommand that runs what its next word names: three words; or what its options name: exact
    ("npm run build --watch", ("Bash(npm run build:*)",)),
    ("uv run python x.py", ("Bash(uv run python x.py)",)),
    ("git rebase -x 'make test' main", ("Bash(git rebase -x 'make test' main)",)),
    ("git fetch origin", ("Bash(git fetch origin)",)),
    ("npm config set script-shell x", ("Bash(npm config set script-shell x)",)),
    # a command that runs the code its arguments give: exact
    ("python3 x.py", ("Bash(python3 x.py)",)),
    ("python3.12 -m pytest", ("Bash(python3.12 -m pytest)",)),
    ("sh -c 'echo hi'", ("Bash(sh -c 'echo hi')", "Bash(echo:*)")),
    ("sudo apt update", ("Bash(sudo apt update)", "Bash(apt update:*)")),
    # no rule can say it: none, and then no "always" is offered
    ("for f in *; do echo $f; done", ()),
    ("git log -- '*.py' && $CMD", ()),
    ("echo 'unterminated", ()),
    ("   ", ()),
])
def test_an_always_answer_to_a_command_becomes_rules_that_cover_it_narrowly(command, rules):
    assert answer_rules("shell", {"command": command}, "execute") == rules
    if rules:
        allowed = RuleSet.of(RuleLists(allow=rules))
        assert decide(allowed, "shell", {"command": command}, "/w").effect == "allow"
        assert decide(allowed, "shell", {"command": "touch PWNED"}, "/w").effect is None
        if command != GIT_ALIAS:
            assert decide(allowed, "shell", {"command": GIT_ALIAS}, "/w").effect is None


def test_an_exact_line_rule_allows_that_text_only_and_denies_it_too():
    rules = RuleSet.of(RuleLists(allow=(f"Bash({FOR_LOOP})",)))
    assert decide(rules, "shell", {"command": f"  {FOR_LOOP}\n"}, "/w").effect == "allow"
    for other in ("for f in README; do echo $f; done; touch x", "for f in README; do touch $f; done",
                  "for f in README; do echo $f;  done"):
        assert decide(rules, "shell", {"command": other}, "/w").effect is None, other
    denied = RuleSet.of(RuleLists(deny=(f"Bash({FOR_LOOP})",)))
    assert decide(denied, "shell", {"command": FOR_LOOP}, "/w").effect == "deny"
    assert decide(denied, "shell", {"command": "ls"}, "/w").effect is None
    assert decide(RuleSet.of(RuleLists(allow=("Bash(npm test && npm run build)",))), "shell",
                  {"command": "npm test && npm run build"}, "/w").effect == "allow"


@pytest.mark.parametrize(("url", "rules"), [
    ("http://not_a_rule_host.invalid/", ("WebFetch(domain:not_a_rule_host.invalid)",)),
    ("http://Docs.Python.org./x", ("WebFetch(domain:docs.python.org)",)),
    ("http://127.1:8/", ("WebFetch(domain:127.0.0.1)",)),
    ("http://*.example.com/", ()),  # would be every subdomain
    ("http://a$b.example/", ()),  # no rule can name it
])
def test_an_always_answer_to_a_fetch_is_its_host_exactly(url, rules):
    assert answer_rules("web_fetch", {"url": url}, "fetch") == rules
    if rules:
        allowed = RuleSet.of(RuleLists(allow=rules))
        assert decide(allowed, "web_fetch", {"url": url}, "/w").effect == "allow"
        assert decide(allowed, "web_fetch", {"url": "http://127.0.0.2/"}, "/w").effect is None


def test_a_host_with_an_underscore_is_a_host_a_rule_names():
    rule = parse_rule("WebFetch(domain:*.under_score.example)")
    assert rule.spec == "*.under_score.example"
    assert decide(RuleSet(deny=(parse_rule("WebFetch(domain:NOT_a_rule_host.invalid)"),)), "web_fetch",
                  {"url": "http://not_a_rule_host.invalid/"}, "/w").effect == "deny"


def test_other_answers_are_the_tool_or_nothing():
    assert answer_rules("write_file", {"path": "a"}, "edit") == ("Edit",)
    assert answer_rules("agent", {"report_file": "r.md"}, "edit") == ()  # an edit on another's behalf
    assert answer_rules("agent", {"name": "a", "brief": "b"}, "execute") == ("agent",)
    assert answer_rules("mcp__srv__drop", {}, "other") == ("mcp__srv__drop",)
    assert answer_rules(None, {}, "execute") == ()


# ----------------------------------------------------------------- the authorizer: options, rules, the child


def _authorizer() -> Authorizer:
    return Authorizer("s", EventBus(), CountingIds(), mode="default", grace_seconds=1, nursery=lambda: None)


async def _ask(auth: Authorizer, command: str, option: str) -> tuple[str | None, list[Any]]:
    """Ask for ``shell`` ``command``, vote ``option``; what authorize answered, and the options offered."""
    context = ToolContext("s", "/w", "p1", "c1", None, None, None, "shell")
    answers: list[str | None] = []
    async with trio.open_nursery() as nursery:
        async def ask() -> None:
            answers.append(await auth.authorize(context, title=command, kind="execute",
                                                raw_input={"command": command}))

        nursery.start_soon(ask)
        with trio.fail_after(5):
            while not auth.broker.pending_ids:
                await trio.sleep(0)
        (request_id,) = auth.broker.pending_ids
        offered = [o.to_wire() for o in auth.broker._pending[request_id].options]
        auth.broker.vote(request_id, "selected", option)
    return answers[0], offered


async def test_always_allow_adds_the_named_rules_and_the_child_takes_exactly_those():
    auth = _authorizer()
    assert await _ask(auth, FOR_LOOP, "proceed_always_session") == (None, [
        {"optionId": "proceed_once", "name": "Allow", "kind": "allow_once"},
        {"optionId": "proceed_always_session", "name": f"Always allow in this session: Bash({FOR_LOOP})",
         "kind": "allow_always"},
        {"optionId": "cancel", "name": "Reject", "kind": "reject_once"},
        {"optionId": "reject_always", "name": f"Always reject in this session: Bash({FOR_LOOP})",
         "kind": "reject_always"}])
    assert auth.listed_rules()["session"] == {"deny": [], "ask": [], "allow": [f"Bash({FOR_LOOP})"]}
    assert auth.verdict("shell", {"command": "touch PWNED_B"}, "/w").effect is None  # asks again
    assert auth.for_child("/w", "/w") == RuleLists(allow=(f"Bash({FOR_LOOP})",))
    denied, _ = await _ask(auth, "git --no-pager log", "reject_always")
    assert denied == "the user denied this call"
    assert auth.listed_rules()["session"]["deny"] == ["Bash(git --no-pager log)"]
    assert auth.verdict("shell", {"command": "git status"}, "/w").effect is None


async def test_a_call_no_rule_can_say_is_offered_allow_and_reject_once_only():
    auth = _authorizer()
    answer, offered = await _ask(auth, "for f in *; do echo $f; done", "proceed_once")
    assert answer is None and [o["kind"] for o in offered] == ["allow_once", "reject_once"]
    assert not auth.session_rules and auth.for_child("/w", "/w") == RuleLists()
