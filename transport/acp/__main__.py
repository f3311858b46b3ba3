"""``python -m transport.acp``: the ACP agent on stdio (same as ``python -m transport acp``).

Like ``python -m transport``, it first re-executes itself without the secrets
of its environment and arguments (:mod:`transport.process_image`).
"""

import sys

from transport.process_image import SecretsError, make_undumpable, reexec_without_secrets

try:
    reexec_without_secrets(sys.argv[1:], module="transport.acp")
except SecretsError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)

make_undumpable()  # the key is in memory: no same-user process may read it
from .stdio import run_stdio  # noqa: E402

sys.exit(run_stdio(sys.argv[1:]))
