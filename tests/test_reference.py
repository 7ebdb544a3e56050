"""Every public name is documented and has its entry in the API reference.

The public names are ``__all__`` of ``sansmcp``, of each adapter module and of the
extras' modules (``sansmcp.otel``, ``sansmcp.oauth_keys``, ``sansmcp.stores``).  Each must
have a docstring of its own as the reference's generator reads it (griffe, the library
mkdocstrings uses, reading the source: a docstring only set at run time does not count), and so
must each public method and property of a public class; a constant may instead be
described by its module's docstring.  ``docs/reference/*.md`` must have one
``::: module.name`` entry per public name, and no entry for anything else.
``make docs`` runs this before building the site in strict mode, where an entry that
does not resolve fails the build.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

griffe = pytest.importorskip("griffe", reason="the docs extra (mkdocstrings[python]) is missing")

REPO = Path(__file__).resolve().parents[1]
MODULES = (
    "sansmcp",
    "sansmcp.io_adapters.asyncio",
    "sansmcp.io_adapters.trio",
    "sansmcp.io_adapters.sync",
    "sansmcp.otel",
    "sansmcp.oauth_keys",
    "sansmcp.stores",
)
ENTRY = re.compile(r"^::: ([\w.]+)\s*$", re.M)


def public_names() -> list[str]:
    return [
        f"{module}.{name}" for module in MODULES for name in importlib.import_module(module).__all__
    ]


@pytest.fixture(scope="module")
def package() -> object:
    extensions = griffe.load_extensions(f"{REPO}/tools/griffe_doc_assign.py:DocAssign")
    return griffe.load(
        "sansmcp", search_paths=[str(REPO)], resolve_aliases=True, extensions=extensions
    )


def lookup(package: object, dotted: str) -> object:
    path = dotted.split(".", 1)[1] if "." in dotted else ""
    return package[path] if path else package  # type: ignore[index]


def undocumented(package: object, names: list[str]) -> list[str]:
    """The names (and public members) in ``names`` without a docstring of their own."""
    missing = []
    for dotted in names:
        module, _, name = dotted.rpartition(".")
        found = lookup(package, dotted)
        if found.kind.value == "attribute":  # type: ignore[attr-defined]
            described = lookup(package, module).docstring  # type: ignore[attr-defined]
            if found.docstring is None and f"``{name}``" not in (  # type: ignore[attr-defined]
                described.value if described else ""
            ):
                missing.append(dotted)
            continue
        if not found.docstring:  # type: ignore[attr-defined]
            missing.append(dotted)
        if found.kind.value != "class":  # type: ignore[attr-defined]
            continue
        for member_name, member in found.all_members.items():  # type: ignore[attr-defined]
            if member_name.startswith("_"):
                continue
            method = member.kind.value == "function"
            prop = member.kind.value == "attribute" and "property" in member.labels
            if (method or prop) and not member.docstring:
                missing.append(f"{dotted}.{member_name}")
    return missing


def test_every_public_name_and_member_has_a_docstring(package: object) -> None:
    assert len(public_names()) >= 30  # the seven modules are read
    assert undocumented(package, public_names()) == []


def test_the_check_sees_a_missing_docstring(tmp_path: Path) -> None:
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "__init__.py").write_text(
        '"""A package; ``CONSTANT`` is described here."""\n\n'
        "CONSTANT = 1\nOTHER = 2\n\n\nclass Bare:\n"
        '    """Documented."""\n\n    def method(self) -> None:\n        pass\n\n'
        '    def fine(self) -> None:\n        """Documented."""\n\n\n'
        "def function() -> None:\n    pass\n"
    )
    fake = griffe.load("fake", search_paths=[str(tmp_path)], resolve_aliases=True)
    names = ["fake.CONSTANT", "fake.OTHER", "fake.Bare", "fake.function"]
    assert undocumented(fake, names) == ["fake.OTHER", "fake.Bare.method", "fake.function"]


def test_every_public_name_has_one_reference_entry_and_nothing_else_has_one() -> None:
    entries = []
    for page in sorted((REPO / "docs" / "reference").glob("*.md")):
        entries += ENTRY.findall(page.read_text(encoding="utf-8"))
    names = [entry for entry in entries if entry not in MODULES]  # module pages' headers
    assert sorted(names) == sorted(public_names())
    assert set(MODULES) <= set(entries)  # each module has its page
