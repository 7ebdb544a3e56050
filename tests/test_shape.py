"""The house's shape (issue 27): rooms small enough for the next feature to land in.

No core file over 650 lines but the two wires and the pool (their size is the protocol's,
and so is the size of the class each of them holds); no core class over 500 lines; no
class that subclasses ``McpMachine`` (the authorizer is composed in front of it); no CLI
file over 450 lines.  A feature that needs more room splits a module along its seam.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "sansmcp"
CORE = ROOT / "core"
MAX_CORE_FILE = 650
MAX_CORE_CLASS = 500
MAX_CLI_FILE = 450
# the protocol's size: the HTTP/1.1 and HTTP/2 wires and the connection pool
PROTOCOL_SIZED = {"wire/h1.py", "wire/h2.py", "net/pool.py"}
PROTOCOL_SIZED_CLASSES = {"wire/h1.py": "H1Connection", "wire/h2.py": "H2Connection"}


def _lines(path: pathlib.Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _core_files() -> list[pathlib.Path]:
    return sorted(CORE.rglob("*.py"))


def _name(path: pathlib.Path) -> str:
    return path.relative_to(CORE).as_posix()


def test_no_core_file_is_over_its_size() -> None:
    over = {
        _name(path): _lines(path)
        for path in _core_files()
        if _name(path) not in PROTOCOL_SIZED and _lines(path) > MAX_CORE_FILE
    }
    assert over == {}


def test_no_core_class_is_over_its_size() -> None:
    over: dict[str, int] = {}
    for path in _core_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            if PROTOCOL_SIZED_CLASSES.get(_name(path)) == node.name:
                continue
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            if size > MAX_CORE_CLASS:
                over[f"{_name(path)}:{node.name}"] = size
    assert over == {}


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: p.name)
def test_nothing_subclasses_the_mcp_machine(path: pathlib.Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
            assert "McpMachine" not in bases, f"{path.name}: {node.name}"


def test_no_cli_file_is_over_its_size() -> None:
    over = {
        path.name: _lines(path)
        for path in sorted((ROOT / "cli").glob("*.py"))
        if _lines(path) > MAX_CLI_FILE
    }
    assert over == {}


def test_the_checks_see_the_files() -> None:
    # the limits above bind something: the walk finds the core, the exempt files, the CLI
    names = {_name(path) for path in _core_files()}
    assert names >= PROTOCOL_SIZED
    assert len(names) > 50
    assert any((ROOT / "cli").glob("*.py"))
