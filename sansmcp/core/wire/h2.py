"""The HTTP/2 client machine: one connection, many exchanges, counted before h2 parses.

(Why over 600 lines: the frame scanner, the translation of h2's events and the flow
control share one byte ledger -- every byte charged to an event, unowned or unsettled --
that a split would spread over modules reaching into each other's fields.  A tenth of it
is this docstring.)

Theory of operation
-------------------
:class:`H2Connection` wraps an ``h2.connection.H2Connection`` (client side, headers as
bytes) and puts a frame scanner of its own in front of it.  Bytes from the server go
through the scanner first; only bytes the scanner has accepted reach h2:

* The 9-byte frame header of every frame is held back (at most 8 bytes buffered) until
  it is complete and checked: length against our ``SETTINGS_MAX_FRAME_SIZE`` (16,384:
  h2 would otherwise buffer a whole announced 16 MiB frame before refusing it), the
  first frame must be the server's SETTINGS, PUSH_PROMISE is refused (push is off),
  a CONTINUATION must continue an open header block and nothing else may interrupt it.
  Then the frame's bytes are collected into a *unit* -- the frame, or the whole header
  block (HEADERS + CONTINUATIONs) -- and h2 gets each unit once it is complete, so the
  events h2 returns for it belong to that unit alone.
* Header blocks are measured from the frame headers: the payload bytes of HEADERS +
  CONTINUATION frames of one block (padding and priority fields included) are summed
  as each frame header arrives, and a frame header that would take the block over
  ``Limits.max_header_bytes`` fails the connection before a byte of that frame is
  passed on.  A block may span at most ``Limits.h2_max_header_frames`` frames (32 by
  default, under h2's own 64), which bounds CONTINUATION floods of tiny or empty
  frames.  The block's size becomes the ``raw_size`` of the head it decodes to.
  A refused block always kills the connection: HPACK state is connection-wide, and a
  block we do not decode leaves the decoder out of step with the server.
* The decoded header list is bounded by hpack's ``max_header_list_size`` (set to
  ``max_header_bytes``, counted as RFC 9113 §6.5.2 does: name + value + 32 per field),
  so an HPACK bomb stops at the first field that crosses it; a metered decoder
  records the figure for the error.
* Control frames (PING, SETTINGS, WINDOW_UPDATE, PRIORITY, RST_STREAM, and also
  GOAWAY and frame types h2 ignores) are counted in a sliding window of
  ``h2_control_window`` seconds of ``now``; more than ``h2_max_control_frames`` fails
  the connection.  DATA frames carrying fewer than 16 bytes of data are counted per
  response; more than ``h2_max_small_data_frames`` fails the connection.

What is charged where.  Every byte received is charged exactly once, in one place (the
unit's owner is decided at its first frame header; :meth:`H2Connection._feed` settles a
unit's bytes once h2 has seen it):

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
  bound="max_unowned_bytes_per_socket")`` before a byte of that frame is passed on
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
window to 1 MiB, and acknowledge data (h2 queues WINDOW_UPDATE when half a window is
consumed) only when :meth:`H2Connection.next_event` returns the ``DataReceived`` that
carried it; a server exceeding a window is a framing failure (h2's FlowControlError).
So the queued body bytes never exceed 1 MiB, whatever the consumer does.  Request
bodies larger than the server's windows are queued and sent as WINDOW_UPDATEs arrive.

GOAWAY from the server: exchanges on streams above its last stream id fail (cause
"refused": the server never processed them, a retry is safe -- also when the GOAWAY
carries an error, RFC 9113 s6.8), no more exchanges start, and the others finish (or,
after a GOAWAY with an error, fail "reset").  h2 closes its state machine on any
GOAWAY (python-hyper/h2#1181), so after a graceful (NO_ERROR) GOAWAY with streams still
in flight the machine puts h2's connection state back to open.
Our own :meth:`close` sends GOAWAY only once no exchange is in flight, for the same
reason.

Request headers: h2 runs with ``validate_outbound_headers`` and
``normalize_outbound_headers`` off; :mod:`.h2_headers` checks each field the first time the
connection sends it and HPACK-encodes the block itself (constant fields become one-byte
indices), and h2 only frames that block.  ``start`` drops the connection-specific fields
(``host``, ``connection``, ``te`` but ``trailers``...) and refuses a regular field named
like a pseudo-header; a field that fails the check raises ``LocalProtocolError`` before
anything is sent (a bad ``:path`` or ``:authority`` also breaks the connection).  Every
value a server chooses or a hook returns is checked by the layer that takes it before it
can reach a header (``tests/core/test_h2_header_safety.py`` feeds a bad one through each
path); the check here is the backstop.

Every server fault becomes ``ExchangeFailed`` events; a connection-level fault fails
every open exchange with the same ``ConnectionFailed`` and leaves ``is_broken`` true
(the machine then ignores further input).  A ``:status`` that is not three ASCII digits
(h2 passes ``abc`` and ``1zz`` on) fails its exchange as a framing fault.  Nothing
escapes the entry points that take server input (``receive_data``, ``receive_eof``,
``next_event``): they catch any exception at that boundary, which fails every exchange
as ``ConnectionFailed(cause="framing")`` and breaks the connection.  Misuse by the driver raises ``LocalProtocolError`` and leaves the machine as
it was (except an h2 refusal inside ``start``, after which the connection is broken).
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hpack
import hpack.table
from hpack.struct import HeaderTuple

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
from .h2_headers import PseudoHeaderRefused, RequestEncoder

__all__ = [
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

_DATA, _HEADERS, _PUSH_PROMISE, _SETTINGS, _CONTINUATION = 0x0, 0x1, 0x5, 0x4, 0x9
_END_HEADERS, _ACK = 0x4, 0x1
_DROPPED_HEADERS = frozenset(
    {
        b"host",
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
    }
)
_BODY_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})
_MAX_STREAM_ID = 2**31 - 1
_MAX_SHOWN = 40  # bytes of a bad server value quoted in an error message


class _MeteredDecoder(hpack.Decoder):
    """hpack's decoder, recording the decoded size of the block being decoded.

    hpack refuses a list over ``max_header_list_size`` at the first field crossing it,
    but does not say by how much; ``inflated`` holds the figure it stopped at.
    """

    def __init__(self, max_header_list_size: int) -> None:
        super().__init__(max_header_list_size=max_header_list_size)
        self.inflated = 0

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


@dataclass(slots=True)
class _Exchange:
    exchange_id: int
    stream_id: int
    body: memoryview
    body_sent: int = 0
    informational: int = 0
    small_frames: int = 0
    head_seen: bool = False  # its final head arrived: later framing on it is charged to it
    pending: int = 0  # bytes of frames on its stream before its head, charged after it


@dataclass(slots=True)
class _Queued:
    event: ExchangeEvent
    stream_id: int
    ack: int  # flow-controlled bytes to acknowledge when the event is handed out
    size: int  # bytes this entry holds (body bytes or raw header bytes)


def _framing(message: str) -> ConnectionFailed:
    return ConnectionFailed(message, cause="framing")


class _BlockSlot(hpack.Encoder):
    """h2's ``encoder``: h2 frames the block :class:`RequestEncoder` made for the stream
    being opened (set in ``block`` just before ``send_headers``), and tells our encoder
    of the server's ``SETTINGS_HEADER_TABLE_SIZE``.  We send no trailers and no push, so
    h2 asks for nothing else."""

    def __init__(self, encoder: RequestEncoder) -> None:
        super().__init__()
        self.requests = encoder
        self.block: bytes | None = None

    @property
    def header_table_size(self) -> int:
        return self.requests.table_size

    @header_table_size.setter
    def header_table_size(self, value: int) -> None:
        self.requests.peer_table_size(value)

    def encode(self, headers: object, huffman: bool = True) -> bytes:
        block, self.block = self.block, None
        assert block is not None, "h2 encoded headers the machine did not prepare"
        return block


class _H2(h2.connection.H2Connection):
    # h2 remembers up to 65,536 closed streams (about 240 bytes each) so late frames on
    # them are handled gracefully; a few hundred cover every stream we ever have open.
    MAX_CLOSED_STREAMS = 512


class H2Connection:
    """An HTTP/2 client connection carrying many exchanges (see the module docstring)."""

    def __init__(self, *, limits: Limits, now: float) -> None:
        self._limits = limits
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding=None,
            # our request headers are checked and encoded by h2_headers, once per field
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            split_outbound_cookies=False,
        )
        self._h2 = _H2(config=config)
        self._encoder = RequestEncoder()
        self._slot = _BlockSlot(self._encoder)
        self._h2.encoder = self._slot
        codes = h2.settings.SettingCodes
        self._h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                codes.ENABLE_PUSH: 0,
                codes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                codes.MAX_HEADER_LIST_SIZE: limits.max_header_bytes,
                codes.MAX_CONCURRENT_STREAMS: limits.h2_max_concurrent_streams,
            },
        )
        self._decoder = _MeteredDecoder(limits.max_header_bytes)
        self._h2.decoder = self._decoder
        self._h2.initiate_connection()
        self._h2.increment_flow_control_window(CONNECTION_WINDOW - 65_535)
        self._out = bytearray(self._h2.data_to_send())
        self._exchanges: dict[int, _Exchange] = {}
        self._by_stream: dict[int, _Exchange] = {}
        self._unsent: dict[int, _Exchange] = {}  # exchanges whose body is not all sent
        self._stream_cap = limits.h2_max_concurrent_streams  # and the server's, once known
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
        self._frame_length = 0
        self._frame_ends_block = False
        self._seen_settings = False
        self._block_stream = 0  # 0: no header block open
        self._block_bytes = 0
        self._block_frames = 0
        # the accounting: every byte received is charged to an event, unowned or unsettled
        self._unit = bytearray()  # the current unit (a frame, or a header block) so far
        self._unit_owned = False
        self._unit_stream = 0
        self._unit_charged = 0  # bytes the events of the unit being fed carry
        self._unowned = 0
        self._pending = 0  # sum of the live exchanges' pending bytes
        self._windows_changed = False  # h2 took a unit since request bodies were last sent
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
        last = self._h2.highest_outbound_stream_id + 2
        if last > _MAX_STREAM_ID:  # pragma: no cover - 2**30 requests on one connection
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
        stream_id = self._h2.get_next_available_stream_id()
        self._slot.block = block
        try:  # h2 reads only these two fields itself: the stream's method and authority
            self._h2.send_headers(stream_id, fields[:3:2], end_stream=not body)
        except h2.exceptions.H2Error as exc:  # pragma: no cover - can_start() rules them out
            # (h2 refuses here only past the stream count or in a closed connection state)
            self._broken = True
            raise LocalProtocolError(f"h2 refused to open a stream: {exc}") from exc
        exchange = _Exchange(exchange_id, stream_id, memoryview(body))
        self._exchanges[exchange_id] = exchange
        self._by_stream[stream_id] = exchange
        if body:
            self._unsent[exchange_id] = exchange
            self._send_body(exchange)
        self._pull()

    def cancel(self, exchange_id: int, *, now: float) -> None:
        """Give up on an exchange: RST_STREAM(CANCEL), and no further events for it."""
        exchange = self._exchanges.get(exchange_id)
        if exchange is not None:
            self._forget(exchange)
            self._reset(exchange.stream_id, h2.errors.ErrorCodes.CANCEL)
        kept: deque[_Queued] = deque()
        for item in self._queue:
            if item.event.exchange_id != exchange_id:
                kept.append(item)
                continue
            self._queued_bytes -= item.size
            self._unowned += charged_bytes(item.event)  # nobody will be charged for it now
            self._acknowledge(item)
        self._queue = kept
        self._after_exchange_end()
        self._pull()

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
        """Scan ``data`` frame by frame, checking bounds before h2 sees a frame."""
        self._received += len(data)
        if self.is_broken:
            self._unowned += len(data)
            return
        try:
            self._scan(memoryview(data), now)
        except Exception as exc:  # the boundary: nothing the server sends may escape
            self._crash(exc)

    def abort(self, error: ConnectionFailed) -> None:
        """Give up on the socket without another h2 call (the driver's last resort when
        its reader hits a fault): every exchange in flight fails with ``error``."""
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
        self._delivered += charged_bytes(item.event)
        try:
            self._acknowledge(item)
            self._pull()
        except Exception as exc:  # the boundary: nothing the server sends may escape
            self._crash(exc)
        return item.event

    def data_to_send(self) -> bytes:
        self._pull()
        out = bytes(self._out)
        self._out.clear()
        return out

    # -- the frame scanner -------------------------------------------------------

    def _scan(self, view: memoryview, now: float) -> None:
        """Split ``view`` into frames; every byte goes to the current unit or is unowned.

        A *unit* is one frame, or one header block (HEADERS + its CONTINUATIONs).  Whether
        it is owned is decided at its first frame header: owned when its stream carries a
        live exchange.  The bytes of an unowned unit count as unowned as they arrive; an
        owned unit is settled by :meth:`_feed` once complete.
        """
        index, size = 0, len(view)
        while index < size and not self._broken:
            if not self._in_payload:
                take = min(9 - len(self._frame_header), size - index)
                self._frame_header += view[index : index + take]
                index += take
                if len(self._frame_header) < 9:
                    break
                error = self._check_frame_header(now)
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
        self._pull()

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

    def _check_frame_header(self, now: float) -> ConnectionFailed | None:
        head = self._frame_header
        length = int.from_bytes(head[0:3], "big")
        kind, flags = head[3], head[4]
        stream_id = int.from_bytes(head[5:9], "big") & _MAX_STREAM_ID
        limits = self._limits
        if not self._seen_settings:
            if kind != _SETTINGS or flags & _ACK:
                what = "an HTTP/1.x answer" if head.startswith(b"HTTP/") else "no SETTINGS frame"
                return _framing(f"server did not start HTTP/2 with its SETTINGS ({what})")
            self._seen_settings = True
        if length > MAX_FRAME_SIZE:
            return _framing(
                f"server sent a frame of {length:,} bytes; our SETTINGS_MAX_FRAME_SIZE "
                f"is {MAX_FRAME_SIZE:,}"
            )
        self._frame_length = self._remaining = length
        self._frame_ends_block = False
        if self._block_stream and (kind != _CONTINUATION or stream_id != self._block_stream):
            return _framing(
                f"server interrupted the header block of stream {self._block_stream} "
                f"with a frame of type {kind}"
            )
        if kind in (_HEADERS, _CONTINUATION):
            if kind == _CONTINUATION and not self._block_stream:
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
            self._frame_ends_block = bool(flags & _END_HEADERS)
        elif kind == _PUSH_PROMISE:
            return _framing("server sent PUSH_PROMISE although we disabled server push")
        elif kind != _DATA:
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
        if kind != _CONTINUATION:  # a CONTINUATION belongs to its block's unit
            self._unit_owned = stream_id != 0 and stream_id in self._by_stream
            self._unit_stream = stream_id
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
        """Hand one complete unit to h2 and settle its bytes: what the events it produced
        carry is charged to their exchange; the rest of an owned unit is charged to its
        exchange as framing once that exchange has its head (``DataReceived(b"", n)``),
        and is unowned otherwise."""
        self._unit_charged = 0
        self._feed_h2(unit)
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

    def _feed_h2(self, unit: bytes) -> None:
        try:
            events = self._h2.receive_data(unit)
        except h2.exceptions.DenialOfServiceError:
            limit = self._limits.max_header_bytes
            self._fail_connection(
                budget_exceeded(
                    f"server sent a header block that decodes to more than {limit:,} bytes "
                    f"(Limits.max_header_bytes, counted as HPACK does): "
                    f"{self._decoder.inflated:,} when refused",
                    "max_header_bytes",
                    limit,
                    self._decoder.inflated,
                )
            )
            return
        except h2.exceptions.H2Error as exc:
            self._fail_connection(_framing(f"server broke the HTTP/2 protocol: {exc}"))
            return
        for event in events:
            self._handle(event, len(unit))
            if self._broken:
                return
        self._windows_changed = True  # bodies may go out: once per read, in _scan

    # -- h2 events -----------------------------------------------------------------

    def _handle(self, event: h2.events.Event, unit_size: int) -> None:
        # the most frequent event first: this runs once per DATA frame
        match event:
            case h2.events.DataReceived():
                self._on_data(self._by_stream.get(event.stream_id), event)
            case h2.events.ResponseReceived():
                exchange = self._by_stream.get(event.stream_id)
                if exchange is not None:
                    self._on_response(exchange, event.headers, unit_size)
            case h2.events.StreamEnded():
                exchange = self._by_stream.get(event.stream_id)
                if exchange is not None:
                    self._forget(exchange)
                    if exchange.body_sent < len(exchange.body):
                        self._reset(exchange.stream_id, h2.errors.ErrorCodes.CANCEL)
                    self._push(ResponseEnded(exchange_id=exchange.exchange_id), exchange.stream_id)
                    self._after_exchange_end()
            case h2.events.InformationalResponseReceived():
                exchange = self._by_stream.get(event.stream_id)
                if exchange is not None:
                    self._on_informational(exchange, event.headers, unit_size)
            case h2.events.TrailersReceived():
                exchange = self._by_stream.get(event.stream_id)
                if exchange is not None:
                    _, headers = _split(event.headers)
                    self._push(
                        TrailersReceived(
                            exchange_id=exchange.exchange_id, headers=headers, raw_size=unit_size
                        ),
                        exchange.stream_id,
                        size=unit_size,
                    )
            case h2.events.StreamReset():
                exchange = self._by_stream.get(event.stream_id)
                if exchange is not None:
                    self._on_stream_reset(exchange, event)
            case h2.events.ConnectionTerminated():
                self._on_goaway(event)
            case h2.events.RemoteSettingsChanged():
                peer = self._h2.remote_settings.max_concurrent_streams
                self._stream_cap = min(peer, self._limits.h2_max_concurrent_streams)
            case _:
                # h2 types its events as an open base class (h2.events.Event), not a closed
                # union, so there is no assert_never here: the others (settings, pings,
                # window updates, priority, ALTSVC, unknown frames) h2 handles itself.
                pass

    def _on_informational(
        self, exchange: _Exchange, raw: list[tuple[bytes, bytes]], unit_size: int
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
        status, headers = _split(raw)
        if status is None or not 100 <= status <= 199:
            self._bad_status(exchange, raw)
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
        )

    def _on_response(
        self, exchange: _Exchange, raw: list[tuple[bytes, bytes]], unit_size: int
    ) -> None:
        status, headers = _split(raw)
        if status is None or not 200 <= status <= 999:
            self._bad_status(exchange, raw)
            return
        exchange.head_seen = True
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
        )
        if exchange.pending:  # frames on its stream before the head: its framing
            self._push(
                DataReceived(exchange_id=exchange.exchange_id, data=b"", overhead=exchange.pending),
                exchange.stream_id,
            )
            self._unit_charged -= exchange.pending  # earlier units' bytes, not this one's
            self._pending -= exchange.pending
            exchange.pending = 0

    def _on_stream_reset(self, exchange: _Exchange, event: h2.events.StreamReset) -> None:
        code = _code_name(event.error_code)
        if event.remote_reset:
            refused = event.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
            error = ConnectionFailed(
                f"server reset stream {exchange.stream_id} ({code})"
                + ("; the request was not processed, a retry is safe" if refused else ""),
                cause="refused" if refused else "reset",
            )
        else:
            error = _framing(f"server broke HTTP/2 on stream {exchange.stream_id} ({code})")
        self._fail_exchange(exchange, error, reset=False)

    def _on_data(self, exchange: _Exchange | None, event: h2.events.DataReceived) -> None:
        data: bytes = event.data
        ack: int = event.flow_controlled_length  # the whole payload: data + padding
        if exchange is None:  # a stream we gave up on: give the window back at once
            self._acknowledge_raw(ack, event.stream_id)
            return
        if len(data) < SMALL_DATA_FRAME:
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
        overhead = 9 + ack - len(data)  # frame header, Pad Length byte, padding
        self._push(
            DataReceived(exchange_id=exchange.exchange_id, data=data, overhead=overhead),
            exchange.stream_id,
            ack=ack,
            size=len(data),
        )

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> None:
        self._closing = True
        last: int = event.last_stream_id or 0
        code = _code_name(int(event.error_code or 0))
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
                    reset=False,
                )
        if event.error_code:
            self._fail_connection(
                ConnectionFailed(
                    f"server sent GOAWAY ({code}, last stream {last})"
                    + (" with the exchanges at or below it in flight" if self._exchanges else ""),
                    cause="reset",
                )
            )
            return
        if self._exchanges:
            # h2 closes its state machine on any GOAWAY (python-hyper/h2#1181); the
            # streams the server kept may still finish, so reopen it for them.
            self._h2.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN

    # -- helpers -------------------------------------------------------------------

    def _push(self, event: ExchangeEvent, stream_id: int, *, ack: int = 0, size: int = 0) -> None:
        self._queue.append(_Queued(event, stream_id, ack, size))
        self._queued_bytes += size
        self._unit_charged += charged_bytes(event)

    def _bad_status(self, exchange: _Exchange, raw: list[tuple[bytes, bytes]]) -> None:
        value = next((bytes(v) for n, v in raw if n == b":status"), b"")
        self._fail_exchange(
            exchange,
            _framing(
                f"server sent the :status {value[:_MAX_SHOWN]!r} on stream "
                f"{exchange.stream_id}; a status is three digits"
            ),
        )

    def _crash(self, exc: Exception) -> None:
        """A fault that got past every check (an h2/hpack bug, an unforeseen input): the
        connection is done, its exchanges fail as framing faults, and the bytes nobody was
        charged for count as unowned."""
        self.abort(_framing(f"server input broke the HTTP/2 machine ({type(exc).__name__}: {exc})"))
        charged = sum(charged_bytes(item.event) for item in self._queue) + self._delivered
        self._unowned = self._received - charged
        self._clear_scanner()

    def _forget(self, exchange: _Exchange) -> None:
        del self._exchanges[exchange.exchange_id]
        del self._by_stream[exchange.stream_id]
        self._unsent.pop(exchange.exchange_id, None)
        self._unowned += exchange.pending  # no head will carry them now
        self._pending -= exchange.pending
        exchange.pending = 0

    def _fail_exchange(
        self, exchange: _Exchange, error: ConnectionFailed, *, reset: bool = True
    ) -> None:
        self._forget(exchange)
        if reset:
            self._reset(exchange.stream_id, h2.errors.ErrorCodes.CANCEL)
        self._push(ExchangeFailed(exchange_id=exchange.exchange_id, error=error), 0)
        self._after_exchange_end()

    def _fail_connection(self, error: ConnectionFailed) -> None:
        if not self._broken and self._h2.state_machine.state != (
            h2.connection.ConnectionState.CLOSED
        ):
            code = h2.errors.ErrorCodes.PROTOCOL_ERROR
            if error.cause == "budget":
                code = h2.errors.ErrorCodes.ENHANCE_YOUR_CALM
            self._h2.close_connection(error_code=code)
        self._broken = True
        self._unowned += self._partial_bytes()  # and _forget moves each pending count
        self._clear_scanner()
        self._pull()
        for exchange in list(self._exchanges.values()):
            self._forget(exchange)
            self._push(ExchangeFailed(exchange_id=exchange.exchange_id, error=error), 0)

    def _after_exchange_end(self) -> None:
        if self._goaway_pending and not self._exchanges and not self._broken:
            self._goaway_pending = False
            self._h2.close_connection()
            self._pull()

    def _reset(self, stream_id: int, code: int) -> None:
        with contextlib.suppress(h2.exceptions.H2Error):  # already closed on h2's side
            self._h2.reset_stream(stream_id, code)

    def _acknowledge(self, item: _Queued) -> None:
        if item.ack:
            self._acknowledge_raw(item.ack, item.stream_id)

    def _acknowledge_raw(self, size: int, stream_id: int) -> None:
        if size and not self._broken:
            with contextlib.suppress(h2.exceptions.H2Error):  # h2 closed: nothing to give back
                self._h2.acknowledge_received_data(size, stream_id)

    def _send_bodies(self) -> None:
        for exchange in list(self._unsent.values()):
            self._send_body(exchange)

    def _send_body(self, exchange: _Exchange) -> None:
        """As much of ``exchange``'s body as the windows allow (END_STREAM on the last)."""
        total = len(exchange.body)
        while exchange.body_sent < total:
            window = self._h2.local_flow_control_window(exchange.stream_id)
            size = min(window, self._h2.max_outbound_frame_size, total - exchange.body_sent)
            if size <= 0:
                return
            chunk = exchange.body[exchange.body_sent : exchange.body_sent + size]
            exchange.body_sent += size
            self._h2.send_data(
                exchange.stream_id, bytes(chunk), end_stream=exchange.body_sent == total
            )
        del self._unsent[exchange.exchange_id]

    def _pull(self) -> None:
        self._out += self._h2.data_to_send()


def _split(raw: list[tuple[bytes, bytes]]) -> tuple[int | None, Headers]:
    """The :status of an h2 header list (None unless exactly three ASCII digits) and its
    regular fields."""
    status: int | None = None
    headers: list[tuple[bytes, bytes]] = []
    for name, value in raw:
        if name == b":status":
            text = bytes(value)
            status = int(text) if len(text) == 3 and text.isdigit() else None
        else:  # h2 admits no other pseudo-header in a response
            headers.append((bytes(name), bytes(value)))
    return status, tuple(headers)


def _code_name(code: int) -> str:
    try:
        return h2.errors.ErrorCodes(code).name
    except ValueError:
        return f"error code {code:#x}"


_WIRE: type[Wire] = H2Connection  # mypy checks the machine against the Wire protocol
