"""The egress proxy codec: its URL, the CONNECT request, and the reading of its answer.

Tables for each classified outcome; properties: an answer read whole, byte by byte or
at drawn split points gives the same outcome, and any bytes (mutated heads, garbage)
end only as ESTABLISHED, None or a ConnectionFailed of the documented causes.
"""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import CallerError, ConnectionFailed
from sansmcp.core.net.tunnel import (
    ESTABLISHED,
    Established,
    Proxy,
    TunnelReply,
    authority,
    connect_request,
    parse_proxy,
)
from sansmcp.core.url import Origin
from tests.tiers import examples

PROXY = parse_proxy("http://proxy.internal:3128")
SECRET = parse_proxy("http://alice:s%3Acret@proxy.internal:3128/")
OK = b"HTTP/1.1 200 Connection established\r\n\r\n"


def reply(
    proxy: Proxy = PROXY, *, max_header_bytes: int = 4096, informational: int = 2
) -> TunnelReply:
    return TunnelReply(proxy, max_header_bytes=max_header_bytes, max_informational=informational)


def outcome(data: bytes, chunks: list[int] | None = None, **kw: int) -> object:
    """What a reader makes of ``data`` fed in pieces (sizes ``chunks``, then the rest),
    then EOF when it still wants more: ESTABLISHED (and nothing after it) or the
    ConnectionFailed raised."""
    reader = reply(**kw)
    pieces = []
    at = 0
    for size in chunks or []:
        pieces.append(data[at : at + size])
        at += size
    pieces.append(data[at:])
    up = False
    try:
        for piece in pieces:
            if piece or not up:  # (the driver feeds no empty read)
                up = reader.receive_data(piece) is ESTABLISHED
        if up:
            return ESTABLISHED
        reader.receive_eof()
    except ConnectionFailed as failure:
        return failure
    raise AssertionError("receive_eof returned")  # pragma: no cover


# ------------------------------------------------------------------ proxy URLs


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port"),
    [
        ("http://proxy.internal:3128", "http", "proxy.internal", 3128),
        ("HTTP://Proxy.Internal", "http", "proxy.internal", 80),
        ("https://proxy.internal/", "https", "proxy.internal", 443),
        ("http://127.0.0.1:8080", "http", "127.0.0.1", 8080),
        ("http://[::1]:8080", "http", "::1", 8080),
    ],
)
def test_proxy_urls(url: str, scheme: str, host: str, port: int) -> None:
    proxy = parse_proxy(url)
    assert proxy.origin == Origin(scheme=scheme, host=host, port=port)
    assert proxy.authorization is None


def test_credentials_are_basic_and_never_shown() -> None:
    assert SECRET.authorization == b"Basic " + base64.b64encode(b"alice:s:cret")
    assert SECRET.url == "http://proxy.internal:3128"
    for text in (repr(SECRET), str(SECRET), SECRET.url):
        assert "alice" not in text and "cret" not in text and "YWxp" not in text
    assert SECRET != PROXY  # the credential keys the pool too
    assert parse_proxy("http://[::1]:1").url == "http://[::1]:1"
    assert parse_proxy("http://%C3%A9:@p").authorization == b"Basic " + base64.b64encode(
        "é:".encode()
    )


@pytest.mark.parametrize(
    ("url", "words"),
    [
        (b"http://p", "must be a str"),
        ("socks5://p:1080", "http:// or https://"),
        ("p:3128", "http:// or https://"),
        ("http://p:3128/path", "no path"),
        ("http://p?x", "no path"),
        ("http://p#x", "no path"),
        ("http://p\x00q", "printable ASCII"),
        ("http://pé", "printable ASCII"),
        ("http://p:0", "bad port"),
        ("http://:3128", "no host"),
        ("http://alice@p", "user:password"),
        (":pw@", "http:// or https://"),
        ("http://:pw@p", "user:password"),
        ("http://al ice:pw@p", "percent-encoded"),
        ("http://@p", "percent-encoded"),
        ("http://a%3Ab:pw@p", "may not hold ':'"),
        ("http://a%0Ab:pw@p", "control character"),
        ("http://a:%zz@p", "bad percent-escape"),
        ("http://a:%f@p", "bad percent-escape"),
        ("http://a:%ff@p", "bad percent-escape"),
        ("http://" + "p" * 9000, "bytes"),
    ],
)
def test_bad_proxy_urls_are_caller_errors(url: object, words: str) -> None:
    with pytest.raises(CallerError, match=words) as caught:
        parse_proxy(url)
    assert "pw" not in str(caught.value)


# ------------------------------------------------------------------ the request


def test_connect_request() -> None:
    assert connect_request(PROXY, "mcp.example.com", 443) == (
        b"CONNECT mcp.example.com:443 HTTP/1.1\r\nHost: mcp.example.com:443\r\n\r\n"
    )
    assert connect_request(SECRET, "2001:db8::1", 8443) == (
        b"CONNECT [2001:db8::1]:8443 HTTP/1.1\r\nHost: [2001:db8::1]:8443\r\n"
        b"Proxy-Authorization: Basic " + base64.b64encode(b"alice:s:cret") + b"\r\n\r\n"
    )
    assert authority("93.184.215.14", 80) == b"93.184.215.14:80"


# ------------------------------------------------------------------ the answer


@pytest.mark.parametrize(
    "answer",
    [
        OK,
        b"HTTP/1.0 200 OK\r\n\r\n",
        b"HTTP/1.1 200\r\n\r\n",
        b"HTTP/1.1 200 OK\nVia: tinyproxy\n\n",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
    ],
)
def test_established(answer: bytes) -> None:
    assert outcome(answer) is ESTABLISHED
    assert outcome(answer, [1] * len(answer)) is ESTABLISHED  # byte by byte


REFUSALS = [
    # (answer, cause, status, words)
    (b"HTTP/1.1 403 Forbidden\r\nContent-Length: 5\r\n\r\nnope!", "proxy", 403, "status 403"),
    (b"HTTP/1.1 502 Bad Gateway\r\n\r\n", "proxy", 502, "refused CONNECT with status 502"),
    (b"HTTP/1.1 301 Moved\r\nLocation: http://x/\r\n\r\n", "proxy", 301, "status 301"),
    (
        b"HTTP/1.1 407 Proxy Authentication Required\r\n"
        b'Proxy-Authenticate: Basic realm="tinyproxy"\r\n\r\n',
        "proxy",
        407,
        "wants credentials",
    ),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", "proxy", 200, "and a body"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "proxy", 200, "and a body"),
    (OK + b"\x16\x03\x01", "proxy", None, "after its answer to CONNECT, before the target"),
    (b"HTTP/1.1 101 Switching\r\n\r\n", "proxy", 101, "status 101"),
    (b"HTTP/1.1 100 A\r\n\r\n" * 3 + OK, "proxy", 100, "more than 2 times"),
    (b"HTTP/1.1 099 Early\r\n\r\n", "proxy", 99, "status 99"),
    (b"HTTP/2.0 200 OK\r\n\r\n", "proxy", None, "malformed status line"),
    (b"RTSP/1.0 200 OK\r\n\r\n", "proxy", None, "malformed status line"),
    (b"\r\nHTTP/1.1 200 OK\r\n\r\n", "proxy", None, "malformed status line"),
    (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", "proxy", None, "malformed head"),
    (
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "proxy",
        None,
        "malformed",
    ),
    (b"HTTP/1.1 200 OK\r\nX: y\r\n", "proxy", None, "closed the connection before answering"),
    (b"", "proxy", None, "closed the connection before answering CONNECT"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 5000 + b"\r\n\r\n", "budget", None, "max_header_bytes"),
]


@pytest.mark.parametrize(("answer", "cause", "status", "words"), REFUSALS)
def test_refusals_are_classified(answer: bytes, cause: str, status: int | None, words: str) -> None:
    for chunks in (None, [1] * len(answer)):
        failure = outcome(answer, chunks)
        assert isinstance(failure, ConnectionFailed), failure
        assert failure.cause == cause, failure
        assert failure.status == status, failure
        assert words in failure.message, failure.message
        assert "http://proxy.internal:3128" in failure.message or cause == "budget"


def test_407_carries_the_challenge_and_hides_the_credential() -> None:
    answer = (
        b'HTTP/1.1 407 Auth\r\nProxy-Authenticate: Basic realm="a"\r\n'
        b"Proxy-Authenticate: Bearer\r\n\r\n"
    )
    reader = reply(SECRET)
    with pytest.raises(ConnectionFailed) as caught:
        reader.receive_data(answer)
    failure = caught.value
    assert failure.cause == "proxy" and failure.status == 407
    assert failure.proxy_authenticate == 'Basic realm="a", Bearer'
    assert "refused the credentials" in failure.message and "alice" not in failure.message
    no_challenge = outcome(b"HTTP/1.1 407 Auth\r\n\r\n")
    assert isinstance(no_challenge, ConnectionFailed)
    assert (
        no_challenge.proxy_authenticate == "" and "Proxy-Authenticate" not in no_challenge.message
    )
    other = outcome(b"HTTP/1.1 403 No\r\nProxy-Authenticate: Basic\r\n\r\n")
    assert isinstance(other, ConnectionFailed) and other.proxy_authenticate is None


def test_the_head_bound_is_exact() -> None:
    head = b"HTTP/1.1 200 OK\r\nX: " + b"y" * 10
    exact = head + b"\r\n\r\n"
    assert outcome(exact, max_header_bytes=len(exact)) is ESTABLISHED
    over = outcome(exact, max_header_bytes=len(exact) - 1)
    assert isinstance(over, ConnectionFailed) and over.bound == "max_header_bytes"
    assert over.limit == len(exact) - 1 and over.observed == len(exact)
    # an endless head fails at byte limit + 1 whatever the split, never buffering more
    reader = reply(max_header_bytes=100)
    assert reader.receive_data(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 13) is None
    with pytest.raises(ConnectionFailed) as caught:
        reader.receive_data(b"X" * 10_000)
    assert caught.value.observed == 101


def test_spent_after_an_answer() -> None:
    reader = reply()
    assert reader.receive_data(OK) is ESTABLISHED
    with pytest.raises(ConnectionFailed, match="after its answer to CONNECT"):
        reader.receive_data(b"x")
    with pytest.raises(ConnectionFailed, match="closed the connection after its answer"):
        reply_after = reply()
        assert reply_after.receive_data(OK) is ESTABLISHED
        reply_after.receive_eof()
    partial = reply()
    assert partial.receive_data(b"HTTP/1.1 2") is None
    with pytest.raises(ConnectionFailed, match=r"after 10 bytes of a head"):
        partial.receive_eof()


# ------------------------------------------------------------------ properties


def _key(result: object) -> object:
    if isinstance(result, ConnectionFailed):
        # (the message counts the bytes after the head, which a split may spread out)
        return (result.cause, result.status, result.proxy_authenticate)
    return result


ANSWERS = st.sampled_from([OK] + [answer for answer, *_ in REFUSALS])


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A near-valid answer with bytes flipped, dropped or inserted."""
    data = bytearray(draw(ANSWERS))
    for _ in range(draw(st.integers(0, 4))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        match draw(st.sampled_from(["flip", "drop", "insert"])):
            case "flip":
                data[at] = draw(st.integers(0, 255))
            case "drop":
                del data[at]
            case _:
                data[at:at] = draw(st.sampled_from([b"\r", b"\n", b"\r\n", b":", b" ", b"\x00"]))
    return bytes(data)


@settings(max_examples=examples(300))
@given(data=st.one_of(mutated(), st.binary(max_size=300)), cuts=st.lists(st.integers(0, 40)))
def test_any_bytes_end_classified_whatever_the_split(data: bytes, cuts: list[int]) -> None:
    whole = outcome(data, max_header_bytes=200)
    assert whole is ESTABLISHED or (
        isinstance(whole, ConnectionFailed) and whole.cause in ("proxy", "budget")
    )
    assert _key(outcome(data, cuts, max_header_bytes=200)) == _key(whole)
    assert isinstance(ESTABLISHED, Established)
