"""The own HTTP/1.1 wire against h11, its oracle: generated responses, split anywhere.

Each example is one response stream (1xx heads, a final head, a body framed by
``Content-Length``, chunked or the connection's end, trailers) built from near-valid
parts -- chunk sizes with leading zeros, upper-case hex and extensions, content-length
variants, obs-fold, odd whitespace, duplicate and invalid header lines, bare LF line
ends -- and then, in some examples, mutated byte-wise.  It is fed to h11 (a client that
sent the same request) whole, and to the wire whole and at hypothesis-drawn split
points (and byte by byte).  They must agree:

* the wire's outcome is the same however the bytes are split;
* h11 refuses it -> the wire refuses it (framing or reset);
* both take it -> the same heads (status, headers), body bytes, trailers, end and
  keep-alive;
* h11 takes it and the wire refuses -> exactly one of :data:`DIVERGENCES`, the stricter
  refusals the wire makes on purpose (each named, with why, an example h11 takes and a
  predicate that recognises it).  Anything else is a bug in the wire.

Example counts are modest in ``make test`` and full under ``SANSMCP_HOSTILE_FULL=1``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sansmcp.core.http import (
    DataReceived,
    ExchangeFailed,
    HttpRequest,
    InformationalReceived,
    ResponseEnded,
    ResponseReceived,
    TrailersReceived,
)
from sansmcp.core.limits import Limits
from sansmcp.core.wire.h1 import H1Connection

from .test_accounting import split
from .test_h1_refusals import POST, Outcome, h11_outcome, head, wire_outcome

FULL = os.environ.get("SANSMCP_HOSTILE_FULL") == "1"
EXAMPLES = 3000 if FULL else 60

GET = HttpRequest(method=b"GET", scheme=b"http", authority=b"a", target=b"/")
HEAD = HttpRequest(method=b"HEAD", scheme=b"http", authority=b"a", target=b"/")


# -- the deliberate divergences ------------------------------------------------------------


def _blocks(data: bytes) -> list[bytes]:
    """Every header block of ``data`` as h11 delimits them (heads, then trailers after the
    last chunk), approximately: enough to recognise the patterns below."""
    out = []
    rest = data
    while rest:
        found = re.search(rb"\n\r?\n", rest)
        block = rest if found is None else rest[: found.end()]
        out.append(block)
        rest = rest[len(block) :]
        if not re.match(rb"HTTP/\d\.\d 1\d\d", block):
            break
    trailers = re.search(rb"(?:^|\n)0+(?:;[^\n]*)?[ \t]*\r?\n(.*)$", rest, re.DOTALL)
    if trailers is not None:
        out.append(trailers[1])
    return out


def _heads(data: bytes) -> list[bytes]:
    return [b for b in _blocks(data) if b.startswith(b"HTTP/")]


def _fields(block: bytes) -> list[tuple[bytes, bytes]]:
    lines = re.split(rb"\r?\n", block)
    return [
        (m[1].lower(), m[2].strip(b" \t"))
        for line in lines[1:]
        if (m := re.match(rb"([^:\s]+):(.*)", line)) is not None
    ]


def _obs_fold(data: bytes) -> bool:
    return any(re.search(rb"\n[ \t]", block) for block in _blocks(data))


def _control_in_field(data: bytes) -> bool:
    # a control character llhttp refuses in a field (h11 took all but NUL, CR, LF, VT, FF)
    return any(
        re.search(rb"\n[^\n]*[\x01-\x08\x0e-\x1f\x7f]", block)
        or (not block.startswith(b"HTTP/") and re.search(rb"[\x01-\x08\x0e-\x1f\x7f]", block))
        for block in _blocks(data)
    )


def _version(data: bytes) -> bool:
    return any(re.match(rb"HTTP/(?!1\.[01] |2\.0 |0\.9 )", h) for h in _heads(data))


def _length_with_chunked(data: bytes) -> bool:
    for block in _heads(data):
        names = {n for n, _ in _fields(block)}
        if b"content-length" in names and b"transfer-encoding" in names:
            return True
    return False


def _length_repeated(data: bytes) -> bool:
    for block in _heads(data):
        lengths = [v for n, v in _fields(block) if n == b"content-length"]
        if len(lengths) > 1 or any(b"," in v for v in lengths):
            return True
    return False


@dataclass(frozen=True)
class Divergence:
    """A response h11 took that the wire refuses, on purpose."""

    why: str
    example: bytes
    shows: Callable[[bytes], bool]


DIVERGENCES: dict[str, Divergence] = {
    "obs-fold": Divergence(
        "llhttp refuses a continuation line (RFC 9112 s5.2 lets a client refuse obs-fold); "
        "h11 joined it to the value.  A folded line is a classic smuggling vector.",
        head(b"X: a", b" b", b"Content-Length: 0"),
        _obs_fold,
    ),
    "control-in-field": Divergence(
        "llhttp refuses a control byte (0x01-0x08, 0x0e-0x1f, 0x7f) in a field value or a "
        "trailer; h11 refused only NUL, CR, LF, VT and FF.  RFC 9110 s5.5: field-vchar has "
        "no control but HTAB; the h1 and h2 wires now read the same grammar.",
        head(b"X: a\x01b", b"Content-Length: 0"),
        _control_in_field,
    ),
    "version": Divergence(
        "llhttp knows HTTP/0.9, 1.0, 1.1 and 2.0 status lines only; h11 took any "
        "HTTP/d.d.  A server answering HTTP/1.2 or 3.1 over HTTP/1.1 is not one we talk to.",
        head(b"Content-Length: 0", status=b"HTTP/1.2 200 OK"),
        _version,
    ),
    "content-length-with-transfer-encoding": Divergence(
        "RFC 9112 s6.1: a response with both is a smuggling signature that a server "
        "ought to handle as an error; llhttp refuses it, h11 let chunked win.",
        head(b"Content-Length: 5", b"Transfer-Encoding: chunked") + b"0\r\n\r\n",
        _length_with_chunked,
    ),
    "content-length-repeated": Divergence(
        "RFC 9110 s8.6 lets a recipient take repeated equal Content-Length values as one; "
        "llhttp refuses any repeat or list (h11 took equal ones).  No legitimate server "
        "needs it, and differing readers of it are how requests get smuggled.",
        head(b"Content-Length: 5", b"Content-Length: 5") + b"hello",
        _length_repeated,
    ),
}


def divergence_of(data: bytes) -> str | None:
    """The name of the first deliberate divergence ``data`` shows, or None."""
    for name, divergence in DIVERGENCES.items():
        if divergence.shows(data):
            return name
    return None


@pytest.mark.parametrize("name", DIVERGENCES)
def test_each_divergence_is_real_and_recognised(name: str) -> None:
    """Each table entry: h11 takes its example, the wire refuses it as framing, and the
    predicate recognises it (so the table cannot hold an entry that is not a divergence)."""
    divergence = DIVERGENCES[name]
    assert h11_outcome(divergence.example).accepted
    outcome, failed = wire_outcome(divergence.example)
    assert not outcome.accepted
    assert isinstance(failed, ExchangeFailed) and failed.error.cause == "framing"
    assert divergence_of(divergence.example) == name


# -- the strategies ------------------------------------------------------------------------

_eol = st.sampled_from([b"\r\n"] * 6 + [b"\n"])
_ows = st.sampled_from([b"", b"", b" ", b"  ", b"\t", b" \t "])
_token_name = st.sampled_from(
    [b"X-A", b"x-b", b"Server", b"Date", b"Link", b"Vary", b"Set-Cookie", b"mcp-session-id"]
)
_odd_name = st.sampled_from(
    [b"X A", b"X@", b"X\x01", b"X\x80", b"", b"X{", b'"x"', b"X\t", b"\xff", b"X/"]
)
_plain_value = st.sampled_from(
    [b"a", b"", b"a b", b"1", b"text/event-stream", b"\xff\xfe", b"a,b", b'"q"', b"a\tb"]
)
_odd_value = st.sampled_from(
    [b"a\x01b", b"a\x7f", b"a\x0bb", b"a\x0cb", b"a\x00b", b"a\rb", b"\x1b[0m", b"\x80"]
)


@st.composite
def _field_line(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 19))
    if kind < 13:
        name, value = draw(_token_name), draw(_plain_value)
    elif kind < 16:
        name, value = draw(_odd_name | _token_name), draw(_odd_value | _plain_value)
    elif kind == 16:
        return b" folded" if draw(st.booleans()) else b"\tfolded"
    elif kind == 17:
        return draw(st.sampled_from([b"X : a", b"X\t: a", b"nocolon", b":a", b"X:: a"]))
    else:
        name, value = (
            b"Connection",
            draw(
                st.sampled_from([b"close", b"keep-alive", b"Keep-Alive, CLOSE", b"upgrade", b"x"])
            ),
        )
    return name + b":" + draw(_ows) + value + draw(_ows)


_length_forms = st.sampled_from(
    ["%d", "%d", "%d", " %d ", "0%d", "%d, %d", "+%d", "%d ", "0x%x", "", "%d;", "%d%d"]
)
_chunk_ext = st.sampled_from(
    [b"", b"", b"", b";a=b", b";a", b';a="q"', b" ", b"\t", b"; a=b", b";;", b";a=b ; c"]
)


@st.composite
def _chunked(draw: st.DrawFn, body: bytes, eol: bytes) -> bytes:
    out = b""
    i = 0
    while i < len(body):
        size = draw(st.integers(1, 12))
        piece = body[i : i + size]
        i += size
        form = draw(st.sampled_from(["%x", "%x", "%X", "0%x", "00%x"]))
        line = (form % len(piece)).encode() + draw(_chunk_ext)
        out += line + draw(st.sampled_from([b"\r\n"] * 8 + [b"\n"])) + piece
        out += draw(st.sampled_from([b"\r\n"] * 12 + [b"\n", b"", b"XX"]))
    last = draw(st.sampled_from([b"0", b"0", b"00", b"0;z"]))
    trailers = b""
    for _ in range(draw(st.integers(0, 2))):
        trailers += draw(_field_line()) + draw(_eol)
    cut = draw(st.integers(0, 8)) == 0
    tail = last + b"\r\n" + trailers + eol
    if cut:  # the body cut short: the connection's end comes before the last chunk
        return out[: draw(st.integers(0, len(out)))]
    return out + tail


@st.composite
def _head_block(draw: st.DrawFn, status: bytes, extra: list[bytes]) -> bytes:
    eol = draw(_eol)
    lines = [status, *draw(st.lists(_field_line(), max_size=3)), *extra]
    if len(lines) > 2 and draw(st.booleans()):
        lines.insert(draw(st.integers(1, len(lines))), lines[1])  # a duplicate header
    return b"".join(line + draw(st.sampled_from([eol, eol, eol, b"\n"])) for line in lines) + eol


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    data = b""
    for _ in range(draw(st.integers(0, 2))):  # 1xx heads
        status = draw(
            st.sampled_from(
                [
                    b"HTTP/1.1 100 Continue",
                    b"HTTP/1.1 103 Early Hints",
                    b"HTTP/1.1 102",
                    b"HTTP/1.1 199 x",
                ]
            )
        )
        data += draw(_head_block(status, []))
    status = draw(
        st.sampled_from(
            [b"HTTP/1.1 200 OK"] * 6
            + [
                b"HTTP/1.0 200 OK",
                b"HTTP/1.1 204 No Content",
                b"HTTP/1.1 304 Not Modified",
                b"HTTP/1.1 404",
                b"HTTP/1.1 500 ",
                b"HTTP/1.1 999 x",
                b"HTTP/1.1 200 \x80\x01ok",
                b"HTTP/1.1 101 Switching",
                b"HTTP/1.1 1000 x",
                b"HTTP/2.0 200 OK",
                b"HTTP/1.1  200 OK",
            ]
        )
    )
    body = draw(st.binary(max_size=40))
    eol = draw(_eol)
    framing = draw(st.sampled_from(["length", "length", "chunked", "chunked", "close", "both"]))
    extra: list[bytes] = []
    if framing in ("length", "both"):
        form = draw(_length_forms)
        n = len(body) + draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
        value = form.replace("%d", "{0}").replace("%x", "{0:x}").format(max(n, 0)).encode()
        extra.append(b"Content-Length:" + draw(_ows) + value)
        if draw(st.integers(0, 5)) == 0:
            extra.append(b"Content-Length: " + value)
    if framing in ("chunked", "both"):
        te = draw(
            st.sampled_from(
                [b"chunked"] * 5
                + [b"CHUNKED", b" chunked ", b"gzip, chunked", b"chunked, chunked", b"identity"]
            )
        )
        extra.append(b"Transfer-Encoding:" + te)
    data += draw(_head_block(status, extra))
    if framing in ("chunked", "both"):
        data += draw(_chunked(body, eol))
    else:
        data += body
    return data


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A generated response with 1-3 raw byte edits (replace, insert or delete)."""
    data = bytearray(draw(responses()))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data)))
        edit = draw(
            st.binary(max_size=2) | st.sampled_from([b"\r", b"\n", b" ", b"\t", b":", b";"])
        )
        width = draw(st.integers(0, 1))
        data[at : at + width] = edit
    return bytes(data)


# -- the oracle and the check --------------------------------------------------------------


def wire_split_outcome(data: bytes, pieces: list[bytes], request: HttpRequest) -> Outcome:
    """``wire_outcome`` with the bytes fed in ``pieces``, events drained between reads."""
    conn = H1Connection(limits=Limits(), now=0.0)
    conn.start(1, request, now=0.0)
    conn.data_to_send()
    events = []
    for piece in pieces:
        conn.receive_data(piece, now=1.0)
        events += list(iter(conn.next_event, None))
    if not events or not isinstance(events[-1], ResponseEnded | ExchangeFailed):
        conn.receive_eof(now=2.0)
        events += list(iter(conn.next_event, None))
    terminal = events[-1]
    assert [isinstance(e, ResponseEnded | ExchangeFailed) for e in events].count(True) == 1
    if not isinstance(terminal, ResponseEnded):
        assert isinstance(terminal, ExchangeFailed)
        assert terminal.error.cause in ("framing", "reset"), terminal.error.message
        return Outcome(False)
    heads = []
    for event in events:
        if isinstance(event, InformationalReceived):
            heads.append(("1xx", event.status, event.headers))
        elif isinstance(event, ResponseReceived):
            heads.append(("final", event.status, event.headers))
        elif isinstance(event, TrailersReceived):
            heads.append(("trailers", 0, event.headers))
    body = b"".join(e.data for e in events if isinstance(e, DataReceived))
    return Outcome(True, tuple(heads), body, conn.can_start())


def check(data: bytes, cuts: list[int], request: HttpRequest = POST) -> None:
    expected = h11_outcome(data, request)
    got, _ = wire_outcome(data, request)
    assert wire_split_outcome(data, split(data, cuts), request) == got, "split changed it"
    if not expected.accepted:
        assert not got.accepted, "h11 refused this; the wire took it"
    elif not got.accepted:
        assert divergence_of(data) is not None, "the wire refused what h11 took: undocumented"
    else:
        assert got == expected


_requests = st.sampled_from([POST, POST, POST, GET, HEAD])
_cuts = st.lists(st.integers(0, 400), max_size=8)
_settings = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@_settings
@given(data=responses(), cuts=_cuts, request=_requests)
def test_generated_responses_against_h11(
    data: bytes, cuts: list[int], request: HttpRequest
) -> None:
    check(data, cuts, request)


@_settings
@given(data=mutated(), cuts=_cuts, request=_requests)
def test_mutated_responses_against_h11(data: bytes, cuts: list[int], request: HttpRequest) -> None:
    check(data, cuts, request)


@settings(max_examples=EXAMPLES // 4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=responses())
def test_every_split_point_alike(data: bytes) -> None:
    """Byte by byte and cut once at every point: the same outcome as whole."""
    whole, _ = wire_outcome(data)
    assert wire_split_outcome(data, [data[i : i + 1] for i in range(len(data))], POST) == whole
    for i in range(1, len(data)):
        assert wire_split_outcome(data, [data[:i], data[i:]], POST) == whole
