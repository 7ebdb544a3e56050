"""Endpoint URL parsing: the normal forms and every refusal."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sansmcp.core.errors import CallerError
from sansmcp.core.url import MAX_URL_BYTES, Endpoint, Origin, is_loopback_host, parse_endpoint
from tests.tiers import examples

# url -> (normalised url, scheme, host, port, authority, target)
GOOD = [
    ("http://example.com", "http://example.com/", "http", "example.com", 80, b"example.com", b"/"),
    (
        "https://Example.COM/MCP",
        "https://example.com/MCP",
        "https",
        "example.com",
        443,
        b"example.com",
        b"/MCP",
    ),
    ("HTTPS://a.b:443?q", "https://a.b/?q", "https", "a.b", 443, b"a.b", b"/?q"),
    ("http://a.b:443/", "http://a.b:443/", "http", "a.b", 443, b"a.b:443", b"/"),
    ("https://a.b:80/", "https://a.b:80/", "https", "a.b", 80, b"a.b:80", b"/"),
    ("http://h:/x", "http://h/x", "http", "h", 80, b"h", b"/x"),
    (
        "http://127.0.0.1:8000/mcp/",
        "http://127.0.0.1:8000/mcp/",
        "http",
        "127.0.0.1",
        8000,
        b"127.0.0.1:8000",
        b"/mcp/",
    ),
    ("http://[::1]:8080/mcp", "http://[::1]:8080/mcp", "http", "::1", 8080, b"[::1]:8080", b"/mcp"),
    (
        "https://[2001:DB8:0:0::1]/",
        "https://[2001:db8::1]/",
        "https",
        "2001:db8::1",
        443,
        b"[2001:db8::1]",
        b"/",
    ),
    ("http://[::1]", "http://[::1]/", "http", "::1", 80, b"[::1]", b"/"),
    (
        "https://bücher.example/pfad",
        "https://xn--bcher-kva.example/pfad",
        "https",
        "xn--bcher-kva.example",
        443,
        b"xn--bcher-kva.example",
        b"/pfad",
    ),
    (
        "https://BÜCHER.example",
        "https://xn--bcher-kva.example/",
        "https",
        "xn--bcher-kva.example",
        443,
        b"xn--bcher-kva.example",
        b"/",
    ),
    (
        "http://h/päth?q=é&r=%20",
        "http://h/p%C3%A4th?q=%C3%A9&r=%20",
        "http",
        "h",
        80,
        b"h",
        b"/p%C3%A4th?q=%C3%A9&r=%20",
    ),
    (
        "http://my_host.local./a",
        "http://my_host.local./a",
        "http",
        "my_host.local.",
        80,
        b"my_host.local.",
        b"/a",
    ),
    ("http://h/a//b/../c;p", "http://h/a//b/../c;p", "http", "h", 80, b"h", b"/a//b/../c;p"),
    ("http://h?", "http://h/?", "http", "h", 80, b"h", b"/?"),
    ("http://h:65535", "http://h:65535/", "http", "h", 65535, b"h:65535", b"/"),
    ("http://h:00080", "http://h/", "http", "h", 80, b"h", b"/"),
    (
        "http://1.2.3.4.example",
        "http://1.2.3.4.example/",
        "http",
        "1.2.3.4.example",
        80,
        b"1.2.3.4.example",
        b"/",
    ),
]


@pytest.mark.parametrize(("url", "norm", "scheme", "host", "port", "authority", "target"), GOOD)
def test_good_urls(
    url: str, norm: str, scheme: str, host: str, port: int, authority: bytes, target: bytes
) -> None:
    endpoint = parse_endpoint(url)
    assert endpoint == Endpoint(
        url=norm,
        origin=Origin(scheme=scheme, host=host, port=port),
        authority=authority,
        target=target,
    )
    # normalising is idempotent
    assert parse_endpoint(endpoint.url) == endpoint


BAD = [
    ("ftp://example.com/", "http:// or https://"),
    ("example.com/mcp", "http:// or https://"),
    ("http:/example.com", "http:// or https://"),
    ("javascript:alert(1)", "http:// or https://"),
    ("", "http:// or https://"),
    ("http://", "no host"),
    ("http:///path", "no host"),
    ("http://:80/", "no host"),
    ("http://?q", "no host"),
    ("http://user@example.com/", "userinfo"),
    ("http://user:pw@example.com/", "userinfo"),
    ("http://evil.com\\@good.com/", "userinfo"),
    ("http://a.com\\b/", "contains"),
    ("http://example.com/#frag", "fragment"),
    ("http://example.com#", "fragment"),
    ("http://example.com:0/", "bad port"),
    ("http://example.com:65536/", "bad port"),
    ("http://example.com:123456/", "bad port"),
    ("http://example.com:-1/", "bad port"),
    ("http://example.com:8o/", "bad port"),
    ("http://example.com:\uff18\uff10/", "bad port"),
    ("http://example.com:80:80/", "bad port"),
    ("http://::1/", "no host"),
    ("http://exa mple.com/", "offset 10"),
    ("http://example.com/a b", "whitespace"),
    (" http://example.com/", "offset 0"),
    ("http://example.com/\t", "control"),
    ("http://example.com/\r\nX: y", "control"),
    ("http://example.com/\x00", "control"),
    ("http://example.com/\x7f", "control"),
    ("http://example.com/\u202e", "format"),
    ("http://example.com/\u00a0", "whitespace"),
    ("http://example.com/\u2028", "whitespace"),
    ("http://[::1/", "unterminated"),
    ("http://[::1]x/", "after an IPv6 literal"),
    ("http://[::1]:0/", "bad port"),
    ("http://[fe80::1%25eth0]/", "zone id"),
    ("http://[1.2.3.4]/", "invalid IPv6"),
    ("http://[v1.x]/", "invalid IPv6"),
    ("http://127.1/", "dotted-quad"),
    ("http://2130706433/", "dotted-quad"),
    ("http://0x7f.0.0.1/", "dotted-quad"),
    ("http://1.2.3.0x4/", "dotted-quad"),
    ("http://010.0.0.1/", "dotted-quad"),
    ("http://256.0.0.1/", "dotted-quad"),
    ("http://1.2.3.4./", "dotted-quad"),
    ("http://a..b/", "empty label"),
    ("http://.a/", "empty label"),
    ("http://" + "a" * 64 + ".com/", "over 63"),
    ("http://" + ("a" * 60 + ".") * 5 + "com/", "253"),
    ("http://ex<ample.com/", "contains"),
    ("http://ex%41mple.com/", "contains"),
    ("http://ex'ample.com/", "contains"),
    ("http://\u2ff0.example/", "IDNA"),
    ("http://\u05d0a.example/", "IDNA"),
    ("http://\u00e9" + "a" * 70 + ".com/", "IDNA"),
    ("http://example.com/\ud800", "surrogate"),
]


@pytest.mark.parametrize(("url", "needle"), BAD)
def test_bad_urls(url: str, needle: str) -> None:
    with pytest.raises(CallerError) as info:
        parse_endpoint(url)
    assert needle in str(info.value)


def test_url_size_bound_is_inclusive() -> None:
    prefix = "http://h/"
    at_bound = prefix + "a" * (MAX_URL_BYTES - len(prefix))
    assert parse_endpoint(at_bound).target == b"/" + b"a" * (MAX_URL_BYTES - len(prefix))
    with pytest.raises(CallerError, match=r"8,193 bytes; limit is 8,192"):
        parse_endpoint(at_bound + "a")
    # counted in UTF-8 bytes, not characters
    with pytest.raises(CallerError, match="limit is 8,192"):
        parse_endpoint(prefix + "é" * (MAX_URL_BYTES // 2))


def test_not_a_string() -> None:
    with pytest.raises(CallerError, match="must be a str"):
        parse_endpoint(b"http://h/")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("localhost.", True),
        ("api.localhost", True),
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("::ffff:7f00:1", True),
        ("localhost.example", False),
        ("notlocalhost", False),
        ("example.com", False),
        ("128.0.0.1", False),
        ("10.0.0.1", False),
        ("::2", False),
        ("::ffff:10.0.0.1", False),
        ("0.0.0.0", False),
        ("", False),
    ],
)
def test_is_loopback_host(host: str, expected: bool) -> None:
    assert is_loopback_host(host) is expected


def test_loopback_from_parsed_origin() -> None:
    assert is_loopback_host(parse_endpoint("http://[::1]:9/").origin.host)
    assert is_loopback_host(parse_endpoint("http://LocalHost:9/").origin.host)
    assert not is_loopback_host(parse_endpoint("https://example.com/").origin.host)


@settings(max_examples=examples(300), deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_suffixes_parse_or_raise_caller_error(suffix: str) -> None:
    """Garbage never escapes as anything but CallerError; success is always normalised."""
    for url in ("http://" + suffix, "https://example.com" + suffix, suffix):
        try:
            endpoint = parse_endpoint(url)
        except CallerError:
            continue
        assert endpoint.url.isascii()
        assert endpoint.target.startswith(b"/")
        assert b"#" not in endpoint.target
        assert all(0x21 <= b < 0x7F for b in endpoint.target)
        assert parse_endpoint(endpoint.url) == endpoint
