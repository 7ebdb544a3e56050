"""The seam between the MCP machine and the byte-level HTTP machines.

Theory of operation
-------------------
The MCP machine (``sansmcp.core.mcp``) never sees HTTP framing, and the wire
machines (``sansmcp.core.wire``) never see JSON-RPC.  They meet in *HTTP messages*:

* the MCP side produces an :class:`HttpRequest` (method, scheme, authority,
  target, headers, body -- the body is complete: MCP requests are small);
* the wire side turns the response bytes into :data:`ExchangeEvent` values, all
  tagged with the ``exchange_id`` the driver chose when it started the exchange:
  zero or more :class:`InformationalReceived` (1xx heads), one
  :class:`ResponseReceived` (the final head), zero or more :class:`DataReceived`,
  optionally :class:`TrailersReceived`, then exactly one terminal event,
  :class:`ResponseEnded` or :class:`ExchangeFailed`.

Every head carries ``raw_size``: the bytes its header block occupied *on the
wire*, counted before parsing (HTTP/1.1: from the status line to the blank line
inclusive; HTTP/2: the HEADERS + CONTINUATION frame payloads).  Body framing
(chunk-size lines and CRLFs, DATA frame headers and padding) travels as
``DataReceived.overhead``.  The MCP machine charges heads, body bytes and body framing
to its cumulative budget.

Header names are lower-case ``bytes``; values are ``bytes`` as received.

The request and the events are read-only by contract but not ``frozen``: several are made
per request and per body read, and a frozen dataclass's ``__init__`` costs about four
times a plain one's (one ``object.__setattr__`` per field).  They hash and compare by
value as before (``unsafe_hash``); nothing assigns to them once made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import assert_never

from .errors import ConnectionFailed

__all__ = [
    "CONNECTION_FIELDS",
    "FIELD_VALUE_CONTROLS",
    "FIELD_VALUE_EDGES",
    "MAX_CONTENT_LENGTH_DIGITS",
    "TOKEN_CHARS",
    "DataReceived",
    "ExchangeEvent",
    "ExchangeFailed",
    "Headers",
    "HttpRequest",
    "InformationalReceived",
    "ResponseEnded",
    "ResponseReceived",
    "TrailersReceived",
    "charged_bytes",
    "header_value",
]

Headers = tuple[tuple[bytes, bytes], ...]

# A content-length longer than this is refused by both wires before int() sees it (20
# digits are past any body a bound lets through, and under Python's int-digit limit).
MAX_CONTENT_LENGTH_DIGITS = 20

# The header-field grammar of what we send (RFC 9110), written once: both wires' request
# checks and the Config check use these.  Where a layer applies another rule on purpose
# (h2 sends no upper case in a name; what a server may send us is checked by RFC 9113's
# looser receive rule) it says so next to its own.
TOKEN_CHARS = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
"""tchar (RFC 9110 s5.6.2): a field name (a token) is one or more of these."""
FIELD_VALUE_CONTROLS = bytes(c for c in range(0x20) if c != 0x09) + b"\x7f"
"""What a field value never holds: field-content is VCHAR, obs-text, SP and HTAB (RFC
9110 s5.5), so every control byte but HTAB, and DEL."""
FIELD_VALUE_EDGES = b" \t"
"""SP and HTAB: inside a field value only, never at either end (RFC 9110 s5.5)."""
CONNECTION_FIELDS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
"""Connection-specific fields (RFC 9110 s7.6.1, RFC 9113 s8.2.2), lower case: they
describe one HTTP/1.1 hop and are malformed in HTTP/2 (so is ``te`` but ``trailers``)."""


def header_value(headers: Headers, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower-case), or None."""
    for key, value in headers:
        if key == name:
            return value
    return None


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class HttpRequest:
    """One HTTP request, complete.  ``authority`` is ``host[:port]`` as for ``Host``."""

    method: bytes
    scheme: bytes
    authority: bytes
    target: bytes
    headers: Headers = ()
    body: bytes = b""


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class InformationalReceived:
    """A 1xx head (never 101: we never ask for an upgrade)."""

    exchange_id: int
    status: int
    headers: Headers
    raw_size: int


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class ResponseReceived:
    """The final response head."""

    exchange_id: int
    status: int
    headers: Headers
    raw_size: int
    http_version: bytes = b"1.1"


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class DataReceived:
    """Body bytes, as they arrived (never buffered to a whole body by the wire layer).

    ``overhead``: wire bytes of framing that carried this data -- HTTP/1.1 chunk-size
    lines (with their extensions) and the CRLFs after chunks, HTTP/2 DATA frame headers
    and padding; charged to the budget like data.  Framing that ends a body with no
    data after it (the last-chunk line, the final CRLF, an empty END_STREAM DATA frame)
    comes as ``DataReceived(data=b"", overhead=n)`` before the terminal event.
    """

    exchange_id: int
    data: bytes
    overhead: int = 0


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class TrailersReceived:
    """Trailing headers (chunked trailers, or an HTTP/2 trailing HEADERS block)."""

    exchange_id: int
    headers: Headers
    raw_size: int


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class ResponseEnded:
    """The response is complete."""

    exchange_id: int


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class ExchangeFailed:
    """The exchange ended without a complete response; ``error`` says why."""

    exchange_id: int
    error: ConnectionFailed = field(compare=False)


ExchangeEvent = (
    InformationalReceived
    | ResponseReceived
    | DataReceived
    | TrailersReceived
    | ResponseEnded
    | ExchangeFailed
)


def charged_bytes(event: ExchangeEvent) -> int:
    """The wire bytes ``event`` carries, which its exchange is charged for: a head's or
    trailers' ``raw_size``, a ``DataReceived``'s data plus overhead, nothing otherwise.

    A wire machine charges every byte it receives either to exactly one event or, when no
    live exchange owns it, to its socket's unowned count
    (``Limits.max_unowned_bytes_per_socket``).
    """
    if isinstance(event, DataReceived):  # the hot case; a class pattern costs twice as much
        return len(event.data) + event.overhead
    match event:
        case ResponseReceived() | InformationalReceived() | TrailersReceived():
            return event.raw_size
        case ResponseEnded() | ExchangeFailed():
            return 0
        case _:
            assert_never(event)
