"""HTTP/2 frames for the client machine in :mod:`.h2`: the bytes we send, and the checks
of what we receive that need no connection state (RFC 9113).

(Split from :mod:`.h2` so that module holds the connection -- scanner, streams, flow
control and byte ledger -- and this one the frame formats: building our frames, the
fixed-size rules of each frame type, the checks of a decoded response header list, and
the metered HPACK decoder.  Nothing here keeps state across frames but the decoder.)

A fault found here raises :class:`ProtocolFault` carrying the RFC 9113 error code the
connection is closed with; the machine turns it into ``ConnectionFailed(cause="framing")``
with the message ``"server broke the HTTP/2 protocol: ..."``.  The wording of the header
checks follows what h2 said for the same faults, so a message names the same thing.
"""

from __future__ import annotations

import contextlib

import hpack
import hpack.table
from hpack.struct import HeaderTuple

from ..http import CONNECTION_FIELDS

__all__ = [
    "ACK",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONTINUATION",
    "DATA",
    "END_HEADERS",
    "END_STREAM",
    "ENHANCE_YOUR_CALM",
    "FLOW_CONTROL_ERROR",
    "FRAME_SIZE_ERROR",
    "GOAWAY",
    "HEADERS",
    "MAX_STREAM_ID",
    "MAX_WINDOW",
    "NO_ERROR",
    "PADDED",
    "PING",
    "PRIORITY",
    "PRIORITY_FLAG",
    "PROTOCOL_ERROR",
    "PUSH_PROMISE",
    "REFUSED_STREAM",
    "RST_STREAM",
    "SETTINGS",
    "SETTINGS_ENABLE_CONNECT_PROTOCOL",
    "SETTINGS_ENABLE_PUSH",
    "SETTINGS_HEADER_TABLE_SIZE",
    "SETTINGS_INITIAL_WINDOW_SIZE",
    "SETTINGS_MAX_CONCURRENT_STREAMS",
    "SETTINGS_MAX_FRAME_SIZE",
    "SETTINGS_MAX_HEADER_LIST_SIZE",
    "STREAM_CLOSED",
    "UNRESERVED",
    "WINDOW_UPDATE",
    "MeteredDecoder",
    "ProtocolFault",
    "check_control",
    "code_name",
    "data_bounds",
    "frame",
    "goaway",
    "header_fragment",
    "response_fields",
    "rst_stream",
    "settings",
    "settings_values",
    "window_update",
]

# The protocol's numbers, each written here once (:mod:`.h2` imports them).
# frame types (RFC 9113 s6)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
# frame flags (RFC 9113 s6): END_STREAM on DATA and HEADERS, ACK on SETTINGS and PING
# (the same bit), END_HEADERS, PADDED and PRIORITY on HEADERS (PADDED on DATA too)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
# setting identifiers (RFC 9113 s6.5.2, RFC 8441 s3)
SETTINGS_HEADER_TABLE_SIZE, SETTINGS_ENABLE_PUSH, SETTINGS_MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6
SETTINGS_ENABLE_CONNECT_PROTOCOL = 0x8
# error codes (RFC 9113 s7)
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED = 0x0, 0x1, 0x3, 0x5
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR = 0x6, 0x7, 0x8, 0x9
ENHANCE_YOUR_CALM = 0xB
_CODE_NAMES = (
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "INTERNAL_ERROR",
    "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT",
    "STREAM_CLOSED",
    "FRAME_SIZE_ERROR",
    "REFUSED_STREAM",
    "CANCEL",
    "COMPRESSION_ERROR",
    "CONNECT_ERROR",
    "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY",
    "HTTP_1_1_REQUIRED",
)
# Three names for 2**31 - 1, each for what it means where it is used:
UNRESERVED = 0x7FFF_FFFF
"""The mask that takes the reserved bit off a 32-bit field whose low 31 bits are the
value: the frame header's stream identifier (RFC 9113 s4.1), a window increment
(s6.9), GOAWAY's last stream id (s6.8), a priority's stream dependency (s5.3.1, the
exclusive flag)."""
MAX_WINDOW = 2**31 - 1
"""The largest flow-control window (RFC 9113 s6.9.1)."""
MAX_STREAM_ID = 2**31 - 1
"""The largest stream identifier (RFC 9113 s5.1.1): a 31-bit number."""

# A regular field name a server may send: visible ASCII, no upper case, no colon (RFC
# 9113 s8.2.1).  Looser than the token we send (``http.TOKEN_CHARS``) on purpose: the
# RFC's receive rule, as h2 applied it, takes delimiters such as '"' or '(' in a name
# (and a value is refused for NUL, CR, LF and edge whitespace only, not every control).
_NAME_BYTES = bytes(c for c in range(0x21, 0x7F) if not 0x41 <= c <= 0x5A and c != 0x3A)
_KNOWN_NAMES_MAX = 256  # field names already checked, remembered per connection


class ProtocolFault(Exception):
    """The server broke RFC 9113; the connection closes with ``code``."""

    def __init__(self, message: str, code: int = PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


def code_name(code: int) -> str:
    """The RFC 9113 name of an error code, or its hex figure."""
    return _CODE_NAMES[code] if 0 <= code < len(_CODE_NAMES) else f"error code {code:#x}"


def frame(kind: int, flags: int, stream_id: int, payload: bytes | memoryview = b"") -> bytes:
    """One frame: the 9-byte header and ``payload``."""
    head = (len(payload) << 48 | kind << 40 | flags << 32 | stream_id).to_bytes(9, "big")
    return head + payload


def settings(values: dict[int, int]) -> bytes:
    payload = b"".join(k.to_bytes(2, "big") + v.to_bytes(4, "big") for k, v in values.items())
    return frame(SETTINGS, 0, 0, payload)


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))


def goaway(code: int) -> bytes:
    """GOAWAY naming stream 0 as the last one processed (the server opens none)."""
    return frame(GOAWAY, 0, 0, code.to_bytes(8, "big"))


# the fixed payload size of a control frame, and whether it is on stream 0 (True) or on
# a stream (False): RFC 9113 s6.3-6.9
_CONTROL_RULES = {
    PRIORITY: ("PRIORITY", 5, False),
    RST_STREAM: ("RST_STREAM", 4, False),
    PING: ("PING", 8, True),
    GOAWAY: ("GOAWAY", 8, True),  # at least 8: debug data may follow
    WINDOW_UPDATE: ("WINDOW_UPDATE", 4, None),  # either
}


def check_control(kind: int, stream_id: int, unit: bytes) -> None:
    """A PRIORITY, RST_STREAM, PING, GOAWAY or WINDOW_UPDATE frame's size and stream."""
    name, size, on_zero = _CONTROL_RULES[kind]
    if on_zero is not None and on_zero != (stream_id == 0):
        raise ProtocolFault(f"{name} on stream {stream_id}")
    length = len(unit) - 9
    if length != size and not (kind == GOAWAY and length > size):
        raise ProtocolFault(f"{name} of {length} bytes", FRAME_SIZE_ERROR)
    if kind == PRIORITY and int.from_bytes(unit[9:13], "big") & UNRESERVED == stream_id:
        raise ProtocolFault(f"stream {stream_id} may not depend on itself")
    if kind == WINDOW_UPDATE and not int.from_bytes(unit[9:13], "big") & UNRESERVED:
        raise ProtocolFault(f"WINDOW_UPDATE of 0 on stream {stream_id}")


def data_bounds(unit: bytes, flags: int, stream_id: int) -> tuple[int, int]:
    """Where a DATA frame's data lies in ``unit`` (the frame), padding taken off."""
    if not stream_id:
        raise ProtocolFault("DATA on stream 0")
    if not flags & PADDED:
        return 9, len(unit)
    if len(unit) == 9 or unit[9] >= len(unit) - 9:
        raise ProtocolFault(f"DATA on stream {stream_id} with more padding than payload")
    return 10, len(unit) - unit[9]


def header_fragment(unit: bytes, flags: int, stream_id: int) -> bytes:
    """The header block of ``unit`` (a HEADERS frame and its CONTINUATIONs): each frame's
    fragment, the HEADERS frame's padding and priority fields taken off."""
    if not stream_id:
        raise ProtocolFault("HEADERS on stream 0")
    length = int.from_bytes(unit[0:3], "big")
    start, end = 9, 9 + length
    if flags & PADDED:
        if not length:
            raise ProtocolFault(f"HEADERS on stream {stream_id} without its Pad Length")
        start, end = 10, end - unit[9]
    if flags & PRIORITY_FLAG:
        if end - start < 5:
            raise ProtocolFault(f"HEADERS on stream {stream_id} with a short priority")
        if int.from_bytes(unit[start : start + 4], "big") & UNRESERVED == stream_id:
            raise ProtocolFault(f"stream {stream_id} may not depend on itself")
        start += 5
    if end < start:
        raise ProtocolFault(f"HEADERS on stream {stream_id} with more padding than payload")
    block = unit[start:end]
    index = 9 + length
    while index < len(unit):  # the CONTINUATIONs
        size = int.from_bytes(unit[index : index + 3], "big")
        block += unit[index + 9 : index + 9 + size]
        index += 9 + size
    return block


def settings_values(unit: bytes, flags: int, stream_id: int) -> list[tuple[int, int]]:
    """The (identifier, value) pairs of a server's SETTINGS frame (none for an ACK), each
    value checked against RFC 9113 s6.5.2."""
    if stream_id:
        raise ProtocolFault(f"SETTINGS on stream {stream_id}")
    size = len(unit) - 9
    if flags & ACK:
        if size:
            raise ProtocolFault("SETTINGS ACK with a payload", FRAME_SIZE_ERROR)
        return []
    if size % 6:
        raise ProtocolFault(f"SETTINGS of {size} bytes", FRAME_SIZE_ERROR)
    values = []
    for index in range(9, len(unit), 6):
        code = int.from_bytes(unit[index : index + 2], "big")
        value = int.from_bytes(unit[index + 2 : index + 6], "big")
        if code == SETTINGS_ENABLE_PUSH and value:
            # s6.5.2: a server never sends 1 (only a client offers to take pushes)
            raise ProtocolFault(f"setting {code:#x} from a server must be 0, not {value}")
        if code == SETTINGS_ENABLE_CONNECT_PROTOCOL and value > 1:
            raise ProtocolFault(f"setting {code:#x} must be 0 or 1, not {value}")
        if code == SETTINGS_INITIAL_WINDOW_SIZE and value > MAX_WINDOW:
            raise ProtocolFault(
                f"SETTINGS_INITIAL_WINDOW_SIZE of {value:,} (FLOW_CONTROL_ERROR)",
                FLOW_CONTROL_ERROR,
            )
        if code == SETTINGS_MAX_FRAME_SIZE and not 1 << 14 <= value <= (1 << 24) - 1:
            raise ProtocolFault(f"SETTINGS_MAX_FRAME_SIZE of {value:,}")
        values.append((code, value))
    return values


class MeteredDecoder(hpack.Decoder):
    """hpack's decoder, saying by how much a refused block was over its bound.

    hpack refuses a list over ``max_header_list_size`` at the first field crossing it,
    but does not say by how much.  Counting every field costs a call per field, so the
    figure is found only when a block is refused: the dynamic table is noted before each
    block (a copy of a few dozen entries), and a refused block is decoded again from that
    state by a :class:`_Meter`, which counts; ``inflated`` holds the figure it stopped at.
    The connection fails on a refused block, so that second pass runs once at most.  It
    also remembers the regular field names the connection has already checked
    (``known_names``), so a repeated name costs a set lookup.
    """

    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size=max_header_list_size)
        self.inflated = 0
        self.known_names: set[bytes] = set()

    def decode(self, data: bytes, raw: bool = False) -> list[HeaderTuple]:
        table = self.header_table
        before = (table.dynamic_entries.copy(), table._current_size, table._maxsize)
        try:
            return list(super().decode(data, raw))
        except hpack.OversizedHeaderListError:
            meter = _Meter(self.max_header_list_size)
            meter.max_allowed_table_size = self.max_allowed_table_size
            again = meter.header_table
            again.dynamic_entries, again._current_size, again._maxsize = before
            with contextlib.suppress(hpack.OversizedHeaderListError):
                meter.decode(data, raw)
            self.inflated = meter.inflated
            raise


class _Meter(hpack.Decoder):
    """A decoder counting the decoded size of its block, as hpack does, field by field."""

    inflated = 0

    def _decode_indexed(self, data: bytes | memoryview) -> tuple[HeaderTuple, int]:
        header, consumed = super()._decode_indexed(data)
        self.inflated += hpack.table.table_entry_size(header[0], header[1])
        return header, consumed

    def _decode_literal(
        self, data: bytes | memoryview, should_index: bool
    ) -> tuple[HeaderTuple, int]:
        header, consumed = super()._decode_literal(data, should_index)
        self.inflated += hpack.table.table_entry_size(header[0], header[1])
        return header, consumed


def response_fields(
    decoded: list[HeaderTuple], *, trailers: bool, known: set[bytes]
) -> tuple[bytes | None, tuple[tuple[bytes, bytes], ...]]:
    """The ``:status`` value and the regular fields of a decoded response header list
    (trailers: no pseudo-header allowed), checked as RFC 9113 s8.2-8.3 ask: field names
    lower-case visible ASCII, values without NUL, CR, LF or surrounding whitespace, no
    connection-specific field, ``te`` only as ``trailers``, pseudo-headers first, only
    ``:status``, exactly once.  ``known`` holds names already checked (it grows here, up
    to a bound)."""
    status: bytes | None = None
    fields: list[tuple[bytes, bytes]] = []
    for name, value in decoded:
        if value and (
            b"\x00" in value
            or b"\r" in value
            or b"\n" in value
            or value[0] in (0x20, 0x09)
            or value[-1] in (0x20, 0x09)
        ):
            _bad_value(value)
        if name in known:
            fields.append((name, value))
            continue
        if name[:1] == b":":
            if trailers:
                raise ProtocolFault(f"Received pseudo-header in trailer {name!r}")
            if fields:
                raise ProtocolFault(f"Received pseudo-header field out of sequence: {name!r}")
            if name != b":status":
                raise ProtocolFault(f"Received a pseudo-header a response cannot carry: {name!r}")
            if status is not None:
                raise ProtocolFault(f"Received duplicate pseudo-header field {name!r}")
            status = value
            continue
        _check_name(name, value)
        if name != b"te" and len(known) < _KNOWN_NAMES_MAX:
            known.add(name)
        fields.append((name, value))
    if status is None and not trailers:
        raise ProtocolFault("Header block missing mandatory b':status' header")
    return status, tuple(fields)


def _check_name(name: bytes, value: bytes) -> None:
    if not name:
        raise ProtocolFault("Received header name with zero length.")
    bad = name.translate(None, _NAME_BYTES)
    if bad:
        if 0x41 <= bad[0] <= 0x5A:
            raise ProtocolFault(f"Received uppercase header name {name!r}.")
        raise ProtocolFault(f"Illegal character {chr(bad[0])!r} in header name: {name!r}")
    if name in CONNECTION_FIELDS:
        raise ProtocolFault(f"Connection-specific header field present: {name!r}.")
    if name == b"te" and value.lower() != b"trailers":
        raise ProtocolFault(f"Invalid value for TE header: {value!r}")


def _bad_value(value: bytes) -> None:
    for c in value:
        if c in (0x00, 0x0A, 0x0D):
            raise ProtocolFault(f"Illegal character '{chr(c)}' in header value: {value!r}")
    raise ProtocolFault(f"Received header value surrounded by whitespace {value!r}")
