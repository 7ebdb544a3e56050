"""``tools/call`` checks ``structuredContent`` against ``outputSchema`` (issue 15, part 2).

Through the MCP machine against the pure fake server, both eras: where the schema
comes from (this Conn's listing, else ``Config.output_schemas``), what each failure
is, that a schema is compiled once per listing and before the call is sent, that
``isError`` results and a switched-off check are not validated, and that the
validator is imported only when a schema is first compiled.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from sansmcp.core import schema as schema_package
from sansmcp.core.config import Config, conn_settings
from sansmcp.core.errors import CallerError, ServerAnswered
from sansmcp.core.limits import Limits
from sansmcp.core.mcp import ConnSettings, ToolCalled
from sansmcp.core.results import CallResult
from sansmcp.core.schema import output as output_module
from sansmcp.core.url import parse_endpoint

from .fakemcp import URL, Driver, FakeServer, result, tool

TOTAL = {
    "type": "object",
    "properties": {"total": {"type": "integer", "minimum": 0}},
    "required": ["total"],
}
ERAS = {"modern": {}, "legacy": {"modern": False, "legacy": "2025-11-25"}}


def settings(**kwargs: Any) -> ConnSettings:
    return ConnSettings(endpoint=parse_endpoint(URL), **kwargs)


def server_with(era: str, *, output_schema: Any = TOTAL, answers: Iterator[Any]) -> FakeServer:
    extra = {} if output_schema is None else {"outputSchema": output_schema}
    server = FakeServer(tools=[tool("count", **extra), tool("plain")], **ERAS[era])

    def answer(request: Any, body: Any) -> Any:
        value = dict(next(answers))
        if server.modern and era == "modern":
            value["resultType"] = "complete"
        return server.wrap(result(body["id"], value))

    server.overrides["tools/call"] = answer
    return server


def outcome(
    structured: Any = None, *, is_error: bool = False, absent: bool = False
) -> dict[str, Any]:
    value: dict[str, Any] = {"content": [{"type": "text", "text": "t"}], "isError": is_error}
    if not absent:
        value["structuredContent"] = structured
    return value


def call(driver: Driver, name: str = "count") -> CallResult:
    done = driver.ok(driver.call(name, b"{}"))
    assert isinstance(done, ToolCalled)
    return done.result


def calls_sent(server: FakeServer) -> int:
    return sum(1 for b in server.bodies if isinstance(b, dict) and b.get("method") == "tools/call")


def listed(server: FakeServer, **kwargs: Any) -> Driver:
    driver = Driver(server, **kwargs)
    driver.ok(driver.connect())
    driver.ok(driver.list_tools())
    return driver


@pytest.mark.parametrize("era", list(ERAS))
def test_a_listed_schema_checks_each_result(era: str) -> None:
    answers = iter(
        [
            outcome({"total": 3}),
            outcome({"total": -1}),
            outcome(absent=True),
            outcome({"total": "x"}, is_error=True),
            outcome({"anything": 1}),
        ]
    )
    server = server_with(era, answers=answers)
    driver = listed(server)
    assert call(driver).validated is True
    with pytest.raises(ServerAnswered) as bad:
        call(driver)
    assert bad.value.reason == "output_schema_mismatch"
    assert str(bad.value) == (
        "the structuredContent of tool 'count' does not conform to its outputSchema: "
        "at '/total' it fails 'minimum'"
    )
    with pytest.raises(ServerAnswered) as missing:
        call(driver)
    assert (missing.value.reason, str(missing.value)) == (
        "output_schema_mismatch",
        "tool 'count' declares an outputSchema and its result has no structuredContent",
    )
    failed = call(driver)
    assert failed.is_error and failed.validated is None
    assert call(driver, "plain").validated is None  # no outputSchema: nothing to check


def test_the_root_failing_is_named_so() -> None:
    server = server_with("modern", answers=iter([outcome([1])]))
    with pytest.raises(ServerAnswered) as bad:
        call(listed(server))
    assert str(bad.value).endswith("outputSchema: at the root it fails 'type'")


def test_validation_can_be_switched_off() -> None:
    server = server_with("modern", answers=iter([outcome({"total": -1})]))
    driver = listed(server, settings=settings(validate_structured_content=False))
    assert call(driver).validated is None


def test_config_schemas_serve_when_the_listing_has_none() -> None:
    answers = iter([outcome({"total": 1}), outcome({"total": 1}), outcome({"total": 1})])
    server = server_with("modern", answers=answers, output_schema=None)
    own = settings(output_schemas={"count": {"properties": {"total": {"const": 2}}}})
    driver = Driver(server, settings=own)
    driver.ok(driver.connect())
    with pytest.raises(ServerAnswered) as bad:  # no listing: the caller's schema
        call(driver)
    assert "at '/total' it fails 'const'" in str(bad.value)
    driver.ok(driver.list_tools())  # listed without an outputSchema: still the caller's
    with pytest.raises(ServerAnswered):
        call(driver)
    server.tools[0]["outputSchema"] = TOTAL
    driver.ok(driver.list_tools())  # now the listing's schema wins
    assert call(driver).validated is True


def test_an_unusable_server_schema_fails_before_the_call_is_sent() -> None:
    remote = {"$ref": "https://example.com/schema.json"}
    server = server_with("modern", answers=iter([]), output_schema=remote)
    driver = listed(server)
    with pytest.raises(ServerAnswered) as refused:
        call(driver)
    assert refused.value.reason == "unusable_output_schema"
    assert str(refused.value) == (
        "the outputSchema of tool 'count' is unusable: $ref 'https://example.com/schema.json' "
        "is not inside the schema (never fetched)"
    )
    assert calls_sent(server) == 0


def test_an_unusable_config_schema_is_a_caller_error() -> None:
    server = server_with("modern", answers=iter([]), output_schema=None)
    for schema, message in (
        ({"pattern": "(?=x)"}, "Config.output_schemas['count'] is unusable: pattern"),
        (
            {"allOf": [{"type": "string"} for _ in range(50)]},
            "Config.output_schemas['count'] is too large to compile",
        ),
    ):
        driver = Driver(
            server,
            settings=settings(output_schemas={"count": schema}),
            limits=Limits(max_validation_steps=20),
        )
        driver.ok(driver.connect())
        with pytest.raises(CallerError) as refused:
            driver.ok(driver.call("count", b"{}"))
        assert str(refused.value).startswith(message)
    assert calls_sent(server) == 0


def test_budgets_compiling_and_checking_are_validation_budget() -> None:
    wide = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(100)}}
    server = server_with("modern", answers=iter([]), output_schema=wide)
    with pytest.raises(ServerAnswered) as compiling:
        call(listed(server, limits=Limits(max_validation_steps=50)))
    assert (compiling.value.reason, compiling.value.bound, compiling.value.limit) == (
        "validation_budget",
        "max_validation_steps",
        50,
    )
    assert str(compiling.value) == (
        "compiling the outputSchema for tool 'count' stopped: more than 50 steps "
        "(Limits.max_validation_steps)"
    )
    deep: Any = {"type": "object"}
    for _ in range(10):
        deep = {"type": "object", "properties": {"n": deep}}
    server = server_with("modern", answers=iter([]), output_schema=deep)
    with pytest.raises(ServerAnswered) as nested:
        call(listed(server, limits=Limits(max_validation_depth=4)))
    assert (nested.value.reason, nested.value.bound, nested.value.limit) == (
        "validation_budget",
        "max_validation_depth",
        4,
    )
    items = {"type": "object", "properties": {"list": {"items": {"type": "integer"}}}}
    server = server_with(
        "modern", answers=iter([outcome({"list": list(range(500))})]), output_schema=items
    )
    with pytest.raises(ServerAnswered) as checking:
        call(listed(server, limits=Limits(max_validation_steps=200)))
    assert checking.value.reason == "validation_budget"
    assert str(checking.value).startswith("checking structuredContent for tool 'count' stopped")


def test_a_schema_is_compiled_once_per_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[Any] = []
    real = output_module.compile_schema

    def counting(raw: Any, **kwargs: Any) -> Any:
        compiled.append(raw)
        return real(raw, **kwargs)

    monkeypatch.setattr(output_module, "compile_schema", counting)
    server = server_with("modern", answers=iter([outcome({"total": 1})] * 6))
    driver = listed(server)
    for _ in range(3):
        assert call(driver).validated is True
    assert len(compiled) == 1
    driver.ok(driver.list_tools())  # a new listing: compiled again, once
    for _ in range(3):
        call(driver)
    assert len(compiled) == 2


def test_the_validator_is_imported_only_when_needed() -> None:
    probe = (
        "import sys, sansmcp, sansmcp.io_adapters.asyncio, sansmcp.core.mcp.operations; "
        "print(sorted(m for m in sys.modules if m.startswith('sansmcp.core.schema')))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert shown.stdout.strip() == "[]"
    assert schema_package.__doc__ is not None


def test_config_output_schemas_are_checked_before_any_io() -> None:
    def build(**kwargs: Any) -> ConnSettings:
        return conn_settings(
            Config(url=URL, **kwargs), client_info=None, capabilities=None, era_hint=None
        )

    made = build(output_schemas={"a": json.dumps(TOTAL).encode(), "b": {"type": "object"}})
    assert made.output_schemas == {"a": TOTAL, "b": {"type": "object"}}
    assert made.validate_structured_content is True
    assert build(validate_structured_content=False).validate_structured_content is False
    for kwargs, message in (
        ({"output_schemas": [("a", {})]}, "Config.output_schemas must be a mapping, not list"),
        ({"output_schemas": {"a": b"{"}}, "the output schema for tool 'a' is not JSON"),
        ({"output_schemas": {"a": [1]}}, "the output schema for tool 'a' is not a JSON object"),
        (
            {"output_schemas": {"a": {"const": float("nan")}}},
            "the output schema for tool 'a' is not JSON: value cannot be encoded as JSON: "
            "Out of range float values are not JSON compliant"
            # the json module's own words, which name the value from CPython 3.12 on
            + ("" if sys.version_info < (3, 12) else ": nan"),
        ),
        (
            {"validate_structured_content": "no"},
            "Config.validate_structured_content must be a bool",
        ),
    ):
        with pytest.raises(CallerError) as refused:
            build(**kwargs)
        assert str(refused.value) == message
