"""Permission rules in Claude Code's form, and the decision they make about one tool call. Pure; no I/O
beyond resolving a path's symlinks.

A rule is ``Tool`` or ``Tool(specifier)``; the tool is named as Claude Code names it or as Trellis does
(:data:`TOOLS`). What the specifier is depends on the tool::

    Bash(npm test)            the command npm test exactly (its words; quoting does not matter)
    Bash(npm run:*)           npm run, then anything (whole words: npm runx is not npm run)
    Bash(git * main)          * is any text; a last " *" may also be nothing (ls * matches ls)
    Read(./src/**)            a gitignore pattern of the path, relative to the session's cwd
    Edit(/docs/**)            ... relative to the settings file's directory (to the cwd for a session's own)
    Read(~/.ssh/**)           ... to the home directory;  Read(//etc/**): absolute
    WebFetch(domain:x.org)    that host (*.x.org: its subdomains); hosts compared in canonical form (url_host)
    mcp__github               every tool of the MCP server github;  mcp__github__create_issue: one tool

:func:`decide` applies a :class:`RuleSet` to a call, in this order — the first row that holds decides::

    a deny rule matches                 -> deny    (for a command: any simple command in it)
    an ask rule matches                 -> ask     (any simple command)
    an allow rule matches               -> allow   (a command: every simple command, and none opaque)
    otherwise                           -> None    (the approval mode decides)

A command is read by :mod:`.shell` into the simple commands it runs (``a && b``, pipes, ``$(…)``,
``sh -c``, ``env``/``timeout``/``xargs`` wrappers...). Deny and ask rules also match a command by the
base name of its path (``/bin/rm`` is ``rm``) and by a glob written for a name (``/???/r?``); allow rules only
by what is written.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import re
import shlex
import socket
from typing import Any, Literal
from urllib.parse import urlsplit

import attrs
import pathspec

from .. import checked
from ..tool_names import CLAUDE_ALIASES
from .shell import simple_commands

Effect = Literal["deny", "ask", "allow"]
EFFECTS: tuple[Effect, ...] = ("deny", "ask", "allow")

COMMAND_TOOLS = ("shell", "monitor")  # the tools whose calls run a shell command (their ``command``)
READ_TOOLS = ("read_file", "glob", "grep")
EDIT_TOOLS = ("write_file", "edit")

# Trellis's own tools a rule may name, and what each one's specifier is (the rest take none).
OWN_TOOLS = ("shell", "monitor", "shell_output", "kill_task", "read_file", "glob", "grep", "write_file", "edit",
             "web_fetch", "todo_write", "agent", "schedule_wakeup", "cron_create", "cron_delete")
SPECIFIERS = {"shell": "command", "monitor": "command", "read_file": "path", "glob": "path", "grep": "path",
              "write_file": "path", "edit": "path", "web_fetch": "domain"}
# Where Claude's rules are wider than its name for one tool: a command rule covers every tool that runs one,
# Read every tool that reads files, Edit every tool that edits them.
WIDER = {"Bash": COMMAND_TOOLS, "shell": COMMAND_TOOLS, "Read": READ_TOOLS, "Edit": EDIT_TOOLS}


def _tools() -> dict[str, tuple[tuple[str, ...], str]]:
    """A rule's tool name -> the tools it covers and what its specifier is: ours by their names, Claude's
    through :data:`actors.tool_names.CLAUDE_ALIASES`, the one table hooks use too."""
    table = {name: (WIDER.get(name, (name,)), SPECIFIERS.get(name, "none")) for name in OWN_TOOLS}
    for claude, ours in CLAUDE_ALIASES.items():
        table[claude] = (WIDER.get(claude, ours), SPECIFIERS.get(ours[0], "none"))
    return table


TOOLS = _tools()

_RULE = re.compile(r"([A-Za-z][A-Za-z0-9_-]*)(?:\((.*)\))?", re.DOTALL)
_MCP = re.compile(r"mcp__([A-Za-z0-9_-]+?)(?:__([A-Za-z0-9_*-]+))?")
# A host name's labels: letters, digits, "-" and "_" (not a DNS host name's, but URL parsers take it and
# resolvers look it up: a host a fetch can go to must be one a rule can name).
_HOST = re.compile(r"(\*\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")
_NUMERIC_IPV4 = re.compile(r"[0-9a-fx.]+")  # what inet_aton may read as an address (127.1, 0x7f000001, 0177.0.0.1)


def canonical_host(host: str) -> str:
    """``host`` as rules compare it, one spelling for each destination: lower case, no trailing dot, an IPv4
    address written as resolvers read it (``127.1``, ``2130706433``, ``0x7f.1`` are ``127.0.0.1``), an IPv6
    address compressed in brackets (``[::1]``), one that carries an IPv4 address (``[::ffff:127.0.0.1]``) as
    that address. A name is taken as given (:func:`url_host` IDNA-encodes it as the fetch does)."""
    host = host.lower().rstrip(".")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in bare:
        try:
            ip = ipaddress.IPv6Address(bare.split("%", 1)[0])  # a zone (%25eth0) names no other host
        except ValueError:
            return host
        return str(ip.ipv4_mapped) if ip.ipv4_mapped is not None else f"[{ip.compressed}]"
    if _NUMERIC_IPV4.fullmatch(host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))  # the parse getaddrinfo applies to a numeric host
        except OSError:
            pass
    return host


def url_host(url: Any) -> str | None:
    """The canonical host (:func:`canonical_host`) of ``url`` (userinfo dropped, a name IDNA-encoded), or
    ``None`` when it is no URL with a host. URL parsers part ways on odd spellings (blanks, backslashes):
    ``web_fetch`` fetches a URL only when its HTTP client reads the same host
    (:func:`actors.tools.client.check_url`), so a rule never judges one host while another is fetched."""
    if not isinstance(url, str):
        return None
    try:
        host = urlsplit(url).hostname
        if host and not host.isascii():
            host = host.encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        return None
    return canonical_host(host) if host else None


def _domain_spec(host: str) -> str | None:
    """A ``WebFetch(domain:…)`` host in the form subjects take (:func:`canonical_host`), or ``None`` if it is
    none: a name (``*.`` for its subdomains), an IPv4 address in any spelling, an IPv6 address (in brackets or
    not). A name that is not ASCII is IDNA-encoded, as a URL's is."""
    if not host.isascii() and "*" not in host:
        encoded = url_host(f"http://{host}/")
        host = encoded if encoded is not None and encoded.isascii() else host
    if _HOST.fullmatch(host):
        return host.lower().rstrip(".") if host.startswith("*.") else canonical_host(host)
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in bare:
        try:
            ipaddress.IPv6Address(bare)
        except ValueError:
            return None
        return canonical_host(bare)
    return None


class RuleError(ValueError):
    """A rule that cannot be read; the message says what is wrong with it."""


@attrs.frozen
class Rule:
    """One rule as written, read: the tools it covers, what kind its specifier is, the specifier."""

    text: str
    tools: tuple[str, ...]  # tool names; an MCP server's rule: ("mcp__server__",), a prefix
    kind: str  # "any" (no specifier), "command", "path", "domain", "mcp"
    spec: str | None = None
    base: str | None = None  # where a "/path" pattern starts: the settings file's directory (None: the cwd)

    def covers(self, tool: str) -> bool:
        if self.kind == "mcp":
            prefix = self.tools[0]
            return tool.startswith(prefix) if prefix.endswith("__") else tool == prefix
        return tool in self.tools


def parse_rule(text: str, base: str | None = None) -> Rule:
    """``text`` read as a rule, or a :class:`RuleError` saying what is wrong; ``base``: where its ``/path``
    patterns start (the directory of the settings file it is from; ``None``: the session's cwd)."""
    return attrs.evolve(_parse(text), base=base)


MAX_RULE_CHARS = 4096
MAX_RULES = 256  # in one list


def _parse(text: str) -> Rule:
    if not isinstance(text, str) or not text.strip():
        raise RuleError("a rule is a tool name, alone or with a specifier in parentheses, as Bash(npm test:*)")
    if len(text) > MAX_RULE_CHARS:
        raise RuleError(f"a rule is at most {MAX_RULE_CHARS} characters")
    text = text.strip()
    mcp = _MCP.fullmatch(text)
    if mcp is not None:
        server, tool = mcp.groups()
        if tool is None or tool == "*":
            return Rule(text, (f"mcp__{server}__",), "mcp")
        if "*" in tool:
            raise RuleError("an MCP rule names one tool or every tool of a server (mcp__server, mcp__server__*)")
        return Rule(text, (text,), "mcp")
    match = _RULE.fullmatch(text)
    if text.startswith("mcp__"):
        raise RuleError("an MCP rule is mcp__server or mcp__server__tool, without a specifier")
    if match is None:
        raise RuleError("a rule is a tool name, alone or with a specifier in parentheses, as Bash(npm test:*)")
    name, spec = match.groups()
    if name not in TOOLS:
        claude = sorted(n for n in TOOLS if n[0].isupper())
        raise RuleError(f"unknown tool {name!r}: a rule names one of {', '.join(claude)}, a Trellis tool (shell, "
                        "read_file, ...) or an MCP server's tools as mcp__server__tool")
    tools, kind = TOOLS[name]
    if spec is None or spec.strip() in ("", "*"):
        return Rule(text, tools, "any")
    spec = spec.strip()
    if kind == "none":
        raise RuleError(f"{name} takes no specifier: write {name} alone")
    if kind == "command":
        _check_command_spec(spec)
    elif kind == "domain":
        host = _domain_spec(spec.removeprefix("domain:")) if spec.startswith("domain:") else None
        if host is None:
            raise RuleError(f"{name}'s specifier is domain:HOST (as domain:example.com or domain:*.example.com)")
        spec = host
    elif kind == "path" and "\0" in spec:
        raise RuleError("a path pattern cannot hold a NUL character")
    return Rule(text, tools, kind, spec)


def _check_command_spec(spec: str) -> None:
    if ":*" in spec[:-2]:
        raise RuleError(":* can only end a command rule (Bash(npm run:*))")
    try:
        words = shlex.split(spec.removesuffix(":*"))
    except ValueError as exc:
        raise RuleError(f"the command cannot be read: {exc}") from None
    if not words:
        raise RuleError("a command rule names at least the command: Bash(npm test:*)")


# ----------------------------------------------------------------- the rule lists of a settings file


def rule_lists(value: Any, path: str) -> RuleLists:
    """``{"allow": [...], "ask": [...], "deny": [...]}`` as given by a client (a REST body, ACP ``_meta``),
    every rule read: a :class:`actors.checked.CheckError` naming the JSON path of the first bad one."""
    lists = checked.structure(value, RuleLists, path)
    for effect in EFFECTS:
        if len(getattr(lists, effect)) > MAX_RULES:
            raise checked.CheckError(f"at most {MAX_RULES} rules", path=checked.member(path, effect))
    return lists


def _rule_text(value: Any) -> bool:
    try:
        parse_rule(value)
    except RuleError as exc:
        raise checked.Invalid(str(exc), value) from None
    return True


RuleText = checked.constrained("PermissionRule", str, "a permission rule", _rule_text)


@checked.form("Permission rules in Claude Code's form: deny wins over ask, ask over allow, and any rule over the "
              "approval mode (plan mode still refuses execution). See the permission rules guide.",
              unknown=checked.REFUSE)
@attrs.frozen(kw_only=True)
class RuleLists:
    allow: tuple[RuleText, ...] = checked.field(
        (), "Calls that run without asking, as Bash(npm test:*), Read(./src/**), WebFetch(domain:example.com).")
    ask: tuple[RuleText, ...] = checked.field((), "Calls that always ask, whatever the mode or an allow rule says.")
    deny: tuple[RuleText, ...] = checked.field((), "Calls that are refused without asking; the model is told the rule.")

    def __bool__(self) -> bool:
        return bool(self.allow or self.ask or self.deny)


# ----------------------------------------------------------------- the decision


@attrs.frozen
class Verdict:
    """What the rules say about a call: ``effect`` (``None``: no rule decides), the deciding rules as
    written and which list they are in, and a sentence saying why."""

    effect: Effect | None
    rules: tuple[str, ...] = ()
    reason: str = "no rule matches: the approval mode decides"

    @property
    def rule(self) -> str | None:
        return ", ".join(self.rules) if self.rules else None

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.effect, "rule": self.rule, "reason": self.reason}


@attrs.frozen
class RuleSet:
    """Rules read, by list."""

    deny: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    allow: tuple[Rule, ...] = ()

    @classmethod
    def of(cls, lists: RuleLists, base: str | None = None) -> RuleSet:
        return cls(*(tuple(parse_rule(t, base) for t in getattr(lists, e)) for e in EFFECTS))

    def __add__(self, other: RuleSet) -> RuleSet:
        return RuleSet(self.deny + other.deny, self.ask + other.ask, self.allow + other.allow)

    def __bool__(self) -> bool:
        return bool(self.deny or self.ask or self.allow)

    def listed(self) -> dict[str, list[str]]:
        return {effect: [r.text for r in getattr(self, effect)] for effect in EFFECTS}


def decide(rules: RuleSet, tool: str, arguments: Any, cwd: str, home: str | None = None) -> Verdict:
    """What ``rules`` say about calling ``tool`` with ``arguments`` in ``cwd`` (see the module's table)."""
    if not rules:
        return Verdict(None)
    home = home if home is not None else os.path.expanduser("~")
    args = arguments if isinstance(arguments, dict) else {}
    if tool in COMMAND_TOOLS and isinstance(args.get("command"), str):
        return _decide_command(rules, tool, args["command"])
    subjects = _subjects(tool, args, cwd, home)

    def hits(rule: Rule, every: bool) -> bool:
        if not rule.covers(tool):
            return False
        if rule.kind in ("any", "mcp"):
            return True
        matched = [_matches(rule, subject, rule.base or cwd, cwd, home) for subject in subjects]
        if not every and rule.kind == "path":
            # To deny or ask, a path also matches in another case (SECRET/k is secret/k where the filesystem
            # ignores case, as macOS's does), and a directory searched matches as a file in it would
            # (grep in secret, with Read(./secret/**)).
            fold = [_matches(rule, subject, rule.base or cwd, cwd, home, fold=True) for subject in subjects]
            inside = [_matches(rule, os.path.join(subject, "x"), rule.base or cwd, cwd, home, fold=f)
                      for subject in subjects for f in (False, True)] if tool in ("glob", "grep") else []
            matched += fold + inside
        return bool(matched) and (all(matched) if every else any(matched))

    for effect in ("deny", "ask"):  # any form of the path (as given, resolved) is enough to deny or ask
        rule = next((r for r in getattr(rules, effect) if hits(r, every=False)), None)
        if rule is not None:
            return Verdict(effect, (rule.text,), f"{effect} rule {rule.text} matches")
    rule = next((r for r in rules.allow if hits(r, every=True)), None)  # ... every form, to allow
    if rule is not None:
        return Verdict("allow", (rule.text,), f"allow rule {rule.text} matches")
    return Verdict(None)


def _decide_command(rules: RuleSet, tool: str, command: str) -> Verdict:
    read = simple_commands(command)
    for effect in ("deny", "ask"):
        for rule in getattr(rules, effect):
            if not rule.covers(tool):
                continue
            hit = next((words for words in read.commands if _command_matches(rule, words, loose=True)), None)
            if hit is not None or rule.kind == "any" or _whole_line(rule, command):
                part = f" (in {shlex.join(hit)})" if hit is not None and len(read.commands) > 1 else ""
                return Verdict(effect, (rule.text,), f"{effect} rule {rule.text} matches{part}")
    bare = next((r for r in rules.allow if r.covers(tool) and (r.kind == "any" or _whole_line(r, command))), None)
    if bare is not None:  # every command, or this line exactly (one that cannot be read in full too)
        return Verdict("allow", (bare.text,), f"allow rule {bare.text} matches")
    if read.opaque is not None:
        return Verdict(None, (), f"no allow rule applies: {read.opaque}; the approval mode decides")
    if not read.commands:
        return Verdict(None)
    deciding: list[str] = []
    for words in read.commands:
        rule = next((r for r in rules.allow if r.covers(tool) and _command_matches(r, words, loose=False)), None)
        if rule is None:
            if deciding or len(read.commands) > 1:
                return Verdict(None, (), f"no allow rule matches {shlex.join(words)}; the approval mode decides")
            return Verdict(None)
        if rule.text not in deciding:
            deciding.append(rule.text)
    return Verdict("allow", tuple(deciding), f"allow rule{'s' if len(deciding) > 1 else ''} "
                                             f"{', '.join(deciding)} match{'' if len(deciding) > 1 else 'es'}")


def _whole_line(rule: Rule, command: str) -> bool:
    """Whether ``rule`` is a command rule without a wildcard written as this command line exactly (its text,
    blanks at either end aside): ``Bash(for f in *; do …; done)`` as the line it was made from, which no rule
    could allow word by word (it cannot be read in full)."""
    return rule.kind == "command" and rule.spec is not None and "*" not in rule.spec \
        and rule.spec == command.strip()


# What an "always" answer to one simple command becomes (answer_rules): its name, ``Bash(ls:*)``; for a
# command whose second word names what it does (git status, npm test), the pair, ``Bash(git status:*)``. The
# exact command instead where a prefix would cover far more than the call shown:
_WITH_SUBCOMMANDS = frozenset({
    "git", "npm", "pnpm", "yarn", "bun", "cargo", "go", "docker", "podman", "kubectl", "helm", "pip", "pip3",
    "uv", "poetry", "gh", "terraform", "systemctl", "apt", "apt-get", "brew", "dotnet", "mvn", "gradle", "npx",
})
_SUBCOMMAND = re.compile(r"[a-z][a-z0-9_:.-]*")
# ... the command runs code its arguments give or name (python3 x.py: Bash(python3:*) would cover
# python3 -c '…'; tar -cf: tar --checkpoint-action=exec=…; vim -c '!…'), runs as another user (sudo -s reads
# commands from stdin) or on another host; a version suffix aside (python3.12, lua5.4). Not every such command
# (see the permission rules guide), the usual ones.
_RUNS_CODE = frozenset({
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox", "eval", "source", ".",
    "python", "pypy", "node", "nodejs", "deno", "perl", "ruby", "php", "lua", "luajit", "tclsh", "wish", "julia",
    "Rscript", "R", "pwsh", "powershell", "osascript", "awk", "gawk", "mawk", "nawk", "sed", "make", "gmake",
    "tar", "zip", "rsync", "scp", "sftp", "vi", "vim", "nvim", "ex", "emacs", "less", "more", "man", "gdb", "lldb",
    "parallel", "expect", "sudo", "doas", "su", "runuser", "ssh",
})
# ... a subcommand runs what its next word names (npm run build, uv run pytest, docker exec box): the three
# words, when that word is a name (npm run build:* is not uv run:*)
_RUNS_NEXT = frozenset({"run", "exec", "x", "dlx", "run-script"})
# ... the subcommand sets what later commands run (npm config set script-shell …, gh alias set x '!…',
# kubectl config set-credentials --exec-command …), or runs a command one of its options or arguments
# names (git grep -O'cmd', git rebase -x cmd, git fetch --upload-pack=cmd, git bisect run cmd)
_SETS_COMMANDS = frozenset({"config", "alias"})
_RUNS_OPTION = {"git": frozenset({"rebase", "bisect", "submodule", "filter-branch", "grep", "difftool", "fetch",
                                  "pull", "push", "clone", "ls-remote", "archive", "send-email", "instaweb"})}


def _runs_code(name: str) -> bool:
    base = os.path.basename(name) or name
    return base in _RUNS_CODE or (base.rstrip("0123456789.") or base) in _RUNS_CODE


def _prefix_words(words: tuple[str, ...]) -> int | None:
    """How many of ``words`` an "always" answer's ``:*`` rule keeps (``None``: the rule is the exact command).
    The command is named by its base name (``/usr/bin/git`` is git) to choose, and as written in the rule."""
    base = os.path.basename(words[0])
    if _runs_code(base):
        return None
    if base not in _WITH_SUBCOMMANDS:
        return 1
    # An option before the subcommand (git --no-pager log, git -c alias.x='!cmd' x) can change what any
    # subcommand runs: the exact command. So for a command alone (git: Bash(git:*) is every git command).
    if len(words) < 2 or not _SUBCOMMAND.fullmatch(words[1]) or words[1] in _SETS_COMMANDS \
            or words[1] in _RUNS_OPTION.get(base, ()):
        return None
    if words[1] in _RUNS_NEXT:
        if len(words) < 3 or not _SUBCOMMAND.fullmatch(words[2]) or _runs_code(words[2]):
            return None
        return 3
    return 2


def _simple_answer(words: tuple[str, ...]) -> str | None:
    n = _prefix_words(words)
    if n is not None:
        return f"Bash({shlex.join(words[:n])}:*)"
    exact = shlex.join(words)
    return None if "*" in exact else f"Bash({exact})"  # a * in a rule is a wildcard: no rule says it exactly


def _command_answer(command: str) -> tuple[str, ...]:
    read = simple_commands(command)
    if read.opaque is None and read.commands:
        texts = [_simple_answer(words) for words in read.commands]
        if None not in texts:
            return tuple(dict.fromkeys(t for t in texts if t is not None))
    # A line that cannot be read in full (a for loop, a here-document, $CMD), or a command no rule can say
    # word by word: the line exactly (_whole_line), when a rule can be written for it.
    line = command.strip()
    return (f"Bash({line})",) if line and "*" not in line else ()


def answer_rules(tool: str | None, arguments: Any, kind: str) -> tuple[str, ...]:
    """The rules an "always allow" or "always reject" answer to a call of ``tool`` becomes, for the rest of
    the session, each one covering the call:

    - a command: one rule per simple command, its name (``Bash(ls:*)``), the name and subcommand
      (``Bash(git status:*)``), or, where such a prefix would cover far more, the exact command
      (``Bash(git --no-pager log)``, ``Bash(python3 x.py)``); a line that cannot be read in full: the line
      exactly (``Bash(for f in a; do echo $f; done)``);
    - a file edit (``write_file``, ``edit``): ``Edit``;
    - a fetch: its host exactly (``WebFetch(domain:docs.python.org)``);
    - otherwise the tool (``agent``, ``mcp__github__create_issue``).

    Empty when no rule can say it (a line with a ``*`` that cannot be read in full, a host no rule can name,
    an edit a tool asks for on another's behalf): the call then offers no "always" answer. Never a rule for
    the call's whole kind."""
    args = arguments if isinstance(arguments, dict) else {}
    if tool is None:
        return ()
    if tool in COMMAND_TOOLS:
        command = args.get("command")
        texts = _command_answer(command) if isinstance(command, str) else ()
    elif kind == "edit":
        texts = ("Edit",) if tool in EDIT_TOOLS else ()
    elif tool == "web_fetch":
        hosts = _subjects(tool, args, "/", "/")
        texts = (f"WebFetch(domain:{hosts[0]})",) if hosts else ()
    else:
        texts = (tool,)
    return texts if texts and _covers_only(texts, tool, args) else ()


def _covers_only(texts: tuple[str, ...], tool: str, args: dict[str, Any]) -> bool:
    """Whether ``texts`` are rules that allow the call, each no wider than :func:`answer_rules` means it: a
    command's exact words or a prefix made of them, the call's host exactly (not ``*.`` its subdomains), one
    MCP tool (not its server's)."""
    try:
        rules = tuple(parse_rule(text) for text in texts)
    except RuleError:
        return False
    for rule in rules:
        if rule.kind == "command" and rule.spec is not None and "*" in rule.spec.removesuffix(":*"):
            return False
        if rule.kind == "domain" and (rule.spec is None or rule.spec.startswith("*.")):
            return False
        if rule.kind == "mcp" and rule.tools != (tool,):
            return False
    return decide(RuleSet(allow=rules), tool, args, "/", "/").effect == "allow"


def _readable(text: str) -> bool:
    try:
        parse_rule(text)
    except RuleError:
        return False
    return True


def _command_matches(rule: Rule, words: tuple[str, ...], *, loose: bool) -> bool:
    if rule.kind == "any":
        return True
    if rule.kind != "command" or rule.spec is None:
        return False
    forms = [words]
    if loose and "/" in words[0]:
        forms.append((os.path.basename(words[0]), *words[1:]))
    if loose and any(c in words[0] for c in "*?["):  # a glob for a name (/???/r?): deny what it could find
        first = shlex.split(rule.spec.removesuffix(":*"))[0]
        if fnmatch.fnmatchcase(first, os.path.basename(words[0])):
            forms.append((first, *words[1:]))
    if loose and len(words) > 2 and words[1].startswith("-"):
        # options before a subcommand (git -C . push, git --no-pager push, docker -H h rm): deny and ask
        # rules see the command without them, and without them and a value each
        for form in list(forms):
            bare, valued, i = [form[0]], [form[0]], 1
            while i < len(form) and form[i].startswith("-"):
                i += 1
            bare += form[i:]
            i = 1
            while i < len(form) and form[i].startswith("-"):
                i += 1 if "=" in form[i] else 2
            valued += form[i:]
            forms += [tuple(bare), tuple(valued)]
    return any(_spec_matches(rule.spec, form) for form in forms)


def _spec_matches(spec: str, words: tuple[str, ...]) -> bool:
    if spec.endswith(":*"):
        prefix = shlex.split(spec[:-2])
        return tuple(words[:len(prefix)]) == tuple(prefix)
    if "*" in spec:
        first = spec.split(" ", 1)[0]
        if "*" not in first and words[0] != first:
            return False  # 'ls -la' (one word, a command of that name) is not ls -la
        text = " ".join(words)
        pattern = ".*".join(re.escape(piece) for piece in spec.split("*"))
        if spec.endswith(" *") and spec.count("*") == 1 and text == spec[:-2]:
            return True
        return re.fullmatch(pattern, text, re.DOTALL) is not None
    return tuple(words) == tuple(shlex.split(spec))


def _subjects(tool: str, args: dict[str, Any], cwd: str, home: str) -> list[str]:
    """What path, host or name a rule of ``tool`` is matched against (a path: as given and with symlinks
    resolved, so a link cannot carry a call past a deny)."""
    if tool in READ_TOOLS or tool in EDIT_TOOLS:
        raw = args.get("path", "." if tool in ("glob", "grep") else None)
        if not isinstance(raw, str) or not raw:
            return []
        if raw == "~" or raw.startswith("~/"):
            raw = home + raw[1:]  # as the file tools read it (os.path.expanduser)
        elif raw.startswith("~"):
            raw = os.path.expanduser(raw)  # ~root/.ssh: another user's home, as the file tools read it
        joined = os.path.join(cwd, raw)
        # resolved as the tools resolve it: link/../k is the parent of where link points, not ./k
        return list(dict.fromkeys([os.path.normpath(joined), os.path.realpath(joined)]))
    if tool == "web_fetch":
        # The host the fetch goes to, in one spelling: 127.1 and 2130706433 are 127.0.0.1, for rules too.
        host = url_host(args.get("url"))
        return [host] if host else []
    return [tool]


def _matches(rule: Rule, subject: str, settings_dir: str, cwd: str, home: str, fold: bool = False) -> bool:
    if rule.spec is None:
        return True
    if rule.kind == "domain":
        return subject == rule.spec or (rule.spec.startswith("*.") and subject.endswith(rule.spec[1:]))
    if rule.kind == "path" and fold:
        return path_matches(rule.spec.lower(), subject.lower(), settings_dir=settings_dir.lower(), cwd=cwd.lower(),
                            home=home.lower())
    if rule.kind == "path":
        return path_matches(rule.spec, subject, settings_dir=settings_dir, cwd=cwd, home=home)
    return False


def anchored(text: str, cwd: str, settings_dir: str | None = None) -> str:
    """``text`` with a path pattern that starts from the cwd (``path``, ``./path``; ``/path`` too when
    ``settings_dir`` is ``None``, as for a session's own rule) rewritten to start from the filesystem root at
    ``cwd``, so that it means in a session with another cwd what it meant here (a child session the ``agent``
    tool starts elsewhere). Every other rule comes back as it is. :class:`RuleError` when the result is too long."""
    rule = parse_rule(text)
    spec = rule.spec
    if rule.kind != "path" or spec is None or spec.startswith(("//", "~/", "!")):
        return text
    if spec.startswith("/"):
        if settings_dir is not None:
            return text  # from the settings file's directory, whatever the cwd
        rest, fixed = spec[1:], True
    elif spec.startswith("./"):
        rest, fixed = spec[2:], True
    else:  # gitignore: a pattern without an inner slash matches at any depth below its base
        rest, fixed = spec, "/" in spec.rstrip("/")
    root = _GLOB_CHARS.sub(r"\\\g<0>", cwd.rstrip("/"))  # the cwd's own name holds no pattern
    match = _RULE.fullmatch(text.strip())
    assert match is not None  # parse_rule read it
    out = f"{match.group(1)}(/{root}/{rest if fixed else '**/' + rest})"
    parse_rule(out)
    return out


_GLOB_CHARS = re.compile(r"[\\*?\[\]]")


def path_matches(pattern: str, path: str, *, settings_dir: str, cwd: str, home: str) -> bool:
    """Whether the absolute ``path`` matches a path rule's ``pattern`` (gitignore syntax, based as the module
    says)."""
    if pattern.startswith("//"):
        base, pattern = "/", pattern[1:]
    elif pattern.startswith("~/"):
        base, pattern = home, pattern[1:]
    elif pattern.startswith("/"):
        base = settings_dir
    elif pattern.startswith("./"):
        base, pattern = cwd, pattern[1:]
    else:
        base = cwd
    rel = os.path.relpath(path, base)
    if rel == os.curdir:
        return pattern.strip("/") in ("", "**", "*") or fnmatch.fnmatch("", pattern)
    if rel.startswith(os.pardir + os.sep) or rel == os.pardir:
        return False
    return pathspec.GitIgnoreSpec.from_lines([pattern]).match_file(rel)


__all__ = ["COMMAND_TOOLS", "EDIT_TOOLS", "EFFECTS", "MAX_RULES", "Rule", "RuleError", "RuleLists", "RuleSet", "RuleText", "TOOLS",
           "Verdict", "anchored", "answer_rules", "canonical_host", "decide", "parse_rule", "path_matches",
           "rule_lists", "url_host"]
