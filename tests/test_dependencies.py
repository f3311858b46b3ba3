"""Dependencies: each has an upper bound the suite is run within, and no private name of one is used.

A private name (``_read_data``, ``h11._writers``, ``re._parser``) can change in
any release without notice; the code that used them broke silently or pinned
its dependency forever. Every requirement in ``pyproject.toml`` names an upper
bound, and the version installed here (what this suite tests) lies within it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("actors", "transport", "trellis", "bench", "tests")
OURS = {"actors", "transport", "trellis", "tests", "bench"} | {p.stem for d in SOURCES for p in (ROOT / d).rglob("*.py")}

ALLOWED: dict[str, set[str]] = {}  # none: replays seed Trio through its Hypothesis plugin (actors/replay/determinism.py)
DOCUMENTED = {"os._exit"}
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")  # underscored, yet public and documented


def _requirements() -> list[tuple[str, Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        found += [(f"optional-dependencies.{extra}", Requirement(r)) for r in requirements]
    return found


@pytest.mark.parametrize("where, requirement", _requirements(), ids=lambda v: str(v) if isinstance(v, Requirement) else v)
def test_every_requirement_has_an_upper_bound_and_the_tested_version_is_within_it(where: str,
                                                                                  requirement: Requirement):
    upper = [s for s in requirement.specifier if s.operator in ("<", "<=", "==", "~=")]
    assert upper, f"pyproject.toml {where}: {requirement} has no upper bound"
    try:
        installed = importlib.metadata.version(requirement.name)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{requirement.name} is not installed here")
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"pyproject.toml {where}: {requirement.name} {installed} is installed and tested, outside {requirement}")


def _private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def private_names(path: Path) -> set[str]:
    """The private names of other packages (stdlib included) that a module imports or reads."""
    tree = ast.parse(path.read_text(), str(path))
    modules: dict[str, str] = {}  # local name -> the foreign module it is bound to
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    continue
                if _private(alias.name):
                    used.add(alias.name)
                modules[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in OURS:
                continue
            if _private(node.module):
                used.add(node.module)
            for alias in node.names:
                if _private(alias.name):
                    used.add(f"{node.module}.{alias.name}")
                else:
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            if _private(node.attr):
                used.add(f"{modules[node.value.id]}.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE.fullmatch(node.value):
            head = node.value.split(".")[0]  # a module named in a string: sys.modules["httpx._main"]
            if head not in OURS and _private(node.value) and importlib.util.find_spec(head) is not None:
                used.add(node.value)
    return used - DOCUMENTED


def test_no_private_name_of_a_dependency_is_imported_or_used():
    offenders = {}
    for directory in SOURCES:
        for path in sorted((ROOT / directory).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if path == Path(__file__).resolve():
                continue  # its sample names them
            used = private_names(path) - ALLOWED.get(relative, set())
            if used:
                offenders[relative] = sorted(used)
    assert not offenders, offenders


def test_the_scan_sees_the_forms_that_were_used(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text("import sys, subprocess, os\nfrom h11._writers import ChunkedWriter\nfrom re import _parser\n"
                      "from trio._core import _run as r\nsubprocess._args_from_interpreter_flags()\n"
                      "sys.modules.setdefault('httpx._main', None)\nimport httpx\nos._exit(0)\n"
                      "from actors._actor import Reply\n")
    assert private_names(sample) == {"h11._writers", "re._parser", "trio._core", "trio._core._run",
                                     "subprocess._args_from_interpreter_flags", "httpx._main"}


def test_the_daemon_imports_no_test_framework():
    # trio.testing imports pytest where it is installed: megabytes of every daemon's memory and a tenth of a
    # second of its start, for a MockClock only a test makes
    import subprocess
    import sys

    probe = ("import sys, transport.cli, transport.server, actors\n"
             "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {'pytest', '_pytest', 'hypothesis'}"
             " or m == 'trio.testing')))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [], f"the daemon imports {out.stdout.strip()}"
