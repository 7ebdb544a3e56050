"""The llhttp wire refuses every response h11 refused (h11 stays here as the oracle).

Three layers: a table of the responses h11 refuses (each checked against h11 itself, so
the table cannot drift into cases h11 takes), a table of what llhttp refuses that h11
took (the added refusals, documented in ``sansmcp/core/wire/h1.py``), and a hypothesis
differential over generated and mutated responses: whenever h11 refuses, the wire
refuses; whenever both take a response, they report the same heads, body and trailers
and agree on keep-alive; the wire refuses what h11 took only for an added refusal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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

POST = HttpRequest(
    method=b"POST",
    scheme=b"http",
    authority=b"127.0.0.1:8000",
    target=b"/mcp",
    headers=((b"Accept", b"application/json"),),
    body=b"{}",
)


@dataclass(frozen=True)
class Outcome:
    accepted: bool
    heads: tuple[tuple[str, int, tuple[tuple[bytes, bytes], ...]], ...] = ()
    body: bytes = b""
    reusable: bool = False


def h11_outcome(data: bytes, request: HttpRequest = POST) -> Outcome:
    """What h11 made of ``data`` (fed whole, then EOF when it still wants bytes)."""
    conn = h11.Connection(h11.CLIENT)
    headers = [(b"Host", request.authority), *request.headers]
    if request.body or request.method == b"POST":
        headers.append((b"Content-Length", b"%d" % len(request.body)))
    conn.send(h11.Request(method=request.method, target=request.target, headers=headers))
    if request.body:
        conn.send(h11.Data(data=request.body))
    conn.send(h11.EndOfMessage())
    heads: list[tuple[str, int, tuple[tuple[bytes, bytes], ...]]] = []
    body = b""
    conn.receive_data(data)
    eof = False
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                if eof:
                    return Outcome(False)
                conn.receive_data(b"")
                eof = True
                continue
            if isinstance(event, h11.InformationalResponse):
                heads.append(("1xx", event.status_code, tuple(event.headers)))
            elif isinstance(event, h11.Response):
                heads.append(("final", event.status_code, tuple(event.headers)))
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                if event.headers:
                    heads.append(("trailers", 0, tuple(event.headers)))
                done = conn.our_state is h11.DONE and conn.their_state is h11.DONE
                rest = conn.trailing_data[0]
                return Outcome(True, tuple(heads), body, done and not rest and not eof)
            else:  # pragma: no cover - h11 ends a message before anything else
                return Outcome(False)
    except h11.RemoteProtocolError:
        return Outcome(False)


def wire_outcome(data: bytes, request: HttpRequest = POST) -> tuple[Outcome, ExchangeEvent]:
    conn = H1Connection(limits=Limits(), now=0.0)
    conn.start(1, request, now=0.0)
    conn.data_to_send()
    conn.receive_data(data, now=1.0)
    events = list(iter(conn.next_event, None))
    if not events or not isinstance(events[-1], ResponseEnded | ExchangeFailed):
        conn.receive_eof(now=2.0)
        events += list(iter(conn.next_event, None))
    terminal = events[-1]
    if not isinstance(terminal, ResponseEnded):
        assert isinstance(terminal, ExchangeFailed)
        assert terminal.error.cause in ("framing", "reset"), terminal.error.message
        assert conn.is_broken
        return Outcome(False), terminal
    heads: list[tuple[str, int, tuple[tuple[bytes, bytes], ...]]] = []
    for event in events:
        if isinstance(event, InformationalReceived):
            heads.append(("1xx", event.status, event.headers))
        elif isinstance(event, ResponseReceived):
            heads.append(("final", event.status, event.headers))
        elif isinstance(event, TrailersReceived):
            heads.append(("trailers", 0, event.headers))
    body = b"".join(e.data for e in events if isinstance(e, DataReceived))
    return Outcome(True, tuple(heads), body, conn.can_start()), terminal


def head(*lines: bytes, status: bytes = b"HTTP/1.1 200 OK") -> bytes:
    return status + b"\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n"


CL0 = b"Content-Length: 0"

# Every response h11 refused, by what it breaks.  The wire must refuse each (framing).
H11_REFUSES = {
    # status lines
    "status-2-digits": head(CL0, status=b"HTTP/1.1 20 OK"),
    "status-4-digits": head(CL0, status=b"HTTP/1.1 2000 OK"),
    "status-under-100": head(CL0, status=b"HTTP/1.1 099 OK"),
    "status-000": head(CL0, status=b"HTTP/1.1 000 OK"),
    "status-fullwidth-digits": head(CL0, status="HTTP/1.1 \uff12\uff10\uff10 OK".encode()),
    "version-without-minor": head(CL0, status=b"HTTP/2 200 OK"),
    "version-lower-case": head(CL0, status=b"http/1.1 200 OK"),
    "rtsp": head(CL0, status=b"RTSP/1.0 200 OK"),
    "ice": head(CL0, status=b"ICE/1.0 200 OK"),
    "two-spaces-before-status": head(CL0, status=b"HTTP/1.1  200 OK"),
    "tab-after-status": head(CL0, status=b"HTTP/1.1 200\tOK"),
    "nul-in-reason": head(CL0, status=b"HTTP/1.1 200 O\x00K"),
    "vt-in-reason": head(CL0, status=b"HTTP/1.1 200 O\x0bK"),
    "ff-in-reason": head(CL0, status=b"HTTP/1.1 200 O\x0cK"),
    "cr-in-reason": head(CL0, status=b"HTTP/1.1 200 O\rK"),
    "crlf-before-status-line": b"\r\n" + head(CL0),
    "lf-before-status-line": b"\n" + head(CL0),
    "switching-protocols": head(b"Upgrade: h2c", status=b"HTTP/1.1 101 Switching Protocols"),
    "switching-protocols-bare": head(status=b"HTTP/1.1 101 Switching Protocols"),
    # header lines
    "continuation-at-start": head(b" X: a", CL0),
    "space-before-colon": head(b"X : a", CL0),
    "no-colon": head(b"Xa", CL0),
    "empty-name": head(b": a", CL0),
    "control-in-name": head(b"X\x01: a", CL0),
    "separator-in-name": head(b"X{: a", CL0),
    "nul-in-value": head(b"X: a\x00b", CL0),
    "cr-in-value": head(b"X: a\rb", CL0),
    "cr-cr-lf": head(b"X: a\r", CL0),
    "vt-in-value": head(b"X: a\x0bb", CL0),
    # framing headers
    "conflicting-content-length": head(b"Content-Length: 5", b"Content-Length: 6") + b"hello",
    "conflicting-content-length-list": head(b"Content-Length: 5, 6") + b"hello",
    "signed-content-length": head(b"Content-Length: +5") + b"hello",
    "empty-content-length": head(b"Content-Length:") + b"hello",
    "hex-content-length": head(b"Content-Length: 0x5") + b"hello",
    "content-length-21-digits": head(b"Content-Length: " + b"0" * 20 + b"5") + b"hello",
    "content-length-overflow": head(b"Content-Length: " + b"9" * 25),
    "transfer-encoding-gzip": head(b"Transfer-Encoding: gzip") + b"x",
    "transfer-encoding-list": head(b"Transfer-Encoding: gzip, chunked") + b"0\r\n\r\n",
    "transfer-encoding-chunked-twice": head(b"Transfer-Encoding: chunked, chunked") + b"0\r\n\r\n",
    "transfer-encoding-repeated": head(b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked")
    + b"0\r\n\r\n",
    "transfer-encoding-identity": head(b"Transfer-Encoding: identity") + b"x",
    # chunked bodies
    "chunk-size-21-digits": head(b"Transfer-Encoding: chunked") + b"0" * 20 + b"5\r\nhello\r\n",
    "chunk-size-22-hex": head(b"Transfer-Encoding: chunked") + b"f" * 22 + b"\r\n",
    "chunk-size-negative": head(b"Transfer-Encoding: chunked") + b"-5\r\nhello\r\n0\r\n\r\n",
    "chunk-size-empty": head(b"Transfer-Encoding: chunked") + b"\r\n0\r\n\r\n",
    "chunk-size-bare-lf": head(b"Transfer-Encoding: chunked") + b"5\nhello\r\n0\r\n\r\n",
    "chunk-size-space-first": head(b"Transfer-Encoding: chunked") + b" 5\r\nhello\r\n0\r\n\r\n",
    "chunk-without-crlf": head(b"Transfer-Encoding: chunked") + b"5\r\nhelloXX0\r\n\r\n",
    "chunk-with-bare-lf": head(b"Transfer-Encoding: chunked") + b"5\r\nhello\n0\r\n\r\n",
    "trailer-continuation-at-start": head(b"Transfer-Encoding: chunked") + b"0\r\n X: a\r\n\r\n",
    "trailer-bad-name": head(b"Transfer-Encoding: chunked") + b"0\r\nX Y: a\r\n\r\n",
    "trailer-bad-content-length": head(b"Transfer-Encoding: chunked")
    + b"0\r\nContent-Length: x\r\n\r\n",
    "trailer-transfer-encoding": head(b"Transfer-Encoding: chunked")
    + b"0\r\nTransfer-Encoding: gzip\r\n\r\n",
    # bodies cut short
    "content-length-lie": head(b"Content-Length: 10") + b"short",
    "chunked-cut-short": head(b"Transfer-Encoding: chunked") + b"5\r\nhel",
    "head-cut-short": b"HTTP/1.1 200 OK\r\nX: a\r\n",
    "nothing": b"",
}

# What llhttp refuses that h11 took: refusals the wire adds (fewer ways to smuggle).
ADDED_REFUSALS = {
    "obs-fold": head(b"X: a", b" b", CL0),
    "soh-in-value": head(b"X: a\x01b", CL0),
    "del-in-value": head(b"X: a\x7fb", CL0),
    "content-length-and-transfer-encoding": head(
        b"Content-Length: 5", b"Transfer-Encoding: chunked"
    )
    + b"0\r\n\r\n",
    "content-length-repeated": head(b"Content-Length: 5", b"Content-Length: 5") + b"hello",
    "content-length-list": head(b"Content-Length: 5, 5") + b"hello",
    "version-1.2": head(CL0, status=b"HTTP/1.2 200 OK"),
    "version-3.1": head(CL0, status=b"HTTP/3.1 200 OK"),
}


@pytest.mark.parametrize("data", H11_REFUSES.values(), ids=H11_REFUSES.keys())
def test_every_h11_refusal_is_kept(data: bytes) -> None:
    assert not h11_outcome(data).accepted  # the oracle: h11 refused it
    outcome, failed = wire_outcome(data)
    assert not outcome.accepted
    assert isinstance(failed, ExchangeFailed) and failed.error.cause in ("framing", "reset")


@pytest.mark.parametrize("data", ADDED_REFUSALS.values(), ids=ADDED_REFUSALS.keys())
def test_refusals_llhttp_adds(data: bytes) -> None:
    assert h11_outcome(data).accepted  # h11 took it
    outcome, failed = wire_outcome(data)
    assert not outcome.accepted
    assert isinstance(failed, ExchangeFailed) and failed.error.cause == "framing"
    assert "malformed HTTP/1.1" in failed.error.message


ACCEPTED_ALIKE = {
    "plain": head(b"Content-Length: 2") + b"ok",
    "bare-lf-everywhere": b"HTTP/1.1 200 OK\nContent-Length: 2\nX:  a b \t\n\nok",
    "mixed-line-ends": b"HTTP/1.1 200 OK\r\nContent-Length: 2\nX: a\r\n\nok",
    "no-reason": head(b"Content-Length: 2", status=b"HTTP/1.1 200") + b"ok",
    "empty-reason": head(b"Content-Length: 2", status=b"HTTP/1.1 200 ") + b"ok",
    "odd-reason": head(b"Content-Length: 2", status=b"HTTP/1.1 200 \x01\x7f\xff\t ok") + b"ok",
    "obs-text-value": head(b"X: \xff\xfe", b"Content-Length: 2") + b"ok",
    "empty-value": head(b"X:", b"Content-Length: 2") + b"ok",
    "padded-content-length": head(b"Content-Length:  2 \t") + b"ok",
    "content-length-20-digits": head(b"Content-Length: " + b"0" * 19 + b"2") + b"ok",
    "http-1.0-close": head(status=b"HTTP/1.0 200 OK") + b"until the end",
    "http-1.0-keep-alive-header": head(
        b"Connection: keep-alive", b"Content-Length: 2", status=b"HTTP/1.0 200 OK"
    )
    + b"ok",
    "http-2.0-version": head(b"Content-Length: 2", status=b"HTTP/2.0 200 OK") + b"ok",
    "http-0.9-version": head(b"Content-Length: 2", status=b"HTTP/0.9 200 OK") + b"ok",
    "connection-close-list": head(b"Connection: Keep-Alive, CLOSE", b"Content-Length: 2") + b"ok",
    "upgrade-on-200": head(b"Connection: upgrade", b"Upgrade: h2c", b"Content-Length: 2") + b"ok",
    "chunked-upper-case": head(b"Transfer-Encoding: CHUNKED") + b"2\r\nok\r\n0\r\n\r\n",
    "chunked-http-1.0": head(b"Transfer-Encoding: chunked", status=b"HTTP/1.0 200 OK")
    + b"2\r\nok\r\n0\r\n\r\n",
    "chunk-extensions": head(b"Transfer-Encoding: chunked") + b"2;a=b;c \t\r\nok\r\n0;z\r\n\r\n",
    "trailers": head(b"Transfer-Encoding: chunked") + b"2\r\nok\r\n0\r\nX-T: 1 \r\nY:\n\r\n",
    "informational": head(status=b"HTTP/1.1 100 Continue")
    + head(b"Link: </a>", status=b"HTTP/1.1 103 Early Hints")
    + head(b"Content-Length: 2")
    + b"ok",
    "informational-with-framing": head(b"Content-Length: 9", status=b"HTTP/1.1 102 Processing")
    + head(b"Content-Length: 2")
    + b"ok",
    "no-content-ignores-framing": head(b"Transfer-Encoding: chunked", status=b"HTTP/1.1 204 X"),
    "not-modified-ignores-framing": head(b"Content-Length: 7", status=b"HTTP/1.1 304 X"),
}


@pytest.mark.parametrize("data", ACCEPTED_ALIKE.values(), ids=ACCEPTED_ALIKE.keys())
def test_what_h11_took_the_wire_reports_alike(data: bytes) -> None:
    expected = h11_outcome(data)
    assert expected.accepted
    assert wire_outcome(data)[0] == expected


def test_head_request_alike() -> None:
    head_request = HttpRequest(method=b"HEAD", scheme=b"http", authority=b"a", target=b"/")
    data = head(b"Content-Length: 5")
    assert wire_outcome(data, head_request)[0] == h11_outcome(data, head_request)


def test_connection_close_in_our_request_ends_reuse() -> None:
    closing = HttpRequest(
        method=b"GET",
        scheme=b"http",
        authority=b"a",
        target=b"/",
        headers=((b"Connection", b"close"),),
    )
    data = head(b"Content-Length: 2") + b"ok"
    outcome = wire_outcome(data, closing)[0]
    assert outcome == h11_outcome(data, closing) and not outcome.reusable


# ------------------------------------------------------------- requests we refuse to write


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (b"X", b"a\r\nInjected: 1"),
        (b"X", b"a\nb"),
        (b"X", b"a\rb"),
        (b"X", b"a\x00b"),
        (b"X", b"a\x0bb"),
        (b"X", b" leading"),
        (b"X", b"trailing\t"),
        (b"X\r\nY", b"v"),
        (b"X: Y", b"v"),
        (b"X:", b"v"),
        (b"", b"v"),
        (b"X\x00", b"v"),
    ],
)
def test_request_headers_h11_refused_are_refused(name: bytes, value: bytes) -> None:
    with pytest.raises(h11.LocalProtocolError):
        h11.Request(method=b"GET", target=b"/", headers=[(b"Host", b"a"), (name, value)])
    conn = H1Connection(limits=Limits(), now=0.0)
    request = HttpRequest(
        method=b"GET", scheme=b"http", authority=b"a", target=b"/", headers=((name, value),)
    )
    with pytest.raises(LocalProtocolError):
        conn.start(1, request, now=0.0)
    assert conn.can_start() and conn.data_to_send() == b""


@pytest.mark.parametrize(
    ("method", "target", "authority"),
    [
        (b"GET", b"/a b", b"a"),
        (b"GET", b"/a\r\nX: y", b"a"),
        (b"GET", b"", b"a"),
        (b"GE\nT", b"/", b"a"),
        (b"", b"/", b"a"),
        (b"GET", b"/", b"a\r\nX: y"),
        (b"GET", b"/", b"a b\x00"),
    ],
)
def test_request_lines_h11_refused_are_refused(
    method: bytes, target: bytes, authority: bytes
) -> None:
    with pytest.raises(h11.LocalProtocolError):
        h11.Request(method=method, target=target, headers=[(b"Host", authority)])
    conn = H1Connection(limits=Limits(), now=0.0)
    request = HttpRequest(method=method, scheme=b"http", authority=authority, target=target)
    with pytest.raises(LocalProtocolError):
        conn.start(1, request, now=0.0)


_CONTROLS = bytes(c for c in range(0x20) if c != 0x09) + b"\x7f"
_request_value = st.binary(max_size=12) | st.text(max_size=8).map(str.encode)


@settings(max_examples=examples(300), deadline=None)
@given(
    name=st.sampled_from([b"X-A", b"mcp-param-x", b"a b", b"", b"X:"]) | st.binary(max_size=6),
    value=_request_value,
)
def test_request_headers_are_written_exactly_as_h11_wrote_them(name: bytes, value: bytes) -> None:
    """The hand-written request head is h11's, byte for byte, and refuses what h11 refused,
    and also a value holding a control byte (but HTAB), which h11 wrote."""
    request = HttpRequest(
        method=b"POST",
        scheme=b"http",
        authority=b"h:1",
        target=b"/mcp?x=1",
        headers=((b"Accept", b"*/*"), (name, value)),
        body=b"{}",
    )
    try:
        h11_conn = h11.Connection(h11.CLIENT)
        expected = h11_conn.send(
            h11.Request(
                method=b"POST",
                target=b"/mcp?x=1",
                headers=[(b"Host", b"h:1"), (b"Accept", b"*/*"), (name, value),
                         (b"Content-Length", b"2")],
            )
        )  # fmt: skip
    except h11.LocalProtocolError:
        expected = None
    if value.translate(None, _CONTROLS) != value:
        expected = None  # stricter than h11: no control byte but HTAB, as the h2 wire checks
    conn = H1Connection(limits=Limits(), now=0.0)
    if expected is None or name.lower() in (b"host", b"content-length", b"transfer-encoding"):
        with pytest.raises(LocalProtocolError):
            conn.start(1, request, now=0.0)
        return
    if name.lower() == b"upgrade":
        with pytest.raises(LocalProtocolError):
            conn.start(1, request, now=0.0)
        return
    conn.start(1, request, now=0.0)
    assert conn.data_to_send() == expected + b"{}"


# ---------------------------------------------------------------- the differential


_ADDED = [
    re.compile(rb"\n[ \t]"),  # obs-fold
    re.compile(rb"[\x01-\x08\x0e-\x1f\x7f]"),  # a control character llhttp refuses
    re.compile(rb"^HTTP/(?!1\.[01] |2\.0 |0\.9 )"),  # a version llhttp refuses
]


def _head_of(data: bytes) -> bytes:
    found = re.search(rb"\n\r?\n", data)
    return data if found is None else data[: found.end()]


def added_refusal(data: bytes) -> bool:
    """``data`` shows one of the refusals the wire adds to h11's, in any head."""
    first = _head_of(data)
    heads = [first]
    rest = data[len(first) :]
    while re.match(rb"HTTP/1\.1 1\d\d", first) and rest:  # 1xx heads before the final one
        first = _head_of(rest)
        heads.append(first)
        rest = rest[len(first) :]
    trailers = re.search(rb"(?:^|\n)0[^\n]*\n(.*)$", rest, re.DOTALL)  # after the last chunk
    if trailers is not None and any(pattern.search(trailers[1]) for pattern in _ADDED[:2]):
        return True  # obs-fold or a control character in a trailer
    for block in heads:
        lower = block.lower()
        if any(pattern.search(block) for pattern in _ADDED):
            return True
        if b"content-length" in lower and b"transfer-encoding" in lower:
            return True
        lengths = re.findall(rb"\ncontent-length:([^\n]*)", lower)
        if len(lengths) > 1 or any(b"," in value for value in lengths):
            return True
    return False


_name = st.sampled_from(
    [b"X", b"content-length", b"Transfer-Encoding", b"connection", b"a b", b"", b"X{"]
)
_value = st.sampled_from(
    [b"a", b"", b" a ", b"2", b"0", b"chunked", b"close", b"2, 2", b"a\x01", b"\xff", b"+2"]
)
_line = st.tuples(_name, _value).map(lambda nv: nv[0] + b":" + nv[1]) | st.sampled_from(
    [b" folded", b"nocolon", b"X : a"]
)
_status = st.sampled_from(
    [
        b"HTTP/1.1 200 OK",
        b"HTTP/1.0 200 OK",
        b"HTTP/1.1 204 No Content",
        b"HTTP/1.1 100 Continue",
        b"HTTP/1.1 101 Switching",
        b"HTTP/1.1 099 X",
        b"HTTP/1.2 200 OK",
        b"HTTP/1.1 200",
        b"HTTP/1.1 20 OK",
        b"RTSP/1.0 200 OK",
        b"HTTP/1.1 200 \x0b",
    ]
)
_eol = st.sampled_from([b"\r\n", b"\n"])
_body = st.sampled_from(
    [b"", b"ok", b"2\r\nok\r\n0\r\n\r\n", b"2;x\r\nok\r\n0\r\nT: 1\r\n\r\n", b"zz\r\n", b"okok"]
)


@st.composite
def near_valid(draw: st.DrawFn) -> bytes:
    data = b""
    for _ in range(draw(st.integers(1, 2))):
        lines = [draw(_status), *draw(st.lists(_line, max_size=4))]
        data += b"".join(line + draw(_eol) for line in lines) + draw(_eol)
    return data + draw(_body)


def check_against_h11(data: bytes) -> None:
    expected = h11_outcome(data)
    got = wire_outcome(data)[0]
    if not expected.accepted:
        assert not got.accepted, "h11 refused this; the wire took it"
    elif not got.accepted:
        assert added_refusal(data), "the wire refused what h11 took, outside the added refusals"
    else:
        assert got == expected


@settings(
    max_examples=examples(1000, 250), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(data=near_valid())
def test_differential_near_valid(data: bytes) -> None:
    check_against_h11(data)


@settings(
    max_examples=examples(1000, 250), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    base=st.sampled_from(list(ACCEPTED_ALIKE.values())),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.binary(max_size=2)), min_size=1, max_size=3),
)
def test_differential_mutated(base: bytes, edits: list[tuple[int, bytes]]) -> None:
    data = bytearray(base)
    for at, replacement in edits:
        i = at % (len(data) + 1)
        data[i : i + 1] = replacement
    check_against_h11(bytes(data))


def test_checked_request_lines_are_remembered_within_a_bound() -> None:
    """A socket remembers the header lines it already checked (the MCP headers repeat on
    every request), at most 64 of them: 200 distinct values on one socket are each
    written exactly, and an invalid one is still refused after the cache was full."""
    conn = H1Connection(limits=Limits(), now=0.0)
    for i in range(200):
        request = HttpRequest(
            method=b"GET",
            scheme=b"http",
            authority=b"a",
            target=b"/",
            headers=((b"Accept", b"*/*"), (b"X-N", b"%d" % i)),
        )
        conn.start(i, request, now=0.0)
        assert (
            conn.data_to_send()
            == b"GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\nX-N: %d\r\n\r\n" % i
        )
        conn.receive_data(head(CL0), now=0.0)
        assert [type(e) for e in iter(conn.next_event, None)] == [ResponseReceived, ResponseEnded]
        assert len(conn._checked) <= 64  # the bound (private: nothing public shows it)
    bad = HttpRequest(
        method=b"GET", scheme=b"http", authority=b"a", target=b"/", headers=((b"X", b"a\nb"),)
    )
    with pytest.raises(LocalProtocolError):
        conn.start(201, bad, now=0.0)
    other_host = HttpRequest(method=b"GET", scheme=b"http", authority=b"b\r\nX: y", target=b"/")
    with pytest.raises(LocalProtocolError):
        conn.start(202, other_host, now=0.0)
    assert conn.can_start()
