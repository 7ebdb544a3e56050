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

The estimate is :data:`HELD_PER_SOURCE_BYTE` bytes per byte of the schema's source plus
:data:`HELD_PER_STEP` bytes per step its compile spent (``Schema.steps``); see
:func:`held_estimate`.  The source alone does not bound the heap: a ``pattern``'s counted
repetition emits its atom once per count, so ``{"pattern":"(?:a{999}){499}"}`` (29
bytes) compiles to ~500,000 instructions and holds ~36 MB.  Each instruction is one step
(and the compile stops at ``Limits.max_validation_steps``), so the steps bound it.  The
two parts are added, not maxed: a schema can be dense in both at once (a wide ``anyOf``
beside such a pattern), and what it holds is then the sum.

Measured (tracemalloc, CPython 3.12, held after the compile, the parsed source excluded):
per source byte, the densest is ``{"anyOf":[{},{},...]}`` at ~123 (a subschema every 3
bytes; ``[true,true,...]`` ~74, many typed ``properties`` ~30, big ``enum`` ~25, a
``const`` object ~12, a typical schema 10-60); per step, the densest are patterns of
alternations and optional repeats, ``(?:(?:)|(?:)|(?:)){999}`` at ~114, ``(?:a{0,9}){999}``
~102, ``(?:a{999}){499}`` and character classes repeated ~73 (a class's bounds are shared
by its copies).  The non-pattern shapes hold more per step (nested ``allOf`` ~423, wide
``anyOf`` ~369, typed ``properties`` ~402, ``$ref`` ~190, ``enum`` ~146) but are covered by
their source term (each is under 128 per source byte).  Both figures are above every shape
measured.  (Before they were ``Limits`` fields, 64 schemas of up to 64 KiB each could hold
~500 MB; before the steps were charged, 12 such patterns held 434 MB against an estimate
of 63 KB.)
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..schema.validator import Schema

__all__ = ["HELD_PER_SOURCE_BYTE", "HELD_PER_STEP", "CompiledSchemas", "held_estimate"]

HELD_PER_SOURCE_BYTE = 128  # the estimated heap a compiled schema holds per source byte
HELD_PER_STEP = 128  # ... and per step its compile spent (see the module docstring)


def held_estimate(source: bytes, schema: Schema) -> int:
    """The bytes the compiled ``schema`` of ``source`` is estimated to hold."""
    return HELD_PER_SOURCE_BYTE * len(source) + HELD_PER_STEP * schema.steps


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
        size = held_estimate(source, schema)
        if size > self.max_bytes or self.max_entries == 0:
            return
        entries = self._entries
        if source in entries:  # two Conns compiled it at once: the first one is kept
            entries.move_to_end(source)
            return
        entries[source] = schema
        self.bytes += size
        while len(entries) > self.max_entries or self.bytes > self.max_bytes:
            evicted, kept = entries.popitem(last=False)
            self.bytes -= held_estimate(evicted, kept)
