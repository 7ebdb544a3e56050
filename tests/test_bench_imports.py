"""``bench/`` has no import circle: its modules import each other as a tree.

Every ``from . import x`` and ``from .x import y`` counts, at the top of a module or
inside a function (a lazy import still ties the two modules together).
"""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found.update(alias.name for alias in node.names)
            else:
                found.add(node.module.split(".")[0])
    return found


def test_bench_modules_import_no_circle() -> None:
    graph = {path.stem: _imports(path) for path in BENCH.glob("*.py")}
    assert {"run", "paired", "report", "sequential"} <= set(graph)
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import circle: " + " -> ".join((*path, module))
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())
