"""Subagent runs: goals, per-run signal tokens, runners, and the ``agent`` tool.

A daemon's :class:`SubagentRegistry` (``daemon.subagents``) starts runs by
name; each :class:`SubagentRun` is an actor running its goal loop over turns
of a runner (a child session, or an external command per turn). A run's
subagent reports through ``/signal/mcp/<token>`` with the URL from its own MCP
config file; the token is its whole identity and dies with the run.
"""

from .registry import StartError, SubagentConfig, SubagentRegistry, UnknownRun, registry_for
from .run import RunSpec, SubagentRun
from .texts import END_LABELS, END_REASONS, SELF_REPORTED, status_text
from .tokens import TokenRegistry
from .tools import AgentTool

__all__ = ["END_LABELS", "END_REASONS", "SELF_REPORTED", "AgentTool", "RunSpec", "StartError", "SubagentConfig",
           "SubagentRegistry", "SubagentRun", "TokenRegistry", "UnknownRun", "registry_for", "status_text"]
