"""Every byte a wire machine receives is charged somewhere, and server input never raises.

Invariant (issue 10 B), after every ``receive_data`` / ``receive_eof`` and whatever the
bytes are::

    bytes fed == sum(charged_bytes(event) for every event taken)
                 + wire.unowned_bytes + wire.unsettled_bytes

``unsettled_bytes`` is what is still in flight inside the machine (a partial frame or
head); after ``receive_eof`` it is 0.  While the connection is usable, ``unowned_bytes``
never exceeds ``Limits.max_unowned_bytes_per_socket``; the frame that would take it past
fails every exchange with ``ConnectionFailed(cause="budget")`` naming that bound.

Issue 10 D: whatever the server sends, the machines hand out only events; a failure is
an ``ExchangeFailed`` carrying a classified ``ConnectionFailed``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as note_event
from hypothesis import strategies as st

from sansmcp.core.errors import ConnectionFailed
from sansmcp.core.http import (
    DataReceived,
    ExchangeEvent,
    ExchangeFailed,
    HttpRequest,
    ResponseEnded,
    ResponseReceived,
    charged_bytes,
)
from sansmcp.core.limits import Limits
from sansmcp.core.wire import h2 as h2_wire
from sansmcp.core.wire import reader_fault
from sansmcp.core.wire.h1 import H1Connection
from sansmcp.core.wire.h2 import H2Connection
from tests.tiers import examples

GET = HttpRequest(method=b"GET", scheme=b"http", authority=b"example:80", target=b"/mcp")
CAUSES = {"framing", "budget", "reset", "refused"}

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = (
    0x0,
    0x1,
    0x2,
    0x3,
    0x4,
    0x6,
    0x7,
    0x8,
)
CONTINUATION = 0x9
END_STREAM, ACK, END_HEADERS, PADDED = 0x1, 0x1, 0x4, 0x8


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big")
        + bytes([kind, flags])
        + stream_id.to_bytes(4, "big")
        + payload
    )


def literal(name: bytes, value: bytes) -> bytes:
    """One HPACK field, literal without indexing, new name (no decoder state change)."""
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


SERVER_SETTINGS = frame(SETTINGS, 0, 0)


class Ledger:
    """Feeds a machine and checks the invariant after every step."""

    def __init__(self, wire: Any) -> None:
        self.wire = wire
        self.fed = 0
        self.charged = 0
        self.events: list[ExchangeEvent] = []

    def feed(self, data: bytes) -> None:
        self.fed += len(data)
        self.wire.receive_data(data, now=0.0)
        self.take()

    def eof(self) -> None:
        self.wire.receive_eof(now=0.0)
        self.take()
        assert self.wire.unsettled_bytes == 0

    def take(self) -> None:
        while (event := self.wire.next_event()) is not None:
            self.events.append(event)
            self.charged += charged_bytes(event)
            if isinstance(event, ExchangeFailed):
                assert isinstance(event.error, ConnectionFailed)
                assert event.error.cause in CAUSES, event.error
        wire = self.wire
        assert self.fed == self.charged + wire.unowned_bytes + wire.unsettled_bytes

    def failures(self) -> list[ConnectionFailed]:
        return [e.error for e in self.events if isinstance(e, ExchangeFailed)]


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for point in [*points, len(data)]:
        pieces.append(data[last:point])
        last = point
    return [p for p in pieces if p]


# -- HTTP/2: random frame sequences ----------------------------------------------------

# streams: 1 and 5 carry live exchanges, 3 was reset by us, 7/9/101 never opened, 2 even
# (weighted so that most sequences go on for a while: a frame on an idle stream is fatal)
STREAMS = st.sampled_from([1, 1, 1, 5, 5, 5, 3, 3, 3, 3] * 3 + [0, 7, 9, 101, 2])
STATUSES = st.sampled_from(
    [b"200", b"200", b"404", b"103", b"103", b"abc", b"1zz", b"20", b"2000", b""]
)


@st.composite
def h2_frames(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(
            ["data"] * 4
            + ["headers"] * 3
            + ["unknown"] * 3
            + ["priority", "rst", "settings", "ping", "goaway", "window"] * 2
        )
    )
    sid = draw(STREAMS)
    pad = draw(st.none() | st.integers(0, 40))

    def padded(payload: bytes, flags: int) -> tuple[bytes, int]:
        if pad is None:
            return payload, flags
        return bytes([pad]) + payload + b"\0" * pad, flags | PADDED

    if kind == "data":
        payload, flags = padded(draw(st.binary(max_size=300)), draw(st.sampled_from([0, 1])))
        return frame(DATA, flags, sid, payload)
    if kind == "headers":
        trailers = draw(st.integers(0, 4)) == 0
        fields = b"" if trailers else literal(b":status", draw(STATUSES))
        if draw(st.integers(0, 4)) == 0:  # now and then, fields h2 may refuse
            for name, value in draw(
                st.lists(st.tuples(st.binary(max_size=20), st.binary(max_size=20)), max_size=3)
            ):
                fields += literal(name, value)
        else:
            fields += literal(b"x-field", b"value")
        end = draw(st.sampled_from([0, END_STREAM]))
        if draw(st.booleans()) and len(fields) > 1:  # split: HEADERS + CONTINUATION
            cut = draw(st.integers(1, len(fields) - 1))
            first, flags = padded(fields[:cut], end)
            return frame(HEADERS, flags, sid, first) + frame(
                CONTINUATION, END_HEADERS, sid, fields[cut:]
            )
        payload, flags = padded(fields, end | END_HEADERS)
        return frame(HEADERS, flags, sid, payload)
    if kind == "priority":
        return frame(PRIORITY, 0, sid, (0).to_bytes(4, "big") + b"\x10")
    if kind == "rst":
        return frame(RST_STREAM, 0, sid, draw(st.sampled_from([0, 7, 8])).to_bytes(4, "big"))
    if kind == "settings":
        if draw(st.booleans()):
            return frame(SETTINGS, ACK, 0)
        return frame(SETTINGS, 0, 0, (3).to_bytes(2, "big") + (100).to_bytes(4, "big"))
    if kind == "ping":
        return frame(
            PING, draw(st.sampled_from([0, ACK])), 0, draw(st.binary(min_size=8, max_size=8))
        )
    if kind == "goaway":
        last = draw(st.sampled_from([0, 1, 5, 2**31 - 1]))
        code = draw(st.sampled_from([0, 0, 0, 2]))
        return frame(GOAWAY, 0, 0, last.to_bytes(4, "big") + code.to_bytes(4, "big"))
    if kind == "window":
        return frame(WINDOW_UPDATE, 0, sid, draw(st.integers(1, 5000)).to_bytes(4, "big"))
    unknown = draw(st.integers(0x0A, 0xFF))
    return frame(unknown, draw(st.integers(0, 255)), sid, draw(st.binary(max_size=400)))


def h2_client(limit: int) -> H2Connection:
    limits = Limits(max_unowned_bytes_per_socket=limit, h2_max_control_frames=100_000)
    client = H2Connection(limits=limits, now=0.0)
    for exchange_id in (1, 2, 3):
        client.start(exchange_id, GET, now=0.0)  # streams 1, 3, 5
    client.cancel(2, now=0.0)  # stream 3: reset by us
    client.data_to_send()
    return client


@settings(
    max_examples=examples(300, 75), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    heads=st.sets(st.sampled_from([1, 5])),
    frames=st.lists(h2_frames(), min_size=10, max_size=60),
    cuts=st.lists(st.integers(0, 20_000), max_size=12),
    limit=st.integers(100, 6000),
    eof=st.booleans(),
)
def test_h2_every_byte_is_charged_somewhere(
    heads: set[int], frames: list[bytes], cuts: list[int], limit: int, eof: bool
) -> None:
    ledger = Ledger(h2_client(limit))
    wire = SERVER_SETTINGS
    for sid in sorted(heads):  # most sequences get going: DATA before a head is fatal
        wire += frame(HEADERS, END_HEADERS, sid, literal(b":status", b"200"))
    for piece in split(wire + b"".join(frames), cuts):
        was_broken = ledger.wire.is_broken
        ledger.feed(piece)
        if not ledger.wire.is_broken:
            assert ledger.wire.unowned_bytes <= limit  # never past the bound while usable
        elif not was_broken:
            tripped = [f for f in ledger.failures() if f.bound == "max_unowned_bytes_per_socket"]
            for error in tripped:  # the frame that would take it past the bound
                assert error.cause == "budget" and error.limit == limit
                assert error.observed is not None and error.observed > limit
    trip = any(f.bound == "max_unowned_bytes_per_socket" for f in ledger.failures())
    note_event(f"broken: {ledger.wire.is_broken}, unowned bound tripped: {trip}")
    note_event(f"events: {min(len(ledger.events) // 5 * 5, 20)}+")
    if eof:
        ledger.eof()
        assert ledger.wire.is_broken


def test_h2_unowned_bound_trips_exactly_past_its_limit() -> None:
    """Only frames no exchange has been charged for (stream 0, a reset stream, and frames
    on a live stream before its head, held for it until then): the bound holds at exactly
    ``limit`` bytes and trips on the frame that would pass it."""
    ping = frame(PING, 0, 0, b"12345678")  # 17 bytes
    unknown = frame(0xEE, 0, 1, b"x" * 100)  # 109 bytes, on a live stream: h2 ignores it
    reset = frame(DATA, 0, 3, b"y" * 41)  # 50 bytes on the stream we reset
    wire = SERVER_SETTINGS + ping * 3 + unknown * 2 + reset  # 9 + 51 + 218 + 50 = 328
    client = h2_client(328)
    ledger = Ledger(client)
    for byte in range(len(wire)):  # byte by byte: the split does not matter
        ledger.feed(wire[byte : byte + 1])
    assert not client.is_broken and ledger.events == []
    assert (client.unowned_bytes, client.unsettled_bytes) == (328 - 218, 218)
    ledger.feed(frame(PING, ACK, 0, b"12345678")[:1])  # 1 byte of a 17-byte frame
    assert not client.is_broken and client.unsettled_bytes == 218 + 1
    ledger.feed(frame(PING, ACK, 0, b"12345678")[1:9])  # its header is complete: over
    assert client.is_broken
    errors = ledger.failures()
    assert [e.exchange_id for e in ledger.events] == [1, 3]  # every live exchange fails
    for error in errors:
        assert (error.cause, error.bound, error.limit, error.observed) == (
            "budget",
            "max_unowned_bytes_per_socket",
            328,
            328 + 17,
        )
    ledger.feed(b"z" * 1000)  # after the failure: every byte is unowned, nothing raises
    assert client.unowned_bytes == 328 + 9 + 1000


def test_h2_reset_stream_data_flood_fails_the_socket() -> None:
    """The 16.8 MB attack: DATA on a stream the client reset is not free any more."""
    client = h2_client(Limits().max_unowned_bytes_per_socket)
    ledger = Ledger(client)
    ledger.feed(SERVER_SETTINGS)
    chunk = frame(DATA, 0, 3, b"\0" * 16_000)
    sent = 0
    while not client.is_broken and sent < 4 << 20:
        ledger.feed(chunk)
        sent += len(chunk)
        assert client.data_to_send() is not None  # its window is still given back
    assert client.is_broken and sent <= (1 << 20) + len(chunk)
    (error, _) = ledger.failures()
    assert (error.cause, error.bound, error.limit) == (
        "budget",
        "max_unowned_bytes_per_socket",
        1 << 20,
    )
    assert error.observed is not None and error.observed > 1 << 20


def test_h2_framing_on_a_live_exchange_is_charged_to_it() -> None:
    """After the head, frames on the stream that carry no event (unknown types, PRIORITY,
    WINDOW_UPDATE) are charged to the exchange as framing, not left unowned."""
    client = h2_client(1 << 20)
    ledger = Ledger(client)
    ledger.feed(SERVER_SETTINGS)
    ledger.feed(frame(HEADERS, END_HEADERS, 1, literal(b":status", b"200")))
    unknown = frame(0xEE, 0, 1, b"x" * 100)
    window = frame(WINDOW_UPDATE, 0, 1, (10).to_bytes(4, "big"))
    ledger.feed(unknown + window)
    ledger.feed(frame(DATA, END_STREAM, 1, b"{}"))
    assert client.unowned_bytes == len(SERVER_SETTINGS)
    ones = [e for e in ledger.events if e.exchange_id == 1]
    assert [type(e) for e in ones] == [
        ResponseReceived,
        DataReceived,
        DataReceived,
        DataReceived,
        ResponseEnded,
    ]
    assert ones[0].raw_size == 9 + len(literal(b":status", b"200"))  # type: ignore[union-attr]
    assert ones[1] == DataReceived(exchange_id=1, data=b"", overhead=len(unknown))
    assert ones[2] == DataReceived(exchange_id=1, data=b"", overhead=len(window))
    assert ones[3] == DataReceived(exchange_id=1, data=b"{}", overhead=9)


def test_h2_dropped_events_of_a_cancelled_exchange_become_unowned() -> None:
    client = h2_client(1 << 20)
    ledger = Ledger(client)
    head = frame(HEADERS, END_HEADERS, 5, literal(b":status", b"200"))
    client.receive_data(SERVER_SETTINGS + head, now=0.0)  # events left queued
    ledger.fed += len(SERVER_SETTINGS + head)
    client.cancel(3, now=0.0)
    ledger.take()
    assert client.unowned_bytes == len(SERVER_SETTINGS) + len(head)


# -- HTTP/2: arbitrary header blocks never raise (issue 10 D) ----------------------------

FIELD_NAMES = st.sampled_from(
    [b":status", b":path", b":method", b":authority", b":scheme", b":foo", b":", b"Upper",
     b"content-type", b"connection", b"te", b"x-a", b""]
) | st.binary(max_size=12)  # fmt: skip


@settings(max_examples=examples(300), deadline=None)
@given(
    fields=st.lists(st.tuples(FIELD_NAMES, st.binary(max_size=16)), max_size=6),
    status=STATUSES | st.binary(max_size=5),
    informational=st.booleans(),
    end=st.booleans(),
)
def test_h2_arbitrary_heads_give_only_events(
    fields: list[tuple[bytes, bytes]], status: bytes, informational: bool, end: bool
) -> None:
    client = h2_client(1 << 20)
    ledger = Ledger(client)
    ledger.feed(SERVER_SETTINGS)
    block = b"".join(literal(n, v) for n, v in fields)
    if informational:
        ledger.feed(frame(HEADERS, END_HEADERS, 1, literal(b":status", b"103")))
    ledger.feed(frame(HEADERS, END_HEADERS | (END_STREAM if end else 0), 1,
                      literal(b":status", status) + block))  # fmt: skip
    ledger.feed(frame(DATA, END_STREAM, 1, b"{}"))
    for event in ledger.events:
        if isinstance(event, ResponseReceived):
            assert 200 <= event.status <= 999


@pytest.mark.parametrize("status", [b"abc", b"1zz", b"2x0", b"099", b"\xd9\xa3\xd9\xa3\xd9"])
def test_h2_non_numeric_status_is_a_framing_failure(status: bytes) -> None:
    client = h2_client(1 << 20)
    ledger = Ledger(client)
    ledger.feed(SERVER_SETTINGS)
    ledger.feed(frame(HEADERS, END_HEADERS, 1, literal(b":status", status)))
    (failure,) = [e for e in ledger.events if isinstance(e, ExchangeFailed)]
    assert failure.exchange_id == 1 and failure.error.cause == "framing"
    assert ":status" in failure.error.message


def test_h2_an_exception_inside_the_machine_is_a_framing_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The boundary: even an exception no check foresaw (here the frame handling itself
    raising a ValueError) fails the socket's exchanges as framing faults, and nothing escapes."""
    client = h2_client(1 << 20)
    ledger = Ledger(client)
    ledger.feed(SERVER_SETTINGS)

    def broken(self: Any, unit: bytes) -> None:
        raise ValueError("invalid literal for int() with base 10: b'abc'")

    monkeypatch.setattr(H2Connection, "_handle", broken)
    ledger.feed(frame(PING, 0, 0, b"12345678"))
    assert client.is_broken
    errors = ledger.failures()
    assert [e.exchange_id for e in ledger.events] == [1, 3]
    assert all(e.cause == "framing" and "ValueError" in e.message for e in errors)
    ledger.eof()


def test_h2_next_event_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    client = h2_client(1 << 20)
    client.receive_data(
        SERVER_SETTINGS
        + frame(HEADERS, END_HEADERS, 1, literal(b":status", b"200"))
        + frame(DATA, 0, 1, b"abc"),
        now=0.0,
    )
    assert isinstance(client.next_event(), ResponseReceived)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(H2Connection, "_give_back", broken)
    assert isinstance(client.next_event(), DataReceived)  # handed out, then the fault
    failed = client.next_event()
    assert isinstance(failed, ExchangeFailed) and failed.error.cause == "framing"
    assert client.is_broken


# -- HTTP/1.1 ------------------------------------------------------------------------------


@st.composite
def h1_responses(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=200))
    head = b"HTTP/1.1 200 OK\r\n"
    if draw(st.booleans()):
        head = b"HTTP/1.1 100 Continue\r\n\r\n" + head
    if draw(st.booleans()):
        chunks = b""
        i = 0
        while i < len(body):
            size = draw(st.integers(1, 64))
            piece = body[i : i + size]
            ext = b";x=1" if draw(st.booleans()) else b""
            chunks += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
            i += size
        trailer = b"x-t: 1\r\n" if draw(st.booleans()) else b""
        return head + b"transfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n" + trailer + b"\r\n"
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


@settings(max_examples=examples(300), deadline=None)
@given(
    response=h1_responses(),
    after=st.binary(max_size=100),
    cuts=st.lists(st.integers(0, 2000), max_size=10),
    eof=st.booleans(),
)
def test_h1_every_byte_is_charged_somewhere(
    response: bytes, after: bytes, cuts: list[int], eof: bool
) -> None:
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, GET, now=0.0)
    wire.data_to_send()
    ledger = Ledger(wire)
    for piece in split(response + after, cuts):
        ledger.feed(piece)
    if eof:
        ledger.eof()
    assert isinstance(ledger.events[-1], ResponseEnded)
    assert ledger.charged == len(response)  # the response's bytes, every one, once
    assert wire.unowned_bytes == len(after)  # what came after it: nobody's
    assert wire.is_broken == bool(after or eof)


def test_h1_bytes_while_idle_and_after_failure_are_unowned() -> None:
    wire = H1Connection(limits=Limits(), now=0.0)
    ledger = Ledger(wire)
    ledger.feed(b"HTTP/1.1 200 OK\r\n")  # nothing was asked
    assert wire.is_broken and wire.unowned_bytes == 17
    ledger.feed(b"more")
    assert wire.unowned_bytes == 21
    wire = H1Connection(limits=Limits(max_header_bytes=1024), now=0.0)
    wire.start(1, GET, now=0.0)
    ledger = Ledger(wire)
    ledger.feed(b"HTTP/1.1 200 OK\r\nx: " + b"a" * 2000)  # over the head bound
    (error,) = ledger.failures()
    assert error.bound == "max_header_bytes"
    assert wire.unowned_bytes == 17 + 2000 + 3
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, GET, now=0.0)
    ledger = Ledger(wire)
    ledger.feed(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")
    wire.cancel(1, now=0.0)
    ledger.take()
    assert wire.unowned_bytes == 0 and wire.is_broken  # the head and data were taken
    ledger.feed(b"defg")
    assert wire.unowned_bytes == 4


def test_h1_cancel_drops_queued_events_as_unowned() -> None:
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, GET, now=0.0)
    ledger = Ledger(wire)
    data = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc"
    wire.receive_data(data, now=0.0)
    ledger.fed += len(data)
    wire.cancel(1, now=0.0)
    ledger.take()
    assert ledger.events == [] and wire.unowned_bytes == len(data)


STATUS_LINES = st.builds(
    lambda version, code, reason: version + b" " + code + b" " + reason + b"\r\n",
    st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b"HTTP/1.1x", b"http/1.1", b""]),
    st.sampled_from(
        [
            b"200",
            b"abc",
            b"1zz",
            b"99",
            b"1000",
            b"-1",
            "\uff12\uff10\uff10".encode(),
            b"101",
            b"100",
        ]
    )
    | st.binary(max_size=4),
    st.binary(max_size=10),
)


@settings(max_examples=examples(300), deadline=None)
@given(
    status_line=STATUS_LINES,
    fields=st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=16)), max_size=5),
    body=st.binary(max_size=20),
    eof=st.booleans(),
)
def test_h1_arbitrary_status_lines_and_headers_give_only_events(
    status_line: bytes, fields: list[tuple[bytes, bytes]], body: bytes, eof: bool
) -> None:
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, GET, now=0.0)
    ledger = Ledger(wire)
    head = status_line + b"".join(n + b": " + v + b"\r\n" for n, v in fields) + b"\r\n"
    ledger.feed(head + body)
    if eof:
        ledger.eof()
    for event in ledger.events:
        if isinstance(event, ResponseReceived):
            assert 200 <= event.status <= 999


def test_h1_an_exception_inside_the_machine_is_a_framing_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, GET, now=0.0)
    ledger = Ledger(wire)
    ledger.feed(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc")

    def broken(*args: Any, **kwargs: Any) -> None:
        raise ValueError("boom")

    # (the meter takes every byte of a read, the EOF path every end of input)
    monkeypatch.setattr(H1Connection, "_meter", broken)
    monkeypatch.setattr(H1Connection, "_receive_eof", broken)
    ledger.feed(b"defg")
    (error,) = ledger.failures()
    assert error.cause == "framing" and "ValueError: boom" in error.message
    assert wire.is_broken
    wire2 = H1Connection(limits=Limits(), now=0.0)
    wire2.start(1, GET, now=0.0)
    ledger = Ledger(wire2)
    ledger.eof()  # the EOF path still raises: it goes through the same boundary
    (error,) = ledger.failures()
    assert error.cause == "framing"


def test_h1_abort_fails_the_exchange_in_flight() -> None:
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, GET, now=0.0)
    ledger = Ledger(wire)
    ledger.feed(b"HTTP/1.1 200 OK\r\ncontent-")
    wire.abort(ConnectionFailed("the reader failed", cause="framing"))
    ledger.take()
    (error,) = ledger.failures()
    assert error.message == "the reader failed" and wire.is_broken
    assert wire.unowned_bytes == len(b"HTTP/1.1 200 OK\r\ncontent-")


def test_reader_fault_fails_the_socket_as_framing() -> None:
    """What an adapter's reader does when something on its path raises: the exchanges
    fail classified, naming the exception, and the machine is broken; a machine whose
    abort itself raises does not take the reader down."""
    wire = H1Connection(limits=Limits(), now=0.0)
    wire.start(1, GET, now=0.0)
    ledger = Ledger(wire)
    reader_fault(wire, KeyError("gone"))
    ledger.take()
    (error,) = ledger.failures()
    assert error.cause == "framing" and "KeyError: 'gone'" in error.message
    assert wire.is_broken

    class Unabortable:
        def abort(self, error: ConnectionFailed) -> None:
            raise RuntimeError("abort failed too")

    reader_fault(Unabortable(), ValueError("first"))  # returns: nothing escapes


def test_h2_eof_boundary(monkeypatch: pytest.MonkeyPatch) -> None:
    client = h2_client(1 << 20)
    ledger = Ledger(client)
    ledger.feed(SERVER_SETTINGS + frame(PING, 0, 0, b"12345678")[:13])  # part of a PING

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(h2_wire, "goaway", broken)
    ledger.eof()
    errors = ledger.failures()
    assert [e.exchange_id for e in ledger.events] == [1, 3]
    assert all(e.cause == "framing" and "RuntimeError: boom" in e.message for e in errors), [
        e.message for e in errors
    ]
    assert client.unowned_bytes == ledger.fed


def test_h2_frames_before_the_head_are_charged_with_it() -> None:
    """A WINDOW_UPDATE on a live stream before its head (a server reading our body) is
    held for the exchange and charged right after its head, not left unowned: a
    long-lived socket does not creep towards its unowned bound with normal traffic."""
    client = h2_client(1 << 20)
    ledger = Ledger(client)
    ledger.feed(SERVER_SETTINGS)
    window = frame(WINDOW_UPDATE, 0, 1, (100).to_bytes(4, "big"))
    ledger.feed(window * 3)
    assert client.unsettled_bytes == 3 * len(window) and ledger.events == []
    head = frame(HEADERS, END_HEADERS, 1, literal(b":status", b"200"))
    ledger.feed(head + frame(DATA, END_STREAM, 1, b"{}"))
    ones = [e for e in ledger.events if e.exchange_id == 1]
    assert ones[:2] == [
        ResponseReceived(exchange_id=1, status=200, headers=(), raw_size=len(head),
                         http_version=b"2"),
        DataReceived(exchange_id=1, data=b"", overhead=3 * len(window)),
    ]  # fmt: skip
    assert client.unowned_bytes == len(SERVER_SETTINGS) and client.unsettled_bytes == 0


def test_h2_frames_before_a_head_that_never_comes_are_bounded() -> None:
    client = h2_client(1000)
    ledger = Ledger(client)
    ledger.feed(SERVER_SETTINGS)
    unknown = frame(0xEE, 0, 5, b"u" * 91)  # 100 bytes on a live stream, before its head
    for _ in range(9):
        ledger.feed(unknown)
    assert not client.is_broken and client.unsettled_bytes == 900  # 9 + 900 <= 1000
    ledger.feed(unknown)
    assert client.is_broken
    for error in ledger.failures():
        assert (error.bound, error.limit, error.observed) == (
            "max_unowned_bytes_per_socket",
            1000,
            1009,
        )
    assert client.unowned_bytes == ledger.fed and client.unsettled_bytes == 0


def test_h2_socket_retires_at_half_its_unowned_bound() -> None:
    """Past half the bound the socket takes no new exchange (the pool retires it once
    idle), so slowly accumulating control traffic never fails an exchange."""
    client = h2_client(1000)
    ledger = Ledger(client)
    ledger.feed(SERVER_SETTINGS)
    ping_ack = frame(PING, ACK, 0, b"12345678")  # 17 bytes
    while client.unowned_bytes + len(ping_ack) <= 500:
        ledger.feed(ping_ack)
    assert client.can_start()
    ledger.feed(ping_ack)
    assert client.unowned_bytes > 500 and not client.can_start() and not client.is_broken
