"""The request header blocks of one HTTP/2 connection: checked once, HPACK-encoded by us.

Theory of operation
-------------------
h2 validates, normalises and HPACK-encodes every header list it sends, through a chain
of generators per field, on every request; for sansmcp's small requests that was about
a third of the HTTP/2 work item.  But our request headers hardly vary on a connection:
the pseudo-headers are fixed per origin, Accept / Content-Type / User-Agent /
Authorization per Conn, ``Mcp-Protocol-Version`` per session, ``Mcp-Method`` and
``Mcp-Name`` over a handful of values; only ``content-length``, ``Mcp-Param-*`` values,
``Last-Event-ID`` and DPoP proofs change from request to request.  So
:class:`RequestEncoder` (one per connection) does both jobs itself, and the wire machine
runs h2 with ``validate_outbound_headers`` and ``normalize_outbound_headers`` off:

* **The check.** A field is checked the first time the connection sends it
  (:func:`check_field`); the fields it has seen are remembered by the encoder's tables
  below, so a repeated field costs one dict lookup.  A field whose value changes per
  request is checked every time (at C speed: ``bytes.translate``).  The rule is
  stricter than the one h2 applied to outbound headers (h2 never looked at the
  characters of an outbound value): a name is a lower-case RFC 9110 token, never a
  pseudo-header; a value has no control character but HTAB (so no CR, LF, NUL, DEL)
  and no SP/HTAB at either end; ``:path`` and ``:authority`` are visible ASCII
  (``:path`` non-empty).  Connection-specific fields are the wire machine's to drop
  before they get here.  A field that fails raises ``LocalProtocolError`` before any
  byte of the block is produced, so the encoder's state is unchanged: every
  server-chosen or hook-returned value that reaches a header is checked before, by the
  layer that took it (``sansmcp.core.fieldvalue.echoable``, ``tools.encode_header_value``,
  ``oauth.grants.sendable_token``, ``config._header_bytes``...); this is the backstop.
* **The encoding** (RFC 7541).  A field equal to a static-table entry is sent as its
  index; ``authorization``, ``proxy-authorization``, ``cookie`` and ``dpop`` as
  *never indexed* literals (RFC 7541 s7.1: credentials stay out of the compression
  context, as h2 did); the per-request fields above as literals *without indexing*
  (they would only churn the table); every other field as a literal *with incremental
  indexing* the first time and by its dynamic-table index after that.  Literals are
  not Huffman-coded: a repeated field is one or two bytes anyway.  The encoder keeps
  its own model of the dynamic table (insertion order, RFC 7541 s4.1 entry sizes,
  eviction of the oldest) so an entry's index is ``62 + entries inserted after it``.
  The table size is the smaller of the peer's ``SETTINGS_HEADER_TABLE_SIZE`` and
  :data:`TABLE_SIZE`; a change is announced by a dynamic table size update at the start
  of the next block (the smallest size since the last block first, RFC 7541 s4.2).
  Pure encodings (static, never-indexed and name prefixes) are memoised in bounded
  dicts.

``RequestEncoder.block`` returns the whole header block; the wire machine hands it to
h2 (h2's ``encoder`` slot returns it), which only frames it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from hpack.table import HeaderTable

from ..errors import LocalProtocolError
from ..http import FIELD_VALUE_CONTROLS, FIELD_VALUE_EDGES, TOKEN_CHARS

__all__ = ["TABLE_SIZE", "PseudoHeaderRefused", "RequestEncoder", "check_field", "check_pseudo"]

TABLE_SIZE = 4096
"""The most dynamic-table bytes we use (RFC 7541's default), whatever the peer allows."""
_MEMO = 512  # entries of a memo dict before it is emptied (per connection)

# the RFC 9110 token, less upper case: HTTP/2 sends field names in lower case (RFC 9113
# s8.2.1), where HTTP/1.1 takes any case (h1 sends a name as given)
_TCHAR = TOKEN_CHARS.translate(None, bytes(range(0x41, 0x5B)))
_VISIBLE = bytes(range(0x21, 0x7F))
_EDGES = tuple(FIELD_VALUE_EDGES)

_STATIC: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAMES: dict[bytes, int] = {}
for _index, (_name, _value) in enumerate(HeaderTable.STATIC_TABLE, start=1):
    _STATIC.setdefault((_name, _value), _index)
    _STATIC_NAMES.setdefault(_name, _index)

# how a field is represented, by name: (first byte's pattern, prefix bits, memoise, index)
_INDEXED = (0x40, 6, False, True)  # literal with incremental indexing, then its index
_NEVER = (0x10, 4, True, False)  # never indexed (credentials), memoised per value
_NEVER_VOLATILE = (0x10, 4, False, False)  # never indexed, different every request
_VOLATILE = (0x00, 4, False, False)  # without indexing, different every request
_MODES: dict[bytes, tuple[int, int, bool, bool]] = {
    b"authorization": _NEVER,
    b"proxy-authorization": _NEVER,
    b"cookie": _NEVER,
    b"dpop": _NEVER_VOLATILE,
    b"content-length": _VOLATILE,
    b"last-event-id": _VOLATILE,
}
_PARAM_PREFIX = b"mcp-param-"  # Mcp-Param-* values are the caller's arguments: unindexed

_ONE_BYTE_INDEX = tuple(bytes((0x80 | i,)) for i in range(127))


def _integer(value: int, bits: int, pattern: int) -> bytes:
    """RFC 7541 s5.1: ``value`` with an N-bit prefix, the first byte's high bits
    ``pattern``."""
    top = (1 << bits) - 1
    if value < top:
        return bytes((pattern | value,))
    out = bytearray((pattern | top,))
    value -= top
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(data: bytes) -> bytes:
    """RFC 7541 s5.2, without Huffman coding."""
    size = len(data)
    return (bytes((size,)) if size < 0x7F else _integer(size, 7, 0)) + data


class PseudoHeaderRefused(LocalProtocolError):
    """A request line (``:method``, ``:scheme``, ``:authority``, ``:path``) we cannot send."""


def check_field(name: bytes, value: bytes) -> None:
    """A regular request field we may send (see the module docstring); else
    ``LocalProtocolError``."""
    if not name or name.translate(None, _TCHAR):
        raise LocalProtocolError(f"request header name {name[:40]!r} is not valid in HTTP/2")
    if value.translate(None, FIELD_VALUE_CONTROLS) != value or (
        value and (value[0] in _EDGES or value[-1] in _EDGES)
    ):
        raise LocalProtocolError(f"request header {name!r} has an invalid value")


def check_pseudo(name: bytes, value: bytes) -> None:
    """``:method``, ``:scheme``, ``:authority`` or ``:path``: visible ASCII, non-empty."""
    if not value:
        raise PseudoHeaderRefused(f"the request has an empty {name.decode()} header")
    if value.translate(None, _VISIBLE):
        raise PseudoHeaderRefused(
            f"the request's {name.decode()} {value[:40]!r} is not visible ASCII"
        )


class RequestEncoder:
    """One connection's HPACK encoder and field check (see the module docstring)."""

    __slots__ = (
        "_entries",
        "_evicted",
        "_inserted",
        "_limit",
        "_memo",
        "_names",
        "_size",
        "_smallest",
        "_undo",
        "_used",
        "_where",
    )

    def __init__(self) -> None:
        self._limit = TABLE_SIZE  # the table size in use
        self._smallest: int | None = None  # the smallest size since the last block
        self._size = TABLE_SIZE  # the size to announce (when _smallest is not None)
        self._entries: deque[tuple[tuple[bytes, bytes], int]] = deque()  # oldest first
        self._where: dict[tuple[bytes, bytes], int] = {}  # field -> its insertion number
        self._inserted = 0  # entries ever inserted
        self._evicted = 0  # entries ever evicted
        self._used = 0  # bytes of the table in use (RFC 7541 s4.1)
        self._memo: dict[tuple[bytes, bytes], bytes] = {}  # checked fields' pure encodings
        self._names: dict[bytes, bytes] = {}  # checked names' prefixes (unindexed fields)
        self._undo: list[tuple[tuple[bytes, bytes], int]] = []  # evicted by this block

    @property
    def table_size(self) -> int:
        """The dynamic-table size in use."""
        return self._limit

    def peer_table_size(self, allowed: int) -> None:
        """The peer's ``SETTINGS_HEADER_TABLE_SIZE`` changed to ``allowed``."""
        size = min(allowed, TABLE_SIZE)
        if size == self._limit:
            return
        self._limit = self._size = size
        self._smallest = size if self._smallest is None else min(self._smallest, size)
        self._evict(0)
        self._undo.clear()

    def block(self, fields: Iterable[tuple[bytes, bytes]]) -> bytes:
        """The HPACK block of ``fields`` (pseudo-headers first).  A field that fails its
        check raises ``LocalProtocolError`` and leaves the encoder as it was."""
        parts: list[bytes] = []
        memo, where = self._memo, self._where
        mark = (self._inserted, self._evicted, self._used)
        self._undo.clear()
        try:
            for field in fields:
                encoded = memo.get(field)
                if encoded is None:
                    serial = where.get(field)
                    if serial is None:
                        encoded = self._first(field)
                    else:
                        index = 61 + self._inserted - serial
                        encoded = (
                            _ONE_BYTE_INDEX[index] if index < 127 else _integer(index, 7, 0x80)
                        )
                parts.append(encoded)
        except LocalProtocolError:
            self._rollback(*mark)
            raise
        if self._smallest is not None:
            update = _integer(self._smallest, 5, 0x20)
            if self._size != self._smallest:
                update += _integer(self._size, 5, 0x20)
            self._smallest = None
            parts.insert(0, update)
        return b"".join(parts)

    # -- helpers -------------------------------------------------------------------

    def _first(self, field: tuple[bytes, bytes]) -> bytes:
        """A field neither memoised nor in the dynamic table: check it, encode it, and
        insert it into the table when its name is indexed."""
        name, value = field
        if name[:1] == b":":
            check_pseudo(name, value)
        else:
            check_field(name, value)
        static = _STATIC.get(field)
        if static is not None:
            encoded = _ONE_BYTE_INDEX[static]
            self._remember(field, encoded)
            return encoded
        pattern, bits, memoise, index = _MODES.get(name, _INDEXED)
        size = len(name) + len(value) + 32
        if index and (size > self._limit or name.startswith(_PARAM_PREFIX)):
            # too big for the table, or a caller's argument: not indexed
            pattern, bits, memoise, index = _VOLATILE
        if index:
            encoded = self._name_prefix(name, 6, 0x40) + _string(value)
            self._insert(field, size)
            return encoded
        prefix = self._names.get(name)
        if prefix is None:
            prefix = self._name_prefix(name, bits, pattern)
            if len(self._names) >= _MEMO:
                self._names.clear()
            self._names[name] = prefix  # a name's unindexed pattern never changes
        encoded = prefix + _string(value)
        if memoise:
            self._remember(field, encoded)
        return encoded

    @staticmethod
    def _name_prefix(name: bytes, bits: int, pattern: int) -> bytes:
        name_index = _STATIC_NAMES.get(name, 0)
        prefix = _integer(name_index, bits, pattern)
        return prefix if name_index else prefix + _string(name)

    def _remember(self, field: tuple[bytes, bytes], encoded: bytes) -> None:
        if len(self._memo) >= _MEMO:
            self._memo.clear()
        self._memo[field] = encoded

    def _insert(self, field: tuple[bytes, bytes], size: int) -> None:
        self._evict(size)
        self._entries.append((field, size))
        self._where[field] = self._inserted
        self._inserted += 1
        self._used += size

    def _evict(self, room: int) -> None:
        """Drop the oldest entries until ``room`` more bytes fit in the table."""
        while self._entries and self._used + room > self._limit:
            entry = self._entries.popleft()
            del self._where[entry[0]]
            self._undo.append(entry)
            self._evicted += 1
            self._used -= entry[1]

    def _rollback(self, inserted: int, evicted: int, used: int) -> None:
        """Undo what a block that failed did to the table: the entries it inserted go,
        the older ones it evicted come back (the k-th evicted had insertion number
        ``evicted + k``; a later one was this block's own)."""
        older = self._undo[: max(0, inserted - evicted)]
        for _ in range(self._inserted - inserted - (len(self._undo) - len(older))):
            field, _size = self._entries.pop()
            del self._where[field]
        for serial, (field, _size) in enumerate(older, start=evicted):
            self._where[field] = serial
        self._entries.extendleft(reversed(older))
        self._undo.clear()
        self._inserted, self._evicted, self._used = inserted, evicted, used
