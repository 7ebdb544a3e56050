"""The HTTP/1.1 client connection machine: llhttp parses heads, a meter frames the rest.

(Why over 600 lines: one machine whose meter -- the framing -- and whose head checks
share one exchange's state and one byte ledger; split, each half would reach into the
other's fields.  A tenth of it is this docstring.)

Theory of operation
-------------------
:class:`H1Connection` is one socket's HTTP/1.1 client, sans I/O.  ``start()``
serialises a complete :class:`~sansmcp.core.http.HttpRequest` into ``data_to_send()``
(written here, each line checked against the grammar h11 applied: a method and header
names are tokens, a target is visible ASCII, a value never holds NUL, CR, LF, VT or
FF nor starts or ends with whitespace); ``receive_data()`` / ``receive_eof()`` turn
the server's bytes into :data:`~sansmcp.core.http.ExchangeEvent` values, taken one at
a time with ``next_event()``.  One exchange at a time: no pipelining.

Every byte the server sends passes through a *meter*, which is the framing: it finds
where each header block ends (the final head, every 1xx head, chunked trailers), the
end of a body (``Content-Length``, chunked, or the connection's end), chunk-size lines
and the CRLF after each chunk.  It recognises the end of a block as h11 did
(``\\n\\r?\\n``, and a block that *is* only ``\\n`` or ``\\r\\n``), so it can

* report ``raw_size``, the bytes of the block as they were on the wire, and
* fail the exchange (``ConnectionFailed``, cause ``"budget"``, bound
  ``"max_header_bytes"``) the moment byte ``max_header_bytes + 1`` of one block
  arrives, however the bytes are split, without parsing it.

A complete block is parsed in one call by llhttp (``httptools``), strict but for bare
LF line ends (h11 took them too), plus the checks where llhttp is more lenient than
h11 was, so that every response h11 refused is refused: the status line's grammar
(``HTTP/d.d``, three digits, a reason without NUL/CR/LF/VT/FF; llhttp also takes
``RTSP/`` and ``ICE/``, a status under 100 and CRLFs before the status line), a single
``Transfer-Encoding`` whose value is exactly ``chunked``, at most 20 digits of
``Content-Length``, 101 without an upgrade asked; keep-alive as h11 decided it (1.1 and
no ``close`` token).  llhttp refuses more than h11 did: obs-fold continuation lines,
control characters in a field value, ``Content-Length`` with ``Transfer-Encoding``,
a repeated or comma-listed ``Content-Length``, HTTP versions other than 0.9, 1.0, 1.1
and 2.0.  Chunk-size lines are checked by the meter against h11's grammar (1-20 hex
digits, an extension, OWS); bodies never pass through llhttp.  Body bytes are reported
as they arrive, never accumulated.

Every byte of a response is accounted for exactly once: heads and a non-empty trailer
block in ``raw_size``; body bytes in ``DataReceived.data``; chunked framing (chunk-size
lines with their extensions, the CRLF after each chunk, the last-chunk line and an
empty trailer block) in ``DataReceived.overhead``.  The meter counts framing as it
enters and attaches it to the next ``DataReceived``; framing left over when the body
ends comes as ``DataReceived(data=b"", overhead=n)`` before the trailers (if any) and
``ResponseEnded``.  So a server padding each body byte with 64 KiB of chunk extension
pays for it in ``Limits.max_response_bytes``.

Bytes outside any response are counted too: ``bytes received == sum(charged_bytes(e))
+ unowned_bytes + unsettled_bytes`` (see ``sansmcp.core.http.charged_bytes``).  Bytes
while no exchange is in flight, bytes after a response, bytes after a failure, and what
a failed or cancelled exchange had received without an event carrying it are
*unowned*; any of them also breaks the connection, so the per-socket bound on them
(``Limits.max_unowned_bytes_per_socket``, which binds on HTTP/2) is never reached on a
socket still in use.

Faults are never raised: they end the exchange with ``ExchangeFailed`` and make the
connection broken.  Causes: ``"budget"`` (``max_header_bytes``, ``max_informational``,
``h1_max_small_chunks``), ``"framing"`` (anything malformed), ``"reset"`` (EOF before
the response was complete, e.g. a ``Content-Length`` lie).  ``receive_data`` and
``receive_eof`` catch any exception at that boundary (one no check foresaw): the
exchange fails as ``"framing"`` and the connection breaks.

Buffering: with a driver that drains ``next_event()`` before each
``receive_data()``, ``buffered_bytes()`` never exceeds ``max_header_bytes`` plus
the bytes of the last read (an incomplete header block or chunk-size line, plus the
events produced from one read).

Connection reuse: the socket is reusable (``can_start()``) only after a complete
response that allows keep-alive and nothing after it.  An aborted exchange, a
protocol error, a cancel, an EOF, bytes the server sends when no exchange is in
flight, or a response that ends the connection make ``is_broken`` true: the driver
closes the socket.
"""

from __future__ import annotations

import enum
import re
from collections import deque
from typing import Final

import httptools

from ..errors import ConnectionFailed, LocalProtocolError, budget_exceeded
from ..http import (
    FIELD_VALUE_CONTROLS,
    FIELD_VALUE_EDGES,
    MAX_CONTENT_LENGTH_DIGITS,
    TOKEN_CHARS,
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    Headers,
    HttpRequest,
    InformationalReceived,
    ResponseEnded,
    ResponseReceived,
    TrailersReceived,
)
from ..limits import Limits
from . import Wire

__all__ = ["H1Connection", "HeadFields"]

# Headers the machine writes itself (or that would change the framing under it).  Not
# the connection-specific set HTTP/2 drops (``http.CONNECTION_FIELDS``), on purpose: on
# HTTP/1.1 a ``Connection`` (``close``) or ``Keep-Alive`` in a request given to this wire
# means what it says, and is sent (the MCP machine drops a caller's own: MACHINE_HEADERS).
_FRAMING_HEADERS = frozenset({b"host", b"content-length", b"transfer-encoding", b"upgrade"})
_METHODS_WITH_BODY = frozenset({b"POST", b"PUT", b"PATCH"})


def _char_class(allowed: bytes) -> bytes:
    """A regex character class matching the bytes ``allowed``, as ranges (letters and
    digits as themselves, other bytes escaped)."""
    out = bytearray(b"[")
    values = sorted(set(allowed))
    start = 0
    for i, value in enumerate(values):
        if i + 1 == len(values) or values[i + 1] != value + 1:
            out += _class_byte(values[start])
            if i > start:
                out += b"-" + _class_byte(value)
            start = i + 1
    return bytes(out + b"]")


def _class_byte(value: int) -> bytes:
    char = bytes((value,))
    return char if char.isalnum() else b"\\x%02x" % value


# The grammar of what we send, as one regex per line, from ``sansmcp.core.http``'s byte
# sets: a name is a token, upper case allowed (HTTP/1.1 names are case-insensitive; h2
# sends lower case); a value is runs of field-vchar -- VCHAR or obs-text, so no control
# byte but HTAB -- joined by SP/HTAB, as h2 checks it.
_TOKEN = _char_class(TOKEN_CHARS) + b"+"
_VCHARS = b"[^" + _char_class(FIELD_VALUE_CONTROLS + FIELD_VALUE_EDGES)[1:]  # field-vchar
_EDGES = _char_class(FIELD_VALUE_EDGES)
_REQUEST_LINE = re.compile(_TOKEN + rb" [\x21-\x7e]+")
_HEADER_LINE = re.compile(
    _TOKEN + b": (?:" + _VCHARS + b"+(?:" + _EDGES + b"+" + _VCHARS + b"+)*)?"
)
# A status line as h11 accepted it (llhttp also takes RTSP/ and ICE/, and NUL, VT or FF
# in the reason); the line end is llhttp's to check.
_STATUS_LINE = re.compile(rb"HTTP/[0-9]\.[0-9] [0-9]{3}(?:[\r\n]| [^\x00\r\n\x0b\x0c]*\r?\n)")
# A chunk-size line as h11 accepted it: 1-20 hex digits, optional extensions, OWS, CRLF.
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\n]*)?[ \t]*\r\n")
# What llhttp is handed for a trailer block: trailers obey the header grammar.
_TRAILER_PREFIX = b"HTTP/1.1 200 OK\r\n"
# At most this many checked request header lines are remembered per socket
_CHECKED_LINES = 64
_MAX_MESSAGE_DETAIL = 200
# A chunk of fewer body bytes than this is "small": each costs a pass through the
# meter, so a response of them is bounded by count (Limits.h1_max_small_chunks), as
# HTTP/2 bounds small DATA frames
_SMALL_CHUNK = 16
_LF = 0x0A
_CR = 0x0D


class _Mode(enum.Enum):
    """Where the meter is in the server's byte stream."""

    HEAD = enum.auto()  # inside a response head (final or 1xx)
    LENGTH = enum.auto()  # a Content-Length body
    CLOSE = enum.auto()  # a body that ends with the connection
    CHUNK_LINE = enum.auto()  # a chunk-size line
    CHUNK_DATA = enum.auto()  # chunk payload
    CHUNK_CRLF = enum.auto()  # the CRLF after a chunk's payload
    TRAILER = enum.auto()  # the trailer block after the last chunk
    DONE = enum.auto()  # no exchange on the wire, or the connection is broken


class _Scan(enum.Enum):
    """How the bytes of a header block seen so far end (to recognise its last byte)."""

    START = enum.auto()  # nothing yet
    START_CR = enum.auto()  # exactly b"\r"
    MID = enum.auto()  # anything else, not ending in b"\n" or b"\n\r"
    LF = enum.auto()  # ends in b"\n"
    LF_CR = enum.auto()  # ends in b"\n\r"


# Members as module constants: on Python 3.11 each ``_Mode.X`` lookup runs the enum
# type's attribute hook (~0.2 us), and the meter looks them up per read.
_M_HEAD: Final = _Mode.HEAD
_M_LENGTH: Final = _Mode.LENGTH
_M_CLOSE: Final = _Mode.CLOSE
_M_CHUNK_LINE: Final = _Mode.CHUNK_LINE
_M_CHUNK_DATA: Final = _Mode.CHUNK_DATA
_M_CHUNK_CRLF: Final = _Mode.CHUNK_CRLF
_M_TRAILER: Final = _Mode.TRAILER
_M_DONE: Final = _Mode.DONE
_S_START: Final = _Scan.START
_S_START_CR: Final = _Scan.START_CR
_S_MID: Final = _Scan.MID
_S_LF: Final = _Scan.LF
_S_LF_CR: Final = _Scan.LF_CR


class HeadFields:
    """What llhttp reports of one header block (its callback interface; the egress
    proxy's ``CONNECT`` answer is read with it too: :mod:`sansmcp.core.net.tunnel`)."""

    __slots__ = ("complete", "fields")

    def __init__(self) -> None:
        self.fields: list[tuple[bytes, bytes]] = []
        self.complete = False

    def on_header(self, name: bytes, value: bytes) -> None:
        # llhttp strips the OWS before a value, not after it (h11 stripped both)
        self.fields.append((name.lower(), value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        self.complete = True


def _header_line(name: bytes, value: bytes) -> tuple[bytes, bool]:
    """The line that sends one caller header, and whether it asks to close; raises
    ``LocalProtocolError`` for a header this machine does not send."""
    lower = name.lower()
    if lower in _FRAMING_HEADERS:
        raise LocalProtocolError(
            f"H1Connection.start: header {name!r} is set by the machine, not the caller"
        )
    line = name + b": " + value + b"\r\n"
    # the final guard: nothing we write holds a CR, LF or NUL of its own (a name
    # without ":" before the first ": " is the whole token)
    if b":" in name or _HEADER_LINE.fullmatch(line, 0, len(line) - 2) is None:
        raise LocalProtocolError(f"H1Connection.start: invalid header {name!r}")
    return line, lower == b"connection" and _has_close(value)


def _detail(text: str) -> str:
    if len(text) > _MAX_MESSAGE_DETAIL:
        text = text[:_MAX_MESSAGE_DETAIL] + "..."
    return text


def _malformed(what: str) -> ConnectionFailed:
    return ConnectionFailed(f"server sent malformed HTTP/1.1: {_detail(what)}", cause="framing")


def _has_close(value: bytes) -> bool:
    """A ``Connection`` value lists the ``close`` option (h11's comma-header reading)."""
    return any(part.strip(b" \t") == b"close" for part in value.lower().split(b","))


class H1Connection:
    """One HTTP/1.1 client connection (one socket), sans I/O.

    After any method returns, the machine is consistent: server faults never raise
    (they become ``ExchangeFailed`` events and ``is_broken``); only driver misuse
    raises ``LocalProtocolError``, and leaves the machine unchanged.
    """

    http_version = "1.1"  # (the Wire's label)

    def __init__(self, *, limits: Limits, now: float) -> None:
        self._limits = limits
        self._max_head = limits.max_header_bytes
        self._outbox = bytearray()
        # each queued event with the bytes it holds and the bytes it is charged
        self._events: deque[tuple[ExchangeEvent, int, int]] = deque()
        self._queued_bytes = 0
        self._exchange: int | None = None  # the exchange in flight on the wire
        self._method = b""
        self._request_close = False  # our request said Connection: close
        self._keep_alive = False  # the response in flight lets the socket be reused
        self._informational = 0
        self._small_chunks = 0
        self._broken = False
        self._closing = False
        self._sink = HeadFields()
        # request lines already checked on this socket (the MCP headers repeat)
        self._host = b""
        self._start_line = b""  # the last request line checked (the MCP ones repeat)
        self._checked: dict[tuple[bytes, bytes], tuple[bytes, bool]] = {}
        # the meter
        self._mode = _M_DONE
        self._scan = _S_START
        self._block = 0  # bytes of the current header block so far
        self._head = bytearray()  # those bytes, when the block spans reads
        self._line = bytearray()  # the current chunk-size line (bounded by max_header_bytes)
        self._body_left = 0  # Content-Length bytes still to come
        self._received_body = 0  # Content-Length bytes received (for the EOF message)
        self._chunk_left = 0
        self._small = False  # the chunk being read is small
        self._crlf_seen = 0
        self._overhead = 0  # framing bytes metered and not yet attached to an event
        # the accounting: bytes received = charged to events + unowned + unsettled
        self._received = 0
        self._delivered = 0  # charged bytes of the events handed out
        self._unowned = 0
        self._ex_fed = 0  # bytes of the exchange in flight the meter took
        self._ex_charged = 0  # bytes its queued events carry

    # ------------------------------------------------------------------ state

    @property
    def is_broken(self) -> bool:
        """The socket must be closed and never reused."""
        return self._broken or (self._closing and self._exchange is None)

    @property
    def is_idle(self) -> bool:
        """No exchange in flight."""
        return self._exchange is None

    @property
    def active_exchanges(self) -> int:
        return 0 if self._exchange is None else 1

    def can_start(self) -> bool:
        """Not broken or closing, no exchange in flight, and keep-alive still allowed."""
        return not self._broken and not self._closing and self._exchange is None

    def buffered_bytes(self) -> int:
        """Bytes held inside the machine: an incomplete header block or chunk-size line
        plus the payload and head sizes of queued events."""
        held = 0
        if self._mode is _M_HEAD or self._mode is _M_TRAILER:
            held = self._block
        elif self._mode is _M_CHUNK_LINE:
            held = len(self._line)
        return held + self._queued_bytes + len(self._outbox)

    # ---------------------------------------------------------------- driving

    def start(self, exchange_id: int, request: HttpRequest, *, now: float) -> None:
        """Serialise ``request`` (adding ``Host`` and ``Content-Length``) into the outbox.

        Raises ``LocalProtocolError`` (and changes nothing) if ``can_start()`` is false,
        or if the request is not one this machine sends: a ``CONNECT``, a method, target
        or header outside the grammar, or ``Host`` / ``Content-Length`` /
        ``Transfer-Encoding`` / ``Upgrade`` given by the caller.
        """
        if not self.can_start():
            raise LocalProtocolError("H1Connection.start: connection cannot start an exchange")
        if request.method == b"CONNECT":
            raise LocalProtocolError("H1Connection.start: CONNECT is not supported")
        start_line = request.method + b" " + request.target
        if start_line != self._start_line:
            if _REQUEST_LINE.fullmatch(start_line) is None:
                raise LocalProtocolError(f"H1Connection.start: invalid request line {start_line!r}")
            self._start_line = start_line
        host = b"Host: " + request.authority + b"\r\n"
        if host != self._host:
            if _HEADER_LINE.fullmatch(host, 0, len(host) - 2) is None:
                raise LocalProtocolError(f"H1Connection.start: invalid Host {request.authority!r}")
            self._host = host
        lines = [start_line + b" HTTP/1.1\r\n", host]
        close = False
        checked = self._checked
        for header in request.headers:
            known = checked.get(header)
            if known is None:
                known = _header_line(*header)
                if len(checked) >= _CHECKED_LINES:
                    checked.clear()
                checked[header] = known
            lines.append(known[0])
            close = close or known[1]
        if request.body or request.method in _METHODS_WITH_BODY:
            lines.append(b"Content-Length: %d\r\n" % len(request.body))
        lines.append(b"\r\n")
        self._outbox += b"".join(lines)
        self._outbox += request.body
        self._exchange = exchange_id
        self._method = request.method
        self._request_close = close
        self._informational = 0
        self._small_chunks = 0
        self._ex_fed = self._ex_charged = 0
        self._reset_meter()

    def cancel(self, exchange_id: int, *, now: float) -> None:
        """No further events for ``exchange_id``.  If it is still in flight on the wire,
        the connection becomes broken (the driver closes the socket)."""
        if self._events:
            kept = deque(q for q in self._events if q[0].exchange_id != exchange_id)
            dropped = sum(q[2] for q in self._events if q[0].exchange_id == exchange_id)
            self._unowned += dropped  # nobody will be charged for these now
            self._events = kept
            self._queued_bytes = sum(q[1] for q in kept)
        if exchange_id == self._exchange:
            self._exchange = None
            self._break()

    def close(self, *, now: float) -> None:
        """No more starts.  An exchange in flight may finish; then ``is_broken`` is true."""
        self._closing = True

    def data_to_send(self) -> bytes:
        if not self._outbox:
            return b""  # after every read: the outbox is filled only by start()
        out = bytes(self._outbox)
        self._outbox.clear()
        return out

    def next_event(self) -> ExchangeEvent | None:
        if not self._events:
            return None
        event, held, charged = self._events.popleft()
        self._queued_bytes -= held
        self._delivered += charged
        return event

    def receive_data(self, data: bytes, *, now: float) -> None:
        """Feed bytes read from the socket.  Never raises for server faults."""
        self._received += len(data)
        try:
            self._receive(data)
        except Exception as exc:  # the boundary: nothing the server sends may escape
            self._crash(exc)

    def receive_eof(self, *, now: float) -> None:
        """The server closed its side.  The connection is broken from now on; an
        exchange in flight ends (a read-until-close body) or fails with cause "reset"."""
        try:
            self._receive_eof()
        except Exception as exc:  # the boundary: nothing the server sends may escape
            self._crash(exc)

    def abort(self, error: ConnectionFailed) -> None:
        """Give up on the socket (the driver's last resort when its reader hits a fault):
        the exchange in flight fails with ``error``."""
        self._fail(error)

    @property
    def unowned_bytes(self) -> int:
        """Bytes received that no exchange was charged for: bytes while no exchange is in
        flight, after a response, after a failure, and what a failed or cancelled exchange
        had received without an event carrying it.  Any such byte also breaks the
        connection, so ``Limits.max_unowned_bytes_per_socket`` cannot be reached on a
        socket still in use."""
        return self._unowned

    @property
    def unsettled_bytes(self) -> int:
        """Bytes of the exchange in flight that no event carries yet (an incomplete head,
        chunk framing not yet attached to a ``DataReceived``)."""
        return self._ex_fed - self._ex_charged

    # -------------------------------------------------------------- internals

    def _receive(self, data: bytes) -> None:
        if not data:
            return
        if self._broken:
            self._unowned += len(data)
            return
        if self._exchange is None:
            # Nothing was asked: unsolicited bytes make the connection unusable.
            self._unowned += len(data)
            self._break()
            return
        pos = 0
        size = len(data)
        while pos < size and self._exchange is not None:
            pos = self._meter(data, pos)
        if pos < size:
            self._unowned += size - pos  # after the response's end, or after a failure
            if not self._broken:
                self._break()  # bytes after the end of the response

    def _receive_eof(self) -> None:
        if self._broken:
            return
        exchange = self._exchange
        if exchange is not None:
            if self._mode is _M_CLOSE:
                self._queue(ResponseEnded(exchange_id=exchange))
                self._exchange = None
            else:
                if self._mode is _M_LENGTH:
                    got = self._received_body
                    detail = f" (received {got} bytes, expected {got + self._body_left})"
                elif self._mode is _M_HEAD:
                    detail = ""
                else:
                    detail = " (in the chunked body)"
                self._fail(
                    ConnectionFailed(
                        f"server closed the connection before the response was complete{detail}",
                        cause="reset",
                    )
                )
        self._break()

    def _crash(self, exc: Exception) -> None:
        """A fault that got past every check (an llhttp bug, an unforeseen input): the
        exchange in flight fails as a framing fault and the connection is done."""
        self._fail(
            ConnectionFailed(
                "server input broke the HTTP/1.1 machine "
                f"({type(exc).__name__}: {_detail(str(exc))})",
                cause="framing",
            )
        )
        queued = sum(q[2] for q in self._events)
        self._unowned = self._received - self._delivered - queued
        self._ex_fed = self._ex_charged

    def _reset_meter(self) -> None:
        self._mode = _M_HEAD
        self._scan = _S_START
        self._block = 0
        self._head.clear()
        self._line.clear()
        self._overhead = 0

    def _orphan(self) -> None:
        """Bytes received for the exchange that no event carries are nobody's now."""
        self._unowned += self._ex_fed - self._ex_charged
        self._ex_fed = self._ex_charged

    def _break(self) -> None:
        self._orphan()
        self._broken = True
        self._head = bytearray()
        self._line = bytearray()
        self._mode = _M_DONE

    def _queue(self, event: ExchangeEvent, held: int = 0, charged: int = 0) -> None:
        """Queue ``event``, holding ``held`` bytes (``buffered_bytes``: body bytes without
        their framing, or a head's size) and charged ``charged`` (``charged_bytes``)."""
        self._events.append((event, held, charged))
        self._queued_bytes += held
        self._ex_charged += charged

    def _fail(self, error: ConnectionFailed) -> None:
        if self._exchange is not None:
            self._orphan()
            self._queue(ExchangeFailed(exchange_id=self._exchange, error=error))
            self._exchange = None
        self._break()

    def _end(self, exchange: int) -> None:
        """The response is complete: queue its end; keep the socket if it may be reused."""
        if self._overhead:
            self._body(exchange, b"")
        self._queue(ResponseEnded(exchange_id=exchange))
        self._exchange = None
        if self._keep_alive:
            self._mode = _M_DONE
        else:
            self._break()

    def _body(self, exchange: int, data: bytes) -> None:
        size = len(data)
        event = DataReceived(exchange_id=exchange, data=data, overhead=self._overhead)
        self._queue(event, size, size + self._overhead)
        self._overhead = 0

    def _meter(self, data: bytes, pos: int) -> int:
        """Take what the current mode takes of ``data[pos:]``; return the new position."""
        mode = self._mode
        size = len(data)
        exchange = self._exchange
        assert exchange is not None
        if mode is _M_LENGTH:
            take = min(self._body_left, size - pos)
            end = pos + take
            self._body_left -= take
            self._received_body += take
            self._ex_fed += take
            self._body(exchange, data[pos:end] if pos or end != size else data)
            if not self._body_left:
                self._end(exchange)
            return end
        if mode is _M_HEAD or mode is _M_TRAILER:
            return self._meter_block(data, pos, exchange)
        if mode is _M_CHUNK_DATA:
            take = min(self._chunk_left, size - pos)
            end = pos + take
            self._chunk_left -= take
            self._ex_fed += take
            if not self._chunk_left:
                self._mode = _M_CHUNK_CRLF
                self._crlf_seen = 0
                if self._small:
                    self._small_chunks += 1
                    limit = self._limits.h1_max_small_chunks
                    if self._small_chunks > limit:
                        self._fail(
                            budget_exceeded(
                                f"server sent more than {limit:,} chunks of under "
                                f"{_SMALL_CHUNK} bytes in one response "
                                "(Limits.h1_max_small_chunks)",
                                bound="h1_max_small_chunks",
                                limit=limit,
                                observed=self._small_chunks,
                            )
                        )
                        return end
            self._body(exchange, data[pos:end])
            return end
        if mode is _M_CHUNK_LINE:
            return self._meter_chunk_line(data, pos, exchange)
        if mode is _M_CHUNK_CRLF:
            i = pos
            while i < size and self._crlf_seen < 2:
                byte = data[i]
                i += 1
                if byte != b"\r\n"[self._crlf_seen]:
                    self._ex_fed += i - pos
                    self._fail(_malformed("a chunk's data is not followed by CRLF"))
                    return i
                self._crlf_seen += 1
            if self._crlf_seen == 2:
                self._mode = _M_CHUNK_LINE
            self._overhead += i - pos
            self._ex_fed += i - pos
            return i
        # CLOSE (DONE never reaches here: no exchange is on the wire then)
        self._ex_fed += size - pos
        self._body(exchange, data[pos:] if pos else data)
        return size

    def _meter_block(self, data: bytes, pos: int, exchange: int) -> int:
        """A header block: count it, bound it, hand it to llhttp once complete."""
        mode = self._mode
        size = len(data)
        stop = min(size, pos + self._max_head - self._block)
        end, done = self._scan_block(data, pos, stop)
        self._block += end - pos
        self._ex_fed += end - pos
        if not done:
            if stop < size:
                what = "header" if mode is _M_HEAD else "trailer"
                self._fail(
                    budget_exceeded(
                        f"server sent a {what} block of more than {self._max_head:,} bytes"
                        " (Limits.max_header_bytes)",
                        bound="max_header_bytes",
                        limit=self._max_head,
                        observed=self._max_head + 1,
                    )
                )
            else:
                self._head += data[pos:end]
            return end
        if self._head:
            self._head += data[pos:end]
            block = bytes(self._head)
            self._head.clear()
        else:
            block = data[pos:end]
        self._block = 0
        self._scan = _S_START
        if mode is _M_HEAD:
            self._on_head(block, exchange)
        else:
            self._on_trailers(block, exchange)
        return end

    def _meter_chunk_line(self, data: bytes, pos: int, exchange: int) -> int:
        size = len(data)
        stop = min(size, pos + self._max_head - len(self._line))
        if self._line and self._line[-1] == _CR and pos < stop and data[pos] == _LF:
            end = pos + 1
        else:
            found = data.find(b"\r\n", pos, stop)
            end = -1 if found < 0 else found + 2
        if end < 0:
            if stop < size:
                self._fail(
                    budget_exceeded(
                        f"server sent a chunk-size line of more than {self._max_head:,} bytes"
                        " (Limits.max_header_bytes)",
                        bound="max_header_bytes",
                        limit=self._max_head,
                        observed=self._max_head + 1,
                    )
                )
                return pos
            self._line += data[pos:stop]
            self._overhead += stop - pos
            self._ex_fed += stop - pos
            return stop
        self._overhead += end - pos
        self._ex_fed += end - pos
        if self._line:
            self._line += data[pos:end]
            line = bytes(self._line)
            self._line.clear()
            match = _CHUNK_LINE.fullmatch(line)
        else:
            match = _CHUNK_LINE.fullmatch(data, pos, end)
            line = data[pos:end]
        if match is None:
            self._fail(_malformed(f"bad chunk-size line {line!r}"))
            return end
        self._chunk_left = int(match.group(1), 16)
        if self._chunk_left:
            self._small = self._chunk_left < _SMALL_CHUNK
            self._mode = _M_CHUNK_DATA
        else:
            self._mode = _M_TRAILER
        return end

    def _scan_block(self, data: bytes, pos: int, stop: int) -> tuple[int, bool]:
        """Advance the block scan over ``data[pos:stop]``; return (end, block complete).

        The end of a block is recognised as h11 recognised it: the block is exactly
        b"\\n" or b"\\r\\n", or it ends at the first b"\\n\\r?\\n".  Each byte is looked
        at once (``find`` skips to the next b"\\n").  A block that starts in this read
        with neither CR nor LF ends at the first b"\\n\\n" or b"\\n\\r\\n": two
        ``find`` calls, when it is complete here (the usual head).
        """
        state = self._scan
        if state is _S_START and pos < stop and data[pos] != _LF and data[pos] != _CR:
            crlf = data.find(b"\n\r\n", pos, stop)
            lf = data.find(b"\n\n", pos, stop if crlf < 0 else crlf + 1)
            if lf >= 0:
                return lf + 2, True
            if crlf >= 0:
                return crlf + 3, True
        i = pos
        while i < stop:
            if state is _S_MID:
                j = data.find(b"\n", i, stop)
                if j < 0:
                    i = stop
                    break
                i = j + 1
                state = _S_LF
                continue
            byte = data[i]
            i += 1
            if byte == _LF:
                self._scan = state
                return i, True
            if byte == _CR and state is _S_START:
                state = _S_START_CR
            elif byte == _CR and state is _S_LF:
                state = _S_LF_CR
            else:
                state = _S_MID
        self._scan = state
        return i, False

    def _parse(self, block: bytes) -> list[tuple[bytes, bytes]] | None:
        """llhttp's reading of one complete header block (its fields), or None after
        failing the exchange.  Also holds the field rules h11 had and llhttp lacks."""
        sink = self._sink
        fields: list[tuple[bytes, bytes]] = []
        sink.fields = fields
        sink.complete = False
        parser = httptools.HttpResponseParser(sink)
        parser.set_dangerous_leniencies(lenient_optional_cr_before_lf=True)
        try:
            parser.feed_data(block)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(_malformed(f"{str(exc) or type(exc).__name__} in {block!r}"))
            return None
        if not sink.complete:  # pragma: no cover - the meter ends a block where llhttp does
            self._fail(_malformed(f"an incomplete header block {block!r}"))
            return None
        chunked = False
        for i, (name, value) in enumerate(fields):
            if name == b"transfer-encoding":
                if chunked or value.lower() != b"chunked":
                    self._fail(_malformed(f"Transfer-Encoding other than one 'chunked': {value!r}"))
                    return None
                chunked = True
                fields[i] = (name, b"chunked")  # as h11 reported it
            elif name == b"content-length" and len(value) > MAX_CONTENT_LENGTH_DIGITS:
                self._fail(_malformed(f"a Content-Length of {len(value)} digits"))
                return None
        return fields

    def _on_head(self, block: bytes, exchange: int) -> None:
        if _STATUS_LINE.match(block) is None:
            self._fail(_malformed(f"illegal status line in {block!r}"))
            return
        status = int(block[9:12])
        if status < 100 or status == 101:  # (before llhttp, which pauses on any 101)
            self._fail(_malformed(f"status {status} (no protocol switch was asked)"))
            return
        fields = self._parse(block)
        if fields is None:
            return
        headers = tuple(fields)
        if status >= 200:
            self._on_final(block, exchange, status, headers)
            return
        self._informational += 1
        limit = self._limits.max_informational
        if self._informational > limit:
            self._fail(
                budget_exceeded(
                    f"server sent more than {limit:,} informational (1xx) "
                    "responses (Limits.max_informational)",
                    bound="max_informational",
                    limit=limit,
                    observed=self._informational,
                )
            )
            return
        size = len(block)
        self._queue(
            InformationalReceived(
                exchange_id=exchange, status=status, headers=headers, raw_size=size
            ),
            size,
            size,
        )
        self._mode = _M_HEAD

    def _on_final(self, block: bytes, exchange: int, status: int, headers: Headers) -> None:
        version = block[5:8]
        size = len(block)
        self._queue(
            ResponseReceived(
                exchange_id=exchange,
                status=status,
                headers=headers,
                raw_size=size,
                http_version=version,
            ),
            size,
            size,
        )
        length: bytes | None = None
        chunked = close = False
        for name, value in headers:
            if name == b"content-length":
                length = value
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"connection" and _has_close(value):
                close = True
        self._keep_alive = not (close or self._request_close or version < b"1.1")
        if status == 204 or status == 304 or self._method == b"HEAD":
            self._end(exchange)
        elif chunked:
            self._mode = _M_CHUNK_LINE
        elif length is not None:
            self._body_left = int(length)
            self._received_body = 0
            if self._body_left:
                self._mode = _M_LENGTH
            else:
                self._end(exchange)
        else:
            self._keep_alive = False
            self._mode = _M_CLOSE

    def _on_trailers(self, block: bytes, exchange: int) -> None:
        if block == b"\r\n" or block == b"\n":
            self._overhead += len(block)  # the empty trailer block: framing
            self._end(exchange)
            return
        fields = self._parse(_TRAILER_PREFIX + block)
        if fields is None:
            return
        # the framing before the trailers (at least the last-chunk line) comes first
        self._body(exchange, b"")
        size = len(block)
        self._queue(
            TrailersReceived(exchange_id=exchange, headers=tuple(fields), raw_size=size), size, size
        )
        self._end(exchange)


_WIRE: type[Wire] = H1Connection  # mypy checks the machine against the Wire protocol
