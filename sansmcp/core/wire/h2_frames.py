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

import hpack
import hpack.table
from hpack.struct import HeaderTuple

__all__ = [
    "CANCEL",
    "ENHANCE_YOUR_CALM",
    "FLOW_CONTROL_ERROR",
    "FRAME_SIZE_ERROR",
    "MAX_WINDOW",
    "NO_ERROR",
    "PROTOCOL_ERROR",
    "REFUSED_STREAM",
    "STREAM_CLOSED",
    "MeteredDecoder",
    "ProtocolFault",
    "code_name",
    "frame",
    "goaway",
    "response_fields",
    "rst_stream",
    "settings",
    "window_update",
]

# error codes (RFC 9113 s7)
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED = 0x0, 0x1, 0x3, 0x5
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0x6, 0x7, 0x8, 0xB
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
MAX_WINDOW = 2**31 - 1
"""The largest flow-control window (RFC 9113 s6.9.1)."""

_RST_STREAM, _SETTINGS, _GOAWAY, _WINDOW_UPDATE = 0x3, 0x4, 0x7, 0x8

# a regular field name: visible ASCII, no upper case, no colon (RFC 9113 s8.2.1)
_NAME_BYTES = bytes(c for c in range(0x21, 0x7F) if not 0x41 <= c <= 0x5A and c != 0x3A)
_CONNECTION_FIELDS = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"}
)
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
    return frame(_SETTINGS, 0, 0, payload)


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(_WINDOW_UPDATE, 0, stream_id, increment.to_bytes(4, "big"))


def rst_stream(stream_id: int, code: int) -> bytes:
    return frame(_RST_STREAM, 0, stream_id, code.to_bytes(4, "big"))


def goaway(code: int) -> bytes:
    """GOAWAY naming stream 0 as the last one processed (the server opens none)."""
    return frame(_GOAWAY, 0, 0, code.to_bytes(8, "big"))


class MeteredDecoder(hpack.Decoder):
    """hpack's decoder, recording the decoded size of the block being decoded.

    hpack refuses a list over ``max_header_list_size`` at the first field crossing it,
    but does not say by how much; ``inflated`` holds the figure it stopped at.  It also
    remembers the regular field names the connection has already checked
    (``known_names``), so a repeated name costs a set lookup.
    """

    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size=max_header_list_size)
        self.inflated = 0
        self.known_names: set[bytes] = set()

    def decode(self, data: bytes, raw: bool = False) -> list[HeaderTuple]:
        self.inflated = 0
        return list(super().decode(data, raw))

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
    if name in _CONNECTION_FIELDS:
        raise ProtocolFault(f"Connection-specific header field present: {name!r}.")
    if name == b"te" and value.lower() != b"trailers":
        raise ProtocolFault(f"Invalid value for TE header: {value!r}")


def _bad_value(value: bytes) -> None:
    for c in value:
        if c in (0x00, 0x0A, 0x0D):
            raise ProtocolFault(f"Illegal character '{chr(c)}' in header value: {value!r}")
    raise ProtocolFault(f"Received header value surrounded by whitespace {value!r}")
