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


# ----------------------------------------------------------------- the module graph of actors/

# Imports that exist only to register something (a module imported for its side effect on a registry);
# such an edge may close a circle. None is needed today.
REGISTRATION_IMPORTS: set[tuple[str, str]] = set()

# The session's pure cores: no Trio, no I/O, no clock, no log. What they import themselves is checked against
# all of IMPURE; what those modules import in turn (the wire forms the cores build events with) against the
# concurrency and network modules only, since a module there may hold a helper that reads the clock.
PURE_CORES = ("actors.session.work_item", "actors.session.prompt_queue",
              "actors.checkpoints.manifest")  # a checkpoint's manifests and a restore's plan
IMPURE = {"trio", "anyio", "httpx", "os", "subprocess", "socket", "time", "threading", "asyncio", "logging"}
IMPURE_ANYWHERE = {"trio", "anyio", "httpx", "subprocess", "socket", "threading", "asyncio"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "actors").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Every import of every actors/ module (TYPE_CHECKING and function-level ones included): the edges
    to other actors/ modules, and the top-level names of everything else it imports."""
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    outside: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    name = ".".join(base + ([node.module] if node.module else []))
                else:
                    name = node.module or ""
                targets = [f"{name}.{a.name}" if f"{name}.{a.name}" in modules else name for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target.split(".")[0] != "actors":
                    outside[module].add(target.split(".")[0])
                    continue
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != module and (module, target) not in REGISTRATION_IMPORTS:
                    edges[module].add(target)
    return edges, outside


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circle_among_the_modules_of_actors():
    assert _circles(_graph()[0]) == []


def test_the_circle_check_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_only_the_daemon_that_supervises_sessions_imports_the_session_actor():
    edges, _ = _graph()
    importers = sorted(m for m, targets in edges.items() if "actors.session.session" in targets)
    assert importers == ["actors.daemon"]


def test_the_pure_cores_need_no_trio_and_do_no_io():
    edges, outside = _graph()
    for core in PURE_CORES:
        assert not outside[core] & IMPURE, (core, outside[core] & IMPURE)
        seen, todo = {core}, [core]
        while todo:
            module = todo.pop()
            assert not outside[module] & IMPURE_ANYWHERE, (core, module, outside[module] & IMPURE_ANYWHERE)
            for target in edges[module] - seen:
                seen.add(target)
                todo.append(target)
