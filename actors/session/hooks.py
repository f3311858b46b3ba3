"""External command hooks in the Claude Code hook contract: settings, matching, running.

Settings (``hooks`` in the settings file, Claude Code's own ``hooks`` block)::

    {"Stop": [{"hooks": [{"type": "command", "command": "./check.sh", "timeout": 30}]}],
     "PreToolUse": [{"matcher": "Bash|todo_write", "hooks": [{"type": "command", "command": "..."}]}]}

Events: ``Stop``, ``PreToolUse``, ``PostToolUse``, ``UserPromptSubmit``, ``SessionStart``,
``SessionEnd`` (others are warned about by the settings loader and ignored). A command gets JSON on
stdin (:meth:`.hook_events.SessionHooks.payload`); its exit code 2 blocks with stderr as the reason, exit 0
with a JSON object says ``decision``/``reason``, ``continue``/``stopReason``, ``systemMessage`` and
``hookSpecificOutput`` (``additionalContext``, ``permissionDecision``, ``updatedInput``), folded into
one :class:`HookResult`; what each event does with it is :mod:`.hook_events`'s. Anything else —
another exit code, bad JSON, a timeout, a command that cannot start — fails open and is reported,
never blocking. Matchers are regular expressions over the tool name, or Claude Code's name for it
(:data:`actors.tool_names.CLAUDE_ALIASES`).

A hook runs in its own process group, with the same markers as a model-run
command (:mod:`actors.process.markers`): when it times out or is cancelled,
its group and every process carrying its ``TRELLIS_TASK`` are killed, so what
it started with ``setsid`` or a double fork goes too. A hook that ends by
itself keeps what it deliberately left running until the daemon process
ends (the lifeline kills the run's processes then).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shlex
import subprocess
from typing import Any, Literal

import attrs
import trio

from .. import checked
from ..background.shell import kill_group, model_environment, user_environment
from ..checked import CheckError, Invalid, NonEmpty, PositiveNumber
from ..process import NO_SANDBOX, Sandbox, kill_task, marked_environment
from ..process.spawn import Child
from ..telemetry import count_process
from ..tool_names import CLAUDE_ALIASES, CLAUDE_NAMES

DEFAULT_TIMEOUT = 60.0
DEFAULT_STOP_BLOCK_CAP = 8
OUTPUT_LIMIT = 64 * 1024


class HookConfigError(CheckError):
    """A ``hooks`` setting that does not have the documented form (``path`` names the bad value)."""


def _valid_pattern(matcher: str) -> bool:
    if matcher in ("", "*"):  # every tool, as in Claude Code
        return True
    try:
        re.compile(matcher)
    except re.error as exc:
        raise Invalid(f"not a valid pattern: {exc}") from None
    return True


Matcher = checked.constrained(
    "Matcher", str, "a regular expression", _valid_pattern,
    schema={"anyOf": [{"enum": ["", "*"]}, {"format": "regex"}]})


def _compiled(matcher: str | None) -> re.Pattern[str] | None:
    return None if matcher in (None, "", "*") else re.compile(matcher)  # type: ignore[arg-type]


@checked.form("One command hook (Claude Code's form). Other members are ignored with a warning (a misspelt "
              "timeout would otherwise silently keep the default).")
@attrs.frozen
class HookCommand:
    command: NonEmpty = checked.field(
        doc="Run with /bin/sh -c in the session's cwd, with the event's JSON on stdin; must not be empty or only "
            "whitespace.")
    timeout: PositiveNumber = checked.field(
        DEFAULT_TIMEOUT, "Seconds before the hook's process group is killed (the hook then fails open).")
    sandbox: bool = checked.field(
        False, "Run the hook in the sandbox of model-run commands, with their environment. Without it a hook runs "
               "unsandboxed, with your rights: give it to any hook that runs project code (make, pytest, a script "
               "under the cwd).")
    type: Literal["command"] = checked.field("command", "Only command hooks exist; may be left out.", kw_only=True)


@checked.form("Hooks run for the tools the matcher matches. Other members are ignored with a warning.")
@attrs.frozen
class HookGroup:
    matcher: Matcher | None = checked.field(
        doc="A Python regular expression matched in full against the tool's name or its Claude Code name (Bash, "
            "Write, TodoWrite, ...); absent, null, \"\" and \"*\" match every tool. Only tool events use it.",
        nullable=True, default=None)
    commands: tuple[HookCommand, ...] = checked.field(doc="The commands, run one after another.", key="hooks",
                                                      kw_only=True)
    pattern: re.Pattern[str] | None = attrs.field(
        init=False, default=attrs.Factory(lambda self: _compiled(self.matcher), takes_self=True), eq=False)

    def matches(self, tool_name: str | None) -> bool:
        if self.pattern is None or tool_name is None:
            return True
        return any(self.pattern.fullmatch(name) for name in (tool_name, *CLAUDE_NAMES.get(tool_name, ())))


def _event(name: str) -> Any:
    return checked.field(factory=tuple, key=name, doc=f"The hook groups of {name}.")


@checked.form("Command hooks by event, in Claude Code's hooks form. Other event names are ignored with a warning "
              "(Notification, SubagentStop, PreCompact, ... are not run).")
@attrs.frozen
class HooksConfig:
    stop: tuple[HookGroup, ...] = _event("Stop")
    post_tool_use: tuple[HookGroup, ...] = _event("PostToolUse")
    pre_tool_use: tuple[HookGroup, ...] = _event("PreToolUse")
    user_prompt_submit: tuple[HookGroup, ...] = _event("UserPromptSubmit")
    session_start: tuple[HookGroup, ...] = _event("SessionStart")
    session_end: tuple[HookGroup, ...] = _event("SessionEnd")

    def all_groups(self) -> tuple[HookGroup, ...]:
        return tuple(g for name in EVENTS.values() for g in getattr(self, name))


# The events run, by their name in the settings: the field of HooksConfig holding each one's groups.
EVENTS = {checked.key_of(f): f.name for f in attrs.fields(HooksConfig)}


def hook_files(hooks: HooksConfig, cwd: str) -> tuple[str, ...]:
    """The files the unsandboxed hook commands may run, resolved against ``cwd``.

    Hooks run outside the sandbox, so a file one runs is a way out for a model that writes it: the
    file tools ask before writing any of these, in every approval mode, sandboxed commands see them
    read-only, and a hook whose files changed since the session vouched for them is not run
    (:class:`HookFiles`). Every word of a command but its program is taken as a possible file (a
    script the model could create before the hook next runs), and the program too when it names a
    path (``./check.sh``); a word with blanks (``bash -c '...'``) is split again; ``-m pkg.mod``
    names ``pkg/mod.py`` and ``pkg/mod/__init__.py``; ``$CLAUDE_PROJECT_DIR`` is the cwd. A script in a
    directory below the cwd brings that directory's other files along (Python imports its siblings
    first). A word that is no file costs one question.
    """
    found: set[str] = set()
    for group in hooks.all_groups():
        for hook in group.commands:
            if not hook.sandbox:
                found.update(os.path.realpath(p) for p in _named_paths(hook.command, cwd))
    return tuple(sorted(found))


def _named_paths(command: str, cwd: str, depth: int = 0) -> list[str]:
    """The absolute paths a hook command names (unresolved: a symlink in the cwd stays itself)."""
    return [path for path, _ in _named(command, cwd, depth)]


def _named(command: str, cwd: str, depth: int = 0) -> list[tuple[str, bool]]:
    """``(path, strict)`` for each path a hook command may run. ``strict``: watched even while it does not
    exist (it names a path: ``./check.sh``, ``lint.py``); a bare word (``rm`` in ``grep -q rm``) is
    watched only if it was a file when the session vouched for it. A file the command only writes (the
    target of ``>``, ``>>``, ``&>``, a ``tee``'s) is not one it runs, and not watched: the hook changes it
    each time it runs (``echo stop >> stops.log``), which would stop it; the same file also named elsewhere
    in the command is watched. The target of ``<`` is (``sh < check.sh``)."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [_PROJECT_DIR.sub(lambda _: cwd, w) for w in words if not _ASSIGNMENT.match(w)]
    roles = _redirections(words)

    def where(word: str) -> str:
        return os.path.normpath(os.path.join(cwd, os.path.expanduser(word)))

    run = {where(w) for w, role in roles if role != "out"}
    real_cwd = os.path.realpath(cwd)
    out: list[tuple[str, bool]] = []
    for n, (word, role) in enumerate(roles):
        if role == "out" and where(word) not in run:
            continue  # only written by the hook
        if role == "in":
            out.append((where(word), True))
            continue
        if depth < 2 and any(c.isspace() for c in word):
            out += _named(word, cwd, depth + 1)
            continue
        if n > 0 and roles[n - 1][0] == "-m" and _MODULE.fullmatch(word):
            parts = word.split(".")
            module = os.path.join(cwd, *parts)
            out += [(module + ".py", True), (os.path.join(module, "__init__.py"), True)]
            # Python imports each enclosing package's __init__.py first
            out += [(os.path.join(cwd, *parts[:i], "__init__.py"), True) for i in range(1, len(parts))]
            continue
        if not word or word.startswith("-") or (n == 0 and "/" not in word):
            continue
        path = os.path.normpath(os.path.join(cwd, os.path.expanduser(word)))
        out.append((path, "/" in word or "." in os.path.basename(word)))
        parent = os.path.dirname(os.path.realpath(path))
        if not os.path.isfile(path) or not _inside(parent, cwd):
            continue
        # Its siblings: Python puts a script's directory first on its import path. In the cwd itself only
        # the *.py ones, for a Python script (every file of the cwd would stop hooks for any new file).
        in_cwd = parent == real_cwd
        if in_cwd and not path.endswith(".py"):
            continue
        try:
            siblings = sorted(os.path.join(parent, e.name) for e in os.scandir(parent)
                              if e.is_file() and (not in_cwd or e.name.endswith(".py")))
        except OSError:
            continue
        out += [(sibling, True) for sibling in siblings[:64]]
    return out


def _redirections(words: list[str]) -> list[tuple[str, str | None]]:
    """The words of a command, the redirection operators taken out, each with its role: ``"out"``, a file
    written (``> f``, ``2>>f``, ``&> f``, a ``tee``'s files); ``"in"``, a file read (``< f``); ``None``, any
    other word. A here-document's delimiter, a here-string and a descriptor (``2>&1``) are left out. Read
    from words as :func:`shlex.split` gives them (quotes gone): a quoted ``'>'`` reads as a redirection too,
    so the word after it is not watched unless the command names it elsewhere."""
    out: list[tuple[str, str | None]] = []
    pending: str | None = None  # the next word is an operator's target, with this role
    teeing = False
    for n, word in enumerate(words):
        if pending is not None:
            if pending != "skip":
                out.append((word, pending))
            pending = None
            continue
        redirection = _REDIRECTION.fullmatch(word)
        if redirection is not None:
            operator, target = redirection.group(2), redirection.group(3)
            role = _REDIRECTION_ROLES[operator]
            if operator == ">&" and (target.isdigit() or target == "-"):
                role = "skip"  # >&2: a descriptor, not a file
            if target:
                if role != "skip":
                    out.append((target, role))
            else:
                pending = role
            continue
        if word in _SEPARATORS:
            teeing = False
        elif os.path.basename(word) == "tee" and (n == 0 or words[n - 1] in _SEPARATORS):
            teeing = True
        elif teeing and not word.startswith("-"):
            out.append((word, "out"))
            continue
        out.append((word, None))
    return out


_REDIRECTION = re.compile(r"(\d*)(&>>|&>|>>|>\||>&|<<<|<<-?|<>|<&|>|<)(.*)", re.DOTALL)
_REDIRECTION_ROLES = {"&>>": "out", "&>": "out", ">>": "out", ">|": "out", ">&": "out", ">": "out",
                      "<": "in", "<>": "in", "<<<": "skip", "<<": "skip", "<<-": "skip", "<&": "skip"}
_SEPARATORS = frozenset({"|", "||", "&&", ";", "&", "|&"})


def _inside(path: str, root: str) -> bool:
    root = os.path.realpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class HookFiles:
    """What the files of the unsandboxed hooks were when the user vouched for them, for one cwd.

    Taken when the first session in a cwd starts, and again when a session's cwd is set (both the
    user's doing); kept per daemon and cwd (:func:`hook_files_for`), so a later session there (a
    subagent's child session among them) inherits it rather than vouching for what the model left on
    disk meanwhile. A write the user approved through the file tools vouches for the file it wrote
    (:meth:`vouch`). Before an unsandboxed hook runs, :meth:`why_refused` compares: a file that
    appeared, vanished, was replaced or now resolves elsewhere since (a command the model ran, a
    subagent, a sandboxed hook) means the hook does not run; a refused PreToolUse hook denies the call
    (a guard the model switched off fails closed); any other, a Stop hook's included, is reported as a
    failed hook. What it vouches for is what the hooks run: the files their commands name, not those
    they only write (:func:`_named`).
    """

    def __init__(self, hooks: HooksConfig, cwd: str) -> None:
        self._hooks = hooks
        self._stat: dict[str, tuple[tuple[int, ...], str | None]] = {}
        self.vouch_all(cwd)

    def vouch_all(self, cwd: str) -> None:
        self._cwd = cwd
        self._known: dict[str, tuple[str, str | None]] = {}
        for path, strict in self._paths():
            found = self._fingerprint(path)
            if strict or found[1] is not None:
                self._known[path] = found

    def _paths(self) -> list[tuple[str, bool]]:
        return [named for group in self._hooks.all_groups() for hook in group.commands if not hook.sandbox
                for named in _named(hook.command, self._cwd)]

    def vouch(self, path: str) -> None:
        """The user approved a write to ``path``: what it holds now is what a hook may run."""
        real = os.path.realpath(path)
        for named, _ in self._paths():
            if os.path.realpath(named) == real:
                self._known[named] = self._fingerprint(named)

    def why_refused(self, hook: HookCommand) -> str | None:
        """Why ``hook`` must not run (a file it runs changed since it was vouched for), or ``None``."""
        if hook.sandbox:
            return None
        for path, strict in _named(hook.command, self._cwd):
            if path not in self._known:
                if strict and os.path.lexists(path):  # a sibling, or a named file, that appeared since
                    return f"{path} appeared since the session vouched for its hooks"
                continue
            if self._fingerprint(path) != self._known[path]:
                return f"{path} changed since the session vouched for its hooks"
        return None

    def _fingerprint(self, path: str) -> tuple[str, str | None]:
        """Where ``path`` resolves, and a digest of what it holds (``None``: no readable file). A file whose
        inode, size and times are as last hashed is not read again (hooks run on every tool call)."""
        real = os.path.realpath(path)
        try:
            info = os.stat(real)
        except OSError:
            return real, None
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        cached = self._stat.get(real)
        if cached is not None and cached[0] == key:
            return real, cached[1]
        try:
            with open(real, "rb") as f:
                digest: str | None = hashlib.sha256(f.read(_FINGERPRINT_BYTES)).hexdigest()
        except OSError:
            digest = None
        self._stat[real] = (key, digest)
        return real, digest


def hook_files_for(vouched: dict[str, HookFiles], hooks: HooksConfig, cwd: str) -> HookFiles:
    """The daemon's :class:`HookFiles` of ``cwd`` (made, so vouched for, by the first session there)."""
    key = os.path.realpath(cwd)
    if key not in vouched:
        vouched[key] = HookFiles(hooks, cwd)
    return vouched[key]


_FINGERPRINT_BYTES = 16 * 1024 * 1024


_PROJECT_DIR = re.compile(r"\$\{?CLAUDE_PROJECT_DIR\}?")


def parse_hooks(raw: Any, where: str = "hooks") -> HooksConfig:
    """The ``hooks`` setting (``None``: none); :class:`HookConfigError` naming the JSON path of a bad value.
    Events this daemon does not run are left out (the settings loader warns about them)."""
    if raw is None:
        return HooksConfig()
    return checked.structure(raw, HooksConfig, where, HookConfigError)


# ----------------------------------------------------------------- running hooks


@attrs.frozen
class HookResult:
    """What the hooks of one event said, folded together."""

    block_reasons: tuple[str, ...] = ()
    stop_chain: bool = False
    stop_reason: str | None = None
    system_messages: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()  # fail-open problems, reported to clients
    contexts: tuple[str, ...] = ()  # hookSpecificOutput.additionalContext, for the model
    permission: str | None = None  # PreToolUse: the strictest permissionDecision (deny > ask > allow)
    permission_reason: str | None = None
    updated_input: Any = None  # PreToolUse: hookSpecificOutput.updatedInput (the last one given)
    failed: tuple[tuple[str, str], ...] = ()  # (command, what went wrong) of each failure, without its output

    @property
    def blocked(self) -> bool:
        return bool(self.block_reasons)


async def run_hooks(groups: tuple[HookGroup, ...], payload: dict[str, Any], cwd: str,
                    tool_name: str | None = None, runner: Any = None, *,
                    plain_context: bool = False, sandbox: Sandbox = NO_SANDBOX,
                    files: HookFiles | None = None, refused_blocks: bool = False) -> HookResult:
    """Run every matching command hook of one event, one after another.

    ``runner`` starts one command (default: a real subprocess with its timeout; a ``sandbox: true``
    hook in ``sandbox``). ``files``: an unsandboxed hook whose files changed since the session vouched for
    them is not run (:class:`HookFiles`), and with ``refused_blocks`` (PreToolUse) that blocks: the call is
    refused. Never for Stop, whatever the caller says: a Stop block re-prompts the model, which cannot vouch
    for a file, so the turn would only loop to the block cap at the model's cost; the refusal is a failure,
    reported as the others are. With ``plain_context`` (UserPromptSubmit, SessionStart) stdout that is not JSON
    is context.
    """
    refused_blocks = refused_blocks and payload.get("hook_event_name") != "Stop"
    start = runner or functools.partial(run_hook_command, sandbox=sandbox)
    blocks: list[str] = []
    messages: list[str] = []
    failures: list[str] = []
    failed: list[tuple[str, str]] = []
    stop_chain, stop_reason = False, None
    contexts: list[str] = []
    permission: str | None = None
    permission_reason: str | None = None
    updated_input: Any = None
    data = json.dumps(payload).encode()
    for group in groups:
        if not group.matches(tool_name):
            continue
        for hook in group.commands:
            refused = files.why_refused(hook) if files is not None else None
            if refused is not None:
                outcome: tuple[int, str, str] | str = (
                    f"not run: {refused} (by a command, a subagent or a sandboxed hook?), and hooks run outside "
                    f"the sandbox; check it, then set the session's cwd again to vouch for it")
                if refused_blocks:  # a guard of tool calls the model switched off fails closed
                    blocks.append(f"a hook did not run: {refused}; the user must check it")
            else:
                outcome = await start(hook, data, cwd)
            if isinstance(outcome, str):
                failures.append(f"{hook.command!r}: {outcome}")
                failed.append((hook.command, outcome))
                continue
            code, stdout, stderr = outcome
            if code == 2:
                blocks.append(stderr.strip() or "blocked by a hook")
                continue
            if code != 0:
                failures.append(f"{hook.command!r} exited with {code}: {stderr.strip()[:500]}")
                failed.append((hook.command, f"exited with {code}"))
                continue
            parsed = _parse_output(stdout)
            if isinstance(parsed, str) and plain_context:
                contexts.append(stdout.strip())
                continue
            if isinstance(parsed, str):
                failures.append(f"{hook.command!r}: {parsed}")
                failed.append((hook.command, parsed))
                continue
            if isinstance(parsed.get("systemMessage"), str):
                messages.append(parsed["systemMessage"])
            if parsed.get("continue") is False:
                stop_chain = True
                reason = parsed.get("stopReason") or parsed.get("reason")
                stop_reason = reason if isinstance(reason, str) else stop_reason
            if parsed.get("decision") == "block":
                reason = parsed.get("reason")
                blocks.append(reason if isinstance(reason, str) and reason else "blocked by a hook")
            specific = parsed.get("hookSpecificOutput")
            if not isinstance(specific, dict):
                continue
            if isinstance(specific.get("additionalContext"), str) and specific["additionalContext"]:
                contexts.append(specific["additionalContext"])
            decision = specific.get("permissionDecision")
            if decision in PERMISSION_RANK and PERMISSION_RANK[decision] > PERMISSION_RANK.get(permission, -1):
                permission = decision
                reason = specific.get("permissionDecisionReason")
                permission_reason = reason if isinstance(reason, str) and reason else None
            if isinstance(specific.get("updatedInput"), dict):
                updated_input = specific["updatedInput"]
    return HookResult(tuple(blocks), stop_chain, stop_reason, tuple(messages), tuple(failures), tuple(contexts),
                      permission, permission_reason, updated_input, tuple(failed))


def command_name(command: str) -> str:
    """What a log line names a hook command by: its program (``./check.sh``), without arguments or leading
    ``NAME=value`` assignments (either may hold a secret), at most 80 characters."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    words = [w for w in words if not _ASSIGNMENT.match(w)]
    name = words[0] if words else "?"
    name = "".join(c if c.isprintable() and c != " " else "?" for c in name)
    return name if len(name) <= 80 else name[:79] + "…"


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


PERMISSION_RANK = {"allow": 0, "ask": 1, "deny": 2}


def _parse_output(stdout: str) -> dict[str, Any] | str:
    text = stdout.strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return "output is not JSON; ignored"
    if not isinstance(value, dict):
        return "output is not a JSON object; ignored"
    return value


async def _kill_group(process: Any, task: str) -> None:
    """A hook that times out or is cancelled ends with everything it started, what left its group too."""
    kill_group(process.pid)
    await kill_task(task)


async def run_hook_command(hook: HookCommand, stdin: bytes, cwd: str, sandbox: Sandbox = NO_SANDBOX
                   ) -> tuple[int, str, str] | str:
    if hook.sandbox:
        return await _run_sandboxed(hook, stdin, cwd, sandbox)
    env, task = marked_environment(user_environment() | {"CLAUDE_PROJECT_DIR": cwd})
    try:
        with trio.move_on_after(hook.timeout) as scope:
            result = await trio.run_process(
                ["/bin/sh", "-c", hook.command], stdin=stdin, capture_stdout=True, capture_stderr=True,
                check=False, cwd=cwd, start_new_session=True,
                deliver_cancel=functools.partial(_kill_group, task=task), env=env,
            )
    except OSError as exc:
        return f"could not start: {exc.strerror or exc}"
    if scope.cancelled_caught:
        return f"timed out after {hook.timeout:g} s"
    out = result.stdout[:OUTPUT_LIMIT].decode("utf-8", "replace")
    err = result.stderr[:OUTPUT_LIMIT].decode("utf-8", "replace")
    return result.returncode, out, err


async def _run_sandboxed(hook: HookCommand, stdin: bytes, cwd: str, sandbox: Sandbox) -> tuple[int, str, str] | str:
    """A ``sandbox: true`` hook: the model-run command's sandbox and environment.

    Started from the Trio thread, as :mod:`actors.process.spawn` says why (``--die-with-parent``
    follows the thread that forked). With no sandbox here it does not run: it asked for one.
    """
    if not sandbox.active:
        return f"could not start: it asks for the sandbox, and there is none here ({sandbox.reason})"
    env, task = marked_environment(sandbox.environment(model_environment()) | {"CLAUDE_PROJECT_DIR": cwd})
    try:
        argv = sandbox.wrap(["/bin/sh", "-c", hook.command], cwd)
        popen = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    except OSError as exc:
        count_process("sandbox_spawns", "yes:failed")
        return f"could not start: {exc.strerror or exc}"
    count_process("sandbox_spawns", "yes:started")
    assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
    # Trio streams over the pipes (FdStream takes its fd over; the Popen file objects are closed here).
    streams = []
    try:
        for f in (popen.stdin, popen.stdout, popen.stderr):
            streams.append(trio.lowlevel.FdStream(os.dup(f.fileno())))
    except OSError as exc:  # out of descriptors: nothing of it may stay behind
        for stream in streams:
            stream.close()
        popen.kill()
        popen.wait()
        return f"could not start: {exc.strerror or exc}"
    finally:
        for f in (popen.stdin, popen.stdout, popen.stderr):
            f.close()
    child = Child(popen, streams[1])
    outputs: list[bytes] = [b"", b""]

    async def feed() -> None:
        try:
            await streams[0].send_all(stdin)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # a hook that does not read its input
        finally:
            await streams[0].aclose()

    async def drain(n: int) -> None:
        while chunk := await streams[n + 1].receive_some(65536):
            if len(outputs[n]) < OUTPUT_LIMIT:
                outputs[n] += chunk

    try:
        with trio.move_on_after(hook.timeout) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(feed)
                nursery.start_soon(drain, 0)
                nursery.start_soon(drain, 1)
            code = await child.wait()
    finally:
        if popen.poll() is None:
            with trio.CancelScope(shield=True):
                await _kill_group(popen, task)
                await child.wait()
        for stream in streams:
            stream.close()  # synchronous: a cancelled aclose() would stop after the first
    if scope.cancelled_caught:
        return f"timed out after {hook.timeout:g} s"
    if code < 0:
        code = 128 - code  # killed by a signal: as a shell reports it, and as bwrap's own child does
    return (code, outputs[0][:OUTPUT_LIMIT].decode("utf-8", "replace"),
            outputs[1][:OUTPUT_LIMIT].decode("utf-8", "replace"))


__all__ = ["CLAUDE_ALIASES", "run_hook_command", "DEFAULT_STOP_BLOCK_CAP", "HookConfigError", "HookFiles", "HookResult", "HooksConfig", "hook_files", "hook_files_for", "parse_hooks",
           "run_hooks"]
