"""Claude Code's tool names for Trellis's: the one table for everything that names tools Claude's way.

Hook matchers (:mod:`actors.session.hooks`) match a tool by its own name or by Claude's name for it, and
fire exactly where Claude's would (``Write|Edit`` never fires for ``shell``, whose commands may write
too: a hook that wants those names ``Bash`` or ``shell``). Permission rules
(:mod:`actors.permission_rules`) read a rule's tool name through the same table, widened where Claude's
rules are wider than its matchers (its ``Read`` rules cover every tool that reads files).
"""

from __future__ import annotations

CLAUDE_ALIASES: dict[str, tuple[str, ...]] = {
    "Bash": ("shell",),
    "BashOutput": ("shell_output",),
    "KillShell": ("kill_task",),
    "Read": ("read_file",),
    "Write": ("write_file",),
    "Edit": ("edit",),
    "MultiEdit": ("edit",),
    "Glob": ("glob",),
    "Grep": ("grep",),
    "WebFetch": ("web_fetch",),
    "TodoWrite": ("todo_write",),
    "Task": ("agent",),
}

# Ours -> Claude's names for it.
CLAUDE_NAMES: dict[str, tuple[str, ...]] = {}
for _claude, _ours in CLAUDE_ALIASES.items():
    for _name in _ours:
        CLAUDE_NAMES[_name] = (*CLAUDE_NAMES.get(_name, ()), _claude)

__all__ = ["CLAUDE_ALIASES", "CLAUDE_NAMES"]
