"""Compiled output schemas shared by every Conn of one ``Client``.

A Conn compiles a tool's output schema the first time a call needs it (see
``Operations.output_schema``).  Work items open a fresh Conn each time, and the server
sends the same schema bytes each time, so the compiled :class:`Schema` is kept here,
keyed by those bytes: the next Conn that lists the same schema skips the compile.

A compiled schema is immutable (``Schema.validate`` keeps its state in a fresh
context), so sharing one between Conns changes nothing they see.  Only a server's
schema (its bytes, from a listing) is kept; a ``Config.output_schemas`` entry (parsed,
mutable) is compiled per Conn as before, and a schema that fails to compile is never
kept (every Conn meets the same error).  Bounded: at most :data:`MAX_ENTRIES` schemas,
least recently used out first, and only sources of at most :data:`MAX_SOURCE_BYTES`
(a compiled schema's size is bounded by ``Limits.max_validation_steps``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..schema.validator import Schema

__all__ = ["MAX_ENTRIES", "MAX_SOURCE_BYTES", "CompiledSchemas"]

MAX_ENTRIES = 64
MAX_SOURCE_BYTES = 64 * 1024


class CompiledSchemas:
    """Schema bytes -> the compiled schema, LRU-bounded (see the module docstring)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: OrderedDict[bytes, Schema] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, source: bytes) -> Schema | None:
        schema = self._entries.get(source)
        if schema is not None:
            self._entries.move_to_end(source)
        return schema

    def put(self, source: bytes, schema: Schema) -> None:
        if len(source) > MAX_SOURCE_BYTES:
            return
        entries = self._entries
        entries[source] = schema
        if len(entries) > MAX_ENTRIES:
            entries.popitem(last=False)
