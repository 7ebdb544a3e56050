"""Config checking (caller errors before I/O) and the dial guard's decisions."""

from __future__ import annotations

import sys

import pytest

from sansmcp.core.config import Config, conn_settings
from sansmcp.core.errors import CallerError, ConnectionFailed
from sansmcp.core.limits import Limits
from sansmcp.core.net import dial
from sansmcp.core.url import Origin


def settings(config: Config, **kwargs: object):  # type: ignore[no-untyped-def]
    return conn_settings(config, client_info=None, capabilities=None, era_hint=None, **kwargs)  # type: ignore[arg-type]


def test_config_becomes_settings() -> None:
    result = conn_settings(
        Config(
            url="https://Example.com/mcp?x=1",
            bearer_token="tok",
            headers={"X-Trace": "abc", "User-Agent": "platform/1"},
            meta={"traceparent": "00-1"},
            tool_schemas={"a": b'{"type":"object"}', "b": {"type": "object"}},
            protocol_versions=["2025-11-25"],
            reissue_calls=True,
        ),
        client_info={"name": "platform", "version": "2"},
        capabilities={"elicitation": {}},
        era_hint="2025-11-25",
    )
    assert result.endpoint.origin == Origin(scheme="https", host="example.com", port=443)
    assert result.endpoint.target == b"/mcp?x=1"
    assert result.headers == ((b"x-trace", b"abc"), (b"user-agent", b"platform/1"))
    assert result.tool_schemas == {"a": {"type": "object"}, "b": {"type": "object"}}
    assert result.protocol_versions == ("2025-11-25",)
    assert result.client_info == {"name": "platform", "version": "2"}
    assert result.capabilities == {"elicitation": {}}
    assert result.era_hint == "2025-11-25" and result.reissue_calls
    assert result.meta == {"traceparent": "00-1"}
    default = settings(Config(url="http://127.0.0.1:8000/mcp", bearer_token="t"))
    assert default.client_info["name"] == "sansmcp"
    assert default.protocol_versions[0] == "2026-07-28"


@pytest.mark.parametrize(
    "config",
    [
        Config(url="ftp://example.com/"),
        Config(url="http://example.com/mcp", bearer_token="secret"),
        Config(url="https://example.com/mcp", bearer_token=""),
        Config(url="https://example.com/mcp", bearer_token="has space"),
        Config(url="https://example.com/mcp", headers={"Bad Name": "x"}),
        Config(url="https://example.com/mcp", headers={"X": "a\r\nInjected: 1"}),
        Config(url="https://example.com/mcp", headers={"X": "\u2603"}),
        Config(url="https://example.com/mcp", headers={"\u2603": "x"}),
        Config(url="https://example.com/mcp", tool_schemas={"a": b"{"}),
        Config(url="https://example.com/mcp", tool_schemas={"a": b"[1]"}),
        Config(url="https://example.com/mcp", protocol_versions=["2024-11-05"]),
        Config(url="https://example.com/mcp", headers=[("X", "y")]),  # type: ignore[arg-type]
        Config(url="https://example.com/mcp", tool_schemas=["a"]),  # type: ignore[arg-type]
    ],
    ids=lambda c: repr(c)[:60],
)
def test_unusable_config_is_a_caller_error(config: Config) -> None:
    with pytest.raises(CallerError):
        settings(config)


def test_an_own_authorization_header_is_sent_when_sansmcp_sets_none() -> None:
    from sansmcp.core.mcp.requests import Requests
    from sansmcp.core.mcp.session import Session
    from sansmcp.core.oauth.store import OAuth

    own = {"Authorization": "Basic dTpw"}
    built = settings(Config(url="https://mcp.example/mcp", headers=own))
    sent = Requests(built, Session()).base_headers()
    assert [value for name, value in sent if name == b"authorization"] == [b"Basic dTpw"]
    assert settings(Config(url="http://127.0.0.1:9/mcp", headers=own)).headers == (
        (b"authorization", b"Basic dTpw"),
    )
    for other, field in (({"bearer_token": "t"}, "bearer_token"), ({"oauth": OAuth()}, "oauth")):
        with pytest.raises(CallerError, match=f"Config.{field} is set"):
            settings(Config(url="https://mcp.example/mcp", headers=own, **other))  # type: ignore[arg-type]
    with pytest.raises(CallerError, match="never sent over plain http"):
        settings(Config(url="http://mcp.example/mcp", headers={"authorization": "Basic x"}))


# An IPv4-mapped IPv6 address as ipaddress writes it (the text dialled is the parse's
# str()): CPython 3.13 writes the IPv4 part dotted, 3.11 and 3.12 in hexadecimal.
MAPPED_FORM = sys.version_info >= (3, 13)


def test_literal_address() -> None:
    assert dial.literal_address("127.0.0.1") == "127.0.0.1"
    assert dial.literal_address("::FFFF:127.0.0.1") == (
        "::ffff:127.0.0.1" if MAPPED_FORM else "::ffff:7f00:1"
    )
    assert dial.literal_address("example.com") is None


ORIGIN = Origin(scheme="https", host="mcp.example.com", port=443)


def test_vet_keeps_allowed_addresses_in_order() -> None:
    allowed = dial.vet(
        ORIGIN,
        ["127.0.0.1", "8.8.8.8", "10.0.0.1", "1.1.1.1"],
        allow_private=False,
        allow_loopback=False,
    )
    assert allowed == ["8.8.8.8", "1.1.1.1"]


def test_vet_normalises_dedupes_and_drops_scope_ids() -> None:
    """Each answer is parsed once; the text returned is that parse's str()."""
    answer = ["1.1.1.1", "fe80::1%eth0", "1.1.1.1", "2606:4700:4700:0:0:0:0:1111", "::FFFF:8.8.8.8"]
    assert dial.vet(ORIGIN, answer, allow_private=False, allow_loopback=False) == [
        "1.1.1.1",
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8" if MAPPED_FORM else "::ffff:808:808",
    ]
    with pytest.raises(ConnectionFailed) as caught:
        dial.vet(ORIGIN, ["fe80::1%eth0"], allow_private=True, allow_loopback=True)
    assert caught.value.cause == "refused_address"
    assert "fe80::1 is link-local" in caught.value.message


def test_vet_refuses_when_nothing_is_allowed() -> None:
    with pytest.raises(ConnectionFailed) as caught:
        dial.vet(
            ORIGIN, ["169.254.169.254", "fd00:ec2::254"], allow_private=True, allow_loopback=True
        )
    assert caught.value.cause == "refused_address"
    assert "169.254.169.254" in caught.value.message and "fd00:ec2::254" in caught.value.message
    with pytest.raises(ConnectionFailed) as caught:
        dial.vet(ORIGIN, ["127.0.0.1"], allow_private=False, allow_loopback=False)
    assert caught.value.cause == "refused_address" and "127.0.0.1" in caught.value.message
    with pytest.raises(ConnectionFailed) as caught:
        dial.vet(ORIGIN, [], allow_private=False, allow_loopback=False)
    assert caught.value.cause == "dns"
    many = [f"10.0.0.{n}" for n in range(6)]
    with pytest.raises(ConnectionFailed) as caught:
        dial.vet(ORIGIN, many, allow_private=False, allow_loopback=False)
    assert "10.0.0.3" in caught.value.message and "10.0.0.4" not in caught.value.message
    assert "and 2 more refused" in caught.value.message


def test_messages_name_the_host_and_the_address_once() -> None:
    literal = Origin(scheme="http", host="10.0.0.1", port=80)
    with pytest.raises(ConnectionFailed) as caught:
        dial.vet(literal, ["10.0.0.1"], allow_private=False, allow_loopback=False)
    assert caught.value.message.startswith("refusing to connect: 10.0.0.1 is private")
    assert caught.value.message.count("10.0.0.1") == 1
    named = Origin(scheme="http", host="svc.example", port=80)
    with pytest.raises(ConnectionFailed) as caught:
        dial.vet(named, ["10.0.0.1"], allow_private=False, allow_loopback=False)
    assert caught.value.message.startswith("refusing to connect svc.example: 10.0.0.1 is private")
    refused = ConnectionRefusedError(111, "refused")
    assert dial.connect_error(literal, "10.0.0.1", refused).message == (
        "could not connect to 10.0.0.1:80: ConnectionRefusedError: [Errno 111] refused"
    )
    assert dial.connect_error(named, "10.0.0.1", refused).message == (
        "could not connect to svc.example:80 at 10.0.0.1: ConnectionRefusedError: [Errno 111] refused"
    )


def test_a_loopback_name_reaches_only_loopback_addresses() -> None:
    origin = Origin(scheme="http", host="svc.localhost", port=8080)
    answer = ["10.0.0.1", "127.0.0.1", "93.184.216.34"]
    assert dial.vet(origin, answer, allow_private=True, allow_loopback=True) == ["127.0.0.1"]
    with pytest.raises(ConnectionFailed) as refused:
        dial.vet(origin, ["93.184.216.34"], allow_private=False, allow_loopback=False)
    assert refused.value.cause == "refused_address"
    assert "93.184.216.34 is not loopback, yet svc.localhost is a loopback name" in (
        refused.value.message
    )


def test_dial_failures_are_tagged_by_phase() -> None:
    """connect_error is the TCP phase, tls_error the handshake: the class never decides."""
    assert dial.dns_error(ORIGIN, OSError("nodename nor servname")).cause == "dns"
    refused = dial.connect_error(ORIGIN, "192.0.2.1", ConnectionRefusedError(111, "refused"))
    assert refused.cause == "dial"
    assert "192.0.2.1" in refused.message and "ConnectionRefusedError" in refused.message

    class SSLCertVerificationError(OSError):
        pass

    # a class name that says "SSL" raised while connecting TCP is still a dial failure
    assert dial.connect_error(ORIGIN, "192.0.2.1", SSLCertVerificationError("x")).cause == "dial"

    class Handshake(Exception):
        reason = "TLSV1_ALERT_PROTOCOL_VERSION"

    tls = dial.tls_error(ORIGIN, "192.0.2.1", Handshake("alert"))
    assert tls.cause == "tls"
    assert "TLSV1_ALERT_PROTOCOL_VERSION" in tls.message and "alert" in tls.message

    class Verify(Exception):
        reason = "CERTIFICATE_VERIFY_FAILED"
        verify_message = "unable to get local issuer certificate"

    tls = dial.tls_error(ORIGIN, "192.0.2.1", Verify())
    assert tls.cause == "tls"
    assert "unable to get local issuer certificate, CERTIFICATE_VERIFY_FAILED" in tls.message
    bare = dial.tls_error(ORIGIN, "192.0.2.1", ConnectionResetError())
    assert (bare.cause, "the TLS library gave no reason" in bare.message) == ("tls", True)
    timeout = dial.timeout_error(Limits(dial_timeout=1.5))
    assert (timeout.cause, timeout.bound, timeout.limit) == ("timeout", "dial_timeout", 1.5)
    assert dial.reset_error().cause == "reset"
