"""External command hooks in the Claude Code hook contract: settings, matching, running.

Settings (``hooks`` in the settings file, Claude Code's own ``hooks`` block)::

    {"Stop": [{"hooks": [{"type": "command", "command": "./check.sh", "timeout": 30}]}],
     "PreToolUse": [{"matcher": "Bash|todo_write", "hooks": [{"type": "command", "command": "..."}]}]}

Events: ``Stop``, ``PreToolUse``, ``PostToolUse``, ``UserPromptSubmit``, ``SessionStart``,
``SessionEnd`` (others are warned about by the settings loader and ignored). A command gets JSON on
stdin (:func:`.hook_events.payload`); its exit code 2 blocks with stderr as the reason, exit 0
with a JSON object says ``decision``/``reason``, ``continue``/``stopReason``, ``systemMessage`` and
``hookSpecificOutput`` (``additionalContext``, ``permissionDecision``, ``updatedInput``), folded into
one :class:`HookResult`; what each event does with it is :mod:`.hook_events`'s. Anything else —
another exit code, bad JSON, a timeout, a command that cannot start — fails open and is reported,
never blocking. Matchers are regular expressions over the tool name, or Claude Code's name for it
(:data:`CLAUDE_ALIASES`).

A hook runs in its own process group, with the same markers as a model-run
command (:mod:`actors.process.markers`): when it times out or is cancelled,
its group and every process carrying its ``TRELLIS_TASK`` are killed, so what
it started with ``setsid`` or a double fork goes too. A hook that ends by
itself keeps what it deliberately left running until the daemon process
ends (the lifeline kills the run's processes then).
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from typing import Any

import attrs
import trio

from ..background.shell import kill_group, model_environment
from ..process import kill_task, marked_environment

DEFAULT_TIMEOUT = 60.0
DEFAULT_STOP_BLOCK_CAP = 8
OUTPUT_LIMIT = 64 * 1024


class HookConfigError(ValueError):
    """A ``hooks`` setting that does not have the documented form."""


@attrs.frozen
class HookCommand:
    command: str
    timeout: float = DEFAULT_TIMEOUT


@attrs.frozen
class HookGroup:
    matcher: re.Pattern[str] | None
    commands: tuple[HookCommand, ...]

    def matches(self, tool_name: str | None) -> bool:
        if self.matcher is None or tool_name is None:
            return True
        return any(self.matcher.fullmatch(name) for name in (tool_name, *CLAUDE_NAMES.get(tool_name, ())))


# Claude Code's tool names, as matchers name them, for ours: a matcher matches a tool by its own
# name or by any of these (``Bash`` and ``Write|Edit`` fire for ``shell``...). The one alias table.
CLAUDE_ALIASES: dict[str, tuple[str, ...]] = {
    "Bash": ("shell",),
    "BashOutput": ("shell_output",),
    "KillShell": ("kill_task",),
    # Our file tools, and shell too: the model may still read, write and search with commands, and a
    # hook written for Claude Code's Write|Edit should keep seeing those.
    "Read": ("read_file", "shell"),
    "Write": ("write_file", "shell"),
    "Edit": ("edit", "shell"),
    "MultiEdit": ("edit", "shell"),
    "Glob": ("glob", "shell"),
    "Grep": ("grep", "shell"),
    "WebFetch": ("web_fetch",),
    "TodoWrite": ("todo_write",),
    "Task": ("agent",),
}
CLAUDE_NAMES: dict[str, tuple[str, ...]] = {}
for _claude, _ours in CLAUDE_ALIASES.items():
    for _name in _ours:
        CLAUDE_NAMES[_name] = (*CLAUDE_NAMES.get(_name, ()), _claude)

EVENTS = {"Stop": "stop", "PostToolUse": "post_tool_use", "PreToolUse": "pre_tool_use",
          "UserPromptSubmit": "user_prompt_submit", "SessionStart": "session_start", "SessionEnd": "session_end"}


@attrs.frozen
class HooksConfig:
    stop: tuple[HookGroup, ...] = ()
    post_tool_use: tuple[HookGroup, ...] = ()
    pre_tool_use: tuple[HookGroup, ...] = ()
    user_prompt_submit: tuple[HookGroup, ...] = ()
    session_start: tuple[HookGroup, ...] = ()
    session_end: tuple[HookGroup, ...] = ()

    def all_groups(self) -> tuple[HookGroup, ...]:
        return tuple(g for name in EVENTS.values() for g in getattr(self, name))


def unknown_events(raw: Any) -> list[str]:
    """Hook events in ``raw`` this daemon does not run (warned about at start, then ignored)."""
    return [key for key in raw if key not in EVENTS] if isinstance(raw, dict) else []


def parse_hooks(raw: Any, where: str = "hooks") -> HooksConfig:
    if raw is None:
        return HooksConfig()
    if not isinstance(raw, dict):
        raise HookConfigError(f"{where}: expected an object keyed by hook event")
    groups: dict[str, tuple[HookGroup, ...]] = {}
    for event, field in EVENTS.items():
        entries = raw.get(event, [])
        if not isinstance(entries, list):
            raise HookConfigError(f"{where}.{event}: expected a list of hook groups")
        groups[field] = tuple(_group(e, f"{where}.{event}[{i}]") for i, e in enumerate(entries))
    return HooksConfig(**groups)


def _group(raw: Any, where: str) -> HookGroup:
    if not isinstance(raw, dict) or not isinstance(raw.get("hooks"), list):
        raise HookConfigError(f"{where}: expected an object {{matcher?, hooks: [...]}}")
    matcher = raw.get("matcher")
    pattern = None
    if matcher not in (None, "", "*"):
        if not isinstance(matcher, str):
            raise HookConfigError(f"{where}.matcher: expected a string")
        try:
            pattern = re.compile(matcher)
        except re.error as exc:
            raise HookConfigError(f"{where}.matcher: not a valid pattern: {exc}") from None
    commands = []
    for i, hook in enumerate(raw["hooks"]):
        at = f"{where}.hooks[{i}]"
        if not isinstance(hook, dict) or hook.get("type", "command") != "command":
            raise HookConfigError(f"{at}: expected {{type: 'command', command, timeout?}}")
        command = hook.get("command")
        if not isinstance(command, str) or not command.strip():
            raise HookConfigError(f"{at}.command: expected a non-empty string")
        timeout = hook.get("timeout", DEFAULT_TIMEOUT)
        if type(timeout) not in (int, float) or timeout <= 0:
            raise HookConfigError(f"{at}.timeout: expected a positive number of seconds")
        commands.append(HookCommand(command, float(timeout)))
    return HookGroup(pattern, tuple(commands))


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
                    plain_context: bool = False) -> HookResult:
    """Run every matching command hook of one event, one after another.

    ``runner`` starts one command (default: a real subprocess with its timeout). With
    ``plain_context`` (UserPromptSubmit, SessionStart) stdout that is not JSON is context.
    """
    start = runner or _run_one
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


async def _kill_group(process: trio.Process, task: str) -> None:
    """A hook that times out or is cancelled ends with everything it started, what left its group too."""
    kill_group(process.pid)
    await kill_task(task)


async def _run_one(hook: HookCommand, stdin: bytes, cwd: str) -> tuple[int, str, str] | str:
    env, task = marked_environment(model_environment())
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


__all__ = ["CLAUDE_ALIASES", "DEFAULT_STOP_BLOCK_CAP", "HookConfigError", "HookResult", "HooksConfig", "parse_hooks", "run_hooks"]
