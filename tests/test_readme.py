"""The README cannot rot: its samples run, its bounds table is ``Limits()``, its names import.

* Every ```` ```python ```` block of ``README.md`` runs as a script, in a fresh
  interpreter (``-W error``), against the e2e suite's real server
  (``tests/e2e/server.py``, started as ``tests/e2e/conftest.py`` starts it), its URL
  put in place of the one the README names.  It must exit 0 with nothing on stderr;
  where the README shows what a block prints (``It prints:`` and a ```` ```text ````
  block), every line shown must be printed, in order (``...`` matches anything).  A
  block preceded by ``<!-- not run: REASON -->`` is skipped, and the skip says REASON.
* The quick start runs once more against a port nobody listens on, and prints what the
  README says it prints then (its ``ConnectionFailed`` branch).
* Every block that runs also passes ``mypy --strict`` (one run over all of them).
* The table under "Deadlines and bounds" lists every ``Limits`` field once, with its
  default exactly (value and kind).
* Every type the README names in backticks (``Config``, ``LogMessage``,
  ``sansmcp.otel.Telemetry``...) imports from where the README says it lives.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sansmcp import Limits
from tests.e2e.conftest import Launcher, free_port

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
NAMED_URL = "http://127.0.0.1:8000/mcp"  # the URL the README's samples name
RUN_TIMEOUT = 60.0


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    code: str
    skip: str | None  # the reason given in <!-- not run: ... -->, or None
    prints: tuple[str, ...] | None  # the lines the README shows it printing

    @property
    def id(self) -> str:
        return f"README.md:{self.line}"


FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*\Z", re.S)
PRINTS = re.compile(r"\A\s*It prints\b[^\n]*:\s*\Z")


def blocks(text: str = README) -> list[Block]:
    fences = list(FENCE.finditer(text))
    found = []
    for index, fence in enumerate(fences):
        if fence.group(1) != "python":
            continue
        before = text[fences[index - 1].end() if index else 0 : fence.start()]
        skip = NOT_RUN.search(before)
        prints = None
        if index + 1 < len(fences) and fences[index + 1].group(1) == "text":
            between = text[fence.end() : fences[index + 1].start()]
            if PRINTS.match(between):
                prints = tuple(fences[index + 1].group(2).splitlines())
        found.append(
            Block(
                line=text.count("\n", 0, fence.start()) + 1,
                code=fence.group(2),
                skip=skip.group(1) if skip else None,
                prints=prints,
            )
        )
    return found


BLOCKS = blocks()
RUNNABLE = [block for block in BLOCKS if block.skip is None]


def test_the_readme_has_samples_that_run_and_each_skip_says_why() -> None:
    assert len(RUNNABLE) >= 2  # the quick start and the blocking sample
    assert all(NAMED_URL in block.code for block in RUNNABLE)
    assert all(block.skip for block in BLOCKS if block not in RUNNABLE)


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    launcher = Launcher(tmp_path_factory.mktemp("readme-servers"))
    try:
        yield launcher("--stateless", "--json").url()
    finally:
        launcher.stop_all()


def run(code: str, url: str, where: Path) -> subprocess.CompletedProcess[str]:
    script = where / "sample.py"
    script.write_text(code.replace(NAMED_URL, url), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        # as a user runs it, warnings as errors; not -X dev, whose asyncio debug mode
        # logs every step slower than 0.1 s on stderr (a loaded machine's, not the sample's)
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=env,
        cwd=where,
    )


def shown_lines_printed(shown: tuple[str, ...], printed: str) -> bool:
    """Every shown line matches a printed line, in order; ``...`` matches anything."""
    lines = iter(printed.splitlines())
    for line in shown:
        pattern = re.compile(".*".join(map(re.escape, line.split("..."))) + r"\Z")
        if not any(pattern.match(candidate) for candidate in lines):
            return False
    return True


@pytest.mark.parametrize("block", BLOCKS, ids=lambda block: block.id)
def test_each_readme_sample_runs_against_a_real_server(
    block: Block, server_url: str, tmp_path: Path
) -> None:
    if block.skip is not None:
        pytest.skip(f"{block.id} is marked not run: {block.skip}")
    done = run(block.code, server_url, tmp_path)
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    assert done.stdout.strip()  # every sample shows something
    if block.prints is not None:
        assert shown_lines_printed(block.prints, done.stdout), (block.prints, done.stdout)


def test_the_quick_start_prints_what_the_readme_says_when_nothing_listens(
    tmp_path: Path,
) -> None:
    said = re.search(r"with no server listening on that port, `([^`]+)`", README)
    assert said is not None
    quick_start = RUNNABLE[0]
    assert "except ConnectionFailed" in quick_start.code
    done = run(quick_start.code, f"http://127.0.0.1:{free_port()}/mcp", tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == [said.group(1)]


def test_the_samples_pass_mypy_strict(tmp_path: Path) -> None:
    paths = []
    for index, block in enumerate(RUNNABLE):
        path = tmp_path / f"readme_sample_{index}.py"
        path.write_text(block.code, encoding="utf-8")
        paths.append(str(path))
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *paths],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MYPYPATH": str(REPO)},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- the bounds table ---------------------------------------------------------------

ROW = re.compile(r"^\| `(\w+)` \| `([^`]+)` \|", re.M)


def bounds_table(text: str = README) -> dict[str, int | float]:
    start = text.index("### Deadlines and bounds")
    section = text[start : text.index("\n## ", start)]
    table: dict[str, int | float] = {}
    for name, default in ROW.findall(section):
        assert name not in table, f"{name} is listed twice"
        table[name] = ast.literal_eval(default)
    return table


def test_the_bounds_table_is_limits_defaults() -> None:
    defaults = Limits()
    expected = {field.name: getattr(defaults, field.name) for field in dataclasses.fields(Limits)}
    table = bounds_table()
    assert table.keys() == expected.keys()
    # the kind too: a deadline is written 30.0, a count 30
    assert {name: (type(value), value) for name, value in table.items()} == {
        name: (type(value), value) for name, value in expected.items()
    }


def test_the_bounds_table_reader_sees_a_wrong_default() -> None:
    wrong = README.replace("| `call_timeout` | `120.0` |", "| `call_timeout` | `60.0` |")
    assert wrong != README
    assert bounds_table(wrong)["call_timeout"] == 60.0 != Limits().call_timeout


# -- every type the README names ------------------------------------------------------

# Where a bare name in the README is to be found: the package, then the adapters
# (``Client``, ``Conn``), then the standard library names the README mentions.
HOMES = ("sansmcp", "sansmcp.io_adapters.asyncio", "sansmcp.io_adapters.sync")
STANDARD = {"ThreadPoolExecutor": "concurrent.futures", "Literal": "typing"}
CODE = re.compile(r"`([^`\n]+)`")
HEADER = re.compile(r"[\w-]+: ")  # an HTTP header line (`Authorization: DPoP`), not a type
TYPE_NAME = re.compile(r"(?<![\w.-])(?:sansmcp(?:\.\w+)*\.)?[A-Z]\w*[a-z]\w*(?![\w-])")


def named_types(text: str = README) -> set[str]:
    """Capitalised names (and dotted ``sansmcp.…`` paths) in the prose's code spans."""
    prose = FENCE.sub("", text)
    return {
        name
        for code in CODE.findall(prose)
        if not HEADER.match(code)
        for name in TYPE_NAME.findall(code)
    }


def find(name: str) -> object:
    if "." in name:
        module, _, attribute = name.rpartition(".")
        return getattr(importlib.import_module(module), attribute)
    if hasattr(builtins, name):
        return getattr(builtins, name)
    if name in STANDARD:
        return getattr(importlib.import_module(STANDARD[name]), name)
    for home in HOMES:
        found = getattr(importlib.import_module(home), name, None)
        if found is not None:
            return found
    raise AssertionError(f"the README names {name}, which none of {HOMES} exports")


def test_every_type_the_readme_names_imports_from_where_it_says() -> None:
    names = named_types()
    # the ones the issue names, so a change of the pattern cannot make this vacuous
    assert {"LogMessage", "Notification", "Config", "Limits", "Unauthorized"} <= names
    assert "sansmcp.otel.Telemetry" in names
    missing = []
    for name in sorted(names):
        try:
            find(name)
        except (AssertionError, ImportError, AttributeError) as error:
            missing.append(f"{name}: {error}")
    assert not missing


def test_the_type_finder_refuses_a_name_nobody_exports() -> None:
    with pytest.raises(AssertionError, match="NoSuchThing"):
        find("NoSuchThing")
