"""``python -m transport.acp``: the ACP agent on stdio (``python -m transport acp`` once wired)."""

import sys

from .stdio import run_stdio

sys.exit(run_stdio(sys.argv[1:]))
