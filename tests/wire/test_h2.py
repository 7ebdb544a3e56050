"""The HTTP/2 client machine, driven by h2's server side and by hand-built frames."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import hpack
import hpack.table
import pytest
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import ConnectionFailed, LocalProtocolError
from sansmcp.core.http import (
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    HttpRequest,
    InformationalReceived,
    ResponseEnded,
    ResponseReceived,
    TrailersReceived,
)
from sansmcp.core.limits import Limits
from sansmcp.core.wire.h2 import CONNECTION_WINDOW, MAX_FRAME_SIZE, STREAM_WINDOW, H2Connection
from tests.tiers import examples

GET = HttpRequest(method=b"GET", scheme=b"http", authority=b"example:80", target=b"/mcp")
HEAD_BLOCK = 64 << 10
# what the machine may hold at worst while a failure is being detected: a partial
# frame, an open header block, and a little output (SETTINGS/PING ACKs, GOAWAY)
SCAN_BOUND = 9 + MAX_FRAME_SIZE + HEAD_BLOCK + 4096

Feeder = Callable[[H2Connection, bytes], int]


def feed_whole(conn: H2Connection, data: bytes, now: float = 0.0) -> int:
    """Feed ``data`` at once; return the most the machine held after a call (all feeders)."""
    conn.receive_data(data, now=now)
    return conn.buffered_bytes()


def feed_bytewise(conn: H2Connection, data: bytes, now: float = 0.0) -> int:
    peak = 0
    for i in range(len(data)):
        conn.receive_data(data[i : i + 1], now=now)
        peak = max(peak, conn.buffered_bytes())
    return peak


def feed_random(conn: H2Connection, data: bytes, now: float = 0.0) -> int:
    rng = random.Random(len(data))
    i = peak = 0
    while i < len(data):
        step = rng.randint(1, 40)
        conn.receive_data(data[i : i + step], now=now)
        peak = max(peak, conn.buffered_bytes())
        i += step
    return peak


FEEDERS = [feed_whole, feed_bytewise, feed_random]
FEED_IDS = ["whole", "bytewise", "random"]


def drain(conn: H2Connection) -> list[ExchangeEvent]:
    events = []
    while (event := conn.next_event()) is not None:
        events.append(event)
    return events


def frames_of(data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    """(type, flags, stream id, payload) of each frame in ``data`` (a test-side parser)."""
    i = 0
    while i + 9 <= len(data):
        length = int.from_bytes(data[i : i + 3], "big")
        yield (
            data[i + 3],
            data[i + 4],
            int.from_bytes(data[i + 5 : i + 9], "big"),
            data[i + 9 : i + 9 + length],
        )
        i += 9 + length


def data_frame_bytes(data: bytes, stream_id: int) -> int:
    """Differential oracle: the wire bytes (header + payload) of a stream's DATA frames."""
    return sum(
        9 + len(p) for kind, _, sid, p in frames_of(data) if kind == 0x0 and sid == stream_id
    )


def body_charge(events: list[ExchangeEvent]) -> int:
    return sum(len(e.data) + e.overhead for e in events if isinstance(e, DataReceived))


def header_block_sizes(data: bytes) -> list[int]:
    """Differential oracle: HEADERS + CONTINUATION wire bytes (frame headers included)
    per block, as sent."""
    sizes: list[int] = []
    current = 0
    for kind, flags, _, payload in frames_of(data):
        if kind in (0x1, 0x9):
            current += 9 + len(payload)
            if flags & 0x4:
                sizes.append(current)
                current = 0
    return sizes


class Pair:
    """Our client machine and an h2 server, with the handshake done."""

    def __init__(self, limits: Limits | None = None, **server_settings: int) -> None:
        self.client = H2Connection(limits=limits or Limits(), now=0.0)
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        self.server = h2.connection.H2Connection(config=config)
        self.server.initiate_connection()
        if server_settings:
            self.server.update_settings(
                {getattr(h2.settings.SettingCodes, k): v for k, v in server_settings.items()}
            )
        self.server_events = self.server.receive_data(self.client.data_to_send())
        self.preface = self.server.data_to_send()

    def handshake(self) -> None:
        self.client.receive_data(self.preface, now=0.0)
        self.to_server()

    def to_server(self) -> list[h2.events.Event]:
        events: list[h2.events.Event] = self.server.receive_data(self.client.data_to_send())
        return events

    def start(self, exchange_id: int, request: HttpRequest = GET) -> int:
        self.client.start(exchange_id, request, now=0.0)
        events = self.to_server()
        return next(e.stream_id for e in events if isinstance(e, h2.events.RequestReceived))


def failure(events: list[ExchangeEvent]) -> ConnectionFailed:
    failed = [e for e in events if isinstance(e, ExchangeFailed)]
    assert failed, events
    return failed[-1].error


def assert_error(error: ConnectionFailed, cause: str, bound: str | None, limit: float | None,
                 observed: float | None) -> None:  # fmt: skip
    assert (error.cause, error.bound, error.limit, error.observed) == (
        cause,
        bound,
        limit,
        observed,
    ), error.message


def raw(frame: Frame) -> bytes:
    data: bytes = frame.serialize()
    return data


# -- handshake and a plain exchange ------------------------------------------------


def test_preface_settings_and_windows() -> None:
    pair = Pair()
    changed = pair.server_events[0]
    assert isinstance(changed, h2.events.RemoteSettingsChanged)
    values = {k: v.new_value for k, v in changed.changed_settings.items()}
    codes = h2.settings.SettingCodes
    assert values[codes.ENABLE_PUSH] == 0
    assert values[codes.INITIAL_WINDOW_SIZE] == STREAM_WINDOW
    assert values[codes.MAX_HEADER_LIST_SIZE] == HEAD_BLOCK
    update = pair.server_events[1]
    assert isinstance(update, h2.events.WindowUpdated)
    assert update.delta == CONNECTION_WINDOW - 65_535
    pair.handshake()
    assert pair.client.can_start() and pair.client.is_idle and not pair.client.is_broken


@pytest.mark.parametrize("feeder", FEEDERS, ids=FEED_IDS)
def test_exchange_with_1xx_continuation_body_trailers(feeder: Feeder) -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(7)
    server = pair.server
    server.send_headers(sid, [(b":status", b"103"), (b"link", b"</a>")])
    big = [(b"x-big-%d" % i, b"v" * 1000) for i in range(40)]  # ~40 KiB: CONTINUATIONs
    server.send_headers(sid, [(b":status", b"200"), (b"content-type", b"text/plain"), *big])
    server.send_data(sid, b"hello ")
    server.send_data(sid, b"world, this is a body")
    server.send_headers(sid, [(b"x-trailer", b"1")], end_stream=True)
    wire = server.data_to_send()
    sizes = header_block_sizes(wire)
    assert len(sizes) == 3 and sizes[1] > MAX_FRAME_SIZE  # the final head spans frames
    feeder(pair.client, wire)
    events = drain(pair.client)
    assert events == [
        InformationalReceived(exchange_id=7, status=103, headers=((b"link", b"</a>"),),
                              raw_size=sizes[0]),
        ResponseReceived(exchange_id=7, status=200,
                         headers=((b"content-type", b"text/plain"), *big),
                         raw_size=sizes[1], http_version=b"2"),
        DataReceived(exchange_id=7, data=b"hello ", overhead=9),
        DataReceived(exchange_id=7, data=b"world, this is a body", overhead=9),
        TrailersReceived(exchange_id=7, headers=((b"x-trailer", b"1"),), raw_size=sizes[2]),
        ResponseEnded(exchange_id=7),
    ]  # fmt: skip
    assert pair.client.is_idle and pair.client.can_start()
    assert pair.client.buffered_bytes() == len(pair.client.data_to_send())


def test_padded_headers_raw_size_counts_padding() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    block = b"\x08\x03200"  # literal without indexing, name index 8 (:status), "200"
    flags = ["END_HEADERS", "END_STREAM", "PADDED"]
    frame = HeadersFrame(sid, data=block, pad_length=200, flags=flags)
    wire = raw(frame)
    feed_bytewise(pair.client, wire)
    events = drain(pair.client)
    assert events[0] == ResponseReceived(
        exchange_id=1, status=200, headers=(), raw_size=len(wire), http_version=b"2"
    )
    assert events[0].raw_size == 9 + 1 + len(block) + 200
    assert events[1] == ResponseEnded(exchange_id=1)


def test_two_streams_interleaved() -> None:
    pair = Pair()
    pair.handshake()
    a, b = pair.start(1), pair.start(2)
    server = pair.server
    server.send_headers(b, [(b":status", b"201")])
    server.send_headers(a, [(b":status", b"200")])
    server.send_data(a, b"a1")
    server.send_data(b, b"b1")
    server.send_data(a, b"a2", end_stream=True)
    server.send_data(b, b"b2", end_stream=True)
    wire = server.data_to_send()
    sizes = header_block_sizes(wire)
    feed_random(pair.client, wire)
    events = drain(pair.client)
    assert events == [
        ResponseReceived(exchange_id=2, status=201, headers=(), raw_size=sizes[0],
                         http_version=b"2"),
        ResponseReceived(exchange_id=1, status=200, headers=(), raw_size=sizes[1],
                         http_version=b"2"),
        DataReceived(exchange_id=1, data=b"a1", overhead=9),
        DataReceived(exchange_id=2, data=b"b1", overhead=9),
        DataReceived(exchange_id=1, data=b"a2", overhead=9),
        ResponseEnded(exchange_id=1),
        DataReceived(exchange_id=2, data=b"b2", overhead=9),
        ResponseEnded(exchange_id=2),
    ]  # fmt: skip


@pytest.mark.parametrize("feeder", FEEDERS, ids=FEED_IDS)
def test_data_frame_headers_and_padding_are_overhead(feeder: Feeder) -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    pair.server.send_headers(sid, [(b":status", b"200")])
    head = pair.server.data_to_send()
    frames = [
        DataFrame(sid, data=b"x" * 16, pad_length=255, flags=["PADDED"]),  # 16 + 256 padding
        DataFrame(sid, data=b"y" * 100, pad_length=0, flags=["PADDED"]),  # Pad Length only
        DataFrame(sid, data=b"", pad_length=200, flags=["PADDED"]),  # padding, no data
        DataFrame(sid, data=b"z" * 5000),  # no padding
        DataFrame(sid, data=b"", pad_length=7, flags=["PADDED", "END_STREAM"]),
    ]
    body_wire = b"".join(raw(f) for f in frames)
    assert data_frame_bytes(body_wire, sid) == len(body_wire)
    feeder(pair.client, head + body_wire)
    events = drain(pair.client)
    assert isinstance(events[0], ResponseReceived) and isinstance(events[-1], ResponseEnded)
    data = [(e.data, e.overhead) for e in events if isinstance(e, DataReceived)]
    assert data == [
        (b"x" * 16, 9 + 256),
        (b"y" * 100, 9 + 1),
        (b"", 9 + 201),
        (b"z" * 5000, 9),
        (b"", 9 + 8),
    ]
    assert body_charge(events) == len(body_wire)  # every byte of every DATA frame, once
    # nothing is held once the events are taken
    assert pair.client.is_idle and pair.client.buffered_bytes() == len(pair.client.data_to_send())


def test_data_on_a_cancelled_stream_is_not_an_event() -> None:
    pair = Pair()
    pair.handshake()
    a, b = pair.start(1), pair.start(2)
    pair.client.cancel(2, now=0.0)
    pair.to_server()
    wire = raw(HeadersFrame(a, data=b"\x88", flags=["END_HEADERS"]))  # :status 200
    wire += raw(DataFrame(b, data=b"gone", pad_length=9, flags=["PADDED"]))
    wire += raw(DataFrame(a, data=b"kept", pad_length=3, flags=["PADDED", "END_STREAM"]))
    feed_whole(pair.client, wire)
    events = drain(pair.client)
    assert [e.exchange_id for e in events] == [1, 1, 1]
    assert events[1] == DataReceived(exchange_id=1, data=b"kept", overhead=9 + 4)


# -- header bounds -----------------------------------------------------------------


@pytest.mark.parametrize("feeder", FEEDERS, ids=FEED_IDS)
def test_hpack_bomb_fails_on_decoded_size(feeder: Feeder) -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    other = pair.start(2)
    value = b"a" * 4000
    literal = hpack.Encoder()
    block = b"\x88" + literal.encode([(b"x", value)], huffman=False) + b"\xbe" * 10_000
    assert len(block) < MAX_FRAME_SIZE  # 14 KiB on the wire, 40 MB decoded
    wire = raw(HeadersFrame(sid, data=block, flags=["END_HEADERS"]))
    peak = feeder(pair.client, wire)
    assert peak <= len(wire) + 64  # the 14 KiB block, never its decoded megabytes
    events = drain(pair.client)
    entry = hpack.table.table_entry_size(b"x", value)
    status = hpack.table.table_entry_size(b":status", b"200")
    crossing = (HEAD_BLOCK - status) // entry + 1  # the field that crosses the bound
    error = failure(events)
    assert_error(error, "budget", "max_header_bytes", HEAD_BLOCK, status + crossing * entry)
    assert "decodes to more than 65,536 bytes" in error.message
    assert {e.exchange_id for e in events if isinstance(e, ExchangeFailed)} == {1, 2}
    assert other == 3 and pair.client.is_broken
    assert pair.client.buffered_bytes() <= SCAN_BOUND


@pytest.mark.parametrize("feeder", FEEDERS, ids=FEED_IDS)
def test_header_block_over_bound_fails_at_the_frame_header(feeder: Feeder) -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    wire = raw(HeadersFrame(sid, data=b"\x88" * MAX_FRAME_SIZE))
    wire += b"".join(raw(ContinuationFrame(sid, data=b"\x88" * MAX_FRAME_SIZE)) for _ in range(3))
    last = raw(ContinuationFrame(sid, data=b"\x88", flags=["END_HEADERS"]))
    peak = feeder(pair.client, wire + last[:8])
    assert peak <= HEAD_BLOCK + 4 * 9 + 9 + 16  # the block's frames held, the header held back
    assert drain(pair.client) == [] and not pair.client.is_broken
    assert pair.client.buffered_bytes() <= 9 + HEAD_BLOCK + 64
    pair.client.receive_data(last[8:9], now=0.0)  # the byte that completes the header
    error = failure(drain(pair.client))
    assert_error(error, "budget", "max_header_bytes", HEAD_BLOCK, HEAD_BLOCK + 1)
    assert error.message.startswith("server sent a header block of more than 65,536 bytes")
    assert pair.client.is_broken and pair.client.buffered_bytes() <= SCAN_BOUND
    goaway = [f for f in frames_of(pair.client.data_to_send()) if f[0] == 0x7]
    assert int.from_bytes(goaway[0][3][4:8], "big") == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


@pytest.mark.parametrize("feeder", FEEDERS, ids=FEED_IDS)
def test_continuation_flood_fails_on_frame_count(feeder: Feeder) -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    wire = raw(HeadersFrame(sid, data=b"\x88"))
    wire += raw(ContinuationFrame(sid, data=b"")) * 10_000
    peak = feeder(pair.client, wire)
    assert peak <= 32 * 9 + 64  # the block's 32 frames, held until it ends
    error = failure(drain(pair.client))
    assert_error(error, "budget", "h2_max_header_frames", 32, 33)
    assert pair.client.buffered_bytes() <= 9 * 2 + 64


def test_trailers_are_header_blocks_too() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    pair.server.send_headers(sid, [(b":status", b"200")])
    feed_whole(pair.client, pair.server.data_to_send())
    big = raw(HeadersFrame(sid, data=b"\x00" * MAX_FRAME_SIZE, flags=["END_STREAM"]))
    more = raw(ContinuationFrame(sid, data=b"\x00" * MAX_FRAME_SIZE)) * 4
    feed_random(pair.client, big + more)
    events = drain(pair.client)
    assert isinstance(events[0], ResponseReceived)
    assert_error(failure(events), "budget", "max_header_bytes", HEAD_BLOCK, 5 * MAX_FRAME_SIZE)


def test_informational_flood_fails_the_exchange_only() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    for _ in range(9):
        pair.server.send_headers(sid, [(b":status", b"103")])
    feed_bytewise(pair.client, pair.server.data_to_send())
    events = drain(pair.client)
    assert [type(e) for e in events] == [InformationalReceived] * 8 + [ExchangeFailed]
    assert_error(failure(events), "budget", "max_informational", 8, 9)
    assert not pair.client.is_broken and pair.client.can_start()
    assert [f[0] for f in frames_of(pair.client.data_to_send())] == [0x3]  # RST_STREAM
    sid = pair.start(2)
    pair.server.send_headers(sid, [(b":status", b"204")], end_stream=True)
    feed_whole(pair.client, pair.server.data_to_send())
    assert [type(e) for e in drain(pair.client)] == [ResponseReceived, ResponseEnded]


# -- floods --------------------------------------------------------------------------

CONTROL_FRAMES: dict[str, Callable[[int], bytes]] = {
    "PING": lambda sid: raw(PingFrame(0, opaque_data=b"12345678")),
    "SETTINGS": lambda sid: raw(SettingsFrame(0)),
    "WINDOW_UPDATE": lambda sid: raw(WindowUpdateFrame(0, window_increment=1)),
    "PRIORITY": lambda sid: raw(PriorityFrame(sid, depends_on=0, stream_weight=16)),
    "RST_STREAM": lambda sid: raw(RstStreamFrame(sid, error_code=0)),
    "UNKNOWN": lambda sid: b"\x00\x00\x01\xfa\x00\x00\x00\x00\x00x",
}


@pytest.mark.parametrize("kind", sorted(CONTROL_FRAMES))
@pytest.mark.parametrize("feeder", FEEDERS, ids=FEED_IDS)
def test_control_frame_flood(kind: str, feeder: Feeder) -> None:
    limit = 40
    pair = Pair(Limits(h2_max_control_frames=limit))
    already = len(list(frames_of(pair.preface)))  # the server's SETTINGS (+ ACK)
    pair.handshake()
    sid = pair.start(1)
    pair.client.cancel(1, now=0.0)  # RST_STREAM floods target a stream we reset
    flood = CONTROL_FRAMES[kind](sid)
    allowed = limit - already
    peak = feeder(pair.client, flood * allowed)
    assert peak <= 17 * limit + 64  # at worst, one PING ACK per PING waiting to be sent
    assert not pair.client.is_broken
    sid = pair.start(2)
    peak = max(peak, feeder(pair.client, flood))
    assert peak <= 17 * limit + 64
    error = failure(drain(pair.client))
    assert_error(error, "budget", "h2_max_control_frames", limit, limit + 1)
    assert "more than 40 control frames in 10 s" in error.message
    assert pair.client.is_broken
    assert pair.client.buffered_bytes() <= 17 * limit + 64 + 9


def test_control_frames_window_slides_with_now() -> None:
    pair = Pair(Limits(h2_max_control_frames=10, h2_control_window=10.0))
    pair.client.receive_data(pair.preface, now=0.0)  # 2 frames at t=0
    ping = raw(PingFrame(0, opaque_data=b"12345678"))
    pair.client.receive_data(ping * 8, now=1.0)  # 10 in the window
    pair.client.receive_data(ping * 2, now=10.0)  # the two at t=0 slid out
    assert not pair.client.is_broken
    pair.client.receive_data(ping, now=10.5)
    assert pair.client.is_broken


@pytest.mark.parametrize("feeder", FEEDERS, ids=FEED_IDS)
def test_small_data_frame_flood(feeder: Feeder) -> None:
    pair = Pair(Limits(h2_max_small_data_frames=20))
    pair.handshake()
    sid = pair.start(1)
    pair.server.send_headers(sid, [(b":status", b"200")])
    feed_whole(pair.client, pair.server.data_to_send())
    peak = feeder(pair.client, raw(DataFrame(sid, data=b"x")) * 10 + raw(DataFrame(sid)) * 10)
    events = drain(pair.client)
    # empty DATA frames make events that carry only their framing
    assert len(events) == 1 + 20
    assert events[11:] == [DataReceived(exchange_id=1, data=b"", overhead=9)] * 10
    assert not pair.client.is_broken
    peak = max(peak, feeder(pair.client, raw(DataFrame(sid, data=b"0123456789abcde"))))
    assert peak <= 64
    error = failure(drain(pair.client))
    assert_error(error, "budget", "h2_max_small_data_frames", 20, 21)
    assert pair.client.buffered_bytes() <= 64 + 9


# -- framing -------------------------------------------------------------------------


@pytest.mark.parametrize("feeder", FEEDERS, ids=FEED_IDS)
def test_oversized_frame_fails_at_its_header(feeder: Feeder) -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    header = (MAX_FRAME_SIZE + 1).to_bytes(3, "big") + b"\x00\x00" + sid.to_bytes(4, "big")
    assert feeder(pair.client, header + b"x" * 100) <= 9 + 64
    error = failure(drain(pair.client))
    assert_error(error, "framing", None, None, None)
    assert "16,385 bytes" in error.message
    assert pair.client.buffered_bytes() <= 9 + 64


@pytest.mark.parametrize(
    ("wire", "text"),
    [
        (b"HTTP/1.1 400 Bad Request\r\n\r\n", "HTTP/1.x"),
        (raw(SettingsFrame(0, flags=["ACK"])), "no SETTINGS"),
        (raw(PingFrame(0)), "no SETTINGS"),
    ],
)
def test_bad_server_preface(wire: bytes, text: str) -> None:
    pair = Pair()
    pair.client.start(1, GET, now=0.0)
    feed_bytewise(pair.client, wire)
    error = failure(drain(pair.client))
    assert_error(error, "framing", None, None, None)
    assert text in error.message and pair.client.is_broken
    pair.client.receive_data(b"more", now=0.0)  # ignored once broken
    pair.client.receive_eof(now=0.0)
    assert drain(pair.client) == []


@pytest.mark.parametrize(
    "wire",
    [
        b"\x00\x00\x01\x00\x00\x00\x00\x00\x00x",  # DATA on stream 0: h2 refuses it
        raw(ContinuationFrame(1, data=b"", flags=["END_HEADERS"])),
        raw(HeadersFrame(1, data=b"\x88")) + raw(PingFrame(0)),
        raw(HeadersFrame(1, data=b"\x88")) + raw(ContinuationFrame(3, data=b"")),
        b"\x00\x00\x04\x05\x04\x00\x00\x00\x01\x00\x00\x00\x02",  # PUSH_PROMISE
        raw(HeadersFrame(1, data=b"\xff\xff\xff\xff", flags=["END_HEADERS"])),  # bad HPACK
        # h2 refuses the first frame while the scanner refuses the second's header
        b"\x00\x00\x01\x00\x00\x00\x00\x00\x00x" + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01",
    ],
)
def test_protocol_errors_are_framing_failures(wire: bytes) -> None:
    pair = Pair()
    pair.handshake()
    pair.start(1)
    feed_random(pair.client, wire)
    error = failure(drain(pair.client))
    assert error.cause == "framing" and pair.client.is_broken
    assert pair.client.buffered_bytes() <= 4096


def test_server_cannot_exceed_our_stream_window() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    pair.server.send_headers(sid, [(b":status", b"200")])
    feed_whole(pair.client, pair.server.data_to_send())
    chunk = raw(DataFrame(sid, data=b"z" * MAX_FRAME_SIZE))
    feed_random(pair.client, chunk * (STREAM_WINDOW // MAX_FRAME_SIZE))
    assert not pair.client.is_broken
    assert pair.client.buffered_bytes() <= STREAM_WINDOW + 4096
    pair.client.receive_data(raw(DataFrame(sid, data=b"!")), now=0.0)
    error = failure(drain(pair.client))
    assert error.cause == "framing" and "flow control" in error.message.lower()


# -- flow control ----------------------------------------------------------------------


def test_window_update_only_when_data_is_taken() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    server = pair.server
    server.send_headers(sid, [(b":status", b"200")])
    while server.local_flow_control_window(sid) > 0:
        size = min(server.local_flow_control_window(sid), MAX_FRAME_SIZE)
        server.send_data(sid, b"d" * size)
    assert server.local_flow_control_window(sid) == 0  # the whole 256 KiB window sent
    feed_random(pair.client, server.data_to_send())
    assert pair.client.data_to_send() == b""  # nothing taken, nothing acknowledged
    pair.client.receive_data(raw(DataFrame(sid, data=b"1234"))[:11], now=0.0)  # 2 bytes in
    assert pair.client.buffered_bytes() == STREAM_WINDOW + 10 + 11  # body, head, partial
    pair.client.receive_data(b"34", now=0.0)  # the window is full: the 4 bytes overflow it
    assert pair.client.is_broken
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    server = pair.server
    server.send_headers(sid, [(b":status", b"200")])
    while server.local_flow_control_window(sid) > 0:
        size = min(server.local_flow_control_window(sid), MAX_FRAME_SIZE)
        server.send_data(sid, b"d" * size)
    feed_random(pair.client, server.data_to_send())
    assert pair.client.buffered_bytes() == STREAM_WINDOW + 10  # + the head (9 + 1 bytes)
    first = pair.client.next_event()
    assert isinstance(first, ResponseReceived)
    taken = 0
    while taken < STREAM_WINDOW // 2:
        event = pair.client.next_event()
        assert isinstance(event, DataReceived)
        taken += len(event.data)
    updates = [f for f in frames_of(pair.client.data_to_send()) if f[0] == 0x8]
    assert {f[2] for f in updates} == {sid}  # stream window reopened, not yet the conn's
    drain(pair.client)
    assert pair.client.buffered_bytes() <= 64


def test_cancel_sends_rst_stream_and_drops_events() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    pair.server.send_headers(sid, [(b":status", b"200")])
    pair.server.send_data(sid, b"x" * 1000)
    feed_whole(pair.client, pair.server.data_to_send())
    pair.client.cancel(1, now=0.0)
    assert pair.client.next_event() is None and pair.client.is_idle
    frames = list(frames_of(pair.client.data_to_send()))
    rst = [f for f in frames if f[0] == 0x3]
    assert rst and int.from_bytes(rst[0][3], "big") == h2.errors.ErrorCodes.CANCEL
    # data in flight for the cancelled stream: no events, window handed back
    pair.client.receive_data(raw(DataFrame(sid, data=b"y" * 6000)), now=0.0)
    assert drain(pair.client) == [] and pair.client.buffered_bytes() <= 64
    pair.client.cancel(99, now=0.0)  # unknown: no-op
    assert not pair.client.is_broken and pair.client.can_start()


def test_cancel_keeps_other_exchanges_events() -> None:
    pair = Pair()
    pair.handshake()
    a, b = pair.start(1), pair.start(2)
    assert pair.client.active_exchanges == 2
    for sid in (a, b):
        pair.server.send_headers(sid, [(b":status", b"200")])
        pair.server.send_data(sid, b"body")
    feed_whole(pair.client, pair.server.data_to_send())
    pair.client.cancel(1, now=0.0)
    assert [(type(e), e.exchange_id) for e in drain(pair.client)] == [
        (ResponseReceived, 2),
        (DataReceived, 2),
    ]
    assert pair.client.active_exchanges == 1
    pair.client.receive_eof(now=0.0)
    pair.client.cancel(2, now=0.0)  # after the connection died: nothing to send
    assert drain(pair.client) == [] and pair.client.is_broken
    pair.client.close(now=0.0)
    assert pair.client.is_broken


def test_stream_level_error_from_h2_fails_that_exchange() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    feed_random(pair.client, raw(WindowUpdateFrame(sid, window_increment=2**31 - 1)))
    error = failure(drain(pair.client))
    assert error.cause == "framing" and "FLOW_CONTROL_ERROR" in error.message
    assert not pair.client.is_broken


def test_h2_refusing_request_headers_breaks_the_connection() -> None:
    pair = Pair()
    pair.handshake()
    request = HttpRequest(method=b"GET", scheme=b"http", authority=b"h", target=b"")
    with pytest.raises(LocalProtocolError, match="empty :path"):
        pair.client.start(1, request, now=0.0)
    assert pair.client.is_broken and not pair.client.can_start()


def test_large_request_body_waits_for_window() -> None:
    pair = Pair()
    pair.handshake()
    body = bytes(range(256)) * 800  # 200 KiB, over the server's 64 KiB windows
    request = HttpRequest(method=b"POST", scheme=b"https", authority=b"h", target=b"/",
                          headers=((b"content-type", b"application/json"),), body=body)  # fmt: skip
    pair.client.start(1, request, now=0.0)
    assert pair.client.buffered_bytes() > len(body) - 70_000
    received = bytearray()
    ended = False
    for _ in range(20):
        for event in pair.to_server():
            if isinstance(event, h2.events.DataReceived):
                received += event.data
                pair.server.acknowledge_received_data(event.flow_controlled_length,
                                                      event.stream_id)  # fmt: skip
            ended = ended or isinstance(event, h2.events.StreamEnded)
        pair.client.receive_data(pair.server.data_to_send(), now=0.0)
        if ended:
            break
    assert ended and bytes(received) == body
    assert pair.client.buffered_bytes() == 0


def test_response_ending_before_body_sent_resets_the_stream() -> None:
    pair = Pair()
    pair.handshake()
    request = HttpRequest(method=b"POST", scheme=b"http", authority=b"h", target=b"/",
                          body=b"b" * 100_000)  # fmt: skip
    sid = pair.start(1, request)
    pair.server.send_headers(sid, [(b":status", b"413")], end_stream=True)
    feed_whole(pair.client, pair.server.data_to_send())
    assert [type(e) for e in drain(pair.client)] == [ResponseReceived, ResponseEnded]
    assert 0x3 in [f[0] for f in frames_of(pair.client.data_to_send())]
    assert pair.client.buffered_bytes() == 0


# -- GOAWAY, reset, EOF, close -----------------------------------------------------------


def test_goaway_fails_unprocessed_streams_and_lets_others_finish() -> None:
    pair = Pair()
    pair.handshake()
    a, b = pair.start(1), pair.start(2)
    pair.server.send_headers(a, [(b":status", b"200")])
    wire = pair.server.data_to_send() + raw(GoAwayFrame(0, last_stream_id=a, error_code=0))
    feed_bytewise(pair.client, wire)
    events = drain(pair.client)
    assert isinstance(events[0], ResponseReceived)
    error = failure(events)
    assert error.cause == "refused" and "retry is safe" in error.message
    assert events[1].exchange_id == 2
    assert not pair.client.can_start() and not pair.client.is_broken
    # a stray DATA frame on the refused stream makes no event; its window is handed back
    pair.server.send_headers(b, [(b":status", b"200")])
    pair.server.send_data(b, b"stray" * 3000)
    tail = pair.server.data_to_send()
    tail += raw(DataFrame(a, data=b"late")) + raw(DataFrame(a, flags=["END_STREAM"]))
    feed_whole(pair.client, tail)
    assert drain(pair.client) == [DataReceived(exchange_id=1, data=b"late", overhead=9),
                                  DataReceived(exchange_id=1, data=b"", overhead=9),
                                  ResponseEnded(exchange_id=1)]  # fmt: skip
    assert pair.client.is_broken and pair.client.is_idle
    with pytest.raises(LocalProtocolError):
        pair.client.start(3, GET, now=0.0)


def test_goaway_on_an_idle_connection() -> None:
    pair = Pair()
    pair.handshake()
    feed_whole(pair.client, raw(GoAwayFrame(0, last_stream_id=0, error_code=0)))
    assert drain(pair.client) == [] and pair.client.is_broken and not pair.client.can_start()


def test_goaway_with_error_fails_everything() -> None:
    pair = Pair()
    pair.handshake()
    pair.start(1)
    feed_whole(pair.client, raw(GoAwayFrame(0, last_stream_id=1, error_code=2)))
    error = failure(drain(pair.client))
    assert error.cause == "reset" and "INTERNAL_ERROR" in error.message
    assert pair.client.is_broken


def test_server_reset_fails_the_exchange() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    pair.server.reset_stream(sid, error_code=0xFF)
    feed_whole(pair.client, pair.server.data_to_send())
    error = failure(drain(pair.client))
    assert error.cause == "reset" and "error code 0xff" in error.message
    assert not pair.client.is_broken and pair.client.can_start()


def test_refused_stream_says_a_retry_is_safe() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    pair.server.reset_stream(sid, error_code=7)  # REFUSED_STREAM
    feed_whole(pair.client, pair.server.data_to_send())
    error = failure(drain(pair.client))
    assert error.cause == "refused" and "retry is safe" in error.message


def test_eof_mid_response_and_when_idle() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    pair.server.send_headers(sid, [(b":status", b"200")])
    feed_whole(pair.client, pair.server.data_to_send())
    pair.client.receive_eof(now=0.0)
    events = drain(pair.client)
    assert isinstance(events[0], ResponseReceived)
    assert_error(failure(events), "reset", None, None, None)
    assert pair.client.is_broken
    idle = Pair()
    idle.handshake()
    idle.client.receive_eof(now=0.0)
    assert idle.client.is_broken and drain(idle.client) == []


def test_close_waits_for_exchanges_then_sends_goaway() -> None:
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    pair.client.close(now=0.0)
    assert not pair.client.can_start() and not pair.client.is_broken
    assert pair.client.data_to_send() == b""
    pair.server.send_headers(sid, [(b":status", b"200")], end_stream=True)
    feed_whole(pair.client, pair.server.data_to_send())
    assert 0x7 in [f[0] for f in frames_of(pair.client.data_to_send())]
    assert pair.client.is_broken
    assert [type(e) for e in drain(pair.client)] == [ResponseReceived, ResponseEnded]


# -- the driver's side -------------------------------------------------------------------


def test_start_misuse_and_header_mapping() -> None:
    pair = Pair(MAX_CONCURRENT_STREAMS=1)
    pair.handshake()
    request = HttpRequest(
        method=b"POST", scheme=b"http", authority=b"h:1", target=b"/p?q",
        headers=((b"host", b"h:1"), (b"connection", b"keep-alive"), (b"te", b"gzip"),
                 (b"te", b"trailers"), (b"content-length", b"99"), (b"accept", b"*/*")),
    )  # fmt: skip
    pair.client.start(1, request, now=0.0)
    received = next(e for e in pair.to_server() if isinstance(e, h2.events.RequestReceived))
    assert received.headers == [
        (b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"h:1"),
        (b":path", b"/p?q"), (b"te", b"trailers"), (b"accept", b"*/*"),
        (b"content-length", b"0"),
    ]  # fmt: skip
    assert not pair.client.can_start()  # the server allows one stream
    with pytest.raises(LocalProtocolError):
        pair.client.start(2, GET, now=0.0)
    other = Pair()
    other.handshake()
    other.client.start(1, GET, now=0.0)
    with pytest.raises(LocalProtocolError, match="already in flight"):
        other.client.start(1, GET, now=0.0)
    for bad in [((b"X-Upper", b"v"),), ((b":path", b"/"),), ((b"a", b"v\r\n"),),
                ((b"a", b" v"),), ((b"", b"v"),)]:  # fmt: skip
        bad_request = HttpRequest(method=b"GET", scheme=b"http", authority=b"h",
                                  target=b"/", headers=bad)  # fmt: skip
        with pytest.raises(LocalProtocolError):
            other.client.start(9, bad_request, now=0.0)
    assert not other.client.is_broken


# -- fuzzing -------------------------------------------------------------------------------


@settings(max_examples=examples(150), deadline=None)
@given(garbage=st.binary(max_size=400), splits=st.lists(st.integers(1, 50), max_size=8))
def test_arbitrary_bytes_after_the_preface(garbage: bytes, splits: list[int]) -> None:
    pair = Pair()
    pair.handshake()
    pair.start(1)
    i = 0
    for step in [*splits, len(garbage)]:
        pair.client.receive_data(garbage[i : i + step], now=0.0)
        i += step
    pair.client.receive_eof(now=0.0)
    events = drain(pair.client)
    assert pair.client.is_broken
    assert isinstance(events[-1], ExchangeFailed)
    assert events[-1].error.cause in {"framing", "budget", "reset"}
    assert pair.client.buffered_bytes() <= SCAN_BOUND


# (not the connection-specific names the h2 server side refuses to send: `te`, `upgrade`, ...)
_names = (
    st.binary(min_size=1, max_size=12)
    .map(lambda b: bytes(97 + c % 26 for c in b))
    .filter(lambda n: n not in {b"te", b"connection", b"upgrade", b"host"})
)
_values = st.binary(max_size=3000).map(lambda b: bytes(33 + c % 90 for c in b))


@settings(max_examples=examples(40), deadline=None)
@given(
    heads=st.lists(st.lists(st.tuples(_names, _values), max_size=12), min_size=1, max_size=3),
    trailers=st.lists(st.tuples(_names, _values), max_size=4),
    body=st.binary(max_size=3000),
    pads=st.lists(st.none() | st.integers(0, 255), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_raw_size_equals_bytes_sent(
    heads: list[list[tuple[bytes, bytes]]],
    trailers: list[tuple[bytes, bytes]],
    body: bytes,
    pads: list[int | None],
    seed: int,
) -> None:
    """Differential: every head's raw_size is the HEADERS+CONTINUATION frames sent, and
    the body's data + overhead is the DATA frames sent (headers and padding included)."""
    pair = Pair()
    pair.handshake()
    sid = pair.start(1)
    *informational, final = heads
    for fields in informational:
        pair.server.send_headers(sid, [(b":status", b"103"), *fields])
    pair.server.send_headers(sid, [(b":status", b"200"), *final], end_stream=not body)
    if body:
        # the body in len(pads) frames, each padded (or not) as drawn
        cuts = [len(body) * k // len(pads) for k in range(len(pads) + 1)]
        for k, pad in enumerate(pads):
            last = k == len(pads) - 1
            piece = body[cuts[k] : cuts[k + 1]]
            pair.server.send_data(sid, piece, end_stream=last and not trailers, pad_length=pad)
        if trailers:
            pair.server.send_headers(sid, trailers, end_stream=True)
    wire = pair.server.data_to_send()
    rng = random.Random(seed)
    i = 0
    while i < len(wire):
        step = rng.randint(1, 3000)
        pair.client.receive_data(wire[i : i + step], now=0.0)
        i += step
    events = drain(pair.client)
    heads_seen = (InformationalReceived, ResponseReceived, TrailersReceived)
    sizes = [e.raw_size for e in events if isinstance(e, heads_seen)]
    assert sizes == header_block_sizes(wire)
    assert b"".join(e.data for e in events if isinstance(e, DataReceived)) == body
    assert body_charge(events) == data_frame_bytes(wire, sid)
    assert isinstance(events[-1], ResponseEnded)


def test_closed_streams_are_remembered_up_to_a_bound() -> None:
    """h2 would keep 65,536 closed streams (about 240 bytes each) on a long-lived connection."""
    pair = Pair()
    pair.handshake()
    for exchange_id in range(1, 701):
        sid = pair.start(exchange_id)
        pair.server.send_headers(sid, [(b":status", b"204")], end_stream=True)
        pair.client.receive_data(pair.server.data_to_send(), now=0.0)
        assert [type(e) for e in drain(pair.client)] == [ResponseReceived, ResponseEnded]
    assert len(pair.client._closed) == 512


def test_goaway_with_error_refuses_the_streams_above_its_last_stream_id() -> None:
    # RFC 9113 s6.8: whatever the error code, a stream above last_stream_id was not
    # processed; hypercorn sends GOAWAY (PROTOCOL_ERROR) when a frame races its own GOAWAY
    pair = Pair()
    pair.handshake()
    a, b = pair.start(1), pair.start(2)
    feed_whole(pair.client, raw(GoAwayFrame(0, last_stream_id=a, error_code=1)))
    events = drain(pair.client)
    assert [type(event) for event in events] == [ExchangeFailed, ExchangeFailed]
    by_id = {
        event.exchange_id: event.error for event in events if isinstance(event, ExchangeFailed)
    }
    assert by_id[2].cause == "refused" and f"stream {b}" in by_id[2].message
    assert by_id[1].cause == "reset" and "PROTOCOL_ERROR, last stream 1" in by_id[1].message
    assert pair.client.is_broken


def test_the_servers_header_table_size_reaches_our_encoder() -> None:
    pair = Pair(HEADER_TABLE_SIZE=0)
    pair.handshake()
    assert pair.client._encoder.table_size == 0
    request = HttpRequest(method=b"GET", scheme=b"http", authority=b"h", target=b"/x",
                          headers=((b"x-a", b"1"),))  # fmt: skip
    blocks = []
    for exchange_id in (1, 2):
        pair.client.start(exchange_id, request, now=0.0)
        out = pair.client.data_to_send()
        blocks += [p for kind, _, _, p in frames_of(out) if kind == 0x1]
        events = pair.server.receive_data(out)
        received = next(e for e in events if isinstance(e, h2.events.RequestReceived))
        assert received.headers[2:] == [(b":authority", b"h"), (b":path", b"/x"), (b"x-a", b"1")]
    # the first block opens with a table size update to 0; nothing is indexed after it
    assert blocks[0][:1] == b"\x20" and blocks[0][1:] == blocks[1]
