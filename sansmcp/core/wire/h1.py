"""The HTTP/1.1 client connection machine: h11, with header blocks counted before parsing.

(Why over 600 lines: one machine whose meter -- a mirror of h11's framing -- and whose
translation of h11's events share one exchange's state and one byte ledger; split, each
half would reach into the other's fields.  A tenth of it is this docstring.)

Theory of operation
-------------------
:class:`H1Connection` wraps one ``h11.Connection`` (client role) for one socket.
``start()`` serialises a complete :class:`~sansmcp.core.http.HttpRequest` into
``data_to_send()``; ``receive_data()`` / ``receive_eof()`` turn the server's bytes
into :data:`~sansmcp.core.http.ExchangeEvent` values, taken one at a time with
``next_event()``.  One exchange at a time: no pipelining.

Every byte the server sends passes through a small *meter* before h11 sees it.
The meter knows just enough framing to find where each header block starts and
ends -- the final head, every 1xx head, and chunked trailers -- and recognises
the end of a block exactly as h11 does (``\\n\\r?\\n``, and a block that *is*
only ``\\n`` or ``\\r\\n``).  So it can

* report ``raw_size``, the bytes of the block as they were on the wire, and
* fail the exchange (``ConnectionFailed``, cause ``"budget"``, bound
  ``"max_header_bytes"``) the moment byte ``max_header_bytes + 1`` of one block
  arrives, however the bytes are split, without handing that byte to h11.

Inside a chunked body the meter follows chunk-size lines (bounded by
``max_header_bytes`` too), chunk data and the CRLF after each chunk; any other body
passes straight through.  h11 stays the parser: it validates every head, line and
body, and its ``max_incomplete_event_size`` is raised above our bound so that ours is
the one that binds.  Body bytes are reported as they arrive, never accumulated.

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
``h1_max_small_chunks``), ``"framing"`` (anything h11 rejects), ``"reset"`` (EOF before
the response was complete, e.g. a ``Content-Length`` lie).  ``receive_data``
and ``receive_eof`` catch any exception at that boundary (one no check foresaw): the
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
from collections.abc import Iterable

import h11

from ..errors import ConnectionFailed, LocalProtocolError, budget_exceeded
from ..http import (
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    Headers,
    HttpRequest,
    InformationalReceived,
    ResponseEnded,
    ResponseReceived,
    TrailersReceived,
    charged_bytes,
)
from ..limits import Limits
from . import Wire

__all__ = ["H1Connection"]

# Headers the machine writes itself (or that would change the framing under it).
_FRAMING_HEADERS = frozenset({b"host", b"content-length", b"transfer-encoding", b"upgrade"})
_METHODS_WITH_BODY = frozenset({b"POST", b"PUT", b"PATCH"})
# A chunk-size line as h11 accepts it: 1-20 hex digits, optional extensions, OWS, CRLF.
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;[^\n]*)?[ \t]*\r\n")
_MAX_MESSAGE_DETAIL = 200
# A chunk of fewer body bytes than this is "small": each costs an h11 event and a pass
# through the meter, so a response of them is bounded by count (Limits.h1_max_small_chunks),
# as HTTP/2 bounds small DATA frames
_SMALL_CHUNK = 16
_LF = 0x0A
_CR = 0x0D


class _Mode(enum.Enum):
    """Where the meter is in the server's byte stream."""

    HEAD = enum.auto()  # inside a response head (final or 1xx)
    AWAIT = enum.auto()  # a head is complete; h11 must parse it before we know the framing
    PASS = enum.auto()  # a non-chunked body, or after the trailers: h11 alone
    CHUNK_LINE = enum.auto()  # a chunk-size line
    CHUNK_DATA = enum.auto()  # chunk payload
    CHUNK_CRLF = enum.auto()  # the CRLF after a chunk's payload
    TRAILER = enum.auto()  # the trailer block after the last chunk
    LOST = enum.auto()  # the meter saw malformed framing; h11 must reject it


class _Scan(enum.Enum):
    """How the bytes of a header block seen so far end (to recognise its last byte)."""

    START = enum.auto()  # nothing yet
    START_CR = enum.auto()  # exactly b"\r"
    MID = enum.auto()  # anything else, not ending in b"\n" or b"\n\r"
    LF = enum.auto()  # ends in b"\n"
    LF_CR = enum.auto()  # ends in b"\n\r"


def _detail(exc: Exception) -> str:
    text = str(exc)
    if len(text) > _MAX_MESSAGE_DETAIL:
        text = text[:_MAX_MESSAGE_DETAIL] + "..."
    return text


def _headers(h11_headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    return tuple((bytes(name), bytes(value)) for name, value in h11_headers)


class H1Connection:
    """One HTTP/1.1 client connection (one socket), sans I/O.

    After any method returns, the machine is consistent: server faults never raise
    (they become ``ExchangeFailed`` events and ``is_broken``); only driver misuse
    raises ``LocalProtocolError``, and leaves the machine unchanged.
    """

    def __init__(self, *, limits: Limits, now: float) -> None:
        self._limits = limits
        self._max_head = limits.max_header_bytes
        self._h11: h11.Connection | None = h11.Connection(
            h11.CLIENT, max_incomplete_event_size=2 * limits.max_header_bytes + 1024
        )
        self._outbox = bytearray()
        self._events: deque[ExchangeEvent] = deque()
        self._queued_bytes = 0
        self._exchange: int | None = None  # the exchange in flight on the wire
        self._method = b""
        self._informational = 0
        self._small_chunks = 0
        self._chunk_size = 0  # body bytes of the chunk being read
        self._broken = False
        self._closing = False
        self._eof = False
        # the meter
        self._mode = _Mode.HEAD
        self._scan = _Scan.START
        self._block = 0  # bytes of the current header block so far
        self._block_size = 0  # size of the last complete header block
        self._line = bytearray()  # the current chunk-size line (bounded by max_header_bytes)
        self._chunk_left = 0
        self._crlf_seen = 0
        self._chunked = False  # the response in flight has a chunked body
        self._overhead = 0  # framing bytes metered and not yet attached to an event
        # the accounting: bytes received = charged to events + unowned + unsettled
        self._received = 0
        self._delivered = 0  # charged bytes of the events handed out
        self._unowned = 0
        self._ex_fed = 0  # bytes of the exchange in flight handed to h11
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
        return (
            not self._broken
            and not self._closing
            and self._exchange is None
            and self._h11 is not None
            and self._h11.our_state is h11.IDLE
            and self._h11.their_state is h11.IDLE
        )

    def buffered_bytes(self) -> int:
        """Bytes held inside the machine: an incomplete header block or chunk-size line
        (exactly what h11 holds unparsed) plus the payload and head sizes of queued events."""
        held = 0
        if self._mode in (_Mode.HEAD, _Mode.TRAILER):
            held = self._block
        elif self._mode is _Mode.CHUNK_LINE:
            held = len(self._line)
        return held + self._queued_bytes + len(self._outbox)

    # ---------------------------------------------------------------- driving

    def start(self, exchange_id: int, request: HttpRequest, *, now: float) -> None:
        """Serialise ``request`` (adding ``Host`` and ``Content-Length``) into the outbox.

        Raises ``LocalProtocolError`` (and changes nothing) if ``can_start()`` is false,
        or if the request is not one this machine sends: a ``CONNECT``, headers h11
        rejects, or ``Host`` / ``Content-Length`` / ``Transfer-Encoding`` / ``Upgrade``
        given by the caller.
        """
        if not self.can_start():
            raise LocalProtocolError("H1Connection.start: connection cannot start an exchange")
        assert self._h11 is not None
        if request.method == b"CONNECT":
            raise LocalProtocolError("H1Connection.start: CONNECT is not supported")
        for name, _ in request.headers:
            if name.lower() in _FRAMING_HEADERS:
                raise LocalProtocolError(
                    f"H1Connection.start: header {name!r} is set by the machine, not the caller"
                )
        headers: list[tuple[bytes, bytes]] = [(b"Host", request.authority)]
        headers.extend(request.headers)
        if request.body or request.method in _METHODS_WITH_BODY:
            headers.append((b"Content-Length", str(len(request.body)).encode("ascii")))
        try:
            head = h11.Request(method=request.method, target=request.target, headers=headers)
        except h11.LocalProtocolError as exc:
            raise LocalProtocolError(f"H1Connection.start: invalid request: {exc}") from None
        events: list[h11.Event] = [head]
        if request.body:
            events.append(h11.Data(data=request.body))
        events.append(h11.EndOfMessage())
        for event in events:
            self._outbox += self._h11.send(event) or b""
        self._exchange = exchange_id
        self._method = request.method
        self._informational = 0
        self._small_chunks = self._chunk_size = 0
        self._ex_fed = self._ex_charged = 0
        self._reset_meter()

    def cancel(self, exchange_id: int, *, now: float) -> None:
        """No further events for ``exchange_id``.  If it is still in flight on the wire,
        the connection becomes broken (the driver closes the socket)."""
        if self._events:
            kept = deque(e for e in self._events if e.exchange_id != exchange_id)
            dropped = sum(charged_bytes(e) for e in self._events if e.exchange_id == exchange_id)
            self._unowned += dropped  # nobody will be charged for these now
            self._events = kept
            self._queued_bytes = sum(_held(e) for e in kept)
        if exchange_id == self._exchange:
            self._exchange = None
            self._break()

    def close(self, *, now: float) -> None:
        """No more starts.  An exchange in flight may finish; then ``is_broken`` is true."""
        self._closing = True

    def data_to_send(self) -> bytes:
        out = bytes(self._outbox)
        self._outbox.clear()
        return out

    def next_event(self) -> ExchangeEvent | None:
        if not self._events:
            return None
        event = self._events.popleft()
        self._queued_bytes -= _held(event)
        self._delivered += charged_bytes(event)
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
            step, error = self._meter(data, pos)
            if error is not None:
                self._fail(error)
                break
            assert self._h11 is not None
            self._h11.receive_data(data[pos : pos + step])
            self._ex_fed += step
            pos += step
            self._pump()
            lost = self._mode is _Mode.AWAIT or self._mode is _Mode.LOST
            if lost and self._exchange is not None:  # pragma: no cover - meter mirrors h11
                # h11 accepted what the meter could not follow: the meter mirrors h11
                # 0.14-0.16 exactly, so this is defensive -- fail closed, never miscount.
                self._fail(
                    ConnectionFailed("server sent malformed HTTP/1.1 framing", cause="framing")
                )
                break
        if pos < size:
            self._unowned += size - pos  # after the response's end, or after a failure
            if not self._broken:
                self._break()  # bytes after the end of the response

    def _receive_eof(self) -> None:
        if self._broken:
            return
        self._eof = True
        if self._exchange is not None:
            assert self._h11 is not None
            self._h11.receive_data(b"")
            self._pump()
            if self._exchange is not None:  # pragma: no cover - h11 ends or raises on EOF
                # h11 raises or ends the message on EOF; defensive, fail closed.
                self._fail(
                    ConnectionFailed(
                        "server closed the connection before the response was complete",
                        cause="reset",
                    )
                )
        self._break()

    def _crash(self, exc: Exception) -> None:
        """A fault that got past every check (an h11 bug, an unforeseen input): the
        exchange in flight fails as a framing fault and the connection is done."""
        self._fail(
            ConnectionFailed(
                f"server input broke the HTTP/1.1 machine ({type(exc).__name__}: {_detail(exc)})",
                cause="framing",
            )
        )
        queued = sum(charged_bytes(event) for event in self._events)
        self._unowned = self._received - self._delivered - queued
        self._ex_fed = self._ex_charged

    # -------------------------------------------------------------- internals

    def _reset_meter(self) -> None:
        self._mode = _Mode.HEAD
        self._scan = _Scan.START
        self._block = 0
        self._line.clear()
        self._chunked = False
        self._overhead = 0

    def _orphan(self) -> None:
        """Bytes received for the exchange that no event carries are nobody's now."""
        self._unowned += self._ex_fed - self._ex_charged
        self._ex_fed = self._ex_charged

    def _break(self) -> None:
        self._orphan()
        self._broken = True
        self._h11 = None  # drops whatever h11 held
        self._line = bytearray()
        self._mode = _Mode.PASS

    def _queue(self, event: ExchangeEvent) -> None:
        self._events.append(event)
        self._queued_bytes += _held(event)
        self._ex_charged += charged_bytes(event)

    def _fail(self, error: ConnectionFailed) -> None:
        if self._exchange is not None:
            self._orphan()
            self._queue(ExchangeFailed(exchange_id=self._exchange, error=error))
            self._exchange = None
        self._break()

    def _meter(self, data: bytes, pos: int) -> tuple[int, ConnectionFailed | None]:
        """How many bytes from ``pos`` to hand h11 now, or the bound they break."""
        mode = self._mode
        size = len(data)
        if mode is _Mode.HEAD or mode is _Mode.TRAILER:
            stop = min(size, pos + self._max_head - self._block)
            end, done = self._scan_block(data, pos, stop)
            self._block += end - pos
            if done:
                self._block_size = self._block
                self._block = 0
                self._scan = _Scan.START
                self._mode = _Mode.AWAIT if mode is _Mode.HEAD else _Mode.PASS
            elif stop < size:
                what = "header" if mode is _Mode.HEAD else "trailer"
                return 0, budget_exceeded(
                    f"server sent a {what} block of more than {self._max_head:,} bytes"
                    " (Limits.max_header_bytes)",
                    bound="max_header_bytes",
                    limit=self._max_head,
                    observed=self._max_head + 1,
                )
            return end - pos, None
        if mode is _Mode.CHUNK_LINE:
            return self._meter_chunk_line(data, pos)
        if mode is _Mode.CHUNK_DATA:
            take = min(self._chunk_left, size - pos)
            self._chunk_left -= take
            if not self._chunk_left:
                self._mode = _Mode.CHUNK_CRLF
                self._crlf_seen = 0
            return take, None
        if mode is _Mode.CHUNK_CRLF:
            taken = 0
            while pos + taken < size and self._crlf_seen < 2:
                byte = data[pos + taken]
                taken += 1
                if byte != b"\r\n"[self._crlf_seen]:
                    self._mode = _Mode.LOST
                    break
                self._crlf_seen += 1
            if self._crlf_seen == 2:
                self._mode = _Mode.CHUNK_LINE
            self._overhead += taken
            return taken, None
        # PASS (and LOST, AWAIT: h11 decides)
        return size - pos, None

    def _meter_chunk_line(self, data: bytes, pos: int) -> tuple[int, ConnectionFailed | None]:
        size = len(data)
        stop = min(size, pos + self._max_head - len(self._line))
        if self._line and self._line[-1] == _CR and pos < stop and data[pos] == _LF:
            end = pos + 1
        else:
            found = data.find(b"\r\n", pos, stop)
            end = -1 if found < 0 else found + 2
        if end < 0:
            if stop < size:
                return 0, budget_exceeded(
                    f"server sent a chunk-size line of more than {self._max_head:,} bytes"
                    " (Limits.max_header_bytes)",
                    bound="max_header_bytes",
                    limit=self._max_head,
                    observed=self._max_head + 1,
                )
            self._line += data[pos:stop]
            self._overhead += stop - pos
            return stop - pos, None
        self._line += data[pos:end]
        self._overhead += end - pos
        match = _CHUNK_LINE.fullmatch(bytes(self._line))
        self._line.clear()
        if match is None:
            self._mode = _Mode.LOST
        else:
            self._chunk_left = int(match.group(1), 16)
            if self._chunk_left:
                self._mode = _Mode.CHUNK_DATA
            else:
                self._mode = _Mode.TRAILER
                self._scan = _Scan.START
                self._block = 0
        return end - pos, None

    def _scan_block(self, data: bytes, pos: int, stop: int) -> tuple[int, bool]:
        """Advance the block scan over ``data[pos:stop]``; return (end, block complete).

        The end of a block is recognised as h11 recognises it: the block is exactly
        b"\\n" or b"\\r\\n", or it ends at the first b"\\n\\r?\\n".  Each byte is looked
        at once (``find`` skips to the next b"\\n").
        """
        state = self._scan
        i = pos
        while i < stop:
            if state is _Scan.MID:
                j = data.find(b"\n", i, stop)
                if j < 0:
                    i = stop
                    break
                i = j + 1
                state = _Scan.LF
                continue
            byte = data[i]
            i += 1
            if byte == _LF:
                self._scan = state
                return i, True
            if byte == _CR and state is _Scan.START:
                state = _Scan.START_CR
            elif byte == _CR and state is _Scan.LF:
                state = _Scan.LF_CR
            else:
                state = _Scan.MID
        self._scan = state
        return i, False

    def _pump(self) -> None:
        """Take h11's events until it needs data; translate them."""
        conn = self._h11
        assert conn is not None
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._on_h11_error(exc)
                return
            if event is h11.NEED_DATA:
                break
            exchange = self._exchange
            # the most frequent event first: this runs once per body chunk
            match event:
                case h11.Data():
                    assert exchange is not None
                    # (h11's chunk_start depends on how the bytes were split; chunk_end
                    # does not)
                    self._chunk_size += len(event.data)
                    small = event.chunk_end and self._chunk_size < _SMALL_CHUNK
                    if event.chunk_end:
                        self._chunk_size = 0
                    if small:
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
                            return
                    self._queue(
                        DataReceived(
                            exchange_id=exchange, data=bytes(event.data), overhead=self._overhead
                        )
                    )
                    self._overhead = 0
                case h11.Response():
                    assert exchange is not None and self._mode is _Mode.AWAIT
                    headers = _headers(event.headers)
                    self._queue(
                        ResponseReceived(
                            exchange_id=exchange,
                            status=event.status_code,
                            headers=headers,
                            raw_size=self._block_size,
                            http_version=bytes(event.http_version),
                        )
                    )
                    chunked = (
                        event.status_code not in (204, 304)
                        and self._method != b"HEAD"
                        and any(name == b"transfer-encoding" for name, _ in headers)
                    )
                    self._chunked = chunked
                    self._mode = _Mode.CHUNK_LINE if chunked else _Mode.PASS
                case h11.InformationalResponse():
                    assert exchange is not None and self._mode is _Mode.AWAIT
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
                    self._queue(
                        InformationalReceived(
                            exchange_id=exchange,
                            status=event.status_code,
                            headers=_headers(event.headers),
                            raw_size=self._block_size,
                        )
                    )
                    self._mode = _Mode.HEAD
                case h11.EndOfMessage():
                    assert exchange is not None
                    if self._chunked and not event.headers:
                        self._overhead += self._block_size  # the empty trailer block: framing
                    if self._overhead:
                        self._queue(
                            DataReceived(exchange_id=exchange, data=b"", overhead=self._overhead)
                        )
                        self._overhead = 0
                    if event.headers:
                        self._queue(
                            TrailersReceived(
                                exchange_id=exchange,
                                headers=_headers(event.headers),
                                raw_size=self._block_size,
                            )
                        )
                    self._queue(ResponseEnded(exchange_id=exchange))
                    self._exchange = None
                case _:
                    # h11.PAUSED or h11.ConnectionClosed, only after the response ended: we
                    # never propose a protocol switch, and h11 raises on an EOF that cuts a
                    # response short.  PAUSED: bytes came after the response; breaking makes
                    # them unowned (_orphan).  (h11 types its events as an open base class,
                    # h11.Event, so there is no closed union to assert_never over; the one
                    # other subclass, Request, never reaches a client.)
                    if exchange is not None:  # pragma: no cover - only after the response
                        self._fail(
                            ConnectionFailed(
                                "server ended the HTTP/1.1 exchange without a complete response",
                                cause="reset" if self._eof else "framing",
                            )
                        )
                    self._break()
                    return
        if self._exchange is None:
            # The response is complete and nothing followed it (yet).
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                conn.start_next_cycle()
                self._reset_meter()
            else:
                self._break()  # keep-alive not allowed

    def _on_h11_error(self, exc: h11.RemoteProtocolError) -> None:
        if self._eof:
            error = ConnectionFailed(
                f"server closed the connection before the response was complete ({_detail(exc)})",
                cause="reset",
            )
        else:
            error = ConnectionFailed(
                f"server sent malformed HTTP/1.1: {_detail(exc)}", cause="framing"
            )
        self._fail(error)


def _held(event: ExchangeEvent) -> int:
    """The bytes a queued event holds (``buffered_bytes``): body bytes (without their
    framing) or what it is charged."""
    if isinstance(event, DataReceived):
        return len(event.data)
    return charged_bytes(event)


_WIRE: type[Wire] = H1Connection  # mypy checks the machine against the Wire protocol
