"""``python -m trellis``: the same as the ``trellis`` command."""

import sys

from .cli import main

sys.exit(main())
