"""What a built wheel carries: every file the browser UI serves is package data (a page missing its vendored
markdown renderer would break only once installed from a wheel, never in an editable checkout)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_file_of_the_browser_ui_is_package_data():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["transport.ui"]
    package = ROOT / "transport" / "ui"
    served = [p.relative_to(package).as_posix() for p in (package / "static").rglob("*") if p.is_file()]
    assert served, "the UI has files"
    # setuptools' globs: '*' does not cross a '/', as fnmatch's would, so compare directory by directory.
    missing = [f for f in served if not any(fnmatch.fnmatch(f, g) and f.count("/") == g.count("/") for g in globs)]
    assert missing == []
