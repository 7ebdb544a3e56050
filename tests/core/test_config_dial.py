"""Config checking (caller errors before I/O) and the dial guard's decisions."""

from __future__ import annotations

import pytest

from sansmcp.core import dial
from sansmcp.core.config import Config, conn_settings
from sansmcp.core.errors import CallerError, ConnectionFailed
from sansmcp.core.limits import Limits
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
    ],
    ids=lambda c: repr(c)[:60],
)
def test_unusable_config_is_a_caller_error(config: Config) -> None:
    with pytest.raises(CallerError):
        settings(config)


def test_literal_and_unique_addresses() -> None:
    assert dial.literal_address("127.0.0.1") == "127.0.0.1"
    assert dial.literal_address("::FFFF:127.0.0.1") == "::ffff:7f00:1"
    assert dial.literal_address("example.com") is None
    assert dial.unique_addresses(["1.1.1.1", "fe80::1%eth0", "1.1.1.1", "fe80::1"]) == [
        "1.1.1.1",
        "fe80::1",
    ]


ORIGIN = Origin(scheme="https", host="mcp.example.com", port=443)


def test_vet_keeps_allowed_addresses_in_order() -> None:
    allowed = dial.vet(
        ORIGIN,
        ["127.0.0.1", "8.8.8.8", "10.0.0.1", "1.1.1.1"],
        allow_private=False,
        allow_loopback=False,
    )
    assert allowed == ["8.8.8.8", "1.1.1.1"]


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


def test_dial_failures_are_classified() -> None:
    assert dial.dns_error(ORIGIN, OSError("nodename nor servname")).cause == "dns"
    assert dial.connect_error(ORIGIN, ConnectionRefusedError("refused")).cause == "dial"

    class SSLCertVerificationError(OSError):
        pass

    assert dial.connect_error(ORIGIN, SSLCertVerificationError("bad cert")).cause == "tls"
    assert dial.connect_error(ORIGIN, None).cause == "dial"
    timeout = dial.timeout_error(Limits(dial_timeout=1.5))
    assert (timeout.cause, timeout.bound, timeout.limit) == ("timeout", "dial_timeout", 1.5)
    assert dial.reset_error().cause == "reset"
