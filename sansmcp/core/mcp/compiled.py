"""Compiled output schemas shared by every Conn of one ``Client``.

A Conn compiles a tool's output schema the first time a call needs it (see
``Operations.output_schema``).  Work items open a fresh Conn each time, and the server
sends the same schema bytes each time, so the compiled :class:`Schema` is kept here,
keyed by those bytes: the next Conn that lists the same schema skips the compile.

A compiled schema is immutable (``Schema.validate`` keeps its state in a fresh
context), so sharing one between Conns changes nothing they see.  Only a server's
schema (its bytes, from a listing) is kept; a ``Config.output_schemas`` entry (parsed,
mutable) is compiled per Conn as before, and a schema that fails to compile is never
kept (every Conn meets the same error).

**Bounds.**  The server chooses what is kept here, and it is kept beyond the Conn and the
server: a hostile server can send another output schema on every listing (a changed
``title`` is enough), and each call then compiles one and holds it in the Client.  So the
bounds are ``Limits`` fields, in the style of the listing cache's (``max_cache_entries``
/ ``max_cache_bytes``): at most ``Limits.max_compiled_schemas`` schemas and
``Limits.max_compiled_schema_bytes`` estimated bytes held, the least recently used out
first; a schema whose estimate alone is over the bytes bound is not kept, and
``max_compiled_schemas=0`` keeps none.

The estimate is :data:`HELD_PER_SOURCE_BYTE` bytes per byte of the schema's source: the
compile holds a node per subschema (and per ``enum`` / ``const`` value, pattern state,
``required`` name), and the densest sources measured (``{"anyOf":[{},{},...]}``: a
subschema every 3 bytes) hold ~123 bytes of heap per source byte (tracemalloc, CPython
3.12); a typical schema holds 10-60.  (Before they were ``Limits`` fields, 64 schemas of
up to 64 KiB each could hold ~500 MB.)  A compile itself is bounded by
``Limits.max_validation_steps``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..schema.validator import Schema

__all__ = ["HELD_PER_SOURCE_BYTE", "CompiledSchemas"]

HELD_PER_SOURCE_BYTE = 128  # the estimated heap a compiled schema holds per source byte


class CompiledSchemas:
    """Schema bytes -> the compiled schema, LRU-bounded (see the module docstring)."""

    __slots__ = ("_entries", "bytes", "max_bytes", "max_entries")

    def __init__(self, *, max_entries: int, max_bytes: int) -> None:
        self._entries: OrderedDict[bytes, Schema] = OrderedDict()
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0  # the estimate of what the kept schemas hold

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, source: bytes) -> Schema | None:
        schema = self._entries.get(source)
        if schema is not None:
            self._entries.move_to_end(source)
        return schema

    def put(self, source: bytes, schema: Schema) -> None:
        size = HELD_PER_SOURCE_BYTE * len(source)
        if size > self.max_bytes or self.max_entries == 0:
            return
        entries = self._entries
        if source in entries:  # two Conns compiled it at once: the first one is kept
            entries.move_to_end(source)
            return
        entries[source] = schema
        self.bytes += size
        while len(entries) > self.max_entries or self.bytes > self.max_bytes:
            evicted, _ = entries.popitem(last=False)
            self.bytes -= HELD_PER_SOURCE_BYTE * len(evicted)
