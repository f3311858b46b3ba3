"""``python -m actors.replay``: see :mod:`actors.replay.cli`."""

import sys

from .cli import main

sys.exit(main())
