"""The package's import graph has floors: no import runs back up between packages, and
no module imports itself through others (no Spark; the code is parsed, not imported).

A package (``barriered/<name>/``) or top-level module (``barriered/<name>.py``) is a room;
an import from one room into another is an arrow. The rooms must form no cycle, so each
stands on those it imports (README, "Layout"); the modules, function-level imports
included, must form no cycle either.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "barriered"


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(module: str) -> bool:
    base = PACKAGE.parent.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imports(path: Path) -> Iterator[str]:
    """The ``barriered`` modules ``path`` imports (a name imported from a package is the
    submodule when there is one)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "barriered")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "barriered":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield sub if _exists(sub) else node.module


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        me = _module_of(path)
        graph[me] |= {m for m in _imports(path) if m != me}
    return graph


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_runs_back_up_between_packages() -> None:
    rooms: dict[str, set[str]] = defaultdict(set)
    arrows: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, imported in _graph().items():
        for other in imported:
            a, b = _room(module), _room(other)
            if a != b:
                rooms[a].add(b)
                arrows[(a, b)].append(f"{module} -> {other}")
    tangled = _cycles(rooms)
    detail = [
        arrow for cycle in tangled for a in cycle for b in cycle for arrow in arrows.get((a, b), [])
    ]
    assert tangled == [], f"packages importing each other: {tangled}: {detail}"


def test_no_module_imports_itself_through_others() -> None:
    graph = _graph()
    packages = {
        m for m in graph if (PACKAGE.parent.joinpath(*m.split(".")) / "__init__.py").is_file()
    }
    # a package's __init__ that hands its modules' names on is no circle of its modules
    inner = {m: {o for o in out if o not in packages} for m, out in graph.items()}
    assert _cycles(inner) == []
