"""A griffe extension for the API reference: ``__doc__ = Other.__doc__`` in a class body.

The runtime adapters' ``Client`` and ``Conn`` share one docstring by assigning
``__doc__`` from the runtime-free class they build on (``sansmcp/io_adapters/_common.py``),
so ``help()`` shows it; griffe reads the source and would see no docstring.  This
extension gives such a class the docstring of the class named, found in the class's own
module (following imports), before mkdocstrings renders it.  ``make docs`` and
``tests/test_reference.py`` load it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import griffe

_ASSIGNED = re.compile(r"(\w+)\.__doc__\Z")


def _classes(obj: griffe.Object) -> Iterator[griffe.Class]:
    for member in obj.members.values():
        if member.is_alias:
            continue
        if member.is_class:
            yield member  # type: ignore[misc]
        if member.is_module or member.is_class:
            yield from _classes(member)  # type: ignore[arg-type]


class DocAssign(griffe.Extension):
    """Fill the docstring of each class whose body assigns ``__doc__`` from another's."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        pending = {}
        for cls in _classes(pkg):
            assigned = cls.members.get("__doc__")
            match = _ASSIGNED.match(str(getattr(assigned, "value", "") or ""))
            if cls.docstring is None and match:
                pending[cls] = match.group(1)
        while pending:  # a chain (asyncio.Client <- ClientBase <- ClientFace) in any order
            progress = False
            for cls, source_name in list(pending.items()):
                source = cls.parent.get_member(source_name) if cls.parent else None
                if source is not None and source.docstring is not None:
                    cls.docstring = griffe.Docstring(source.docstring.value, parent=cls)
                    del pending[cls]
                    progress = True
            if not progress:
                names = ", ".join(f"{cls.path} <- {name}" for cls, name in pending.items())
                raise ValueError(f"__doc__ assigned from a class without a docstring: {names}")
