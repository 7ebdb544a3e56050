"""H1Connection: header blocks counted on the wire, bounded buffers, keep-alive, framing faults.

Every hostile case is fed whole, one byte at a time and at seeded random split points;
each must end in the documented error in the read that carries the documented byte,
with ``buffered_bytes()`` bounded by ``max_header_bytes`` (+ the read in hand) throughout.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import LocalProtocolError
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
from sansmcp.core.wire.h1 import H1Connection
from tests.tiers import examples

LIMITS = Limits()
MAX = LIMITS.max_header_bytes  # 65,536
REQUEST = HttpRequest(
    method=b"POST",
    scheme=b"http",
    authority=b"127.0.0.1:8000",
    target=b"/mcp",
    headers=((b"Accept", b"application/json, text/event-stream"),),
    body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
)
MODES = ["whole", "bytewise", "random"]
TERMINAL = (ResponseEnded, ExchangeFailed)


def started(limits: Limits = LIMITS, exchange_id: int = 1) -> H1Connection:
    conn = H1Connection(limits=limits, now=0.0)
    conn.start(exchange_id, REQUEST, now=0.0)
    assert conn.data_to_send().startswith(b"POST /mcp HTTP/1.1\r\n")
    return conn


def pieces(data: bytes, mode: str, seed: int = 0) -> Iterator[bytes]:
    if mode == "whole":
        yield data
    elif mode == "bytewise":
        for i in range(len(data)):
            yield data[i : i + 1]
    else:
        rng = random.Random(seed)
        i = 0
        while i < len(data):
            n = rng.choice((1, 2, 3, rng.randint(1, 100), rng.randint(1, 20_000)))
            yield data[i : i + n]
            i += n


@dataclass
class Run:
    events: list[ExchangeEvent] = field(default_factory=list)
    # bytes fed before / after the read that produced the terminal event
    end_before: int | None = None
    end_after: int | None = None
    fed: int = 0
    peak: int = 0  # most bytes held right after a read

    @property
    def terminal(self) -> ExchangeEvent:
        assert self.events and isinstance(self.events[-1], TERMINAL)
        return self.events[-1]

    def body(self) -> bytes:
        return b"".join(e.data for e in self.events if isinstance(e, DataReceived))

    def body_charge(self) -> int:
        """What the body costs: data plus framing, summed over DataReceived."""
        return sum(len(e.data) + e.overhead for e in self.events if isinstance(e, DataReceived))

    def charge(self) -> int:
        """Everything the events account for: heads, trailers, body data and framing."""
        heads = sum(
            e.raw_size
            for e in self.events
            if isinstance(e, InformationalReceived | ResponseReceived | TrailersReceived)
        )
        return heads + self.body_charge()


def feed(
    conn: H1Connection,
    data: bytes,
    mode: str,
    *,
    seed: int = 0,
    eof: bool = False,
    limit: int = MAX,
) -> Run:
    """Drive ``conn`` like an adapter: read, feed, drain; stop at the exchange's end."""
    run = Run()
    for piece in pieces(data, mode, seed):
        before = run.fed
        conn.receive_data(piece, now=1.0)
        run.fed += len(piece)
        held = conn.buffered_bytes()
        run.peak = max(run.peak, held)
        assert held <= limit + len(piece), (held, len(piece))
        if drain(conn, run):
            run.end_before, run.end_after = before, run.fed
            return run
        assert conn.buffered_bytes() <= limit
    if eof:
        conn.receive_eof(now=2.0)
        if drain(conn, run):
            run.end_before = run.end_after = run.fed
    return run


def drain(conn: H1Connection, run: Run) -> bool:
    ended = False
    while (event := conn.next_event()) is not None:
        assert not ended, "event after the terminal event"
        run.events.append(event)
        ended = isinstance(event, TERMINAL)
    return ended


def assert_failed_at(
    run: Run, conn: H1Connection, byte: int | None, cause: str, bound: str | None = None
) -> ExchangeFailed:
    """The exchange failed in the read that carried byte number ``byte`` (1-based), or
    (``byte=None``) at the EOF after every byte was fed, and not before."""
    failed = run.terminal
    assert isinstance(failed, ExchangeFailed)
    assert failed.error.cause == cause, failed.error.message
    assert failed.error.bound == bound
    assert run.end_before is not None and run.end_after is not None
    if byte is None:
        assert run.end_before == run.end_after == run.fed
    else:
        assert run.end_before < byte <= run.end_after, (run.end_before, byte, run.end_after)
    assert conn.is_broken and not conn.can_start()
    assert conn.buffered_bytes() == 0
    return failed


def head(*lines: bytes, status: bytes = b"200 OK") -> bytes:
    return b"HTTP/1.1 " + status + b"\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n"


CHUNKED_HEAD = head(b"Transfer-Encoding: chunked")


# --------------------------------------------------------------- header block bound


@pytest.mark.parametrize("mode", MODES)
def test_padded_header_fails_at_byte_65537(mode: str) -> None:
    data = b"HTTP/1.1 200 OK\r\nX: a" + b" " * 200_000 + b"\r\n\r\n"
    conn = started()
    run = feed(conn, data, mode, seed=1)
    failed = assert_failed_at(run, conn, MAX + 1, "budget", "max_header_bytes")
    assert failed.error.limit == MAX and failed.error.observed == MAX + 1
    assert "65,536" in failed.error.message and "Limits.max_header_bytes" in failed.error.message
    assert run.events == [failed]
    if mode == "bytewise":
        assert run.fed == MAX + 1
        assert run.peak <= MAX  # never held the 65,537th byte


@pytest.mark.parametrize("mode", MODES)
def test_twenty_thousand_small_fields_fail_at_byte_65537(mode: str) -> None:
    data = b"HTTP/1.1 200 OK\r\n" + b"a: b\r\n" * 20_000 + b"\r\n"
    conn = started()
    run = feed(conn, data, mode, seed=2)
    assert_failed_at(run, conn, MAX + 1, "budget", "max_header_bytes")


@pytest.mark.parametrize("mode", MODES)
def test_twenty_thousand_small_fields_parse_under_a_larger_bound(mode: str) -> None:
    limits = Limits(max_header_bytes=1 << 20)
    data = b"HTTP/1.1 200 OK\r\n" + b"a: b\r\n" * 20_000 + b"Content-Length: 2\r\n\r\n"
    conn = started(limits)
    run = feed(conn, data + b"ok", mode, seed=3, limit=limits.max_header_bytes)
    response = run.events[0]
    assert isinstance(response, ResponseReceived)
    assert len(response.headers) == 20_001 and response.raw_size == len(data)
    assert run.body() == b"ok" and isinstance(run.terminal, ResponseEnded)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\n" + b"X-Forever: yes\r\n" * 20_000,
        b"HTTP/1.1 200 OK\r\nX: " + b"x" * 200_000,
        b"HTTP/1.1 200 OK\n" + b"y: z\n" * 40_000,
    ],
    ids=["fields", "one-line", "bare-lf"],
)
def test_header_block_that_never_ends(mode: str, data: bytes) -> None:
    conn = started()
    run = feed(conn, data, mode, seed=4)
    assert_failed_at(run, conn, MAX + 1, "budget", "max_header_bytes")


@pytest.mark.parametrize("mode", MODES)
def test_block_of_exactly_the_bound_passes_one_more_byte_fails(mode: str) -> None:
    prefix = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX: "
    exact = prefix + b"v" * (MAX - len(prefix) - 4) + b"\r\n\r\n"
    assert len(exact) == MAX
    conn = started()
    run = feed(conn, exact, mode, seed=5)
    response = run.events[0]
    assert isinstance(response, ResponseReceived) and response.raw_size == MAX
    assert isinstance(run.terminal, ResponseEnded) and conn.can_start()

    over = prefix + b"v" * (MAX - len(prefix) - 3) + b"\r\n\r\n"
    conn = started()
    run = feed(conn, over, mode, seed=5)
    assert_failed_at(run, conn, MAX + 1, "budget", "max_header_bytes")


@pytest.mark.parametrize("mode", MODES)
def test_bound_counts_each_head_from_its_own_first_byte(mode: str) -> None:
    early = head(b"Link: </a.css>; rel=preload", status=b"103 Early Hints")
    data = early * 3 + b"HTTP/1.1 200 OK\r\nX: " + b"x" * 100_000
    conn = started()
    run = feed(conn, data, mode, seed=6)
    assert_failed_at(run, conn, 3 * len(early) + MAX + 1, "budget", "max_header_bytes")
    infos = [e for e in run.events if isinstance(e, InformationalReceived)]
    assert [(i.status, i.raw_size) for i in infos] == [(103, len(early))] * 3


# ------------------------------------------------------------------------- 1xx floods


@pytest.mark.parametrize("mode", MODES)
def test_informational_flood_fails_on_the_ninth_head(mode: str) -> None:
    early = head(b"Link: </s.css>; rel=preload", status=b"103 Early Hints")
    data = early * 1000 + head(b"Content-Length: 0")
    conn = started()
    run = feed(conn, data, mode, seed=7)
    n = LIMITS.max_informational
    failed = assert_failed_at(run, conn, (n + 1) * len(early), "budget", "max_informational")
    assert failed.error.limit == n and failed.error.observed == n + 1
    assert "Limits.max_informational" in failed.error.message
    infos = run.events[:-1]
    assert len(infos) == n and all(
        isinstance(i, InformationalReceived) and i.raw_size == len(early) for i in infos
    )


@pytest.mark.parametrize("mode", MODES)
def test_eight_informational_heads_are_allowed(mode: str) -> None:
    cont = b"HTTP/1.1 100 Continue\r\n\r\n"
    final = head(b"Content-Length: 3")
    conn = started()
    run = feed(conn, cont * 8 + final + b"abc", mode, seed=8)
    kinds = [type(e) for e in run.events]
    assert kinds[:9] == [InformationalReceived] * 8 + [ResponseReceived]
    assert run.body() == b"abc" and isinstance(run.terminal, ResponseEnded)
    assert conn.can_start()


def test_switching_protocols_is_framing() -> None:
    conn = started()
    run = feed(conn, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "whole")
    assert_failed_at(run, conn, 1, "framing")


@pytest.mark.parametrize(
    "head", [b"HTTP/1.1 101 Switching Protocols\r\n\r\n", b"HTTP/1.1 099 x\r\n\r\n"]
)
def test_a_status_no_request_asked_for_says_so(head: bytes) -> None:
    failed = assert_failed_at(feed(conn := started(), head, "whole"), conn, 1, "framing")
    assert "(no protocol switch was asked)" in failed.error.message


# ---------------------------------------------------------------- chunked framing


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("bad", "at"),
    [
        (b"zz\r\n", 4),
        (b"-5\r\n", 4),
        (b"1" * 21 + b"\r\n", 23),
        (b"5\r\nhelloXX\r\n", 9),
        (b"5\r\nhello\rX", 10),
        (b"\r\n", 2),
        (b"5\n\r\nhello\r\n", 4),
    ],
    ids=["non-hex", "negative", "21-digits", "bad-footer", "bad-footer-lf", "empty", "bare-lf"],
)
def test_bad_chunk_size_is_framing_at_the_offending_byte(mode: str, bad: bytes, at: int) -> None:
    good = b"3\r\nabc\r\n"
    conn = started()
    run = feed(conn, CHUNKED_HEAD + good + bad + b"0\r\n\r\n", mode, seed=9)
    failed = assert_failed_at(run, conn, len(CHUNKED_HEAD) + len(good) + at, "framing")
    assert "malformed HTTP/1.1" in failed.error.message
    assert run.body().startswith(b"abc")


@pytest.mark.parametrize("mode", MODES)
def test_chunk_size_line_that_never_ends_is_bounded(mode: str) -> None:
    conn = started()
    run = feed(conn, CHUNKED_HEAD + b"5;ext=" + b"e" * 200_000, mode, seed=10)
    failed = assert_failed_at(run, conn, len(CHUNKED_HEAD) + MAX + 1, "budget", "max_header_bytes")
    assert "chunk-size line" in failed.error.message


@pytest.mark.parametrize("mode", MODES)
def test_small_chunks_are_bounded_by_count(mode: str) -> None:
    """One-byte chunks cost a parser event each: at most ``h1_max_small_chunks`` of them
    in one response (the twin of h2_max_small_data_frames); a larger chunk is not counted."""
    limits = Limits(h1_max_small_chunks=5)
    tiny = b"1\r\nx\r\n"
    big = b"10\r\n" + b"y" * 16 + b"\r\n"
    conn = started(limits)
    run = feed(conn, CHUNKED_HEAD + tiny * 5 + big + b"0\r\n\r\n", mode, seed=12)
    assert isinstance(run.terminal, ResponseEnded) and run.body() == b"x" * 5 + b"y" * 16
    conn = started(limits)
    run = feed(conn, CHUNKED_HEAD + big + tiny * 6 + b"0\r\n\r\n", mode, seed=13)
    sixth = len(CHUNKED_HEAD) + len(big) + 5 * len(tiny) + len(b"1\r\nx")
    failed = assert_failed_at(run, conn, sixth, "budget", "h1_max_small_chunks")
    assert (failed.error.limit, failed.error.observed) == (5, 6)
    assert "Limits.h1_max_small_chunks" in failed.error.message
    assert run.charge() + conn.unowned_bytes == run.fed  # every byte fed is charged somewhere


@pytest.mark.parametrize("mode", MODES)
def test_chunked_body_with_extensions_and_large_chunks(mode: str) -> None:
    body = bytes(range(256)) * 160
    framed = b"".join(
        b"%x;name=value \r\n" % len(body[i : i + 17_000]) + body[i : i + 17_000] + b"\r\n"
        for i in range(0, len(body), 17_000)
    )
    conn = started()
    run = feed(conn, CHUNKED_HEAD + framed + b"0\r\n\r\n", mode, seed=11)
    assert run.body() == body and isinstance(run.terminal, ResponseEnded)
    assert not any(isinstance(e, TrailersReceived) for e in run.events)
    # reported as it arrived: never one event holding the whole body
    assert max(len(e.data) for e in run.events if isinstance(e, DataReceived)) <= 17_000
    assert conn.can_start()


@pytest.mark.parametrize("mode", MODES)
def test_chunk_extensions_are_charged_as_overhead(mode: str) -> None:
    # One body byte per chunk, each behind a chunk-size line of exactly the bound.
    line = b"1;x=" + b"e" * (MAX - 6) + b"\r\n"
    assert len(line) == MAX
    body_wire = b"".join(line + b"%d\r\n" % i for i in range(3)) + b"0\r\n\r\n"
    conn = started()
    run = feed(conn, CHUNKED_HEAD + body_wire, mode, seed=19)
    assert isinstance(run.terminal, ResponseEnded) and run.body() == b"012"
    assert run.body_charge() == len(body_wire)  # every framing byte is charged
    assert run.charge() == len(CHUNKED_HEAD + body_wire)
    data = [e for e in run.events if isinstance(e, DataReceived)]
    # each byte carries the framing before it: its line (and the CRLF of the chunk before)
    carried = [(e.data, e.overhead) for e in data if e.data]
    assert carried == [(b"0", MAX), (b"1", MAX + 2), (b"2", MAX + 2)]
    # what follows the last byte (CRLF, last-chunk line, empty trailer block) comes last
    assert data[-1] == DataReceived(exchange_id=1, data=b"", overhead=2 + 3 + 2)
    assert run.events[-2] is data[-1]
    assert conn.can_start()


@pytest.mark.parametrize("mode", MODES)
def test_framing_before_trailers_is_overhead_trailers_are_raw_size(mode: str) -> None:
    trailer = b"X-Checksum: abc\r\n\r\n"
    body_wire = b"2;a=b\r\nhi\r\n0;last\r\n"
    conn = started()
    run = feed(conn, CHUNKED_HEAD + body_wire + trailer, mode, seed=20)
    assert [type(e) for e in run.events][-3:] == [DataReceived, TrailersReceived, ResponseEnded]
    assert run.events[-3] == DataReceived(exchange_id=1, data=b"", overhead=2 + 8)
    assert run.body_charge() == len(body_wire)  # no double counting of the trailer block
    assert run.charge() == len(CHUNKED_HEAD + body_wire + trailer)


@pytest.mark.parametrize(
    "data",
    [
        head(b"Content-Length: 5") + b"hello",
        head(b"Content-Length: 0"),
        head(b"Transfer-Encoding: chunked", status=b"204 No Content"),
    ],
)
def test_unframed_bodies_carry_no_overhead(data: bytes) -> None:
    conn = started()
    run = feed(conn, data, "whole")
    assert isinstance(run.terminal, ResponseEnded)
    assert all(e.overhead == 0 and e.data for e in run.events if isinstance(e, DataReceived))
    assert run.charge() == len(data)


def test_overhead_of_one_exchange_does_not_leak_into_the_next() -> None:
    conn = started()
    first = feed(conn, CHUNKED_HEAD + b"1;ext\r\na\r\n0\r\n\r\n", "whole")
    assert isinstance(first.terminal, ResponseEnded)
    conn.start(2, REQUEST, now=3.0)
    conn.data_to_send()
    second = feed(conn, head(b"Content-Length: 1") + b"b", "whole")
    assert [e.overhead for e in second.events if isinstance(e, DataReceived)] == [0]


@pytest.mark.parametrize("mode", MODES)
def test_trailers_are_counted(mode: str) -> None:
    trailer = b"X-Checksum: abc\r\nX-Other: 1\n\r\n"
    conn = started()
    run = feed(conn, CHUNKED_HEAD + b"2\r\nhi\r\n0\r\n" + trailer, mode, seed=12)
    trailers = run.events[-2]
    assert isinstance(trailers, TrailersReceived) and trailers.raw_size == len(trailer)
    assert trailers.headers == ((b"x-checksum", b"abc"), (b"x-other", b"1"))
    assert conn.can_start()


@pytest.mark.parametrize("mode", MODES)
def test_trailers_over_the_bound(mode: str) -> None:
    prefix = CHUNKED_HEAD + b"2\r\nhi\r\n0\r\n"
    conn = started()
    run = feed(conn, prefix + b"X-Pad: " + b"p" * 100_000 + b"\r\n\r\n", mode, seed=13)
    failed = assert_failed_at(run, conn, len(prefix) + MAX + 1, "budget", "max_header_bytes")
    assert "trailer block" in failed.error.message
    assert run.body() == b"hi"


@pytest.mark.parametrize("mode", MODES)
def test_chunked_eof_mid_chunk_is_reset(mode: str) -> None:
    data = CHUNKED_HEAD + b"10\r\nonly-part"
    conn = started()
    run = feed(conn, data, mode, seed=14, eof=True)
    assert_failed_at(run, conn, None, "reset")
    assert run.body() == b"only-part"


# ------------------------------------------------------------ Content-Length lies


@pytest.mark.parametrize("mode", MODES)
def test_content_length_lie_short_then_eof_is_reset(mode: str) -> None:
    data = head(b"Content-Length: 100") + b"x" * 50
    conn = started()
    run = feed(conn, data, mode, seed=15, eof=True)
    failed = assert_failed_at(run, conn, None, "reset")
    assert "received 50 bytes, expected 100" in failed.error.message
    assert run.body() == b"x" * 50


@pytest.mark.parametrize("mode", MODES)
def test_content_length_lie_long_ends_the_response_and_breaks_the_socket(mode: str) -> None:
    data = head(b"Content-Length: 5") + b"12345" + b"67890"
    conn = started()
    run = feed(conn, data, mode, seed=16)
    assert run.body() == b"12345" and isinstance(run.terminal, ResponseEnded)
    conn.receive_data(b"more", now=1.0)  # whatever arrives later
    assert conn.is_broken and not conn.can_start() and conn.buffered_bytes() == 0


def test_eof_mid_head_is_reset() -> None:
    conn = started()
    run = feed(conn, b"HTTP/1.1 200 OK\r\nContent-Le", "whole", eof=True)
    assert_failed_at(run, conn, None, "reset")
    assert run.fed == 27


def test_eof_before_any_byte_is_reset() -> None:
    conn = started()
    run = feed(conn, b"", "whole", eof=True)
    assert isinstance(run.terminal, ExchangeFailed) and run.terminal.error.cause == "reset"
    assert conn.is_broken


def test_malformed_status_line_is_framing() -> None:
    conn = started()
    run = feed(conn, b"HTTP/1.1 2000 OK\r\n\r\n", "whole")
    assert_failed_at(run, conn, 1, "framing")


def test_long_h11_messages_are_truncated() -> None:
    conn = started()
    run = feed(conn, b"HTTP/1.1 200 OK\r\nbad header " + b"z" * 5000 + b"\r\n\r\n", "whole")
    failed = assert_failed_at(run, conn, 1, "framing")
    assert len(failed.error.message) < 400 and failed.error.message.endswith("...")


# ------------------------------------------------------------------------ bodies


@pytest.mark.parametrize("mode", MODES)
def test_read_until_close_body(mode: str) -> None:
    data = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + b"b" * 30_000
    conn = started()
    run = feed(conn, data, mode, seed=17, eof=True)
    response = run.events[0]
    assert isinstance(response, ResponseReceived) and response.http_version == b"1.0"
    assert run.body() == b"b" * 30_000 and isinstance(run.terminal, ResponseEnded)
    assert conn.is_broken  # the body ended with the connection


def test_body_is_reported_per_read_not_accumulated() -> None:
    conn = started()
    conn.receive_data(head(b"Content-Length: 1000000"), now=1.0)
    assert isinstance(conn.next_event(), ResponseReceived)
    for _ in range(100):
        conn.receive_data(b"z" * 10_000, now=1.0)
        assert conn.buffered_bytes() == 10_000
        event = conn.next_event()
        assert isinstance(event, DataReceived) and len(event.data) == 10_000
        assert conn.buffered_bytes() == 0
    assert isinstance(conn.next_event(), ResponseEnded)


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
def test_bodiless_status_ignores_framing_headers(status: bytes) -> None:
    conn = started()
    run = feed(conn, head(b"Transfer-Encoding: chunked", status=status), "whole")
    assert [type(e) for e in run.events] == [ResponseReceived, ResponseEnded]
    assert conn.can_start()


def test_head_request_has_no_body_and_extra_bytes_break_the_socket() -> None:
    conn = H1Connection(limits=LIMITS, now=0.0)
    conn.start(7, HttpRequest(method=b"HEAD", scheme=b"http", authority=b"h", target=b"/"), now=0)
    assert conn.data_to_send() == b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n"
    conn.receive_data(CHUNKED_HEAD + b"5\r\nhello\r\n0\r\n\r\n", now=1.0)
    events = [conn.next_event(), conn.next_event(), conn.next_event()]
    assert [type(e) for e in events] == [ResponseReceived, ResponseEnded, type(None)]
    assert conn.is_broken


def test_connection_close_response_is_not_reusable() -> None:
    conn = started()
    run = feed(conn, head(b"Connection: close", b"Content-Length: 2") + b"ok", "whole")
    assert isinstance(run.terminal, ResponseEnded) and run.body() == b"ok"
    assert conn.is_broken and not conn.can_start()


def test_bytes_after_a_close_response_are_dropped() -> None:
    conn = started()
    data = head(b"Connection: close", b"Content-Length: 2") + b"okEXTRA"
    run = feed(conn, data, "whole")
    assert isinstance(run.terminal, ResponseEnded) and run.body() == b"ok"
    assert conn.is_broken and conn.next_event() is None and conn.buffered_bytes() == 0


def test_data_after_trailers_breaks_the_socket() -> None:
    conn = started()
    run = feed(conn, CHUNKED_HEAD + b"0\r\nA: b\r\n\r\nHTTP/1.1 200 OK\r\n", "whole")
    assert isinstance(run.terminal, ResponseEnded) and conn.is_broken


# -------------------------------------------------------------------- keep-alive


def test_keep_alive_reuse_two_exchanges() -> None:
    conn = H1Connection(limits=LIMITS, now=0.0)
    assert conn.can_start() and conn.is_idle and conn.active_exchanges == 0
    for exchange_id, response in [
        (1, head(b"Content-Length: 5") + b"first"),
        (2, CHUNKED_HEAD + b"6\r\nsecond\r\n0\r\n\r\n"),
    ]:
        conn.start(exchange_id, REQUEST, now=0.0)
        assert not conn.can_start() and conn.active_exchanges == 1 and not conn.is_idle
        assert conn.data_to_send().endswith(REQUEST.body)
        with pytest.raises(LocalProtocolError):
            conn.start(99, REQUEST, now=0.0)  # no pipelining
        run = feed(conn, response, "bytewise")
        assert {e.exchange_id for e in run.events} == {exchange_id}
        assert run.body() == (b"first" if exchange_id == 1 else b"second")
        assert isinstance(run.terminal, ResponseEnded)
        assert conn.can_start() and conn.is_idle and not conn.is_broken
    conn.receive_eof(now=3.0)  # idle keep-alive connection closed by the server
    assert conn.is_broken and conn.next_event() is None and not conn.can_start()


def test_unsolicited_bytes_while_idle_break_the_socket() -> None:
    conn = H1Connection(limits=LIMITS, now=0.0)
    conn.receive_data(b"HTTP/1.1 200 OK\r\n", now=1.0)
    assert conn.is_broken and conn.next_event() is None and conn.buffered_bytes() == 0
    conn.receive_data(b"more", now=1.0)
    conn.receive_eof(now=1.0)
    assert conn.next_event() is None
    with pytest.raises(LocalProtocolError):
        conn.start(1, REQUEST, now=1.0)


def test_empty_read_is_not_eof() -> None:
    conn = started()
    conn.receive_data(b"", now=1.0)
    assert not conn.is_broken and conn.next_event() is None


def test_cancel_in_flight_drops_its_events_and_breaks() -> None:
    conn = started()
    conn.receive_data(head(b"Content-Length: 10") + b"abc", now=1.0)
    conn.cancel(1, now=1.0)
    assert conn.next_event() is None and conn.is_broken and conn.is_idle
    assert conn.buffered_bytes() == 0
    conn.receive_data(b"defghij", now=1.0)
    assert conn.next_event() is None


def test_cancel_before_any_byte() -> None:
    conn = started()
    conn.cancel(5, now=1.0)
    assert not conn.is_broken and not conn.is_idle
    conn.cancel(1, now=1.0)
    assert conn.is_broken and conn.is_idle and conn.next_event() is None


def test_cancel_after_the_wire_finished_keeps_the_socket() -> None:
    conn = started()
    conn.receive_data(head(b"Content-Length: 2") + b"ok", now=1.0)
    assert conn.buffered_bytes() > 0
    conn.cancel(2, now=1.0)  # not ours: nothing happens
    assert conn.buffered_bytes() > 0
    conn.cancel(1, now=1.0)
    assert conn.next_event() is None and conn.buffered_bytes() == 0
    assert conn.can_start() and not conn.is_broken


def test_close_lets_the_exchange_finish_then_reports_broken() -> None:
    conn = started()
    conn.close(now=1.0)
    assert not conn.can_start() and not conn.is_broken
    run = feed(conn, head(b"Content-Length: 1") + b"x", "whole")
    assert isinstance(run.terminal, ResponseEnded) and conn.is_broken

    idle = H1Connection(limits=LIMITS, now=0.0)
    idle.close(now=0.0)
    assert idle.is_broken and not idle.can_start()


# ------------------------------------------------------------- request serialisation


def test_request_serialisation() -> None:
    conn = H1Connection(limits=LIMITS, now=0.0)
    conn.start(1, REQUEST, now=0.0)
    assert conn.buffered_bytes() > 0  # the outbox until it is taken
    assert conn.data_to_send() == (
        b"POST /mcp HTTP/1.1\r\n"
        b"Host: 127.0.0.1:8000\r\n"
        b"Accept: application/json, text/event-stream\r\n"
        b"Content-Length: 46\r\n\r\n" + REQUEST.body
    )
    assert conn.data_to_send() == b"" and conn.buffered_bytes() == 0


def test_request_without_body() -> None:
    conn = H1Connection(limits=LIMITS, now=0.0)
    get = HttpRequest(method=b"DELETE", scheme=b"https", authority=b"ex.com", target=b"/m?a=1")
    conn.start(1, get, now=0.0)
    assert conn.data_to_send() == b"DELETE /m?a=1 HTTP/1.1\r\nHost: ex.com\r\n\r\n"
    empty_post = HttpRequest(method=b"POST", scheme=b"http", authority=b"a", target=b"/")
    conn = H1Connection(limits=LIMITS, now=0.0)
    conn.start(1, empty_post, now=0.0)
    assert conn.data_to_send() == b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize(
    "request_",
    [
        HttpRequest(method=b"CONNECT", scheme=b"http", authority=b"a:1", target=b"a:1"),
        HttpRequest(
            method=b"GET", scheme=b"http", authority=b"a", target=b"/", headers=((b"Host", b"b"),)
        ),
        HttpRequest(
            method=b"GET",
            scheme=b"http",
            authority=b"a",
            target=b"/",
            headers=((b"content-length", b"1"),),
        ),
        HttpRequest(
            method=b"GET",
            scheme=b"http",
            authority=b"a",
            target=b"/",
            headers=((b"Transfer-Encoding", b"chunked"),),
        ),
        HttpRequest(
            method=b"GET",
            scheme=b"http",
            authority=b"a",
            target=b"/",
            headers=((b"upgrade", b"h2c"),),
        ),
        HttpRequest(
            method=b"GET",
            scheme=b"http",
            authority=b"a",
            target=b"/",
            headers=((b"bad name", b"v"),),
        ),
        HttpRequest(method=b"G T", scheme=b"http", authority=b"a", target=b"/"),
    ],
    ids=[
        "connect",
        "host",
        "content-length",
        "transfer-encoding",
        "upgrade",
        "bad-name",
        "bad-method",
    ],
)
def test_invalid_requests_raise_and_change_nothing(request_: HttpRequest) -> None:
    conn = H1Connection(limits=LIMITS, now=0.0)
    with pytest.raises(LocalProtocolError):
        conn.start(1, request_, now=0.0)
    assert conn.can_start() and conn.data_to_send() == b""
    conn.start(2, REQUEST, now=0.0)
    assert conn.data_to_send().startswith(b"POST /mcp")


# ---------------------------------------------------------------------- hypothesis

_token = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-0123456789", min_size=1, max_size=12).map(
    str.encode
)
_value = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ;=,/:0123456789", max_size=40).map(
    lambda s: s.strip().encode()
)
_eol = st.sampled_from([b"\r\n", b"\n"])


@st.composite
def _block(draw: st.DrawFn, first_line: bytes | None, extra: list[tuple[bytes, bytes]]) -> bytes:
    fields = draw(st.lists(st.tuples(_token, _value), max_size=6))
    fields = [(n, v) for n, v in fields if n not in (b"content-length", b"transfer-encoding")]
    lines = ([first_line] if first_line is not None else []) + [
        n + b": " + v for n, v in [*fields, *extra]
    ]
    return b"".join(line + draw(_eol) for line in lines) + draw(_eol)


@dataclass(frozen=True)
class Wellformed:
    data: bytes
    blocks: tuple[tuple[type, int], ...]  # (event type, true raw size) of every block
    body: bytes
    eof: bool


@st.composite
def wellformed(draw: st.DrawFn) -> Wellformed:
    data = bytearray()
    blocks: list[tuple[type, int]] = []
    for _ in range(draw(st.integers(0, 3))):
        status = draw(st.sampled_from([b"100 Continue", b"102 Processing", b"103 Early Hints"]))
        block = draw(_block(b"HTTP/1.1 " + status, []))
        data += block
        blocks.append((InformationalReceived, len(block)))
    body = draw(st.binary(max_size=300))
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    extra = {
        "length": [(b"Content-Length", b"%d" % len(body))],
        "chunked": [(b"Transfer-Encoding", b"chunked")],
        "close": [],
    }[framing]
    version = b"HTTP/1.0" if framing == "close" and draw(st.booleans()) else b"HTTP/1.1"
    block = draw(_block(version + b" 200 OK", extra))
    data += block
    blocks.append((ResponseReceived, len(block)))
    if framing == "chunked":
        i = 0
        while i < len(body):
            n = draw(st.integers(1, len(body) - i))
            ext = draw(st.sampled_from([b"", b";x=1", b" "]))
            data += b"%x%s\r\n" % (n, ext) + body[i : i + n] + b"\r\n"
            i += n
        data += b"0\r\n"
        trailer = draw(_block(None, []))
        data += trailer
        if trailer not in (b"\r\n", b"\n"):
            blocks.append((TrailersReceived, len(trailer)))
    else:
        data += body
    return Wellformed(bytes(data), tuple(blocks), body, eof=framing == "close")


def summary(run: Run) -> tuple[list[tuple[type, int, object]], bytes]:
    """Events without the DataReceived split: (type, raw_size, headers) and the body."""
    kept = [
        (type(e), getattr(e, "raw_size", -1), getattr(e, "headers", None))
        for e in run.events
        if not isinstance(e, DataReceived)
    ]
    return kept, run.body()


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=wellformed(), seed=st.integers(0, 2**16))
def test_chunking_invariance_and_raw_size(case: Wellformed, seed: int) -> None:
    results = []
    for mode in MODES:
        conn = started()
        run = feed(conn, case.data, mode, seed=seed, eof=case.eof)
        assert isinstance(run.terminal, ResponseEnded), run.events
        sizes = tuple(
            (type(e), e.raw_size)
            for e in run.events
            if isinstance(e, InformationalReceived | ResponseReceived | TrailersReceived)
        )
        assert sizes == case.blocks  # the differential: raw_size == bytes on the wire
        assert run.body() == case.body
        assert run.charge() == len(case.data)  # and framing is overhead: every byte, once
        assert conn.can_start() != case.eof
        results.append(summary(run))
    assert results[0] == results[1] == results[2]


@settings(max_examples=examples(60), deadline=None)
@given(
    reads=st.lists(st.binary(max_size=300), max_size=8),
    prefix=st.sampled_from([b"", b"HTTP/1.1 200 OK\r\n", CHUNKED_HEAD, head(b"Content-Length: 9")]),
    eof=st.booleans(),
)
def test_arbitrary_bytes_only_produce_exchange_events(
    reads: list[bytes], prefix: bytes, eof: bool
) -> None:
    conn = started(Limits(max_header_bytes=256))
    run = Run()
    for data in [prefix, *reads]:
        conn.receive_data(data, now=1.0)
        assert conn.buffered_bytes() <= 256 + len(data)
        drain(conn, run)
    if eof:
        conn.receive_eof(now=2.0)
        drain(conn, run)
        assert run.events and isinstance(run.events[-1], TERMINAL) and conn.is_broken
    assert all(e.exchange_id == 1 for e in run.events)
    assert sum(isinstance(e, TERMINAL) for e in run.events) <= 1
    for event in run.events:
        if isinstance(event, ExchangeFailed):
            assert event.error.cause in ("budget", "framing", "reset")


@settings(max_examples=examples(60), deadline=None)
@given(case=wellformed(), edits=st.lists(st.tuples(st.integers(0, 10**6), st.binary(max_size=3))))
def test_mutated_responses_only_produce_exchange_events(
    case: Wellformed, edits: list[tuple[int, bytes]]
) -> None:
    data = bytearray(case.data)
    for at, replacement in edits:
        i = at % (len(data) + 1)
        data[i : i + 1] = replacement
    conn = started(Limits(max_header_bytes=128, max_informational=2))
    run = feed(conn, bytes(data), "random", seed=len(edits), eof=True, limit=128)
    assert run.events and isinstance(run.events[-1], TERMINAL)
    assert sum(isinstance(e, TERMINAL) for e in run.events) == 1


# ------------------------------------------------- differential against an h11 server


@pytest.mark.parametrize("mode", MODES)
def test_raw_size_equals_what_an_h11_server_sent(mode: str) -> None:
    server = h11.Connection(h11.SERVER)
    conn = H1Connection(limits=LIMITS, now=0.0)
    conn.start(1, REQUEST, now=0.0)
    server.receive_data(conn.data_to_send())
    while server.next_event() is not h11.NEED_DATA:
        pass
    blocks: list[int] = []
    wire = bytearray()
    for event in (
        h11.InformationalResponse(status_code=103, headers=[(b"Link", b"</a>; rel=preload")]),
        h11.InformationalResponse(status_code=100, headers=[]),
        h11.Response(
            status_code=200, headers=[(b"Transfer-Encoding", b"chunked"), (b"X-Pad", b"p" * 4000)]
        ),
    ):
        out = server.send(event) or b""
        blocks.append(len(out))
        wire += out
    wire += server.send(h11.Data(data=b"payload")) or b""
    end = server.send(h11.EndOfMessage(headers=[(b"X-Digest", b"sha-256=abc")])) or b""
    assert end.startswith(b"0\r\n")
    blocks.append(len(end) - 3)  # the trailer block follows the last-chunk line
    wire += end
    run = feed(conn, bytes(wire), mode, seed=18)
    sized = [
        e.raw_size
        for e in run.events
        if isinstance(e, InformationalReceived | ResponseReceived | TrailersReceived)
    ]
    assert sized == blocks and run.body() == b"payload"
    assert run.charge() == len(wire)
    assert isinstance(run.terminal, ResponseEnded) and conn.can_start()
