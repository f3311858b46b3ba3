"""Permission rules: what they decide about a command, a path, a host, an MCP tool — and the ways a model
might try to smuggle a denied command past them."""

from __future__ import annotations

import os

import pytest

from actors.permission_rules import RuleError, RuleLists, RuleSet, decide, parse_rule, simple_commands
from actors.settings_file import settings_from_dict
from actors.settings import SettingsError

ECHO_NOT_RM = RuleSet.of(RuleLists(allow=("Bash(echo:*)", "Bash(git status)"), deny=("Bash(rm:*)",)))


@pytest.mark.parametrize(("command", "effect"), [
    ("echo hi", "allow"),
    ("echo hi > out.txt 2>&1", "allow"),  # redirections are not commands
    ("echo 'rm -rf x'", "allow"),  # rm is echo's argument here
    ("echo hi # ; rm x", "allow"),  # a comment runs nothing
    ("git status", "allow"),
    ("git status --short", None),  # an exact rule: nothing more
    ("echox hi", None),  # whole words: echox is not echo
    ("ls", None),
    ("rm -rf x", "deny"),
    ("rm", "deny"),
    # compound commands: every part must be allowed, any denied part denies
    ("echo hi && rm x", "deny"),
    ("echo hi || rm x", "deny"),
    ("echo hi; rm x", "deny"),
    ("echo hi | rm x", "deny"),
    ("echo hi & rm x", "deny"),
    ("echo hi\nrm x", "deny"),
    ("echo hi && ls", None),
    ("echo a | echo b", "allow"),
    ("(rm x)", "deny"),
    ("{ rm x; }", "deny"),
    ("if true; then rm x; fi", "deny"),
    # substitutions
    ("echo $(rm x)", "deny"),
    ('echo "$(rm x)"', "deny"),
    ("echo `rm x`", "deny"),
    ("echo $(echo $(rm x))", "deny"),
    ("cat <(rm x)", "deny"),
    ("echo $(echo hi)", "allow"),
    # quoting and escapes do not hide a name
    ("'r'm x", "deny"),
    ('"rm" x', "deny"),
    ("r\\m x", "deny"),
    ("\\rm x", "deny"),
    ("$'\\x72m' x", "deny"),
    ("$'\\162m' x", "deny"),
    ("/bin/rm x", "deny"),
    ("FOO=1 rm x", "deny"),
    ("LANG=C echo hi", "allow"),  # an inert variable
    ("FOO=1 echo hi", None),  # any other may change what runs (PATH=., GIT_CONFIG_*): never allowed
    # wrappers and shells run their argument
    ("sh -c 'rm x'", "deny"),
    ("bash -lc 'echo a; rm b'", "deny"),
    ("eval rm x", "deny"),
    ("env rm x", "deny"),
    ("env -i FOO=1 rm x", "deny"),
    ("command rm x", "deny"),
    ("exec rm x", "deny"),
    ("nohup rm x", "deny"),
    ("nice -n 5 rm x", "deny"),
    ("timeout 5 rm x", "deny"),
    ("timeout -s KILL 5 rm x", "deny"),
    ("sudo -u root rm x", "deny"),
    ("xargs rm", "deny"),
    ("xargs -n 1 rm", "deny"),
    ("find . -name '*.o' -exec rm {} ;", "deny"),
    ("time rm x", "deny"),
    ("sh -c 'echo hi'", None),  # sh itself is not allowed
    # what cannot be read is never allowed (it asks)
    ("$CMD x", None),
    ("e* hi", None),
    ("{echo,hi}", None),
    ("cat <<EOF\nhi\nEOF", None),
    ("echo $((1+1))", None),
    ("echo 'unterminated", None),
    ("for f in a; do echo $f; done", None),
    ("env -S 'echo x'", None),
    ("env -S 'rm x'", "deny"),  # the string is read as sh -c's
])
def test_a_command_is_decided_by_every_simple_command_in_it(command, effect):
    verdict = decide(ECHO_NOT_RM, "shell", {"command": command}, "/work")
    assert verdict.effect == effect, (command, verdict, simple_commands(command))
    if effect == "deny":
        assert verdict.rules == ("Bash(rm:*)",)


def test_a_hidden_command_still_denies_when_the_rest_cannot_be_read():
    assert decide(ECHO_NOT_RM, "shell", {"command": "rm x; cat <<EOF"}, "/w").effect == "deny"
    assert decide(ECHO_NOT_RM, "shell", {"command": "echo a; rm 'b"}, "/w").effect == "deny"


def test_deny_wins_over_ask_and_ask_over_allow_whatever_the_order_or_specificity():
    rules = RuleSet.of(RuleLists(allow=("Bash(aws s3 ls)",), ask=("Bash(aws s3:*)",), deny=("Bash(aws iam:*)",)))
    assert decide(rules, "shell", {"command": "aws s3 ls"}, "/w").effect == "ask"
    assert decide(rules, "shell", {"command": "aws iam list-users"}, "/w").effect == "deny"
    everything = RuleSet.of(RuleLists(allow=("Bash",), deny=("Bash",)))
    assert decide(everything, "shell", {"command": "ls"}, "/w").effect == "deny"


def test_wildcards_and_the_optional_last_word():
    rules = RuleSet.of(RuleLists(allow=("Bash(git * main)", "Bash(ls *)", "Bash(npm run test:*)")))
    for command, effect in [("git push origin main", "allow"), ("git push origin dev", None), ("ls", "allow"),
                            ("ls -la", "allow"), ("lsblk", None), ("npm run test", "allow"),
                            ("npm run test -- -x", "allow"), ("npm run testing", None), ("npm run build", None)]:
        assert decide(rules, "shell", {"command": command}, "/w").effect == effect, command


def test_a_command_rule_covers_monitor_too():
    assert decide(ECHO_NOT_RM, "monitor", {"command": "rm -rf x"}, "/w").effect == "deny"
    assert decide(ECHO_NOT_RM, "monitor", {"task_id": "t1"}, "/w").effect is None


def test_path_rules_match_relative_home_absolute_and_settings_relative_forms(tmp_path):
    home, cwd = str(tmp_path / "home"), str(tmp_path / "proj")
    rules = RuleSet.of(RuleLists(allow=("Read(./src/**)", "Edit(/docs/**)"),
                                 deny=("Read(*.env)", "Read(~/.ssh/**)", "Edit(//etc/**)")), str(tmp_path / "proj"))
    cases = [("read_file", "src/a.py", "allow"), ("read_file", "src/deep/b.py", "allow"),
             ("read_file", "lib/a.py", None), ("read_file", "src/.env", "deny"), ("read_file", ".env", "deny"),
             ("grep", "src", None), ("glob", "src/x", "allow"),
             ("read_file", os.path.join(home, ".ssh", "id_rsa"), "deny"), ("read_file", "~/.ssh/id_rsa", "deny"),
             ("write_file", "/etc/passwd", "deny"), ("edit", "/etc/hosts", "deny"),
             ("edit", "docs/a.md", "allow"), ("write_file", "docs/a.md", "allow"), ("write_file", "src/a.py", None),
             ("read_file", "../proj/src/a.py", "allow"), ("read_file", "src/../../elsewhere/a.py", None)]
    for tool, path, effect in cases:
        got = decide(rules, tool, {"path": path}, cwd, home=home)
        assert got.effect == effect, (tool, path, got)


def test_a_symlink_cannot_carry_a_read_past_a_deny_nor_into_an_allow(tmp_path):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "key").write_text("k")
    (tmp_path / "src").mkdir()
    os.symlink(tmp_path / "secret" / "key", tmp_path / "src" / "link")
    rules = RuleSet.of(RuleLists(allow=("Read(./src/**)",), deny=("Read(./secret/**)",)))
    assert decide(rules, "read_file", {"path": "src/link"}, str(tmp_path)).effect == "deny"
    only_allow = RuleSet.of(RuleLists(allow=("Read(./src/**)",)))
    assert decide(only_allow, "read_file", {"path": "src/link"}, str(tmp_path)).effect is None


def test_web_fetch_domains_and_mcp_servers():
    rules = RuleSet.of(RuleLists(allow=("WebFetch(domain:example.com)", "WebFetch(domain:*.docs.org)",
                                        "mcp__github"), deny=("mcp__github__delete_repo",)))
    for tool, args, effect in [("web_fetch", {"url": "https://example.com/a"}, "allow"),
                               ("web_fetch", {"url": "https://EXAMPLE.com:8080/a"}, "allow"),
                               ("web_fetch", {"url": "https://example.com.evil.net/"}, None),
                               ("web_fetch", {"url": "https://a.docs.org/"}, "allow"),
                               ("web_fetch", {"url": "https://docs.org/"}, None),
                               ("mcp__github__create_issue", {}, "allow"),
                               ("mcp__github__delete_repo", {}, "deny"),
                               ("mcp__githubx__create_issue", {}, None), ("shell_output", {}, None)]:
        assert decide(rules, tool, args, "/w").effect == effect, (tool, args)


@pytest.mark.parametrize(("text", "wrong"), [
    ("Bahs(ls)", "unknown tool 'Bahs'"),
    ("Bash(npm:*:*)", ":* can only end"),
    ("Bash('open)", "cannot be read"),
    ("TodoWrite(x)", "takes no specifier"),
    ("WebFetch(example.com)", "domain:HOST"),
    ("mcp__x(y)", "without a specifier"),
    ("mcp__x__a*", "one tool or every tool"),
    ("", "a rule is a tool name"),
    ("Bash(ls", "a rule is a tool name"),
])
def test_a_rule_that_cannot_be_read_says_what_is_wrong(text, wrong):
    with pytest.raises(RuleError, match=wrong.replace("(", r"\(").replace("*", r"\*")):
        parse_rule(text)


def test_a_malformed_rule_in_settings_is_refused_naming_its_json_path_and_changes_nothing():
    with pytest.raises(SettingsError) as caught:
        settings_from_dict({"permissions": {"allow": ["Bash(echo:*)"], "deny": ["Bash(rm:*)", "Bahs(x)"]}})
    assert caught.value.path == "permissions.deny[1]" and "unknown tool 'Bahs'" in str(caught.value)
    with pytest.raises(SettingsError) as caught:
        settings_from_dict({"permissions": {"allow": "Bash"}})
    assert caught.value.path == "permissions.allow"
    with pytest.raises(SettingsError) as caught:
        settings_from_dict({"permissions": {"alow": []}})
    assert caught.value.path == "permissions.alow"
    good = settings_from_dict({"permissions": {"allow": ["Bash(echo:*)"]}})
    assert good.permission_rules.listed() == {"allow": ["Bash(echo:*)"], "ask": [], "deny": []}
