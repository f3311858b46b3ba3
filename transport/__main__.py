"""``python -m transport``: the daemon, re-executed first if its environment or arguments hold a secret."""

import sys

from .process_image import SecretsError, make_undumpable, reexec_without_secrets

try:
    reexec_without_secrets(sys.argv[1:])  # returns only once neither environ nor argv holds a secret
except SecretsError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)

make_undumpable()  # the token and key are in memory: no same-user process may read it
from .cli import main  # noqa: E402  (after the re-exec: nothing is imported twice for nothing)

sys.exit(main())
