"""The HTTP/2 client machine: one connection, many exchanges, counted before a frame is read.

(Why over 600 lines, and over 1,000 with this docstring: the frame scanner, the stream
states and the flow control share one byte ledger -- every byte charged to an event,
unowned or unsettled -- and one set of per-exchange fields, which a split would spread
over modules reaching into each other's state.  What needs no connection state is out:
the frame formats and stateless checks in :mod:`.h2_frames`, the request encoder in
:mod:`.h2_headers`.)

Theory of operation
-------------------
:class:`H2Connection` is the client side of RFC 9113 that sansmcp needs, written here:
the preface and our SETTINGS, the server's SETTINGS (applied and acknowledged), PING,
WINDOW_UPDATE, DATA, HEADERS + CONTINUATION (decoded with ``hpack.Decoder``),
RST_STREAM, GOAWAY; PRIORITY and frame types we do not know are ignored (s5.5).  Server
push is off, so PUSH_PROMISE is refused.  Bytes from the server go through a frame
scanner first:

* The 9-byte frame header of every frame is held back (at most 8 bytes buffered) until
  it is complete and checked: length against our ``SETTINGS_MAX_FRAME_SIZE`` (16,384),
  the first frame must be the server's SETTINGS, PUSH_PROMISE is refused, a
  CONTINUATION must continue an open header block and nothing else may interrupt it.
  Then the frame's bytes are collected into a *unit* -- the frame, or the whole header
  block (HEADERS + CONTINUATIONs) -- and the unit is handled once it is complete, so the
  events it produces belong to that unit alone.
* Header blocks are measured from the frame headers: the payload bytes of HEADERS +
  CONTINUATION frames of one block (padding and priority fields included) are summed
  as each frame header arrives, and a frame header that would take the block over
  ``Limits.max_header_bytes`` fails the connection before a byte of that frame is
  taken.  A block may span at most ``Limits.h2_max_header_frames`` frames (32 by
  default), which bounds CONTINUATION floods of tiny or empty frames.  The block's size
  becomes the ``raw_size`` of the head it decodes to.  Every block is decoded, also on a
  stream we gave up on: HPACK state is connection-wide, and a block we do not decode
  leaves the decoder out of step with the server; for the same reason a refused block
  always kills the connection.
* The decoded header list is bounded by hpack's ``max_header_list_size`` (set to
  ``max_header_bytes``, counted as RFC 9113 s6.5.2 does: name + value + 32 per field),
  so an HPACK bomb stops at the first field that crosses it; a metered decoder
  records the figure for the error.  The decoded fields are checked as s8.2-8.3 ask
  (:func:`.h2_frames.response_fields`).
* Control frames (PING, SETTINGS, WINDOW_UPDATE, PRIORITY, RST_STREAM, and also
  GOAWAY and frame types we ignore) are counted in a sliding window of
  ``h2_control_window`` seconds of ``now``; more than ``h2_max_control_frames`` fails
  the connection.  DATA frames carrying fewer than 16 bytes of data are counted per
  response; more than ``h2_max_small_data_frames`` fails the connection.

Streams.  We open odd streams only.  A stream carries a live exchange until its
response ends, it is reset (either way) or refused by a GOAWAY; then its id is
remembered (the last :data:`CLOSED_STREAMS`) as closed *by reset* (frames still in flight
there are dropped: DATA has its connection window given back and is answered with
RST_STREAM(STREAM_CLOSED), as is a header block once decoded) or closed *by end* (DATA
is dropped as above; a header block there is a connection error STREAM_CLOSED, s5.1).
A stream past that memory counts as closed by end.  DATA or HEADERS on a stream we
never opened (an idle one), and RST_STREAM/WINDOW_UPDATE there, are a connection error;
DATA before the final head, a second final head, trailers without END_STREAM, a 1xx
head with END_STREAM and a body longer or shorter than its ``content-length`` are
connection errors too (PROTOCOL_ERROR).

What is charged where.  Every byte received is charged exactly once, in one place (the
unit's owner is decided at its first frame header; :meth:`H2Connection._feed` settles a
unit's bytes once it has been handled):

    bytes received == sum(charged_bytes(event) for every event)   (sansmcp.core.http)
                      + unowned_bytes + unsettled_bytes

* to an exchange, through its events (the MCP machine charges ``raw_size`` and
  ``len(data) + overhead`` to ``Limits.max_response_bytes``): a head's or trailers'
  ``raw_size`` is the wire size of its HEADERS + CONTINUATION frames (frame headers,
  padding and priority fields included); every DATA frame of a live exchange becomes one
  ``DataReceived`` whose ``len(data) + overhead`` is the frame's wire size (an empty or
  padding-only frame comes as ``DataReceived(data=b"", overhead=n)``); any other frame
  on the stream of a live exchange that no event carries (WINDOW_UPDATE, PRIORITY,
  frames of unknown types) comes as ``DataReceived(data=b"", overhead=n)`` too -- at
  once if the exchange has its final head, else right after that head (until then the
  bytes are *pending*: part of ``unsettled_bytes``, and bounded with the unowned ones);
* to the socket's *unowned* count (:attr:`H2Connection.unowned_bytes`), everything no
  live exchange owns: the server's SETTINGS and every frame on stream 0 (PING, GOAWAY,
  WINDOW_UPDATE, unknown types), frames on streams we reset or that already ended, on
  idle streams, a RST_STREAM that ends an exchange, the pending bytes of an exchange that
  ends without a head, events dropped by :meth:`H2Connection.cancel`, what was held
  when the connection failed, and every byte after that.  A frame header that would take
  unowned + pending bytes over ``Limits.max_unowned_bytes_per_socket`` (1 MiB) fails
  every exchange with ``ConnectionFailed(cause="budget",
  bound="max_unowned_bytes_per_socket")`` before a byte of that frame is taken
  (observed: the figure with that frame).  The count is for the socket's life; once it
  passes half the bound, ``can_start()`` is false and the pool retires the socket when
  idle, so a well-behaved server's stream-0 traffic (SETTINGS, PING, connection
  WINDOW_UPDATEs) can never fail an exchange;
* ``unsettled_bytes``: an incomplete frame header, the part of an owned frame or header
  block received so far, and the pending bytes (0 once the connection failed or saw
  EOF).

DATA on a stream we gave up on still has its flow-control window returned at once (the
connection window must not shrink), so only the unowned bound stops such a flood.

Flow control: we advertise a 256 KiB initial stream window and open the connection
window to 1 MiB, and acknowledge data only when :meth:`H2Connection.next_event` returns
the ``DataReceived`` that carried it: a window is reopened (WINDOW_UPDATE) once half of
it has been taken, or once it is empty and more than 1,024 bytes were taken; a stream's
window only while its response goes on.  A server exceeding a window is a connection
error (FLOW_CONTROL_ERROR).  So the queued body bytes never exceed 1 MiB, whatever the
consumer does.  Our send windows follow the server's SETTINGS_INITIAL_WINDOW_SIZE and
WINDOW_UPDATEs (past 2**31 - 1: FLOW_CONTROL_ERROR, for the connection or, on a stream,
that stream's exchange fails and the stream is reset); request bodies larger than the
windows are queued and sent as WINDOW_UPDATEs arrive, in frames of at most the
server's SETTINGS_MAX_FRAME_SIZE.

GOAWAY from the server: exchanges on streams above its last stream id fail (cause
"refused": the server never processed them, a retry is safe -- also when the GOAWAY
carries an error, RFC 9113 s6.8), no more exchanges start, and the others finish (or,
after a GOAWAY with an error, fail "reset").  Output not yet taken is dropped on a
GOAWAY, and nothing more is sent unless exchanges remain after a graceful one.
Our own :meth:`close` sends GOAWAY only once no exchange is in flight; a connection
failure sends GOAWAY with PROTOCOL_ERROR (ENHANCE_YOUR_CALM for a bound, or the code of
the fault: FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, STREAM_CLOSED).

Request headers: :mod:`.h2_headers` checks each field the first time the connection
sends it and HPACK-encodes the block; this module frames it (HEADERS, and CONTINUATIONs
past the server's frame size).  ``start`` drops the connection-specific fields
(``host``, ``connection``, ``te`` but ``trailers``...) and refuses a regular field named
like a pseudo-header; a field that fails the check raises ``LocalProtocolError`` before
anything is sent (a bad ``:path`` or ``:authority`` also breaks the connection).  Every
value a server chooses or a hook returns is checked by the layer that takes it before it
can reach a header (``tests/core/test_h2_header_safety.py`` feeds a bad one through each
path); the check here is the backstop.

Every server fault becomes ``ExchangeFailed`` events; a connection-level fault fails
every open exchange with the same ``ConnectionFailed`` and leaves ``is_broken`` true
(the machine then ignores further input).  A ``:status`` that is not three ASCII digits
fails its exchange as a framing fault.  Nothing escapes the entry points that take
server input (``receive_data``, ``receive_eof``, ``next_event``): they catch any
exception at that boundary, which fails every exchange as
``ConnectionFailed(cause="framing")`` and breaks the connection.  Misuse by the driver
raises ``LocalProtocolError`` and leaves the machine as it was (except a refused
request line inside ``start``, after which the connection is broken).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import hpack

from ..errors import ConnectionFailed, LocalProtocolError, budget_exceeded
from ..http import (
    CONNECTION_FIELDS,
    MAX_CONTENT_LENGTH_DIGITS,
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
from .h2_frames import (
    ACK,
    CANCEL,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    GOAWAY,
    HEADERS,
    MAX_STREAM_ID,
    MAX_WINDOW,
    NO_ERROR,
    PING,
    PRIORITY,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    SETTINGS_ENABLE_PUSH,
    SETTINGS_HEADER_TABLE_SIZE,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE,
    SETTINGS_MAX_HEADER_LIST_SIZE,
    STREAM_CLOSED,
    UNRESERVED,
    WINDOW_UPDATE,
    MeteredDecoder,
    ProtocolFault,
    check_control,
    code_name,
    data_bounds,
    frame,
    goaway,
    header_fragment,
    response_fields,
    rst_stream,
    settings,
    settings_values,
    window_update,
)
from .h2_headers import PseudoHeaderRefused, RequestEncoder

__all__ = [
    "CLOSED_STREAMS",
    "CONNECTION_WINDOW",
    "MAX_FRAME_SIZE",
    "SMALL_DATA_FRAME",
    "STREAM_WINDOW",
    "H2Connection",
]

MAX_FRAME_SIZE = 16_384
"""Our SETTINGS_MAX_FRAME_SIZE (the protocol default and minimum)."""
STREAM_WINDOW = 256 << 10
"""The initial stream flow-control window we advertise."""
CONNECTION_WINDOW = 1 << 20
"""The connection flow-control window we open at the start."""
SMALL_DATA_FRAME = 16
"""A DATA frame carrying fewer data bytes than this counts as small."""
CLOSED_STREAMS = 512
"""Closed streams remembered (how each closed), so late frames on them are told apart."""

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_CONTROL = frozenset({PING, RST_STREAM, GOAWAY, PRIORITY})
_DEFAULT_WINDOW = 65_535
_SETTINGS_ACK = frame(SETTINGS, ACK, 0)
# a caller's fields ``start`` leaves out: the connection-specific ones, and the two this
# machine writes itself (``:authority`` for ``host``; ``content-length``)
_DROPPED_HEADERS = CONNECTION_FIELDS | {b"host", b"content-length"}
_BODY_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})
_MAX_SHOWN = 40  # bytes of a bad server value quoted in an error message


@dataclass(slots=True)
class _Exchange:
    exchange_id: int
    stream_id: int
    body: memoryview
    send_window: int  # what we may still send on the stream
    head_request: bool = False
    body_sent: int = 0
    informational: int = 0
    small_frames: int = 0
    head_seen: bool = False  # its final head arrived: later framing on it is charged to it
    pending: int = 0  # bytes of frames on its stream before its head, charged after it
    recv_window: int = STREAM_WINDOW  # what the server may still send on the stream
    taken: int = 0  # flow-controlled bytes handed out and not yet given back
    expected: int | None = None  # the content-length of its response
    received: int = 0  # body bytes received


@dataclass(slots=True)
class _Queued:
    event: ExchangeEvent
    stream_id: int
    ack: int  # flow-controlled bytes to acknowledge when the event is handed out
    size: int  # bytes this entry holds (body bytes or raw header bytes)
    charged: int  # charged_bytes(event), known when it is pushed


def _framing(message: str) -> ConnectionFailed:
    return ConnectionFailed(message, cause="framing")


class H2Connection:
    """An HTTP/2 client connection carrying many exchanges (see the module docstring)."""

    http_version = "2"  # (the Wire's label)

    def __init__(self, *, limits: Limits, now: float) -> None:
        self._limits = limits
        self._encoder = RequestEncoder()
        self._decoder = MeteredDecoder(limits.max_header_bytes)
        ours = {
            SETTINGS_ENABLE_PUSH: 0,
            SETTINGS_MAX_CONCURRENT_STREAMS: limits.h2_max_concurrent_streams,
            SETTINGS_INITIAL_WINDOW_SIZE: STREAM_WINDOW,
            SETTINGS_MAX_HEADER_LIST_SIZE: limits.max_header_bytes,
        }
        self._out = bytearray(_PREFACE + settings(ours))
        self._out += window_update(0, CONNECTION_WINDOW - _DEFAULT_WINDOW)
        self._exchanges: dict[int, _Exchange] = {}
        self._by_stream: dict[int, _Exchange] = {}
        self._unsent: dict[int, _Exchange] = {}  # exchanges whose body is not all sent
        self._closed: dict[int, bool] = {}  # the last closed streams: True = by a reset
        self._next_stream = 1
        self._stream_cap = limits.h2_max_concurrent_streams  # and the server's, once known
        # the server's settings and our windows
        self._peer_window = _DEFAULT_WINDOW  # its SETTINGS_INITIAL_WINDOW_SIZE
        self._peer_frame_size = MAX_FRAME_SIZE  # its SETTINGS_MAX_FRAME_SIZE
        self._send_window = _DEFAULT_WINDOW  # the connection window we may send into
        self._recv_window = CONNECTION_WINDOW  # what the server may still send
        self._taken = 0  # flow-controlled bytes handed out, not yet given back
        self._silent = False  # a GOAWAY was sent, or received and not outlived: send nothing
        self._queue: deque[_Queued] = deque()
        self._queued_bytes = 0
        self._broken = False
        self._closing = False  # close() called or GOAWAY received: no more starts
        self._goaway_pending = False  # close() called with exchanges in flight
        self._control_times: deque[float] = deque()
        # the frame scanner
        self._frame_header = bytearray()
        self._in_payload = False
        self._remaining = 0  # payload bytes of the current frame still to come
        self._frame_ends_block = False
        self._seen_settings = False
        self._block_stream = 0  # 0: no header block open
        self._block_bytes = 0
        self._block_frames = 0
        # the accounting: every byte received is charged to an event, unowned or unsettled
        self._unit = bytearray()  # the current unit (a frame, or a header block) so far
        self._unit_owned = False
        self._unit_stream = 0
        self._unit_kind = self._unit_flags = 0  # of the unit's first frame
        self._unit_charged = 0  # bytes the events of the unit being handled carry
        self._unowned = 0
        self._pending = 0  # sum of the live exchanges' pending bytes
        self._windows_changed = False  # a send window grew since bodies were last sent
        self._received = 0
        self._delivered = 0  # charged bytes of events handed out or dropped

    # -- state -----------------------------------------------------------------

    @property
    def is_broken(self) -> bool:
        """The socket must be closed and never reused."""
        return self._broken or (self._closing and not self._exchanges)

    @property
    def is_idle(self) -> bool:
        return not self._exchanges

    @property
    def active_exchanges(self) -> int:
        return len(self._exchanges)

    def buffered_bytes(self) -> int:
        """Bytes held right now: the unit being received (a partial frame or header block),
        queued events, output, request bodies not yet sent."""
        partial = len(self._frame_header) + len(self._unit)
        pending_bodies = sum(len(ex.body) - ex.body_sent for ex in self._unsent.values())
        return partial + self._queued_bytes + len(self._out) + pending_bodies

    def can_start(self) -> bool:
        if self.is_broken or self._closing:
            return False
        if self._unowned > self._limits.max_unowned_bytes_per_socket // 2:
            return False  # retire the socket before its unowned bound could fail anything
        if self._next_stream > MAX_STREAM_ID:  # pragma: no cover - 2**30 requests on one socket
            return False
        return len(self._exchanges) < self._stream_cap

    # -- commands --------------------------------------------------------------

    def start(self, exchange_id: int, request: HttpRequest, *, now: float) -> None:
        """Open a stream for ``request``; its body goes out as the windows allow."""
        if not self.can_start():
            raise LocalProtocolError("cannot start an exchange on this HTTP/2 connection now")
        if exchange_id in self._exchanges:
            raise LocalProtocolError(f"exchange {exchange_id} is already in flight")
        fields = [
            (b":method", request.method),
            (b":scheme", request.scheme),
            (b":authority", request.authority),
            (b":path", request.target),
        ]
        for field in request.headers:
            name = field[0]
            if name in _DROPPED_HEADERS or (name == b"te" and field[1] != b"trailers"):
                continue
            if name[:1] == b":":  # the encoder knows pseudo-headers: refuse them here
                raise LocalProtocolError(f"request header name {name!r} is not valid in HTTP/2")
            fields.append(field)
        body = request.body
        if body or request.method in _BODY_METHODS:
            fields.append((b"content-length", str(len(body)).encode()))
        try:
            block = self._encoder.block(fields)
        except PseudoHeaderRefused:
            self._broken = True  # a request line we cannot send: the socket is not reused
            raise
        stream_id = self._next_stream
        self._next_stream += 2
        self._send_headers(stream_id, block, end_stream=not body)
        exchange = _Exchange(exchange_id, stream_id, memoryview(body), self._peer_window)
        exchange.head_request = request.method == b"HEAD"
        self._exchanges[exchange_id] = exchange
        self._by_stream[stream_id] = exchange
        if body:
            self._unsent[exchange_id] = exchange
            self._send_body(exchange)

    def cancel(self, exchange_id: int, *, now: float) -> None:
        """Give up on an exchange: RST_STREAM(CANCEL), and no further events for it."""
        exchange = self._exchanges.get(exchange_id)
        if exchange is not None:
            self._forget(exchange, by_reset=True)
            self._reset(exchange.stream_id, CANCEL)
        kept: deque[_Queued] = deque()
        for item in self._queue:
            if item.event.exchange_id != exchange_id:
                kept.append(item)
                continue
            self._queued_bytes -= item.size
            self._unowned += item.charged  # nobody will be charged for it now
            self._acknowledge(item)
        self._queue = kept
        self._after_exchange_end()

    def close(self, *, now: float) -> None:
        """No more starts; GOAWAY is sent once no exchange is in flight."""
        self._closing = True
        if not self._broken:
            self._goaway_pending = True
            self._after_exchange_end()

    def receive_eof(self, *, now: float) -> None:
        """The server closed its side: open exchanges fail (cause "reset")."""
        if self._broken:
            return
        try:
            if self._exchanges:
                self._fail_connection(
                    ConnectionFailed(
                        f"server closed the connection with {len(self._exchanges)} "
                        "HTTP/2 exchange(s) in flight",
                        cause="reset",
                    )
                )
            self._broken = True
            self._unowned += self._partial_bytes()
            self._clear_scanner()
        except Exception as exc:  # the boundary: nothing the server sends may escape
            self._crash(exc)

    def receive_data(self, data: bytes, *, now: float) -> None:
        """Scan ``data`` frame by frame, checking bounds before a frame is handled."""
        self._received += len(data)
        if self.is_broken:
            self._unowned += len(data)
            return
        try:
            self._scan(memoryview(data), now)
        except Exception as exc:  # the boundary: nothing the server sends may escape
            self._crash(exc)

    def abort(self, error: ConnectionFailed) -> None:
        """Give up on the socket without sending anything more (the driver's last resort
        when its reader hits a fault): every exchange in flight fails with ``error``."""
        self._broken = True
        for exchange in list(self._exchanges.values()):
            self._forget(exchange)
            self._push(ExchangeFailed(exchange_id=exchange.exchange_id, error=error), 0)

    def next_event(self) -> ExchangeEvent | None:
        """The next event, or None; handing out body data acknowledges it to the server."""
        if not self._queue:
            return None
        item = self._queue.popleft()
        self._queued_bytes -= item.size
        self._delivered += item.charged
        if item.ack:
            try:
                self._acknowledge(item)
            except Exception as exc:  # the boundary: nothing the server sends may escape
                self._crash(exc)
        return item.event

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    # -- the frame scanner -------------------------------------------------------

    def _scan(self, view: memoryview, now: float) -> None:
        """Split ``view`` into frames; every byte goes to the current unit or is unowned.

        A *unit* is one frame, or one header block (HEADERS + its CONTINUATIONs).  Whether
        it is owned is decided at its first frame header: owned when its stream carries a
        live exchange.  The bytes of an unowned unit count as unowned as they arrive; an
        owned unit is settled by :meth:`_feed` once complete.  A frame that arrives whole,
        with no unit under way, is handed on as one slice (the common case).
        """
        index, size = 0, len(view)
        while index < size and not self.is_broken:
            if not self._in_payload:
                if not self._frame_header and not self._unit and size - index >= 9:
                    error = self._check_frame_header(view[index : index + 9], now)
                    if error is not None:
                        self._fail_connection(error)
                        break
                    end = index + 9 + self._remaining
                    if end <= size and not (self._block_stream and not self._frame_ends_block):
                        unit = bytes(view[index:end])  # the whole frame, and its unit
                        index = end
                        self._remaining = 0
                        self._block_stream = self._block_bytes = self._block_frames = 0
                        if not self._unit_owned:
                            self._unowned += len(unit)
                        self._feed(unit, self._unit_owned)
                        continue
                    self._take(view[index : index + 9])
                    index += 9
                else:
                    take = min(9 - len(self._frame_header), size - index)
                    self._frame_header += view[index : index + take]
                    index += take
                    if len(self._frame_header) < 9:
                        break
                    error = self._check_frame_header(self._frame_header, now)
                    if error is not None:
                        self._fail_connection(error)
                        break
                    self._take(self._frame_header)
                    self._frame_header.clear()
                self._in_payload = True
            else:
                take = min(self._remaining, size - index)
                self._take(view[index : index + take])
                index += take
                self._remaining -= take
            if self._in_payload and self._remaining == 0:
                self._in_payload = False
                if self._block_stream and not self._frame_ends_block:
                    continue  # the header block goes on in a CONTINUATION
                self._block_stream = self._block_bytes = self._block_frames = 0
                unit, owned = bytes(self._unit), self._unit_owned
                self._unit.clear()
                self._feed(unit, owned)
        self._unowned += size - index  # bytes after a failure: nobody's
        if self._windows_changed and not self._broken:
            self._windows_changed = False
            self._send_bodies()

    def _take(self, chunk: bytes | bytearray | memoryview) -> None:
        self._unit += chunk
        if not self._unit_owned:
            self._unowned += len(chunk)

    def _clear_scanner(self) -> None:
        self._frame_header.clear()
        self._unit = bytearray()
        self._in_payload = False

    @property
    def unowned_bytes(self) -> int:
        """Bytes received that no live exchange was charged for (bounded per socket by
        ``Limits.max_unowned_bytes_per_socket``); after a failure, every later byte."""
        return self._unowned

    @property
    def unsettled_bytes(self) -> int:
        """Bytes received and not yet charged anywhere: an incomplete frame header, and the
        part of an owned frame or header block received so far."""
        return self._partial_bytes() + self._pending

    def _partial_bytes(self) -> int:
        return len(self._frame_header) + (len(self._unit) if self._unit_owned else 0)

    def _check_frame_header(
        self, head: bytearray | memoryview, now: float
    ) -> ConnectionFailed | None:
        bits = int.from_bytes(head, "big")
        length, kind, flags = bits >> 48, bits >> 40 & 0xFF, bits >> 32 & 0xFF
        stream_id = bits & UNRESERVED
        limits = self._limits
        if not self._seen_settings:
            if kind != SETTINGS or flags & ACK:
                what = "an HTTP/1.x answer" if bytes(head[:5]) == b"HTTP/" else "no SETTINGS frame"
                return _framing(f"server did not start HTTP/2 with its SETTINGS ({what})")
            self._seen_settings = True
        if length > MAX_FRAME_SIZE:
            return _framing(
                f"server sent a frame of {length:,} bytes; our SETTINGS_MAX_FRAME_SIZE "
                f"is {MAX_FRAME_SIZE:,}"
            )
        self._remaining = length
        self._frame_ends_block = False
        if self._block_stream and (kind != CONTINUATION or stream_id != self._block_stream):
            return _framing(
                f"server interrupted the header block of stream {self._block_stream} "
                f"with a frame of type {kind}"
            )
        if kind in (HEADERS, CONTINUATION):
            if kind == CONTINUATION and not self._block_stream:
                return _framing("server sent a CONTINUATION frame outside a header block")
            total, frames = self._block_bytes + length, self._block_frames + 1
            if total > limits.max_header_bytes:
                return budget_exceeded(
                    f"server sent a header block of more than {limits.max_header_bytes:,} "
                    f"bytes (Limits.max_header_bytes): {total:,} announced",
                    "max_header_bytes",
                    limits.max_header_bytes,
                    total,
                )
            if frames > limits.h2_max_header_frames:
                return budget_exceeded(
                    f"server split a header block into more than "
                    f"{limits.h2_max_header_frames:,} frames (Limits.h2_max_header_frames)",
                    "h2_max_header_frames",
                    limits.h2_max_header_frames,
                    frames,
                )
            self._block_stream = stream_id or -1
            self._block_bytes, self._block_frames = total, frames
            self._frame_ends_block = bool(flags & END_HEADERS)
        elif kind == PUSH_PROMISE:
            return _framing("server sent PUSH_PROMISE although we disabled server push")
        elif kind != DATA:
            times = self._control_times
            while times and times[0] <= now - limits.h2_control_window:
                times.popleft()
            times.append(now)
            if len(times) > limits.h2_max_control_frames:
                return budget_exceeded(
                    f"server sent more than {limits.h2_max_control_frames:,} control frames "
                    f"in {limits.h2_control_window:g} s (Limits.h2_max_control_frames)",
                    "h2_max_control_frames",
                    limits.h2_max_control_frames,
                    len(times),
                )
        if kind != CONTINUATION:  # a CONTINUATION belongs to its block's unit
            self._unit_owned = stream_id != 0 and stream_id in self._by_stream
            self._unit_stream, self._unit_kind, self._unit_flags = stream_id, kind, flags
        if not self._unit_owned:
            announced = self._unowned + self._pending + 9 + length
            limit = limits.max_unowned_bytes_per_socket
            if announced > limit:
                return budget_exceeded(
                    f"server sent more than {limit:,} bytes that no live exchange was "
                    f"charged for (Limits.max_unowned_bytes_per_socket): {announced:,} with "
                    f"a frame of type {kind} on stream {stream_id}",
                    "max_unowned_bytes_per_socket",
                    limit,
                    announced,
                )
        return None

    def _feed(self, unit: bytes, owned: bool) -> None:
        """Handle one complete unit and settle its bytes: what the events it produced
        carry is charged to their exchange; the rest of an owned unit is charged to its
        exchange as framing once that exchange has its head (``DataReceived(b"", n)``),
        and is unowned otherwise."""
        self._unit_charged = 0
        try:
            self._handle(unit)
        except ProtocolFault as fault:
            self._fail_connection(
                _framing(f"server broke the HTTP/2 protocol: {fault}"), code=fault.code
            )
        if not owned:
            return
        rest = len(unit) - self._unit_charged
        assert rest >= 0, "the events of a unit carry more bytes than it has"
        if not rest:
            return
        exchange = self._by_stream.get(self._unit_stream)
        if exchange is not None and exchange.head_seen and not self._broken:
            self._push(
                DataReceived(exchange_id=exchange.exchange_id, data=b"", overhead=rest),
                exchange.stream_id,
                charged=rest,
            )
            return
        if exchange is not None and not self._broken:
            exchange.pending += rest  # charged with its head (bounded below until then)
            self._pending += rest
        else:
            self._unowned += rest
        limit = self._limits.max_unowned_bytes_per_socket
        uncharged = self._unowned + self._pending
        if uncharged > limit and not self._broken:
            self._fail_connection(
                budget_exceeded(
                    f"server sent more than {limit:,} bytes that no live exchange was "
                    f"charged for (Limits.max_unowned_bytes_per_socket): {uncharged:,} "
                    f"after a frame on stream {self._unit_stream}",
                    "max_unowned_bytes_per_socket",
                    limit,
                    uncharged,
                )
            )

    # -- the frames ----------------------------------------------------------------

    def _handle(self, unit: bytes) -> None:
        """One complete frame (or header block) the scanner has checked."""
        kind, flags, stream_id = self._unit_kind, self._unit_flags, self._unit_stream
        # the most frequent first: DATA, then header blocks
        if kind == DATA:
            self._on_data(unit, flags, stream_id)
        elif kind == HEADERS:
            self._on_header_block(unit, flags, stream_id)
        elif kind == SETTINGS:
            self._on_settings(unit, flags, stream_id)
        elif kind == WINDOW_UPDATE:
            self._on_window_update(unit, stream_id)
        elif kind in _CONTROL:
            check_control(kind, stream_id, unit)
            if kind == PING:
                if not flags & ACK:
                    self._out += frame(PING, ACK, 0, unit[9:])
            elif kind == RST_STREAM:
                exchange = self._by_stream.get(stream_id)
                if exchange is not None:
                    self._on_stream_reset(exchange, int.from_bytes(unit[9:13], "big"))
                elif self._is_idle(stream_id):
                    raise ProtocolFault(f"RST_STREAM on idle stream {stream_id}")
            elif kind == GOAWAY:
                last = int.from_bytes(unit[9:13], "big") & UNRESERVED
                self._on_goaway(last, int.from_bytes(unit[13:17], "big"))
        # anything else (ALTSVC, ORIGIN, unknown types) is ignored: RFC 9113 s5.5

    def _is_idle(self, stream_id: int) -> bool:
        """A stream we never opened (servers open none: push is off)."""
        return not stream_id & 1 or stream_id >= self._next_stream

    def _on_data(self, unit: bytes, flags: int, stream_id: int) -> None:
        start, end = data_bounds(unit, flags, stream_id)
        size = len(unit) - 9  # flow-controlled: data, Pad Length and padding
        self._recv_window -= size
        if self._recv_window < 0:
            raise ProtocolFault(
                "the server sent more DATA than the connection's flow control window "
                "(FLOW_CONTROL_ERROR)",
                FLOW_CONTROL_ERROR,
            )
        exchange = self._by_stream.get(stream_id)
        if exchange is None:
            if self._is_idle(stream_id):
                raise ProtocolFault(f"DATA on idle stream {stream_id}")
            # a stream we gave up on, or that ended: give the window back at once
            self._out += rst_stream(stream_id, STREAM_CLOSED)
            self._give_back(size, None)
            return
        if not exchange.head_seen:
            raise ProtocolFault(f"DATA before the response head on stream {stream_id}")
        exchange.recv_window -= size
        if exchange.recv_window < 0:
            raise ProtocolFault(
                f"the server sent more DATA than stream {stream_id}'s flow control window "
                "(FLOW_CONTROL_ERROR)",
                FLOW_CONTROL_ERROR,
            )
        length = end - start
        exchange.received += length
        expected = exchange.expected
        if expected is not None and (
            exchange.received > expected or (flags & END_STREAM and exchange.received != expected)
        ):
            raise ProtocolFault(
                f"stream {stream_id}'s body is not its content-length: {expected:,} "
                f"announced, {exchange.received:,} received"
            )
        if length < SMALL_DATA_FRAME:
            exchange.small_frames += 1
            limit = self._limits.h2_max_small_data_frames
            if exchange.small_frames > limit:
                self._fail_connection(
                    budget_exceeded(
                        f"server sent more than {limit:,} DATA frames of under "
                        f"{SMALL_DATA_FRAME} bytes in one response "
                        "(Limits.h2_max_small_data_frames)",
                        "h2_max_small_data_frames",
                        limit,
                        exchange.small_frames,
                    )
                )
                return
        self._push(
            DataReceived(
                exchange_id=exchange.exchange_id,
                data=unit[start:end],
                overhead=len(unit) - length,  # frame header, Pad Length byte, padding
            ),
            stream_id,
            ack=size,
            size=length,
            charged=len(unit),
        )
        if flags & END_STREAM:
            self._on_end(exchange)

    def _on_header_block(self, unit: bytes, flags: int, stream_id: int) -> None:
        block = header_fragment(unit, flags, stream_id)
        try:
            decoded = self._decoder.decode(block, raw=True)
        except hpack.OversizedHeaderListError:
            limit = self._limits.max_header_bytes
            self._fail_connection(
                budget_exceeded(
                    f"server sent a header block that decodes to more than {limit:,} bytes "
                    f"(Limits.max_header_bytes, counted as HPACK does): "
                    f"{self._decoder.inflated:,} when refused",
                    "max_header_bytes",
                    limit,
                    self._decoder.inflated,
                ),
                code=ENHANCE_YOUR_CALM,
            )
            return
        except (hpack.HPACKError, IndexError, TypeError, UnicodeDecodeError) as exc:
            raise ProtocolFault(f"Error decoding header block: {exc}", COMPRESSION_ERROR) from exc
        exchange = self._by_stream.get(stream_id)
        if exchange is None:
            if self._is_idle(stream_id):
                raise ProtocolFault(f"HEADERS on idle stream {stream_id}")
            if not self._closed.get(stream_id, False):
                raise ProtocolFault(
                    f"HEADERS on stream {stream_id} after it ended (STREAM_CLOSED)", STREAM_CLOSED
                )
            self._out += rst_stream(stream_id, STREAM_CLOSED)  # we reset it: drop what was sent
            return
        end_stream = flags & END_STREAM
        known = self._decoder.known_names
        if exchange.head_seen:
            if not end_stream:
                raise ProtocolFault(f"trailers on stream {stream_id} without END_STREAM")
            _, headers = response_fields(decoded, trailers=True, known=known)
            self._push(
                TrailersReceived(
                    exchange_id=exchange.exchange_id, headers=headers, raw_size=len(unit)
                ),
                stream_id,
                size=len(unit),
                charged=len(unit),
            )
            self._on_end(exchange)
            return
        value, headers = response_fields(decoded, trailers=False, known=known)
        assert value is not None  # response_fields refuses a head without :status
        if value[:1] == b"1":
            if end_stream:
                raise ProtocolFault(f"END_STREAM on an informational head on stream {stream_id}")
            self._on_informational(exchange, value, headers, len(unit))
            return
        if self._on_response(exchange, value, headers, len(unit)) and end_stream:
            self._on_end(exchange)

    def _on_settings(self, unit: bytes, flags: int, stream_id: int) -> None:
        for code, value in settings_values(unit, flags, stream_id):
            if code == SETTINGS_HEADER_TABLE_SIZE:
                self._encoder.peer_table_size(value)
            elif code == SETTINGS_MAX_CONCURRENT_STREAMS:
                self._stream_cap = min(value, self._limits.h2_max_concurrent_streams)
            elif code == SETTINGS_INITIAL_WINDOW_SIZE:
                delta, self._peer_window = value - self._peer_window, value
                for exchange in self._exchanges.values():
                    exchange.send_window += delta
                    if exchange.send_window > MAX_WINDOW:
                        raise ProtocolFault(
                            f"SETTINGS_INITIAL_WINDOW_SIZE of {value:,} takes stream "
                            f"{exchange.stream_id}'s window past {MAX_WINDOW:,} "
                            "(FLOW_CONTROL_ERROR)",
                            FLOW_CONTROL_ERROR,
                        )
                self._windows_changed = True
            elif code == SETTINGS_MAX_FRAME_SIZE:
                self._peer_frame_size = value
            # others (SETTINGS_MAX_HEADER_LIST_SIZE, unknown ones) need nothing from us
        if not flags & ACK:
            self._out += _SETTINGS_ACK

    def _on_window_update(self, unit: bytes, stream_id: int) -> None:
        check_control(WINDOW_UPDATE, stream_id, unit)
        increment = int.from_bytes(unit[9:13], "big") & UNRESERVED
        if not stream_id:
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise ProtocolFault(
                    f"WINDOW_UPDATE takes the connection's window past {MAX_WINDOW:,} "
                    "(FLOW_CONTROL_ERROR)",
                    FLOW_CONTROL_ERROR,
                )
            self._windows_changed = True
            return
        exchange = self._by_stream.get(stream_id)
        if exchange is None:
            if self._is_idle(stream_id):
                raise ProtocolFault(f"WINDOW_UPDATE on idle stream {stream_id}")
            return  # late, on a stream that is done
        exchange.send_window += increment
        if exchange.send_window > MAX_WINDOW:  # a stream error (RFC 9113 s6.9.1)
            self._fail_exchange(
                exchange,
                _framing(f"server broke HTTP/2 on stream {stream_id} (FLOW_CONTROL_ERROR)"),
                code=FLOW_CONTROL_ERROR,
            )
            return
        self._windows_changed = True

    # -- what the frames mean for an exchange --------------------------------------

    def _on_informational(
        self, exchange: _Exchange, value: bytes, headers: Headers, unit_size: int
    ) -> None:
        exchange.informational += 1
        if exchange.informational > self._limits.max_informational:
            self._fail_exchange(
                exchange,
                budget_exceeded(
                    f"server sent more than {self._limits.max_informational} 1xx heads "
                    "(Limits.max_informational)",
                    "max_informational",
                    self._limits.max_informational,
                    exchange.informational,
                ),
            )
            return
        status = _status(value)
        if status is None or not 100 <= status <= 199:
            self._bad_status(exchange, value)
            return
        self._push(
            InformationalReceived(
                exchange_id=exchange.exchange_id,
                status=status,
                headers=headers,
                raw_size=unit_size,
            ),
            exchange.stream_id,
            size=unit_size,
            charged=unit_size,
        )

    def _on_response(
        self, exchange: _Exchange, value: bytes, headers: Headers, unit_size: int
    ) -> bool:
        """The final head: pushed (True), or the exchange failed on its status."""
        status = _status(value)
        if status is None or not 200 <= status <= 999:
            self._bad_status(exchange, value)
            return False
        exchange.head_seen = True
        for name, field in headers:  # checked whatever the status (h2 and llhttp do too)
            if name == b"content-length":
                if not field.isdigit() or len(field) > MAX_CONTENT_LENGTH_DIGITS:
                    raise ProtocolFault(f"Invalid content-length header: {field[:40]!r}")
                length = int(field)
                if exchange.expected is not None and exchange.expected != length:
                    raise ProtocolFault(
                        f"content-length given twice, as {exchange.expected:,} and {length:,}"
                    )
                exchange.expected = length
        if exchange.head_request or status in (204, 304):
            exchange.expected = 0  # no content, whatever content-length says (RFC 9113 s8.1.1)
        self._push(
            ResponseReceived(
                exchange_id=exchange.exchange_id,
                status=status,
                headers=headers,
                raw_size=unit_size,
                http_version=b"2",
            ),
            exchange.stream_id,
            size=unit_size,
            charged=unit_size,
        )
        if exchange.pending:  # frames on its stream before the head: its framing
            self._push(
                DataReceived(exchange_id=exchange.exchange_id, data=b"", overhead=exchange.pending),
                exchange.stream_id,
                charged=exchange.pending,
            )
            self._unit_charged -= exchange.pending  # earlier units' bytes, not this one's
            self._pending -= exchange.pending
            exchange.pending = 0
        return True

    def _on_end(self, exchange: _Exchange) -> None:
        """END_STREAM from the server: the response is complete."""
        if exchange.expected is not None and exchange.received != exchange.expected:
            raise ProtocolFault(
                f"stream {exchange.stream_id}'s body is not its content-length: "
                f"{exchange.expected:,} announced, {exchange.received:,} received"
            )
        unsent = exchange.body_sent < len(exchange.body)
        self._forget(exchange, by_reset=unsent)
        if unsent:  # the server answered before taking the whole body
            self._reset(exchange.stream_id, CANCEL)
        self._push(ResponseEnded(exchange_id=exchange.exchange_id), exchange.stream_id)
        self._after_exchange_end()

    def _on_stream_reset(self, exchange: _Exchange, code: int) -> None:
        refused = code == REFUSED_STREAM
        error = ConnectionFailed(
            f"server reset stream {exchange.stream_id} ({code_name(code)})"
            + ("; the request was not processed, a retry is safe" if refused else ""),
            cause="refused" if refused else "reset",
        )
        self._fail_exchange(exchange, error, code=None)

    def _on_goaway(self, last: int, code: int) -> None:
        self._closing = True
        # RFC 9113 s6.8: a stream above last_stream_id was not processed, whatever the
        # error code, so it fails "refused" (a retry is safe) even before an error fails the
        # rest
        for exchange in list(self._exchanges.values()):
            if exchange.stream_id > last:
                self._fail_exchange(
                    exchange,
                    ConnectionFailed(
                        f"server sent GOAWAY (last stream {last}) before processing stream "
                        f"{exchange.stream_id}; the request was not processed, a retry is safe",
                        cause="refused",
                    ),
                    code=None,
                )
        # what the server keeps may still finish after a graceful GOAWAY (what those streams
        # still need -- their bodies, window updates, ACKs -- still goes out); else we are done
        self._silent = self._silent or bool(code) or not self._exchanges
        if self._silent:
            self._out.clear()  # nothing more goes out on a connection the server is closing
        if code:
            self._fail_connection(
                ConnectionFailed(
                    f"server sent GOAWAY ({code_name(code)}, last stream {last})"
                    + (" with the exchanges at or below it in flight" if self._exchanges else ""),
                    cause="reset",
                )
            )

    # -- helpers -------------------------------------------------------------------

    def _push(
        self, event: ExchangeEvent, stream_id: int, *, ack: int = 0, size: int = 0, charged: int = 0
    ) -> None:
        """Queue ``event``; ``charged`` is ``charged_bytes(event)``, which the caller knows."""
        self._queue.append(_Queued(event, stream_id, ack, size, charged))
        self._queued_bytes += size
        self._unit_charged += charged

    def _bad_status(self, exchange: _Exchange, value: bytes) -> None:
        self._fail_exchange(
            exchange,
            _framing(
                f"server sent the :status {value[:_MAX_SHOWN]!r} on stream "
                f"{exchange.stream_id}; a status is three digits"
            ),
        )

    def _crash(self, exc: Exception) -> None:
        """A fault that got past every check (an hpack bug, an unforeseen input): the
        connection is done, its exchanges fail as framing faults, and the bytes nobody was
        charged for count as unowned."""
        self.abort(_framing(f"server input broke the HTTP/2 machine ({type(exc).__name__}: {exc})"))
        charged = sum(item.charged for item in self._queue) + self._delivered
        self._unowned = self._received - charged
        self._clear_scanner()

    def _forget(self, exchange: _Exchange, *, by_reset: bool = True) -> None:
        del self._exchanges[exchange.exchange_id]
        del self._by_stream[exchange.stream_id]
        self._unsent.pop(exchange.exchange_id, None)
        self._unowned += exchange.pending  # no head will carry them now
        self._pending -= exchange.pending
        exchange.pending = 0
        closed = self._closed
        closed[exchange.stream_id] = by_reset
        if len(closed) > CLOSED_STREAMS:
            del closed[next(iter(closed))]

    def _fail_exchange(
        self, exchange: _Exchange, error: ConnectionFailed, *, code: int | None = CANCEL
    ) -> None:
        """``exchange`` fails with ``error``; its stream is reset with ``code`` (None: the
        server reset it, or refused it with a GOAWAY)."""
        self._forget(exchange)
        if code is not None:
            self._reset(exchange.stream_id, code)
        self._push(ExchangeFailed(exchange_id=exchange.exchange_id, error=error), 0)
        self._after_exchange_end()

    def _fail_connection(self, error: ConnectionFailed, *, code: int | None = None) -> None:
        if not self._broken and not self._silent:
            if code is None:
                code = ENHANCE_YOUR_CALM if error.cause == "budget" else PROTOCOL_ERROR
            self._out += goaway(code)
            self._silent = True
        self._broken = True
        self._unowned += self._partial_bytes()  # and _forget moves each pending count
        self._clear_scanner()
        for exchange in list(self._exchanges.values()):
            self._forget(exchange)
            self._push(ExchangeFailed(exchange_id=exchange.exchange_id, error=error), 0)

    def _after_exchange_end(self) -> None:
        if self._goaway_pending and not self._exchanges and not self._broken:
            self._goaway_pending = False
            self._out += goaway(NO_ERROR)
            self._silent = True

    def _reset(self, stream_id: int, code: int) -> None:
        self._out += rst_stream(stream_id, code)

    def _acknowledge(self, item: _Queued) -> None:
        if item.ack:
            self._give_back(item.ack, self._by_stream.get(item.stream_id))

    def _give_back(self, size: int, exchange: _Exchange | None) -> None:
        """``size`` flow-controlled bytes were taken: reopen the windows they were sent in
        once half of a window is taken (or it is empty and over 1,024 bytes are)."""
        if self._broken or self._silent:
            return
        self._taken += size
        if self._taken >= CONNECTION_WINDOW // 2 or (not self._recv_window and self._taken > 1024):
            self._out += window_update(0, self._taken)
            self._recv_window += self._taken
            self._taken = 0
        if exchange is None:  # the stream is done: no point reopening its window
            return
        exchange.taken += size
        if exchange.taken >= STREAM_WINDOW // 2 or (
            not exchange.recv_window and exchange.taken > 1024
        ):
            self._out += window_update(exchange.stream_id, exchange.taken)
            exchange.recv_window += exchange.taken
            exchange.taken = 0

    def _send_headers(self, stream_id: int, block: bytes, *, end_stream: bool) -> None:
        """Frame a header block: one HEADERS frame, or HEADERS + CONTINUATIONs."""
        flags = END_STREAM if end_stream else 0
        limit = self._peer_frame_size
        if len(block) <= limit:
            self._out += frame(HEADERS, flags | END_HEADERS, stream_id, block)
            return
        view = memoryview(block)
        self._out += frame(HEADERS, flags, stream_id, view[:limit])
        for start in range(limit, len(block), limit):
            last = start + limit >= len(block)
            piece = view[start : start + limit]
            self._out += frame(CONTINUATION, END_HEADERS if last else 0, stream_id, piece)

    def _send_bodies(self) -> None:
        for exchange in list(self._unsent.values()):
            self._send_body(exchange)

    def _send_body(self, exchange: _Exchange) -> None:
        """As much of ``exchange``'s body as the windows allow (END_STREAM on the last)."""
        total = len(exchange.body)
        while exchange.body_sent < total:
            window = min(exchange.send_window, self._send_window)
            size = min(window, self._peer_frame_size, total - exchange.body_sent)
            if size <= 0:
                return
            chunk = exchange.body[exchange.body_sent : exchange.body_sent + size]
            exchange.body_sent += size
            exchange.send_window -= size
            self._send_window -= size
            flags = END_STREAM if exchange.body_sent == total else 0
            self._out += frame(DATA, flags, exchange.stream_id, chunk)
        del self._unsent[exchange.exchange_id]


def _status(value: bytes) -> int | None:
    """A :status value as a number, or None unless it is exactly three ASCII digits."""
    return int(value) if len(value) == 3 and value.isdigit() else None


_WIRE: type[Wire] = H2Connection  # mypy checks the machine against the Wire protocol
