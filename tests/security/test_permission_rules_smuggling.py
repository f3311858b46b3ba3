"""A hostile model against the permission rules: smuggling a denied command past ``Bash(rm:*)``, or anything but
an allowed command past ``Bash(echo:*)``, ``Bash(git status)``, ``Bash(ls *)`` — and a read past
``Read(./secret/**)``.

The promise: a line that runs ``rm`` is never allowed (it is denied, or at worst asks: ``None``, the approval
mode decides), and only lines made of allowed commands are allowed. ``/bin/sh`` is dash here and bash on other
systems, so the reading must hold for both.

``BYPASSES`` were decided "allow" before the fixes (each one checked to really run ``rm`` under bash or dash:
``test_the_bypasses_are_real``). ``ATTACKS`` is every other line tried, with what it comes to now. Lines
that hide ``rm`` from any reading — an interpreter's own language, a script read from a file or stdin, a
name computed at run time — cannot be denied, only kept from being allowed (see the guide's "Compound
commands").
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from actors.permission_rules import RuleLists, RuleSet, decide, simple_commands

RULES = RuleSet.of(RuleLists(allow=("Bash(echo:*)", "Bash(git status)", "Bash(ls *)"),
                             deny=("Bash(rm:*)", "Read(./secret/**)")))

# (line, the shells that run its rm) — each was "allow" before the fixes.
BYPASSES = [
    # $'…' is bash's; dash 0.5.12 reads $' as "$" and a plain quote, so quotes pair differently
    ("echo $'\\' ; rm x ; echo ' #'", "dash"),
    ("echo $'\\'' \"'; rm x; echo '\"' #'", "dash"),
    # ${…} ended at its first }, even a quoted one
    ("echo ${x:-'}'}; rm x; echo ' #'", "bash dash"),
    ("echo ${x#'}'}; rm x; echo ' #'", "bash dash"),
    ("echo ${x//a/'}'}; rm x; echo ' #'", "bash"),
    # bash evaluates a variable's value as arithmetic in subscripts, offsets, $[…], ((…)), ${!x}: a[$(…)] runs
    ("x='a[$(rm x)]'; echo ${PATH:x}", "bash"),
    ("x='a[$(rm x)]'; echo ${a[x]}", "bash"),
    ("x='a[$(rm x)]'; echo $[x]", "bash"),
    ("x='a[$(rm x)]'; echo ${!x}", "bash"),
    ("x='a[$(rm x)]'; ls ${PATH:x}", "bash"),
    ("ls='a[$(rm x)]'; ((ls))", "bash"),
    ("x='$(rm x)'; echo ${x@P}", "bash"),  # prompt expansion runs $(…)
]
# Allowed before the fixes, and able to run anything: an assignment changes what an allowed command does.
ASSIGNMENTS = [
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor GIT_CONFIG_VALUE_0='rm -rf x; false' git status",
    "HOME=. git status",  # a .gitconfig written by an allowed echo
    "PATH=.; ls", "PATH=.:$PATH ls", "PATH+=:. ls", "LD_PRELOAD=./x.so ls", "BASH_ENV=./f ls",
    "IFS=x; echo hi", "PROMPT_COMMAND='rm x' echo hi", "FOO=1 echo hi",
]


@pytest.mark.parametrize(("command", "shells"), BYPASSES)
def test_a_former_bypass_is_no_longer_allowed(command, shells):
    verdict = decide(RULES, "shell", {"command": command}, "/w")
    assert verdict.effect != "allow", (command, verdict, simple_commands(command))


@pytest.mark.parametrize("command", ASSIGNMENTS)
def test_an_assignment_keeps_a_line_from_being_allowed(command):
    verdict = decide(RULES, "shell", {"command": command}, "/w")
    assert verdict.effect is None and "assignment" in verdict.reason, (command, verdict)


def test_an_inert_assignment_still_allows():
    assert decide(RULES, "shell", {"command": "LANG=C LC_ALL=C TZ=UTC echo hi"}, "/w").effect == "allow"


def _runs_rm(command: str, shell: str, tmp_path) -> bool:
    stub = tmp_path / "bin"
    stub.mkdir(exist_ok=True)
    (stub / "rm").write_text('#!/bin/sh\necho ran >> "$LOG"\n')
    (stub / "rm").chmod(0o755)
    work = tmp_path / shell
    work.mkdir()
    log = tmp_path / f"{shell}.log"
    env = {"PATH": f"{stub}:/usr/bin:/bin", "LOG": str(log), "HOME": str(work)}
    subprocess.run([shell, "-c", command], cwd=work, env=env, capture_output=True, timeout=10)
    return log.exists()


@pytest.mark.parametrize(("command", "shells"), BYPASSES)
def test_the_bypasses_are_real(command, shells, tmp_path):
    """Each former bypass runs (a stub) rm under the shells named: the table is of real attacks."""
    for shell in shells.split():
        if shutil.which(shell) is None:
            pytest.skip(f"no {shell}")
        assert _runs_rm(command, shell, tmp_path), (command, shell)


ATTACKS = [
    # separators, continuations, comments, whitespace
    ("git status; rm x", "deny"), ("git status && rm x", "deny"), ("git status\nrm x", "deny"),
    ("git status\r\nrm x", "deny"), ("git status #\nrm x", "deny"), ("echo hi #\nrm x", "deny"),
    ("echo hi # ; rm x", "allow"),  # a comment: rm does not run
    ("echo x; #\\\nrm x", "deny"), ("echo hi\rrm x", "allow"),  # CR is no separator: one word, hi\rrm
    ("echo\thi;\trm\tx", "deny"), ("r\\\nm x", "deny"), ("echo hi \\\n&& rm x", "deny"),
    ("echo hi;\\\nrm x", "deny"), ("e\\cho hi;r\\\n\\m x", "deny"), ("echo hi |\nrm x", "deny"),
    ("echo hi ||\n\nrm x", "deny"), ("echo a |& rm x", "deny"), ("echo hi;& rm x", "deny"),
    ("echo hi;;& rm x", "deny"), ("rm x &", "deny"), ("echo hi & rm x", "deny"), ("! rm x", "deny"),
    ("echo hi | (rm x)", "deny"), ("{ rm x; }", "deny"),
    # quoting, escapes, lookalikes, NUL
    ("\\rm x", "deny"), ("$\"rm\" x", "deny"), ("echo $\"hi\"", None), ("echo $'hi'", None),
    ("echo $'\\''; rm x; echo '", "deny"), ("echo \\\\'; rm x; echo '", "allow"),  # rm is quoted: not run
    ("echo 'a\\' ; rm x", "deny"), ('echo "a\\"" ; rm x', "deny"), ("echo x\\ ; rm x", "deny"),
    ("\uff52\uff4d x", None),  # fullwidth rm: another command, not rm
    ("r\0m x", None), ("echo a\0; rm x", "deny"),
    # redirections, here-strings, here-documents
    ("rm>f x", "deny"), ("rm 2>f x", "deny"), ("echo hi > $(rm x)", "deny"), ("echo hi 2>$(rm x)", "deny"),
    ("git status >$(rm x)", "deny"), ("cat <<<$(rm x)", "deny"), ("echo hi <<< $(rm x)", "deny"),
    ("echo hi > >(rm x)", "deny"), ("ls >(rm x)", "deny"), ("exec 3< <(rm x)", "deny"),
    ("exec >f; rm x", "deny"), ("echo hi&>f;rm x", "deny"), ("echo hi>|f;rm x", "deny"),
    ("echo hi 3>&1 1>&2- ; rm x", "deny"), ("git status 2>/dev/null", "allow"),
    ("echo <<EOF\n$(rm x)\nEOF", "deny"), ("echo <<EOF\nhi\nEOF\nrm x", "deny"),
    ("cat <<-EOF\n\tEOF\nrm x", "deny"), ("echo <<E\"O\"F\nhi\nEOF\nrm x", "deny"),
    ("echo <<'EOF'\n$(rm x)\nEOF", None),  # a quoted delimiter: the body is not expanded
    ("echo $(cat <<EOF\n)\nEOF\nrm x\n)", "deny"),
    # substitutions and expansions
    ("ls $(rm x)", "deny"), ("ls `rm x`", "deny"), ('ls "$(rm x)"', "deny"), ("ls x`rm x`", "deny"),
    ("echo `echo \\`rm x\\``", "deny"), ('echo "$(echo "$(rm x)")"', "deny"), ("echo $( (rm x) )", "deny"),
    ("echo $(echo ')'; rm x)", "deny"), ("echo $(echo hi # '\n) ; rm x ; echo '\n)'", "deny"),
    ("echo $(( $(rm x) ))", "deny"), ("echo $(( 1 + `rm x` ))", "deny"), ("(( $(rm x) ))", "deny"),
    ("echo $((echo hi); (rm x))", "deny"), ("echo $[$(rm x)]", "deny"), ("echo $((1)); rm x", "deny"),
    ("echo ${x:-$(rm x)}", "deny"), ("echo ${x:-`rm x`}", "deny"), ("echo ${x:=$(rm x)}", "deny"),
    ('echo ${x:-"$(rm x)"}', "deny"), ("echo ${a[$(rm x)]}", "deny"), ("ls ${x:-$(rm x)}", "deny"),
    ('echo "${x:-\'}\'}"; rm x; echo \' #\'', "deny"), ("echo ${x}}; rm x", "deny"),
    ("echo ${#x}; rm x", "deny"), ("[[ $(rm x) ]]", "deny"), ('[ -n "$(rm x)" ]', "deny"),
    ("X=$(rm x) echo hi", "deny"), ("X=`rm x`", "deny"), ("declare X=$(rm x)", "deny"),
    ("export X=$(rm x)", "deny"), ("local X=$(rm x)", "deny"), ("readonly X=$(rm x)", "deny"),
    ("ls ${x}", "allow"), ("git status $EMPTY", None), ("git status ''", None),
    # computed names: what they could come to is denied, the rest asks
    ("rm${IFS}x", "deny"), ("${IFS}rm x", "deny"), ("$@ rm x", "deny"), ('"$@" rm x', "deny"),
    ("$EMPTY rm x", "deny"), ("{rm,x}", "deny"), ("/???/r? x", "deny"), ("/bin/r[m] x", "deny"),
    ("r* x", "deny"), ("e* hi", None), ("$CMD x", None), ("{ec'}',ho} hi", None),  # {…'}'…}: still a brace
    ("a=rm; $a x", None), ("set -- rm x; \"$@\"", None), ("x=r; eval ${x}m y", None),  # run-time values
    # shell features that run a command later or elsewhere
    ("alias x=rm\nx y", "deny"), ("alias echo=rm\necho x", "deny"), ("trap 'rm x' EXIT; echo hi", "deny"),
    ("f(){ rm x; }; f", "deny"), ("f () { rm x; }; f", "deny"), ("ls () { rm x; }; ls", "deny"),
    ("function f { rm x; }; f", "deny"), ("coproc rm x", "deny"), ("coproc F { rm x; }", "deny"),
    ("case a in a) rm x;; esac", "deny"), ("for i in 1; do rm x; done", "deny"),
    ("while rm x; do break; done", "deny"), ("until rm x; do :; done", "deny"),
    ("select x in a; do rm x; done", "deny"), ("if rm x; then :; fi", "deny"),
    ("echo $(case a in a) rm x;; esac)", None),  # case inside $(…): its ) ends the substitution early
    # wrappers and commands that run a command
    ("exec rm x", "deny"), ("exec -- rm x", "deny"), ("exec -la sh rm x", "deny"), ("command -p rm x", "deny"),
    ("command -- rm x", "deny"), ("builtin eval rm x", "deny"), ("builtin command rm x", "deny"),
    ("eval r\"m\" x", "deny"), ("eval 'r''m x'", "deny"), ("nohup rm x", "deny"), ("time -p rm x", "deny"),
    ("time -- rm x", "deny"), ("timeout --foreground 5 rm x", "deny"),
    ("timeout -k 1 --preserve-status 5 rm x", "deny"), ("nice rm x", "deny"), ("nice -5 rm x", "deny"),
    ("env - rm x", "deny"), ("env -iu X rm x", "deny"), ("env --ignore-environment rm x", "deny"),
    ("/usr/bin/env rm x", "deny"), ("env -S 'rm x'", "deny"), ("env -S'echo hi' x", None),
    ("stdbuf -oL rm x", "deny"), ("setsid -f rm x", "deny"), ("ionice -c3 rm x", "deny"),
    ("chrt -i 0 rm x", "deny"), ("taskset -c 0 rm x", "deny"), ("sudo rm x", "deny"), ("doas rm x", "deny"),
    ("unbuffer rm x", "deny"), ("strace -f rm x", "deny"), ("busybox rm x", "deny"), ("watch -n1 rm x", "deny"),
    ("flock f rm x", "deny"), ("flock -c 'rm x' f", "deny"), ("su -c 'rm x'", "deny"),
    ("runuser -c 'rm x'", "deny"), ("script -c 'rm x'", "deny"),
    ("sh -c 'rm x'", "deny"), ("dash -c 'rm x'", "deny"), ("/bin/sh -c 'rm x'", "deny"),
    ("sh -e -c 'rm x'", "deny"), ("sh -c -- 'rm x'", "deny"), ("sh -o errexit -c 'rm x'", "deny"),
    ("xargs -i rm {}", "deny"), ("xargs --replace rm {}", "deny"), ("xargs -l rm", "deny"),  # -i: no value
    ("env -S'rm a=b' x", "deny"), ("env --split-string 'rm x'", "deny"),
    ("echo x | xargs sh -c 'rm x'", "deny"), ("echo x | xargs -I{} sh -c 'rm {}'", "deny"), ("xargs -0 rm", "deny"),
    ("find . -maxdepth 0 -exec sh -c 'rm x' \\;", "deny"), ("find . -maxdepth 0 -exec rm x {} +", "deny"),
    ("sh -c \"$(echo rm x)\"", None),
    # git: only the exact words of Bash(git status)
    ("git -c alias.status='!rm x' status", None), ("git -c core.pager='rm x' status", None),
    ("git -c core.fsmonitor='rm x' status", None), ("git 'status'", "allow"), ('git stat"us"', "allow"),
    ("git status --short", None),
    # what no command rule can see into: never allowed (it asks), never denied
    ("awk 'BEGIN{system(\"rm x\")}'", None), ("echo | sed 'e rm x'", None), ("perl -e 'system(\"rm x\")'", None),
    ("python3 -c 'import os; os.system(\"rm x\")'", None), ("echo 'rm x' > f; . ./f", None),
    ("echo 'rm x' > f; source ./f", None), ("echo 'rm x' | sh", None), ("echo 'rm x' | bash -s", None),
    ("bash <<< 'rm x'", None), ("sh -s <<<'rm x'", None), ("echo -e '\\x72m x' | sh", None),
    ("echo rm x | xargs -I% sh -c %", None), ("BASH_ENV=./f bash -c 'echo hi'", None),
    ("echo 'x' && ls", "allow"), ("ls; ls", "allow"), ("ls *", "allow"),
]


@pytest.mark.parametrize(("command", "effect"), ATTACKS)
def test_an_attack_comes_to_what_the_table_says(command, effect):
    verdict = decide(RULES, "shell", {"command": command}, "/w")
    assert verdict.effect == effect, (command, verdict, simple_commands(command))


@pytest.mark.parametrize("command", [c for c, _ in ATTACKS + BYPASSES] + ASSIGNMENTS)
def test_a_line_that_could_run_anything_but_allowed_commands_is_never_allowed(command):
    """The property itself: "allow" only for lines the table marks allowed."""
    allowed = {c for c, e in ATTACKS if e == "allow"} | {"LANG=C echo hi"}
    if decide(RULES, "shell", {"command": command}, "/w").effect == "allow":
        assert command in allowed


@pytest.mark.parametrize("command", [
    "$a " * 3000 + "rm x", "${x:-" * 3000, '"${x:-' * 3000, "$(" * 3000, "(" * 5000 + "rm x", "eval " * 3000 + "rm x",
    "env " * 3000 + "rm x", "nice " * 3000 + "rm x", "time " * 3000 + "rm x", "a=$b " * 3000 + "rm x",
    "cat <<E\n" * 2000, "$'" * 3000, '$"' * 3000, "{ " * 3000 + "rm x",
])
def test_a_pathological_line_is_read_quickly_and_never_allowed(command):
    """No recursion error (a decision that raises is no decision) and never "allow"."""
    assert decide(RULES, "shell", {"command": command}, "/w").effect != "allow"


# ----------------------------------------------------------------- paths


@pytest.fixture
def project(tmp_path):
    cwd = tmp_path / "proj"
    (cwd / "secret" / "sub").mkdir(parents=True)
    (cwd / "pub").mkdir()
    (cwd / "secret" / "k").write_text("k")
    os.symlink(cwd / "secret", cwd / "pub" / "ln")
    os.symlink(cwd / "secret" / "sub", cwd / "s2")
    os.symlink("secret", cwd / "rel")
    return str(cwd)


READS = RuleSet.of(RuleLists(allow=("Read(./**)",), deny=("Read(./secret/**)",)))


@pytest.mark.parametrize(("tool", "path", "effect"), [
    ("read_file", "secret/k", "deny"), ("read_file", "secret/../secret/k", "deny"),
    ("read_file", "./secret//k", "deny"),
    ("read_file", "secret/k/", "deny"), ("read_file", "pub/ln/k", "deny"), ("read_file", "rel/k", "deny"),
    # before: matched as ./k, but the tools resolve s2 first: s2/.. is secret
    ("read_file", "s2/../k", "deny"),
    # before: allowed; on a filesystem that ignores case (macOS) it is secret/k
    ("read_file", "SECRET/k", "deny"),
    # before: allowed; a search of the denied directory itself reads every file in it
    ("grep", "secret", "deny"), ("glob", "secret/", "deny"), ("grep", "pub/ln", "deny"), ("grep", "SECRET", "deny"),
    ("grep", "secret/sub", "deny"),
    # a limit, as documented: a search is matched by the directory it searches, not by the files under it
    ("grep", ".", "allow"), ("glob", ".", "allow"), ("grep", None, "allow"),
    ("read_file", "pub/a", "allow"),
])
def test_a_read_cannot_reach_a_denied_path_by_another_spelling(project, tool, path, effect):
    args = {"path": path} if path is not None else {}
    assert decide(READS, tool, args, project).effect == effect, (tool, path)


def test_proc_self_cwd_is_the_daemon_s_own_directory(project, monkeypatch):
    """/proc/self/cwd is resolved as the tool resolves it: the daemon's directory, denied when it is the cwd."""
    monkeypatch.chdir(project)
    assert decide(READS, "read_file", {"path": "/proc/self/cwd/secret/k"}, project).effect == "deny"


def test_another_user_s_home_is_read_as_the_tools_read_it(tmp_path):
    """~root/.ssh is /root/.ssh to the tools (os.path.expanduser); before, it was matched as ./~root/.ssh."""
    home = os.path.expanduser("~root")
    rules = RuleSet.of(RuleLists(allow=("Read(./**)",), deny=("Read(//" + home.lstrip("/") + "/.ssh/**)",)))
    assert decide(rules, "read_file", {"path": "~root/.ssh/id_rsa"}, str(tmp_path)).effect == "deny"


# ----------------------------------------------------------------- rules with more than one word

GIT = RuleSet.of(RuleLists(allow=("Bash(git:*)", "Bash(ls *)"), deny=("Bash(git push:*)",)))


@pytest.mark.parametrize(("command", "effect"), [
    ("git push", "deny"), ("git push -f origin main", "deny"),
    # before: allowed by Bash(git:*), the deny's words not found at the start
    ("git -C . push", "deny"), ("git --no-pager push -f", "deny"), ("git -c push.default=x push", "deny"),
    ("git --git-dir=.git push", "deny"), ("git -p push", "deny"),
    ("git -C . status", "allow"), ("git status", "allow"),
    ("ls -la", "allow"), ("ls", "allow"),
    ("'ls -la'", None),  # before: allowed by Bash(ls *); one word, so a command named "ls -la"
])
def test_options_before_a_subcommand_do_not_hide_it_from_a_deny(command, effect):
    assert decide(GIT, "shell", {"command": command}, "/w").effect == effect, command
