"""The layering rules, checked on the source: actors/ is pure Trio; the guard is pure."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HTTP_FRAMEWORKS = {"quart", "quart_trio", "hypercorn", "h11", "werkzeug", "starlette", "transport"}
# No exceptions now: the openai provider's HTTP/1.1 client (actors/model/h1.py, http.py) is written without h11.
CLIENTS: dict[str, set[str]] = {}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_actors_never_import_transport_or_an_http_framework():
    offenders = {}
    for path in (ROOT / "actors").rglob("*.py"):
        name = path.relative_to(ROOT).as_posix()
        found = (imports(path) & HTTP_FRAMEWORKS) - CLIENTS.get(name, set())
        if found:
            offenders[name] = sorted(found)
    assert offenders == {}


def test_the_guard_state_machine_does_no_io_and_needs_no_trio():
    for path in (ROOT / "actors" / "guard").glob("*.py"):
        assert not imports(path) & {"trio", "httpx", "os", "subprocess", "socket", "pathlib", "time"}, path
