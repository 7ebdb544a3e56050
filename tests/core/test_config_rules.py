"""``conn_settings``' checks, one per field of ``Config``, driven through a table: each row a
config (and the Client's ``client_info`` / ``capabilities``) with the exact ``CallerError``
message it raises, and, in order, configs with two faults: the field checked first names
its fault."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from sansmcp.core.config import Config, conn_settings
from sansmcp.core.errors import CallerError
from sansmcp.core.oauth.store import OAuth

HTTPS = "https://mcp.example/mcp"
PLAIN = "http://mcp.example/mcp"
LOOPBACK = "http://127.0.0.1:9/mcp"
_SPOKEN = "2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26"
_LEVELS = "debug, info, notice, warning, error, critical, alert, emergency"


def _settings(config: Config, client_info: Any = None, capabilities: Any = None) -> Any:
    return conn_settings(config, client_info=client_info, capabilities=capabilities, era_hint=None)


# (Config keywords, client_info, capabilities, the message)
_FAULTS: list[tuple[dict[str, Any], Any, Any, str]] = [
    (
        {"url": "ftp://mcp.example/"},
        None,
        None,
        "endpoint URL must start with http:// or https://, got 'ftp://mcp.example/'",
    ),
    ({"bearer_token": 7}, None, None, "the bearer token must be a str, not int"),
    (
        {"url": PLAIN, "bearer_token": "t"},
        None,
        None,
        "a bearer token is never sent over plain http except to loopback; use https",
    ),
    ({"bearer_token": ""}, None, None, "the bearer token must be non-empty visible ASCII"),
    ({"bearer_token": "a b"}, None, None, "the bearer token must be non-empty visible ASCII"),
    ({"bearer_token": "a\x7f"}, None, None, "the bearer token must be non-empty visible ASCII"),
    ({"bearer_token": "caf\xe9"}, None, None, "the bearer token must be non-empty visible ASCII"),
    ({"oauth": "yes"}, None, None, "Config.oauth must be an OAuth, not str"),
    (
        {"url": PLAIN, "oauth": OAuth()},
        None,
        None,
        "OAuth tokens are never sent over plain http except to loopback",
    ),
    ({"headers": [("X", "y")]}, None, None, "Config.headers must be a mapping, not list"),
    ({"tool_schemas": ["a"]}, None, None, "Config.tool_schemas must be a mapping, not list"),
    ({"output_schemas": 3}, None, None, "Config.output_schemas must be a mapping, not int"),
    ({"headers": {"X": 1}}, None, None, "header 'X': names and values must be str"),
    ({"headers": {1: "x"}}, None, None, "header 1: names and values must be str"),
    ({"headers": {"X": "\u2603"}}, None, None, "header 'X' is not ASCII / Latin-1"),
    ({"headers": {"\u2603": "x"}}, None, None, "header '\u2603' is not ASCII / Latin-1"),
    ({"headers": {"Bad Name": "x"}}, None, None, "header name 'Bad Name' is not an HTTP token"),
    ({"headers": {"": "x"}}, None, None, "header name '' is not an HTTP token"),
    (
        {"headers": {"X": "a\r\nInjected: 1"}},
        None,
        None,
        "header 'X' has a control character in its value",
    ),
    (
        {"headers": {"X": " a"}},
        None,
        None,
        "header 'X' has whitespace at the start or end of its value",
    ),
    (
        {"headers": {"Authorization": "Basic x"}, "bearer_token": "t"},
        None,
        None,
        "Config.headers has an Authorization entry and Config.bearer_token is set:"
        " give the credential one way",
    ),
    (
        {"url": PLAIN, "headers": {"authorization": "Basic x"}},
        None,
        None,
        "an Authorization header is never sent over plain http except to loopback; use https",
    ),
    (
        {"meta": {"x": math.nan}},
        None,
        None,
        "Config.meta cannot be sent as JSON: value cannot be encoded as JSON: Out of range float values are not JSON compliant",
    ),
    (
        {},
        {"v": math.inf},
        None,
        "client_info cannot be sent as JSON: value cannot be encoded as JSON: Out of range float values are not JSON compliant",
    ),
    (
        {},
        None,
        {"v": {1, 2}},
        "capabilities cannot be sent as JSON: value cannot be encoded as JSON:"
        " Object of type set is not JSON serializable",
    ),
    ({"tool_schemas": {"a": b"{"}}, None, None, "the schema for tool 'a' is not JSON"),
    ({"tool_schemas": {"a": b"[" * 100_000}}, None, None, "the schema for tool 'a' is not JSON"),
    ({"tool_schemas": {"a": b"[1]"}}, None, None, "the schema for tool 'a' is not a JSON object"),
    ({"tool_schemas": {"a": 3}}, None, None, "the schema for tool 'a' is not a JSON object"),
    ({"output_schemas": {"a": b"{"}}, None, None, "the output schema for tool 'a' is not JSON"),
    (
        {"output_schemas": {"a": b"[1]"}},
        None,
        None,
        "the output schema for tool 'a' is not a JSON object",
    ),
    (
        {"output_schemas": {"a": {"x": math.nan}}},
        None,
        None,
        "the output schema for tool 'a' is not JSON: value cannot be encoded as JSON: Out of range float values are not JSON compliant",
    ),
    (
        {"validate_structured_content": 1},
        None,
        None,
        "Config.validate_structured_content must be a bool",
    ),
    (
        {"protocol_versions": ["2024-11-05"]},
        None,
        None,
        f"protocol_versions ('2024-11-05',) names no version sansmcp speaks ({_SPOKEN})",
    ),
    ({"on_notification": "print"}, None, None, "Config.on_notification must be callable"),
    (
        {"log_level": "loud"},
        None,
        None,
        f"Config.log_level 'loud' is not a log level ({_LEVELS})",
    ),
]


@pytest.mark.parametrize(
    ("given", "client_info", "capabilities", "message"),
    _FAULTS,
    ids=[message[:50] for _, _, _, message in _FAULTS],
)
def test_each_fault_is_a_caller_error_saying_so(
    given: dict[str, Any], client_info: Any, capabilities: Any, message: str
) -> None:
    config = Config(**{"url": HTTPS, **given})
    # (the standard json module's own words end a JSON fault; CPython 3.12 adds the value)
    version_suffix = "(: -?(nan|inf))?" if message.endswith("not JSON compliant") else ""
    with pytest.raises(CallerError, match=f"^{re.escape(message)}{version_suffix}$"):
        _settings(config, client_info, capabilities)


# Two faults: the one of the field checked first is raised (the mapping shapes of headers,
# tool_schemas and output_schemas before the contents of any of them).
_ORDER: list[tuple[dict[str, Any], str]] = [
    ({"bearer_token": "", "oauth": "x"}, "the bearer token must be non-empty visible ASCII"),
    ({"oauth": "x", "headers": []}, "Config.oauth must be an OAuth, not str"),
    ({"headers": {"X": 1}, "tool_schemas": []}, "Config.tool_schemas must be a mapping, not list"),
    ({"headers": {"X": 1}, "output_schemas": []}, "Config.output_schemas must be a mapping"),
    ({"headers": {"X": 1}, "meta": {"x": math.nan}}, "header 'X': names and values must be str"),
    ({"meta": {"x": math.nan}, "tool_schemas": {"a": 1}}, "Config.meta cannot be sent as JSON"),
    ({"tool_schemas": {"a": 1}, "output_schemas": {"a": 1}}, "the schema for tool 'a'"),
    ({"output_schemas": {"a": 1}, "validate_structured_content": 0}, "the output schema"),
    ({"validate_structured_content": 0, "protocol_versions": ["x"]}, "Config.validate_structured"),
    ({"protocol_versions": ["x"], "on_notification": 1}, "protocol_versions ('x',)"),
    ({"on_notification": 1, "log_level": "x"}, "Config.on_notification must be callable"),
]


@pytest.mark.parametrize(("given", "first"), _ORDER)
def test_the_first_field_checked_names_its_fault(given: dict[str, Any], first: str) -> None:
    with pytest.raises(CallerError, match=f"^{re.escape(first)}"):
        _settings(Config(**{"url": HTTPS, **given}))


def test_the_client_values_are_checked_after_meta_and_before_the_schemas() -> None:
    with pytest.raises(CallerError, match=r"^Config\.meta "):
        _settings(Config(url=HTTPS, meta={"x": math.nan}), {"v": math.nan})
    with pytest.raises(CallerError, match=r"^client_info "):
        _settings(Config(url=HTTPS, tool_schemas={"a": 1}), {"v": math.nan}, {"v": math.nan})
    with pytest.raises(CallerError, match=r"^capabilities "):
        _settings(Config(url=HTTPS, tool_schemas={"a": 1}), None, {"v": math.nan})


def test_what_the_checks_keep() -> None:
    kept = _settings(
        Config(
            url=LOOPBACK,
            bearer_token="t",
            headers={"X-A": "b\tc"},
            meta={"k": 1},
            tool_schemas={"a": b'{"type":"object"}'},
            output_schemas={"a": b'{"type":"object"}', "b": {"type": "object"}},
            protocol_versions=["2025-06-18", "1999-01-01"],
            validate_structured_content=False,
            on_notification=print,
            log_level="info",
        ),
        {"name": "n", "version": "1"},
        {"x": {}},
    )
    assert kept.bearer_token == "t"
    assert kept.headers == ((b"x-a", b"b\tc"),)
    assert kept.meta == {"k": 1}
    assert kept.tool_schemas == {"a": {"type": "object"}}
    assert kept.output_schemas == {"a": {"type": "object"}, "b": {"type": "object"}}
    assert kept.protocol_versions == ("2025-06-18", "1999-01-01")
    assert kept.validate_structured_content is False
    assert kept.notifications is True and kept.log_level == "info"
    assert kept.client_info == {"name": "n", "version": "1"}
    assert kept.capabilities == {"x": {}}
    assert _settings(Config(url=LOOPBACK, oauth=OAuth())).bearer_token is None
