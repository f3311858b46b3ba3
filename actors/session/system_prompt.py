"""The system prompt: the first message of every model request a session makes.

What the model is told before the conversation: where it runs (working
directory, operating system, today's date, the sandbox), how the built-in
tools it is offered behave, that multi-step work is tracked with
``todo_write`` with exactly one item ``in_progress`` (the one behaviour the
Todo Stop Guard depends on), and that approvals go through the permission
flow. Only tools the session offers are described. It is rendered afresh for
each request (a cwd change or Plan mode shows at once) and never written into
the conversation: the transcript holds the conversation, and a restored
session renders its prompt again from the same inputs.

Layers, in order:

1. the base: the session's own ``systemPrompt`` (``POST /session``), else the
   settings' ``systemPrompt``, else :func:`default_prompt`; an empty string
   means no base;
2. the settings' ``appendSystemPrompt``;
3. the session's own ``appendSystemPrompt`` (a subagent's child session
   carries its brief here, see :mod:`actors.subagents.runners`).

When every layer is empty no system message is sent at all. The prompt holds
no secret: nothing of the environment but the cwd, the OS name and the date.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from ..model import ChatMessage
from ..model.prefix import note_build
from .history import History

ORIGIN = "system_prompt"  # the origin of the rendered system message (never sent, never stored)


@attrs.frozen
class PromptOverrides:
    """A session's own system-prompt layers, from ``POST /session``; kept in its session record."""

    system_prompt: str | None = None  # replaces the base (settings' or default); "" for none
    append_system_prompt: str | None = None  # added after everything else

    def given(self, other: PromptOverrides | None) -> PromptOverrides:
        """These layers, with those ``other`` sets (not ``None``) in their place."""
        if other is None:
            return self
        return PromptOverrides(
            self.system_prompt if other.system_prompt is None else other.system_prompt,
            self.append_system_prompt if other.append_system_prompt is None else other.append_system_prompt,
        )

    def to_record(self) -> dict[str, str]:
        out = {}
        if self.system_prompt is not None:
            out["systemPrompt"] = self.system_prompt
        if self.append_system_prompt is not None:
            out["appendSystemPrompt"] = self.append_system_prompt
        return out

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> PromptOverrides:
        """The layers a session record holds (a value that is not a string is ignored)."""
        def text(key: str) -> str | None:
            value = record.get(key)
            return value if isinstance(value, str) else None

        return cls(text("systemPrompt"), text("appendSystemPrompt"))


# One line per built-in tool the session offers, in this order; other tools speak for themselves.
TOOL_NOTES: dict[str, str] = {
    "shell": ("runs a command with /bin/sh in the working directory and waits for it (timeout in seconds, "
              "default 120, at most 600). Start servers, watchers and long builds with run_in_background: "
              "you get a task id at once."),
    "shell_output": "returns only what a background shell wrote since your last read, with its status and exit code.",
    "kill_task": "stops a background task by id: a shell with its whole process group, a monitor, a wakeup, a cron job.",
    "monitor": ("watches a command, or a background shell by task_id; new lines arrive later as notifications "
                "until its timeout."),
    "schedule_wakeup": "brings you back after a delay (or at a time) with your note.",
    "cron_create": "runs a prompt on a 5-field cron schedule (minute hour day month weekday); cron_delete removes it.",
    "read_file": ("reads a text file (relative to the working directory), up to 2000 lines from `offset`; the "
                  "note at the end says which lines it left out and the offset that reads on."),
    "write_file": "creates or overwrites a whole file (parent directories too); it asks the user first.",
    "edit": ("replaces `old_string` with `new_string` in a file, exactly: copy the text from read_file, with "
             "enough context to occur once (or set replace_all). Prefer it to write_file for changes; it asks first."),
    "glob": "finds files by a pattern such as **/*.py, sorted, leaving out what .gitignore ignores.",
    "grep": ("searches file contents with a Python regular expression (optionally only files matching a glob) "
             "and returns path:line:text; prefer it and glob to shell find/grep."),
    "web_fetch": "fetches an http(s) URL and returns its text (HTML reduced to text); it asks the user first.",
    "agent": ("starts a subagent in the background with a brief, and optionally a goal; its end arrives as a "
              "notification. A subagent's goal_reached is its own claim: check the work before relying on it."),
}

INTRO = ("You are an agent working in the user's environment through the tools offered with this request. "
         "Do the work with the tools rather than describe it, check results (exit codes, output) before you "
         "say something is done, and keep answers short.")

TODO_SECTION = """# Tracking work
For any task with more than one step, call todo_write before you start, with the whole plan. Keep exactly \
one item in_progress: when it is done, mark it completed and set the next one in_progress in the same call. \
Send the complete list every time. Do not end your turn while items are pending or in_progress: finish \
them, or say exactly what blocks you. A question with one quick answer needs no list."""

PERMISSION_SECTION = """# Permissions and questions
Some calls need the user's approval. Make the call: the daemon asks the user and waits for the answer, so \
do not ask for permission in text first. A denied call comes back as an error; do not repeat it, take \
another way or say what you need. When only the user can decide something, ask one clear question and \
end your turn."""

PLAN_MODE = ("The session is in plan mode: commands and file changes are refused until the user approves a plan. "
             "Investigate, then present the plan.")

BACKGROUND_NOTE = ("Results of background work arrive later as user messages wrapped in <task-notification>; "
                   "scheduled prompts arrive as user messages too. Nothing you start outlives the session.")


@functools.cache
def os_name() -> str:
    """The operating system, as a person would name it (``Linux 6.1.0-18-amd64``)."""
    return f"{platform.system() or 'unknown'} {platform.release()}".strip()


def default_prompt(*, cwd: str, os: str, today: str, tools: Sequence[str], sandboxed: bool,
                   plan_mode: bool = False) -> str:
    """The built-in prompt for a session in ``cwd`` offering ``tools`` (names, in order)."""
    environment = [f"- Working directory: {cwd} (commands and relative paths start here)",
                   f"- Operating system: {os}", f"- Today's date: {today}"]
    if sandboxed:
        environment.append("- Commands run in a sandbox: only the working directory and a private /tmp are "
                           "writable.")
    parts = [INTRO, "# Environment\n" + "\n".join(environment)]
    notes = [f"- {name} {TOOL_NOTES[name]}" for name in TOOL_NOTES if name in tools]
    if notes:
        background = any(name in tools for name in ("shell", "monitor", "schedule_wakeup", "cron_create", "agent"))
        parts.append("# Tools\n" + "\n".join(notes) + (f"\n{BACKGROUND_NOTE}" if background else ""))
    if "todo_write" in tools:
        parts.append(TODO_SECTION)
    parts.append(PERMISSION_SECTION + (f"\n{PLAN_MODE}" if plan_mode else ""))
    return "\n\n".join(parts)


def compose(base: str, appended: Iterable[str | None]) -> str:
    """The layers joined by blank lines, empty ones left out."""
    return "\n\n".join(part.strip("\n") for part in (base, *appended) if part and part.strip())


class SystemPrompt:
    """One session's system prompt: its own layers, rendered for each request from what it depends on."""

    def __init__(self, settings: Any, overrides: PromptOverrides, *, cwd: Callable[[], str],
                 today: Callable[[], str], tool_names: Callable[[], tuple[str, ...]],
                 machine: tuple[str | None, bool], plan_mode: Callable[[], bool]) -> None:
        self.settings = settings
        self.overrides = overrides
        self._cwd = cwd
        self._today = today
        self._tool_names = tool_names
        self._os, self._sandboxed = machine  # an OS name of None: this machine's
        self._plan_mode = plan_mode
        self._kept: ChatMessage | None = None  # the last system message sent

    def render(self) -> str:
        """The whole system prompt as the next request sends it ("" for none)."""
        settings, overrides = self.settings, self.overrides
        base = overrides.system_prompt if overrides.system_prompt is not None else settings.system_prompt
        if base is None:
            base = _default_prompt(self._cwd(), self._os or os_name(), self._today(), self._tool_names(), self._sandboxed,
                                   self._plan_mode())
        return _compose(base, settings.append_system_prompt, overrides.append_system_prompt)

    def message(self) -> ChatMessage | None:
        """The system message for the next request, or ``None`` when its prompt is empty."""
        text = self.render()
        if not text:
            return None
        kept = self._kept
        if kept is None or kept.content != text:  # the same message while its text holds: its memo is reused
            self.release()
            kept = self._kept = ChatMessage("system", text, origin=ORIGIN)
        return kept

    def release(self) -> None:
        """Let go of what the requests built from the kept message recorded on it: those records hold the
        requests' message tuples, which hold the message (a cycle; see :mod:`actors.model.prefix`)."""
        if self._kept is not None:
            self._kept.memo.clear()

    def before(self, messages: Iterable[ChatMessage], pending: Iterable[ChatMessage] = ()
               ) -> tuple[ChatMessage, ...]:
        """``messages`` (then ``pending``) as a request sends them: the system message first."""
        message = self.message()
        built = (message, *messages, *pending) if message is not None else (*messages, *pending)
        if isinstance(messages, History):
            # The history only grows while its rewrites hold: the next request is known to extend this one.
            note_build(built, messages, messages.rewrites, 1 if message is not None else 0, len(messages))
        return built


# Rendered for every request of every session, from a handful of distinct inputs: kept, not rebuilt.
@functools.lru_cache(maxsize=256)
def _default_prompt(cwd: str, os: str, today: str, tools: tuple[str, ...], sandboxed: bool, plan_mode: bool) -> str:
    return default_prompt(cwd=cwd, os=os, today=today, tools=tools, sandboxed=sandboxed, plan_mode=plan_mode)


@functools.lru_cache(maxsize=256)
def _compose(base: str, *appended: str | None) -> str:
    return compose(base, appended)


__all__ = ["ORIGIN", "PromptOverrides", "SystemPrompt", "compose", "default_prompt", "os_name"]
