"""sansmcp.core is pure: no I/O, clock, randomness, threads or logging imports."""

from __future__ import annotations

import ast
import pathlib

import pytest

FORBIDDEN = {
    "asyncio",
    "trio",
    "anyio",
    "socket",
    "ssl",
    "select",
    "selectors",
    "threading",
    "time",
    "random",
    "secrets",
    "os",
    "logging",
}
CORE = pathlib.Path(__file__).resolve().parent.parent / "sansmcp" / "core"


def imported_roots(tree: ast.AST) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            roots.add("__import__")
    return roots


CORE_FILES = sorted(CORE.rglob("*.py"))


def test_core_has_modules() -> None:
    assert len(CORE_FILES) >= 4


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_is_pure(path: pathlib.Path) -> None:
    roots = imported_roots(ast.parse(path.read_text(), filename=str(path)))
    assert not roots & (FORBIDDEN | {"__import__", "importlib"}), roots & FORBIDDEN


def test_checker_catches_forbidden_imports() -> None:
    tree = ast.parse("import os\nfrom time import monotonic\nimport asyncio.tasks\n")
    assert imported_roots(tree) >= {"os", "time", "asyncio"}
