"""Replaced by ``bench_admission.py`` (POST prompt -> 202, ours against a bare quart-trio route); kept so
the old command still runs it.

    python bench/bench_prompt_latency.py [--rounds 300] [--json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_admission import main  # noqa: E402

if __name__ == "__main__":
    main()
