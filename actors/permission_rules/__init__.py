"""Permission rules: allow, ask and deny by tool and argument, in Claude Code's form.

    shell.py   a command line read into the simple commands it runs (pure)
    rules.py   rules read and checked; the decision they make about one tool call (pure)
"""

from .rules import *  # noqa: F403
from .shell import ShellCommands, simple_commands  # noqa: F401
